"""Run under `accelerate launch --num_processes 2 --cpu`: trains a few steps and writes what each rank saw."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ALPHABET, config_kwargs, make_dataset, parity_reward  # noqa: E402

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer  # noqa: E402
from trl_budget.tiny import build_char_tokenizer, build_tiny_model  # noqa: E402


class RecordingTrainer(BudgetGRPOTrainer):
    """Keeps every rank's view of each generation batch."""

    seen = []

    def _plan_rollouts(self, inputs):
        plan = super()._plan_rollouts(inputs)
        self.seen.append({"local_rows": len(inputs), "keys": plan.keys, "counts": plan.counts.tolist()})
        return plan


def main(output_dir: str, allocator: str):
    tokenizer = build_char_tokenizer(ALPHABET)
    args = BudgetGRPOConfig(
        **config_kwargs(output_dir, per_device_train_batch_size=4, max_steps=9, budget_allocator=allocator,
                        save_strategy="steps", save_steps=9)
    )
    trainer = RecordingTrainer(
        model=build_tiny_model(tokenizer), reward_funcs=parity_reward, args=args, train_dataset=make_dataset(),
        processing_class=tokenizer,
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    report = {
        "world_size": trainer.accelerator.num_processes,
        "batches": trainer.seen,
        "tracker": trainer.tracker.state_dict(),
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
    }
    Path(output_dir, f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
