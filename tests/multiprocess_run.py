"""Run under `accelerate launch --num_processes 2`: trains a few steps and writes what each rank saw.

    multiprocess_run.py OUTPUT_DIR MODE [OUTPUT_DIR MODE ...]   # the runs one after another, in the same processes
                                                      # (a launch's start-up is most of a run's time)
    multiprocess_run.py OUTPUT_DIR ALLOCATOR          # a normal run
    multiprocess_run.py OUTPUT_DIR knapsack-probe     # with a probe stage of 2 rollouts per prompt
    multiprocess_run.py OUTPUT_DIR uniform-rounds     # rounds until mixed: 2 rollouts a round (also knapsack-, coba-, vip-)
    multiprocess_run.py OUTPUT_DIR reinforce_ada      # Reinforce-Ada: 4 rollouts a round, 3 rounds, K = 4 trained, a
                                                      # parity and a 0.5-weighted format reward
    multiprocess_run.py OUTPUT_DIR knapsack-tools     # tool calling, with the model at $TOOL_MODEL (tool_task.py)
    multiprocess_run.py OUTPUT_DIR knapsack-rollout_func   # a rollout_func whose completions name their prompt
    multiprocess_run.py OUTPUT_DIR coba-environment   # environments that own the reward, reset with their own row
    multiprocess_run.py OUTPUT_DIR coba-environment-probe   # any of the agent modes, with a probe stage of 2
    multiprocess_run.py OUTPUT_DIR failing-allocator  # the allocator raises at the second step
    multiprocess_run.py OUTPUT_DIR failing-reward     # the reward function raises on rank 1 only, at the second step
    multiprocess_run.py OUTPUT_DIR infinite-reward    # one rollout on rank 1 earns infinity, at the second step
    multiprocess_run.py OUTPUT_DIR knapsack-rank-seed # each rank is given its own `seed` (its rank)
    multiprocess_run.py OUTPUT_DIR knapsack-beyond    # a column prior, group pools, prompt-weighted loss, token cap
    multiprocess_run.py OUTPUT_DIR knapsack-history   # advantages against each prompt's reward history
    multiprocess_run.py OUTPUT_DIR uniform-trl        # uniform, and GRPOTrainer itself (grpo-trl), on the same run
    multiprocess_run.py OUTPUT_DIR default-trl        # the trainer's defaults (the history baseline) on that run
    multiprocess_run.py OUTPUT_DIR uniform-dynamic    # dynamic sampling over 12 prompts, no cap on generation batches
    multiprocess_run.py OUTPUT_DIR dynamic-cap        # dynamic sampling where every rollout earns 1: the cap is reached
    multiprocess_run.py OUTPUT_DIR spo                # SPO: one rollout a prompt, drawn by its weights, KL-adaptive rho
    multiprocess_run.py OUTPUT_DIR spo-rank-seed      # the same, each rank given its own `seed` (its rank)
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

# the script's own folder is on the path
from helpers import ALPHABET, leave_without_teardown, make_dataset, make_trainer, parity_reward

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer, KnapsackAllocator
from trl_budget.demo.tiny import build_char_tokenizer


class RecordingTrainer(BudgetGRPOTrainer):
    """Keeps every rank's view of each generation batch: the plan, and the rows this rank generated."""

    def __init__(self, *args, **kwargs):
        self.seen = []  # this run's batches alone, where several runs share a launch
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        plan = self.last_rollout_plan
        rank = self.accelerator.process_index
        rounds = np.split(plan.slot_order, np.cumsum(plan.round_rows)[:-1])
        slots = np.concatenate([slots.reshape(self.accelerator.num_processes, -1)[rank]  # this rank's rows
                                for slots in rounds])
        self.seen.append({
            "local_rows": len(inputs),
            "keys": plan.keys,
            "counts": plan.counts.tolist(),
            "slot_order": plan.slot_order.tolist(),
            "my_slots": slots.tolist(),
            "all_rewards": list(self._logs["rewards"]["parity_reward"])[-len(plan.slot_order):],  # in row order
            "my_advantages": output["advantages"].tolist(),
            "round_rows": list(plan.round_rows),
            "trained_rewards": plan.rewards.tolist(),
            "prompts": [row["prompt"] if isinstance(row["prompt"], str) else row["prompt"][-1]["content"]
                        for row in plan.prompts],
            "my_rows": rows_as_text(output, self.processing_class),
            # SPO's estimates the batch was trained against: its rows wait, so the tracker has not moved yet.
            "spo_p_hats": [] if self.spo is None else self.spo.tracker.p_hats(plan.keys).tolist(),
            "pass_rates": plan.pass_rates.tolist(),
        })
        return output


def rows_as_text(output, tokenizer) -> list[list[str]]:
    """Each row of a generation output as [prompt, completion], decoded without padding."""
    rows = []
    for prompt, prompt_mask, completion, completion_mask in zip(output["prompt_ids"], output["prompt_mask"],
                                                                output["completion_ids"], output["completion_mask"]):
        rows.append([tokenizer.decode(prompt[prompt_mask.bool()], skip_special_tokens=True),
                     tokenizer.decode(completion[completion_mask.bool()], skip_special_tokens=True)])
    return rows


class ScoredRows:
    """A reward (the parity reward by default), keeping every (prompt, completion, reward, step) it scored on this
    rank."""

    __name__ = "parity_reward"

    def __init__(self, reward=None):
        self.scored, self.reward = [], reward

    def __call__(self, prompts, completions, answer=None, trainer_state=None, **kwargs):
        rewards = parity_reward(completions, answer) if self.reward is None else self.reward(prompts, completions)
        step = None if trainer_state is None else trainer_state.global_step
        self.scored += [[prompt, completion, reward, step] for prompt, completion, reward in zip(prompts, completions,
                                                                                                    rewards)]
        return rewards


def format_reward(prompts, completions):
    """A format reward beside the parity reward: 1 for a completion of two characters or more."""
    return [float(len(completion) >= 2) for completion in completions]


class FailingAllocator:
    """A real allocator that raises at its third call: the construction probe and step 1 go through."""

    def __init__(self):
        self.allocator, self.calls = KnapsackAllocator(2, 8, default_generations=4), 0

    def __call__(self, pass_rates, budget, failure_rate=None):
        self.calls += 1
        if self.calls == 3:
            raise ArithmeticError("allocator broke at step 2")
        return self.allocator(pass_rates, budget, failure_rate)


def parity_reward_failing_on_rank_1(completions, answer, trainer_state, **kwargs):
    """The parity reward, except that it raises on rank 1 at the second step, as a flaky grader on one node would."""
    if int(os.environ["RANK"]) == 1 and trainer_state.global_step == 1:
        raise ConnectionError("grader unreachable from rank 1")
    return parity_reward(completions, answer)


def parity_reward_infinite_on_rank_1(completions, answer, trainer_state, **kwargs):
    """The parity reward, except that one rollout on rank 1 earns infinity at the second step."""
    rewards = parity_reward(completions, answer)
    if int(os.environ["RANK"]) == 1 and trainer_state.global_step == 1:
        rewards[-1] = float("inf")
    return rewards


def trl_parity(output_dir: str, mode: str):
    """`uniform-trl`, `default-trl` and `grpo-trl`: BudgetGRPOTrainer with GRPO's baseline (exactly GRPOTrainer), with
    the defaults (the history baseline), or GRPOTrainer itself, on the same run; each rank writes its losses, the
    completions and advantages TRL logged, and a digest of the trained weights. Returns the trainer's accelerator."""
    import hashlib

    from trl import GRPOConfig, GRPOTrainer

    from helpers import grpo_kwargs
    from trl_budget.demo.tiny import build_tiny_model

    tokenizer = build_char_tokenizer(ALPHABET)
    options = grpo_kwargs(output_dir, per_device_train_batch_size=4, max_steps=4)
    budget = mode != "grpo-trl"
    rule = {"advantage_baseline": "group"} if mode == "uniform-trl" else {}
    trainer = (BudgetGRPOTrainer if budget else GRPOTrainer)(
        model=build_tiny_model(tokenizer), reward_funcs=parity_reward, train_dataset=make_dataset(8),  # no revisit
        args=(BudgetGRPOConfig(**options, **rule) if budget else GRPOConfig(**options)),
        processing_class=tokenizer)
    trainer.train()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in trainer.model.parameters())).hexdigest()
    report = {"losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
              "completions": list(trainer._logs["completion"]), "advantages": list(trainer._logs["advantages"]),
              "weights": digest}
    rank = trainer.accelerator.process_index
    Path(output_dir, f"rank{rank}.json").write_text(json.dumps(report))
    return trainer.accelerator


def run(output_dir: str, mode: str):
    """One run of `mode`, its reports written under `output_dir`; returns the trainer's accelerator."""
    if mode.endswith("-trl"):
        return trl_parity(output_dir, mode)
    tokenizer = build_char_tokenizer(ALPHABET)
    failing = mode in ("failing-allocator", "failing-reward", "infinite-reward", "dynamic-cap")
    allocator = "knapsack" if failing else mode.split("-")[0]  # knapsack-probe, coba, uniform-rounds, ...
    beyond = {}
    if mode.endswith("-beyond"):
        levels = ["easy", "hard", "easy"]
        data = make_dataset().map(lambda row, i: {"prior": [0.8, None, 0.3][i % 3], "level": levels[i % 3]},
                                  with_indices=True)
        beyond = dict(dataset=data, pass_rate_prior_column="prior", prompt_group_column="level",
                      loss_weighting="prompt", budget_token_cap=1.0)
    if mode.endswith("-history"):  # the tracker's reward history as the advantage baseline
        beyond = dict(advantage_baseline="history", advantage_history_window=2.0)
    if mode.endswith("-dynamic"):
        beyond = dict(dynamic_sampling=True, dynamic_sampling_max_gen_batches=0,
                      dataset=make_dataset(12))
    if allocator == "uniform" and "advantage_baseline" not in beyond:  # GRPO's, which the advantages are checked by
        beyond["advantage_baseline"] = "group"
    if mode.startswith("spo"):  # 8 prompts a batch drawn from 6, so prompts come back within the run
        beyond = dict(budget_max_generations=128, learning_rate=1e-2)
    if mode == "dynamic-cap":
        allocator, beyond = "uniform", dict(dynamic_sampling=True, dynamic_sampling_max_gen_batches=2)
    scored, reward_funcs = ScoredRows(), None
    if allocator == "reinforce_ada":  # accuracy plus a 0.5-weighted format reward, success by accuracy alone
        formatted = ScoredRows(format_reward)
        formatted.__name__ = "format_reward"
        reward_funcs = [scored, formatted]
        beyond = dict(reinforce_ada_samples_per_round=4, reinforce_ada_max_rounds=3, reward_weights=[1.0, 0.5],
                      success_reward_func="parity_reward")
    if "-tools" in mode:  # the tool-calling model of tool_task.py, built by the test (TOOL_MODEL)
        from tool_task import add, build_tool_tokenizer, tool_dataset
        from transformers import AutoModelForCausalLM

        from test_tools import ToolReward

        tokenizer, scored = build_tool_tokenizer(), ToolReward()
        beyond = dict(model=AutoModelForCausalLM.from_pretrained(os.environ["TOOL_MODEL"]), tools=[add],
                      dataset=tool_dataset(), max_completion_length=128)
    if "-rollout_func" in mode:  # completions that name their prompt (test_agent.py), one row per rollout
        from test_agent import CopyingRollouts, last_digit_parity

        beyond, scored = dict(rollout_func=CopyingRollouts(seed=int(os.environ["RANK"]))), ScoredRows(last_digit_parity)
    if "-environment" in mode:  # environments that own the reward, each checking the row it was reset with
        from helpers import build_chat_tokenizer
        from test_agent import EnvironmentCredit, RecordingEnvironment, conversational

        from trl_budget.demo.tiny import build_tiny_model

        tokenizer, scored = build_chat_tokenizer(), EnvironmentCredit()
        beyond = dict(model=build_tiny_model(tokenizer), environment_factory=RecordingEnvironment,
                      dataset=conversational(), max_completion_length=3)
    trainer = make_trainer(
        output_dir, tokenizer, trainer_class=RecordingTrainer, per_device_train_batch_size=4, max_steps=9,
        budget_allocator=allocator, save_strategy="steps", save_steps=9,
        allocator=FailingAllocator() if mode == "failing-allocator" else None,
        reward_funcs={"failing-reward": parity_reward_failing_on_rank_1,
                      "infinite-reward": parity_reward_infinite_on_rank_1,
                      "dynamic-cap": ScoredRows(lambda prompts, completions: [1.0] * len(completions)),
                      }.get(mode, reward_funcs or scored),
        probe_generations=2 if "-probe" in mode else 0,
        rounds_generations=2 if mode.endswith("-rounds") else 0,
        seed=int(os.environ["RANK"]) if mode.endswith("-rank-seed") else 0, **beyond,
    )
    rank = trainer.accelerator.process_index
    if failing:
        try:
            trainer.train()
        except (RuntimeError, ValueError) as error:
            # What an exception handler that saves or retries does: reach another collective.
            trainer.accelerator.wait_for_everyone()
            Path(output_dir, f"rank{rank}_error.txt").write_text(str(error))
    else:
        trainer.train()
        report = {
            "world_size": trainer.accelerator.num_processes,
            "batches": trainer.seen,
            "tracker": trainer.tracker.state_dict(),
            "spo": None if trainer.spo is None else trainer.spo.state_dict(),
            "vip_embeddings": None if trainer.vip is None else trainer.vip.embeddings.tolist(),
            "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
            "scored": getattr(scored, "scored", getattr(scored, "calls", [])),
            "format_scored": formatted.scored if allocator == "reinforce_ada" else [],
        }
        Path(output_dir, f"rank{rank}.json").write_text(json.dumps(report))
    return trainer.accelerator


def main(*arguments: str):
    """Each (OUTPUT_DIR, MODE) pair in turn, then leave once every process is done."""
    if not arguments or len(arguments) % 2:
        sys.exit(f"expected OUTPUT_DIR MODE pairs, got {' '.join(arguments) or 'nothing'}")
    for output_dir, mode in zip(arguments[::2], arguments[1::2]):
        accelerator = run(output_dir, mode)
    leave_without_teardown(accelerator)


if __name__ == "__main__":
    main(*sys.argv[1:])
