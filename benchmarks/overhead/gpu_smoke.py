"""GPU smoke check: a few bf16 steps of the tiny model with each allocator, step time against GRPOTrainer.

Where vLLM is installed it also runs the vLLM colocate path. Without a CUDA GPU it says so and exits 0.

    python benchmarks/overhead/gpu_smoke.py --output gpu_smoke.json
Until the move to benchmarks/overhead/ this script was benchmarks/gpu_smoke.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
from pathlib import Path

import torch

STEPS = 12


def run(kind: str, model_dir: Path, output_dir: Path, use_vllm: bool) -> dict:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
    from trl_budget.demo.task import exact_match_reward, make_problems

    common = dict(
        output_dir=str(output_dir), per_device_train_batch_size=128, num_generations=8, max_completion_length=8,
        max_steps=STEPS, logging_steps=1, report_to=[], save_strategy="no", bf16=True, seed=0, disable_tqdm=True,
        use_vllm=use_vllm, vllm_mode="colocate", vllm_gpu_memory_utilization=0.15,
    )
    if kind == "GRPOTrainer":
        trainer_class, args = GRPOTrainer, GRPOConfig(**common)
    else:
        trainer_class, args = BudgetGRPOTrainer, BudgetGRPOConfig(**common, budget_allocator=kind,
                                                                  budget_min_generations=2, budget_max_generations=64)
    problems = make_problems(64, seed=0)
    trainer = trainer_class(
        model=str(model_dir), reward_funcs=exact_match_reward, args=args,
        train_dataset=Dataset.from_list([{"prompt": p["prompt"], "answer": p["answer"]} for p in problems]),
        processing_class=PreTrainedTokenizerFast.from_pretrained(model_dir),
    )
    trainer.train()
    logs = trainer.state.log_history
    times = [entry["step_time"] for entry in logs if "step_time" in entry][2:]
    return {
        "median_step_ms": statistics.median(times) * 1e3,
        "effective_ratio": [entry.get("budget/effective_ratio") for entry in logs if "loss" in entry],
        "losses_finite": all(torch.isfinite(torch.tensor(entry["loss"])) for entry in logs if "loss" in entry),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU here: nothing to check.")
        return {}
    from trl_budget.demo.run import warm_start
    from trl_budget.demo.settings import WarmStartSettings

    result = {"device": torch.cuda.get_device_name(0)}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = warm_start(WarmStartSettings(steps=300), Path(tmp) / "cache")
        backends = [("transformers", False)]
        if importlib.util.find_spec("vllm"):
            backends.append(("vllm_colocate", True))
        for backend, use_vllm in backends:
            rows = {kind: run(kind, model_dir, Path(tmp) / backend / kind, use_vllm)
                    for kind in ("GRPOTrainer", "uniform", "knapsack", "coba")}
            base = rows["GRPOTrainer"]["median_step_ms"]
            for row in rows.values():
                row["step_time_vs_GRPOTrainer"] = row["median_step_ms"] / base
            result[backend] = rows
    print(json.dumps(result, indent=2))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
