"""What the trainer logs of each generation batch beside TRL's metrics: the `budget/*` figures, the advantages shown
in `log_completions`, histograms for W&B and TensorBoard, and the allocation's share of the batch's time."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
from transformers.utils import logging
from trl.trainer.utils import nanstd

from .rollout_plan import RolloutPlan

logger = logging.get_logger(__name__)

__all__ = ["BudgetMetrics"]

SLOW_ALLOCATION_SHARE = 0.2  # of a generation batch's wall time (gather, allocation, generation, scoring)


class BudgetMetrics:
    """Writes each batch's `budget/*` figures into TRL's `metrics` (its `_metrics["train"]`) and keeps the batch
    histories that `log_histograms` sends to W&B and TensorBoard at each logging step."""

    def __init__(self, metrics: defaultdict, is_main_process: bool):
        self.metrics, self.is_main_process = metrics, is_main_process
        self.history = {"rollouts_per_prompt": [], "pass_rates": [], "pass_rates_before": []}
        self._warned_slow_allocation = False

    def record_batch(self, plan: RolloutPlan, rewards: torch.Tensor, advantages: torch.Tensor,
                     from_prior: np.ndarray | None, token_cap, allocator, pass_rates_after: np.ndarray) -> None:
        """The allocation's figures, the share of rollouts and prompts with a gradient, and the optional ones (token
        cap, prior, failure rate, the allocator's own, the probe's). `pass_rates_after`: the tracker's pass rates of
        the batch's prompts once it has scored the batch, for the pass-rate histogram under every rule (before the
        batch a prompt's first visit has none)."""
        metrics = self.metrics
        trained = plan.counts > 0  # dynamic sampling's dropped prompts train no rollout
        counts = plan.counts[trained].astype(np.float64)
        metrics["budget/rollouts_mean"].append(float(counts.mean()))
        metrics["budget/rollouts_std"].append(float(counts.std()))
        metrics["budget/rollouts_min"].append(float(counts.min()))
        metrics["budget/rollouts_max"].append(float(counts.max()))
        metrics["budget/effective_ratio"].append((advantages != 0).float().mean().item())
        weight = np.bincount(np.repeat(np.arange(len(plan.counts)), plan.counts), advantages.abs().cpu().numpy(),
                             minlength=len(plan.counts))  # each prompt's share of the loss's |advantage| mass
        metrics["budget/prompts_with_gradient"].append(float(np.mean(weight[trained] > 0)))
        metrics["budget/top_prompt_loss_share"].append(float(weight.max() / weight.sum()) if weight.sum() else 0.0)
        starts = (np.cumsum(plan.counts) - plan.counts)[trained]
        rewards = rewards.cpu().numpy()
        group_max = np.fmax.reduceat(rewards, starts)  # NaN rewards ignored
        group_min = np.fmin.reduceat(rewards, starts)
        metrics["budget/zero_std_groups"].append(float(np.mean(~(group_max > group_min))))
        known = plan.pass_rates if plan.history_rates is None else plan.history_rates
        metrics["budget/unseen_prompts"].append(float(np.isnan(known).mean()))  # before this batch, in every mode
        if token_cap is not None and token_cap.last is not None:
            metrics["budget/expected_token_ratio"].append(token_cap.last.token_ratio)  # against uniform's, estimated
            metrics["budget/token_cap_multiplier"].append(token_cap.last.multiplier)
            metrics["budget/token_cap_fits"].append(float(token_cap.last.fits))  # 0: even the cheapest split is above
        if from_prior is not None:  # share of the batch's prompts allocated from a prior
            metrics["budget/prior_share"].append(float(from_prior.mean()))
        if plan.failure_rate is not None:
            metrics["budget/failure_rate"].append(plan.failure_rate)
        allocator_metrics = getattr(allocator, "metrics", None)
        if callable(allocator_metrics):  # the allocator's own view of the batch, e.g. CoBA-RL's alpha
            for name, value in allocator_metrics(plan.pass_rates, plan.failure_rate).items():
                metrics[f"budget/{name}"].append(float(value))
        if plan.probe_generations:
            metrics["budget/probe_share"].append(plan.probe_generations * len(plan.counts) / float(plan.counts.sum()))
            if plan.history_counts is not None:  # share of the budget the probe moved to other prompts
                moved = np.abs(plan.counts - plan.history_counts).sum() / (2.0 * plan.counts.sum())
                metrics["budget/probe_moved_share"].append(float(moved))
        self.history["rollouts_per_prompt"].extend(plan.counts[trained].tolist())
        for name, rates in (("pass_rates", np.asarray(pass_rates_after, dtype=np.float64)),
                            ("pass_rates_before", plan.pass_rates)):
            self.history[name].extend(rates[~np.isnan(rates)].tolist())

    def record_rounds(self, rule, rounds, trained_counts: np.ndarray, prompt_stream=None) -> None:
        """In every mode: the rounds the batch took (one engine request each, or prompt by prompt), the rollouts
        generated and trained, the prompts generated; with rounds until mixed or Reinforce-Ada, the share of prompts still active after each
        round; with dynamic sampling (`prompt_stream`), the prompts whose rollouts differ and the passes over the
        data."""
        self.metrics["budget/rounds"].append(float(len(rounds)))
        if rounds.logged_ahead is not None:  # rounds_prompt_by_prompt: the rounds sent prompt by prompt
            self.metrics["budget/rounds_prompt_by_prompt"].append(float(rounds.rounds_ahead))
        for index, share in enumerate(getattr(rule, "active_after_round", ()), start=1):
            self.metrics[f"budget/active_after_round_{index}"].append(share)
        self.metrics["budget/generated_rollouts"].append(float(rounds.counts.sum()))
        self.metrics["budget/trained_rollouts"].append(float(trained_counts.sum()))
        self.metrics["budget/generated_prompts"].append(float(rounds.num_prompts))
        if prompt_stream is not None:  # dynamic sampling: prompts whose rollouts differ, passes over the data begun
            self.metrics["budget/varied_prompts"].append(float(rule.varied_prompts))
            self.metrics["budget/data_passes"].append(float(prompt_stream.passes))

    def record_spo_estimates(self, p_hats: np.ndarray) -> None:
        """SPO's estimates of the batch's prompts, before the batch: their histogram at the next logging step."""
        self.history.setdefault("spo_p_hats", []).extend(np.asarray(p_hats, dtype=np.float64).tolist())

    @staticmethod
    def log_prompt_rollouts(extra_columns, generated_counts: np.ndarray, generated_slot_order: np.ndarray) -> None:
        """Add to TRL's completions table (`extra_columns`: its `_logs["extra"]`) each generated row's
        `prompt_rollouts`: the rollouts its prompt was generated in the batch, rows in the order TRL logged them."""
        prompt_of_slot = np.repeat(np.arange(generated_counts.size), generated_counts)
        extra_columns["prompt_rollouts"].extend(generated_counts[prompt_of_slot[generated_slot_order]].tolist())

    def record_allocation_time(self, allocation_seconds: float, batch_seconds: float, allocator) -> None:
        """Log the batch's allocation time; warn once when it takes a large share of generating the batch."""
        self.metrics["budget/allocation_seconds"].append(allocation_seconds)
        share = allocation_seconds / batch_seconds if batch_seconds > 0 else 0.0
        if share > SLOW_ALLOCATION_SHARE and not self._warned_slow_allocation and self.is_main_process:
            self._warned_slow_allocation = True
            logger.warning(
                f"Allocation took {allocation_seconds:.2f} s of this generation batch's {batch_seconds:.2f} s "
                f"({share:.0%}; warned above {SLOW_ALLOCATION_SHARE:.0%}), while every process waits for the main "
                f"process's decision. The built-in allocators take milliseconds per batch; a slow custom allocator "
                f"({allocator!r}) is the usual cause. budget/allocation_seconds logs every batch's time; this "
                "warning is not repeated."
            )

    def log_histograms(self, report_to: list[str], callbacks, step: int) -> None:
        """Send the histories since the last logging step to W&B and TensorBoard (main process), then start anew."""
        histories = {f"train/budget/{name}": np.asarray(values) for name, values in self.history.items() if values}
        self.history = {name: [] for name in self.history}
        if not histories or not self.is_main_process:
            return
        if "wandb" in report_to:
            import wandb

            if wandb.run is not None:
                histograms = {tag: wandb.Histogram(values) for tag, values in histories.items()}
                wandb.log({**histograms, "train/global_step": step})
        if "tensorboard" in report_to:
            from transformers.integrations import TensorBoardCallback

            for callback in callbacks:
                if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
                    for tag, values in histories.items():
                        callback.tb_writer.add_histogram(tag, values, step)


def batch_figures_logged(metrics: defaultdict, reward_func_names: list[str]) -> dict[str, int]:
    """How many entries each of TRL's reward and length figures holds before a batch (`relog_batch_figures`)."""
    return {key: len(metrics[key]) for key in trl_batch_figures(reward_func_names)}


def trl_batch_figures(reward_func_names: list[str]) -> tuple[str, ...]:
    """TRL's figures of a batch's rewards and completion lengths, which it logs once per generation request."""
    per_function = [f"rewards/{name}/{stat}" for name in reward_func_names for stat in ("mean", "std")]
    return ("reward", "reward_std", *per_function, "completions/mean_length", "completions/min_length",
            "completions/max_length")


def relog_batch_figures(metrics: defaultdict, logged_before: dict[str, int], rewards_per_func: torch.Tensor,
                        reward_weights: torch.Tensor, reward_func_names: list[str], lengths: torch.Tensor) -> None:
    """TRL's reward and length figures for a batch generated in several requests (rounds, dynamic sampling's
    generation batches), as TRL means them: one figure over every rollout the batch generated, not the mean of one
    figure per request (requests of different sizes, rows a rule then drops). `rewards_per_func` and `lengths` are
    every generated row's, from all processes; NaN marks a reward a function could not give."""
    rewards = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    lengths = lengths.float()
    figures = {"reward": torch.nanmean(rewards).item(), "reward_std": nanstd(rewards).item(),
               "completions/mean_length": lengths.mean().item(), "completions/min_length": lengths.min().item(),
               "completions/max_length": lengths.max().item()}
    for index, name in enumerate(reward_func_names):
        figures[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, index]).item()
        figures[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, index]).item()
    for key, value in figures.items():
        del metrics[key][logged_before.get(key, 0):]
        metrics[key].append(value)


def relog_advantages(logged: list, generated_counts: np.ndarray, generated_slot_order: np.ndarray,
                     trained_slots: np.ndarray, advantages: torch.Tensor) -> None:
    """Replace the advantages TRL logged for this batch's generated rows (`logged`, its `_logs["advantages"]`, for
    `log_completions`) with the ones trained; a row generated but not trained logs NaN."""
    by_slot = torch.full((int(generated_counts.sum()),), float("nan"), device=advantages.device)
    by_slot[torch.as_tensor(trained_slots, device=advantages.device)] = advantages
    by_row = by_slot[torch.as_tensor(generated_slot_order, device=advantages.device)]
    for _ in range(min(by_row.numel(), len(logged))):
        logged.pop()
    logged.extend(by_row.tolist())
