"""`BudgetGRPOTrainer`: TRL's `GRPOTrainer` with per-prompt rollout budgets.

Per generation batch, TRL's sampler still brings `generation_batch_size` rollout slots (each prompt repeated
`num_generations` times). This trainer gathers the batch's distinct prompts from all processes, asks the allocator how
many of the slots each prompt gets (one decision, broadcast from the main process so every rank uses the same one),
re-lays the slots prompt by prompt and gives each rank its contiguous share. TRL then generates one completion per slot
and scores it as usual; advantages are recomputed over the variable-size groups from the rewards of all ranks.

Tested with TRL 1.16.0: the overrides below rely on internals of that release (`_generate_and_score_completions`,
`_calculate_rewards`, `_generate_single_turn`, `_save_checkpoint`, `_load_optimizer_and_scheduler`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_callable_name, get_config_model_id, nanstd

from .allocators import Allocator, CoBAAllocator, KnapsackAllocator, UniformAllocator
from .config import BudgetGRPOConfig
from .tracker import CapabilityTracker, prompt_key

logger = logging.get_logger(__name__)

TRACKER_STATE_NAME = "budget_tracker_state.json"


def allocator_from_config(args: BudgetGRPOConfig):
    """The built-in allocator that `args.budget_allocator` names, with the config's options."""
    bounds = {"min_generations": args.min_generations, "max_generations": args.max_generations}
    if args.budget_allocator == "uniform":
        return UniformAllocator(**bounds)
    if args.budget_allocator == "knapsack":
        return KnapsackAllocator(
            **bounds,
            default_generations=args.num_generations,
            zero_pass_generations=args.knapsack_zero_pass_generations,
            full_pass_generations=args.knapsack_full_pass_generations,
            fallback=args.knapsack_fallback,
            fallback_confidence=args.knapsack_fallback_confidence,
        )
    return CoBAAllocator(
        **bounds,
        kappa=args.coba_kappa,
        gamma=args.coba_gamma,
        bucket_heuristic=args.coba_bucket_heuristic,
        exploration_share=args.coba_exploration_share,
    )


def tracker_from_config(args: BudgetGRPOConfig) -> CapabilityTracker:
    """The capability tracker with the config's pass-rate rule (by default, the chosen allocator's release rule)."""
    return CapabilityTracker(
        window=args.pass_rate_window,
        success_threshold=args.success_threshold,
        failure_rate_window=args.failure_rate_window,
        min_rollouts=args.pass_rate_min_rollouts,
        rollout_pool=args.pass_rate_rollout_pool,
    )


def reward_func_name(reward_func) -> str:
    """The name TRL gives a reward function in `reward_func_names` and in its logs."""
    if isinstance(reward_func, str):
        return reward_func.split("/")[-1]
    if isinstance(reward_func, torch.nn.Module):
        return get_config_model_id(reward_func.config).split("/")[-1]
    return get_callable_name(reward_func)


def success_reward_index(choice: int | str | None, reward_funcs) -> int | None:
    """Index of the reward function that `success_reward_func` names (by index or name); None for the weighted sum."""
    if choice is None:
        return None
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    names = [reward_func_name(func) for func in funcs]
    if isinstance(choice, str) and choice.isdigit():
        choice = int(choice)
    if isinstance(choice, int) and 0 <= choice < len(names):
        return choice
    if choice in names:
        if names.count(choice) > 1:
            raise ValueError(
                f"success_reward_func={choice!r} names {names.count(choice)} reward functions ({names}); give its index "
                "instead."
            )
        return names.index(choice)
    raise ValueError(
        f"success_reward_func={choice!r} is neither the name nor the index of a reward function; the trainer's "
        f"reward functions are {dict(enumerate(names))}. Name one of them, or set None to judge success by the "
        "weighted sum of all rewards."
    )


def checked_allocation(allocator, pass_rates: np.ndarray, budget: int, failure_rate, bounds: tuple[int, int]):
    """Call the allocator and make sure it returned one count per prompt, within bounds, summing to the budget."""
    counts = np.asarray(allocator(pass_rates, budget, failure_rate))
    low, high = bounds
    problem = None
    if counts.shape != pass_rates.shape:
        problem = f"{counts.shape[0] if counts.ndim == 1 else counts.shape} counts for {pass_rates.size} prompts"
    elif not np.issubdtype(counts.dtype, np.integer) and not np.array_equal(counts, np.round(counts)):
        problem = f"non-integer counts {counts.tolist()}"
    elif counts.sum() != budget:
        problem = f"counts summing to {counts.sum()} instead of the budget {budget}"
    elif counts.min() < low or counts.max() > high:
        problem = f"counts between {counts.min()} and {counts.max()}, outside [{low}, {high}]"
    if problem:
        raise RuntimeError(f"Allocator {allocator!r} returned {problem}: {counts.tolist()}.")
    return counts.astype(np.int64)


def grouped_advantages(
    rewards_per_func: torch.Tensor,
    counts: torch.Tensor,
    reward_weights: torch.Tensor,
    scale_rewards: str,
    aggregation: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages over consecutive groups of `counts` rows, as TRL computes them for equal groups.

    Groups are padded with NaN to the largest size, so TRL's NaN-aware reductions give exactly TRL's numbers when all
    groups have the same size. A group of one row gets advantage 0 (its reward is its own baseline).

    Returns:
        `(advantages, is_std_zero)`, one value per row.
    """
    rows, num_funcs = rewards_per_func.shape
    group_of_row = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    start = torch.cumsum(counts, 0) - counts
    position = torch.arange(rows, device=counts.device) - start[group_of_row]
    singleton = (counts == 1)[group_of_row]

    def pad(values: torch.Tensor) -> torch.Tensor:
        padded = values.new_full((counts.numel(), int(counts.max()), *values.shape[1:]), float("nan"))
        padded[group_of_row, position] = values
        return padded

    def group_std(padded: torch.Tensor) -> torch.Tensor:
        std = nanstd(padded, dim=1, keepdim=True)[group_of_row, 0]
        return torch.where(singleton.view(-1, *[1] * (std.ndim - 1)), torch.zeros_like(std), std)

    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        padded = pad(rewards)
        mean = torch.nanmean(padded, dim=1)[group_of_row]
        if scale_rewards in ("group", "none"):
            std = group_std(padded)
        elif scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rows > 1 else torch.zeros_like(rewards)
        else:
            raise ValueError(f"Invalid value for scale_rewards: {scale_rewards}. Must be 'batch', 'group' or 'none'.")
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
    elif aggregation == "normalize_then_sum":
        padded = pad(rewards_per_func)
        mean_k = torch.nanmean(padded, dim=1, keepdim=True)[group_of_row, 0]
        reward_k = (rewards_per_func - mean_k) / (group_std(padded) + 1e-4)
        rewards = (reward_k * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if rows > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    else:
        raise ValueError(
            f"Invalid multi_objective_aggregation: {aggregation}. Must be 'sum_then_normalize' or 'normalize_then_sum'."
        )
    is_std_zero = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0), is_std_zero


@dataclass
class RolloutPlan:
    """One generation batch's allocation, identical on every process."""

    prompts: list[dict[str, Any]]  # one input row per distinct prompt slot, in batch order
    keys: list[str]
    pass_rates: np.ndarray
    failure_rate: float | None
    counts: np.ndarray

    def rows(self) -> list[dict[str, Any]]:
        """The batch's rollout slots, prompt by prompt."""
        return [row for row, count in zip(self.prompts, self.counts) for _ in range(count)]


class BudgetGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` that shares each generation batch's rollouts unevenly among its prompts.

    Takes everything `GRPOTrainer` takes, plus:

    Args:
        allocator: any object or callable `(pass_rates, budget, failure_rate) -> counts`; defaults to the built-in
            allocator named by `args.budget_allocator`.
        tracker: a `CapabilityTracker` holding the prompts' pass rates; defaults to one built from `args`.
    """

    _tag_names = ["trl", "grpo", "trl_budget"]

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: GRPOConfig | None = None,
        *positional,
        allocator: Allocator | None = None,
        tracker: CapabilityTracker | None = None,
        **kwargs,
    ):
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = BudgetGRPOConfig(f"{str(model_name).split('/')[-1]}-BudgetGRPO")
        elif not isinstance(args, BudgetGRPOConfig):
            args = BudgetGRPOConfig.from_grpo_config(args)
        for unsupported in ("tools", "rollout_func", "environment_factory"):
            if kwargs.get(unsupported) is not None:
                raise ValueError(
                    f"BudgetGRPOTrainer does not support `{unsupported}` yet: its rollouts are not one completion per "
                    "prompt row, which per-prompt budgets rely on. Use GRPOTrainer for this run."
                )
        self.allocator = allocator if allocator is not None else allocator_from_config(args)
        self.tracker = tracker if tracker is not None else tracker_from_config(args)
        self._success_reward_index = success_reward_index(args.success_reward_func, reward_funcs)
        prompts_per_batch = args.generation_batch_size // args.num_generations
        checked_allocation(  # a broken allocator fails here, before any model is loaded
            self.allocator, np.full(prompts_per_batch, np.nan), args.generation_batch_size, None,
            (args.min_generations, args.max_generations),
        )
        self._budget_history = {"rollouts_per_prompt": [], "pass_rates": []}
        self.last_rollout_plan: RolloutPlan | None = None  # the latest training batch's allocation, for inspection
        super().__init__(model, reward_funcs, args, *positional, **kwargs)

    # ----------------------------------------------------------------------------------------------- allocation

    def _prompt_identity(self, row: dict[str, Any]) -> Any:
        column = self.args.prompt_id_column
        if column is None:
            return row["prompt"]
        if column not in row:
            raise KeyError(
                f"prompt_id_column={column!r} is not a column of the training dataset (columns: {sorted(row)}). "
                "Keep the column (set remove_unused_columns=False) or set prompt_id_column=None to hash prompts."
            )
        return row[column]

    def _prompt_key(self, row: dict[str, Any]) -> str:
        identity = self._prompt_identity(row)
        return prompt_key(identity) if self.args.prompt_id_column is None else str(identity)

    def _plan_rollouts(self, inputs: list[dict[str, Any]]) -> RolloutPlan:
        all_rows = gather_object(inputs)
        group = self.num_generations
        prompts = all_rows[::group]
        for index, first in enumerate(prompts):
            identity = self._prompt_identity(first)
            if any(self._prompt_identity(row) != identity for row in all_rows[index * group : (index + 1) * group]):
                raise RuntimeError(
                    "BudgetGRPOTrainer expects each prompt to arrive num_generations times in a row, as TRL's "
                    "RepeatSampler lays them out; a custom sampler or data collator broke that layout."
                )
        keys = [self._prompt_key(row) for row in prompts]
        pass_rates = self.tracker.pass_rates(keys)
        failure_rate = self.tracker.failure_rate
        counts = None
        if self.accelerator.is_main_process:
            bounds = (self.args.min_generations, self.args.max_generations)
            counts = checked_allocation(self.allocator, pass_rates, len(all_rows), failure_rate, bounds)
        decision = [counts]
        broadcast_object_list(decision, from_process=0)  # every rank follows the main process's decision
        return RolloutPlan(prompts, keys, pass_rates, failure_rate, decision[0])

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Keeps the gathered rewards so that advantages can be recomputed over variable-size groups.
        self._gathered_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._gathered_rewards

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # Rows are already one rollout each, so vLLM server mode must not deduplicate them by a fixed group size:
        # it then sends every row in a single request with n=1 (the server's prefix cache shares the prompts).
        if self.model.training:
            num_generations = 1
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _generate_and_score_completions(self, inputs):
        # TRL groups rows by a fixed num_generations; this re-lays the rows by allocation, then redoes the grouping.
        if not self.model.training:  # evaluation keeps TRL's uniform num_generations_eval
            return super()._generate_and_score_completions(inputs)
        plan = self.last_rollout_plan = self._plan_rollouts(inputs)
        rank, local = self.accelerator.process_index, len(inputs)
        output = super()._generate_and_score_completions(plan.rows()[rank * local : (rank + 1) * local])

        rewards_per_func = self._gathered_rewards
        device = rewards_per_func.device
        counts = torch.as_tensor(plan.counts, device=device)
        advantages, is_std_zero = grouped_advantages(
            rewards_per_func, counts, self.reward_weights, self.scale_rewards, self.multi_objective_aggregation
        )
        if self.args.advantage_clip is not None:
            advantages = advantages.clamp(-self.args.advantage_clip, self.args.advantage_clip)
        output["advantages"] = advantages[rank * local : (rank + 1) * local]
        self._metrics["train"]["frac_reward_zero_std"][-1] = is_std_zero.float().mean().item()
        logged_advantages = self._logs["advantages"]
        for _ in range(min(advantages.numel(), len(logged_advantages))):
            logged_advantages.pop()
        logged_advantages.extend(advantages.tolist())

        rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        column = self._success_reward_index
        success_rewards = rewards if column is None else rewards_per_func[:, column]
        self.tracker.update(np.repeat(plan.keys, plan.counts), success_rewards.cpu().numpy())
        self._record_budget_metrics(plan, rewards, advantages)
        return output

    # -------------------------------------------------------------------------------------------------- metrics

    def _record_budget_metrics(self, plan: RolloutPlan, rewards: torch.Tensor, advantages: torch.Tensor) -> None:
        metrics = self._metrics["train"]
        counts = plan.counts.astype(np.float64)
        metrics["budget/rollouts_mean"].append(float(counts.mean()))
        metrics["budget/rollouts_std"].append(float(counts.std()))
        metrics["budget/rollouts_min"].append(float(counts.min()))
        metrics["budget/rollouts_max"].append(float(counts.max()))
        metrics["budget/effective_ratio"].append((advantages != 0).float().mean().item())
        starts = np.cumsum(plan.counts) - plan.counts
        rewards = rewards.cpu().numpy()
        group_max = np.fmax.reduceat(rewards, starts)  # NaN rewards ignored
        group_min = np.fmin.reduceat(rewards, starts)
        metrics["budget/zero_std_groups"].append(float(np.mean(~(group_max > group_min))))
        metrics["budget/unseen_prompts"].append(float(np.isnan(plan.pass_rates).mean()))
        if plan.failure_rate is not None:
            metrics["budget/failure_rate"].append(plan.failure_rate)
        if isinstance(self.allocator, CoBAAllocator):
            metrics["budget/alpha"].append(self.allocator.beta_parameters(plan.pass_rates, plan.failure_rate)[0])
        self._budget_history["rollouts_per_prompt"].extend(plan.counts.tolist())
        self._budget_history["pass_rates"].extend(plan.pass_rates[~np.isnan(plan.pass_rates)].tolist())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training:  # an evaluation log in mid-training keeps the training history for the next one
            if self.accelerator.is_main_process:
                self._log_budget_histograms()
            self._budget_history = {"rollouts_per_prompt": [], "pass_rates": []}
        super().log(logs, start_time)

    def _log_budget_histograms(self) -> None:
        histories = {
            f"train/budget/{name}": np.asarray(values) for name, values in self._budget_history.items() if values
        }
        if not histories:
            return
        report_to = self.args.report_to or []
        if "wandb" in report_to:
            import wandb

            if wandb.run is not None:
                histograms = {tag: wandb.Histogram(values) for tag, values in histories.items()}
                wandb.log({**histograms, "train/global_step": self.state.global_step})
        if "tensorboard" in report_to:
            from transformers.integrations import TensorBoardCallback

            for callback in self.callback_handler.callbacks:
                if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
                    for tag, values in histories.items():
                        callback.tb_writer.add_histogram(tag, values, self.state.global_step)

    # ---------------------------------------------------------------------------------------------- checkpoints

    def _save_checkpoint(self, model, trial):
        # Adds the tracker's state to TRL's checkpoint, so that a resumed run allocates as an uninterrupted one.
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            checkpoint = os.path.join(self._get_output_dir(trial=trial), folder)
            with open(os.path.join(checkpoint, TRACKER_STATE_NAME), "w") as f:
                json.dump(self.tracker.state_dict(), f)

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Restores the tracker with the optimizer, the hook TRL itself uses for its own controller state on resume.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, TRACKER_STATE_NAME)
        if os.path.exists(path):
            with open(path) as f:
                self.tracker.load_state_dict(json.load(f))
        else:
            logger.warning(
                f"{path} not found: the checkpoint was not written by BudgetGRPOTrainer, so pass rates start unseen."
            )
