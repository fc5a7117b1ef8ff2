"""What the trainer reads from the rewards: each rollout's weighted reward and its outcome (a success, a failure, or
unscored), the reward function that decides success, and the rewards it refuses or warns about."""

from __future__ import annotations

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers.utils import logging
from trl.trainer.utils import get_callable_name, get_config_model_id

from .advantages import weighted_rewards
from .allocators.uniform import UniformAllocator

logger = logging.get_logger(__name__)

__all__ = ["RewardReader", "reward_func_name", "success_reader_effects", "success_reward_index"]

EXTREME_BATCHES_BEFORE_WARNING = 10


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
                f"success_reward_func={choice!r} names {names.count(choice)} reward functions ({names}); give its "
                "index instead."
            )
        return names.index(choice)
    raise ValueError(
        f"success_reward_func={choice!r} is neither the name nor the index of a reward function; the trainer's "
        f"reward functions are {dict(enumerate(names))}. Name one of them, or set None to judge success by the "
        "weighted sum of all rewards."
    )


def success_reader_effects(args, allocator) -> list[str]:
    """What reads the rollouts' outcomes in a run (success_threshold's verdicts, as pass rates or within a batch), each
    as what it makes of outcomes that never vary. Empty where nothing does: uniform counts in one shot, a probe under
    uniform (whose rates uniform ignores), SPO (its own success estimate), whatever the advantage baseline (none reads
    outcomes)."""
    effects = []
    if hasattr(allocator, "round_rule"):
        effects.append("Reinforce-Ada's rounds end a prompt by its successes and failures (reinforce_ada_choice), "
                       "which then never mix")
    elif not isinstance(allocator, UniformAllocator) and not args.dynamic_sampling:
        effects.append(f"the allocator ({allocator!r}) sees every pass rate at 0 or 1 and hands out fixed counts as "
                       "if nothing were known")
    if args.rounds_generations:
        effects.append("rounds until mixed (rounds_generations) find no prompt mixed and add rounds to every prompt "
                       "up to its cap")
    if args.dynamic_sampling and args.dynamic_sampling_metric == "success":
        effects.append("dynamic sampling (dynamic_sampling_metric='success') finds no prompt whose outcomes differ "
                       "and drops every group")
    if args.resolved_prompt_sampling() == "value":
        effects.append("prompt_sampling='value' weighs the prompts by the allocator's value at pass rates of 0 or 1")
    return effects


class RewardReader:
    """The trainer's reading of its rewards: weighted sums, outcomes, and the checks and warnings on them.

    Args:
        weights: TRL's `reward_weights`.
        names: TRL's `reward_func_names`.
        success_index: the reward function that alone decides success (`success_reward_func`); None: the weighted sum.
        success_threshold: a rollout is a success when that reward reaches it.
        is_main_process: warnings are written by the main process only.
        success_readers: what reads the outcomes in this run (`success_reader_effects`); none: no warning that they
            never vary, since nothing then depends on them.
    """

    def __init__(self, weights: torch.Tensor, names: list[str], success_index: int | None, success_threshold: float,
                 is_main_process: bool, success_readers: list[str] = ()):
        self.weights, self.names, self.success_index = weights, names, success_index
        self.success_threshold, self.is_main_process = success_threshold, is_main_process
        self.success_readers = list(success_readers)
        self._extreme_batches = 0  # consecutive batches whose rollouts were all solved, or all failed
        self._warned_overflow = False

    def scored(self, score, accelerator, prompts: list, functions: int) -> torch.Tensor:
        """`score()`'s rewards of every process's rows (TRL's gathered `_calculate_rewards`), refused where infinite.

        A reward function that raises on one process only would leave the others waiting in TRL's gather (its last
        statement), and an exception handler reaching another collective would hang the run: the failing process
        meets that gather with unscorable rows instead, and then every process raises the same error.
        """
        several = accelerator.num_processes > 1
        failure = None
        try:
            gathered = score()
        except Exception as error:  # noqa: BLE001 - re-raised below, on every rank
            if not several:
                raise
            failure = f"{type(error).__name__}: {error}"
            gathered = accelerator.gather(torch.full((len(prompts), functions), torch.nan, device=accelerator.device))
        if several:
            failed = [(rank, message) for rank, message in enumerate(gather_object([failure])) if message is not None]
            if failed:
                rank, message = failed[0]
                raise RuntimeError(f"A reward function failed on process {rank}, so every process stops: {message}")
        self.refuse_infinite(gathered, (lambda: gather_object(list(prompts))) if several else (lambda: list(prompts)),
                             len(prompts))
        return gathered

    def weighted(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        return weighted_rewards(rewards_per_func, self.weights)

    def success_rewards(self, rewards_per_func: torch.Tensor, weighted: torch.Tensor | None = None) -> np.ndarray:
        """The reward that decides success: the weighted sum (`weighted`, where already summed), or that of
        `success_reward_func`."""
        if self.success_index is not None:
            return rewards_per_func[:, self.success_index].cpu().numpy()
        return (self.weighted(rewards_per_func) if weighted is None else weighted).cpu().numpy()

    def outcomes(self, rewards_per_func: torch.Tensor) -> np.ndarray:
        """Each row's outcome for the tracker and the round rules: 1.0 a success, 0.0 a failure, NaN unscored."""
        rewards = self.success_rewards(rewards_per_func)
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(rewards), np.nan, (rewards >= self.success_threshold).astype(np.float64))

    def refuse_infinite(self, rewards: torch.Tensor, every_prompt, rows_per_process: int) -> None:
        """Stop at the batch where a reward is infinite, naming the function, the prompt and the value.

        `rewards` are the gathered rewards, the same on every process, so every process raises the same error;
        `every_prompt()` gives every process's prompts in row order (a collective, reached by all alike). TRL would
        turn that rollout's group into NaN and then zero advantages, the tracker would count +inf as a success, and
        Reinforce-Ada's baseline would train NaN weights. NaN stays what it is in TRL: a rollout that a function
        could not score (it returned None).
        """
        infinite = torch.isinf(rewards)
        if not infinite.any():
            return
        row, column = (int(index) for index in infinite.nonzero()[0])
        shown = repr(every_prompt()[row])
        raise ValueError(
            f"The reward function {self.names[column]!r} gave {float(rewards[row, column])} to a completion of the "
            f"prompt {shown[:200] + ('...' if len(shown) > 200 else '')} (generated on process "
            f"{row // rows_per_process}): a reward must be finite, and TRL keeps rewards in float32, where anything "
            "beyond ±3.4e38 is infinite. An infinite reward would zero its group's advantages (NaN weights under "
            "Reinforce-Ada's baseline) and count as a success. Return a finite reward (clip or rescale it), or None "
            "for a rollout that cannot be scored, which TRL leaves out of the baseline."
        )

    def warn_if_spread_overflows(self, counts: np.ndarray, rewards: np.ndarray, advantages: torch.Tensor) -> None:
        """Warn once when a group's rewards differ yet all its advantages are 0: their spread overflowed float32,
        where TRL computes a group's standard deviation (`GRPOTrainer` zeroes such a group too)."""
        if self._warned_overflow:
            return
        counts = counts[counts > 0]  # prompts that train no rollout hold no row
        starts = np.cumsum(counts) - counts
        with np.errstate(invalid="ignore"):
            spread = np.fmax.reduceat(rewards, starts) > np.fmin.reduceat(rewards, starts)
        silent = ~np.logical_or.reduceat(advantages.detach().cpu().numpy() != 0, starts)
        if (spread & silent).any() and self.is_main_process:
            self._warned_overflow = True
            largest = float(np.nanmax(np.abs(rewards)))
            logger.warning(
                f"{int((spread & silent).sum())} group(s) of this batch have rewards that differ (up to {largest:.3g} "
                "in size) and yet advantage 0 on every rollout: the squared spread of their rewards overflows float32 "
                "(beyond about 1.8e19), in which TRL computes a group's standard deviation, so GRPOTrainer zeroes "
                "them too and they train nothing. Rescale the rewards (to within about ±1e9) to train on them. This "
                "warning is not repeated."
            )

    def warn_if_success_never_varies(self, batch_failure_rate: float | None) -> None:
        """Warn once when every rollout of many batches in a row was judged solved, or every one failed, in a run
        where something reads the outcomes."""
        if batch_failure_rate not in (0.0, 1.0) or not self.success_readers:
            self._extreme_batches = 0
            return
        self._extreme_batches += 1
        if self._extreme_batches == EXTREME_BATCHES_BEFORE_WARNING and self.is_main_process:
            judged = "solved" if batch_failure_rate == 0.0 else "failed"
            judge = ("the weighted sum of the rewards" if self.success_index is None
                     else f"the reward {self.names[self.success_index]!r}")
            logger.warning(
                f"Every rollout of the last {EXTREME_BATCHES_BEFORE_WARNING} generation batches was judged {judged}: a "
                f"rollout is a success when {judge} reaches success_threshold={self.success_threshold}. What reads "
                f"the outcomes then learns nothing from them: {'; '.join(self.success_readers)}. If the rewards do "
                "vary, set success_threshold to the reward that means 'solved' (and success_reward_func to the "
                "correctness reward)."
            )
