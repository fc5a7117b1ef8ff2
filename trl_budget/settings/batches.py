"""How a batch is generated: rounds until mixed, dynamic sampling, and generation batches that checkpoints would split."""

from __future__ import annotations

import math
import re
import warnings

from ..checks import (
    check_whole_number,
    is_whole_number,
    shown,
)
from .common import allocator_in_words

DYNAMIC_SAMPLING_METRICS = ("reward", "success")


class BatchSettings:
    """`BudgetGRPOConfig`'s part for how a batch is generated: rounds until mixed and dynamic sampling, checked."""

    def check_round_settings(self) -> None:
        """Rounds until mixed: whole counts within the bounds, and not together with a probe stage."""
        check_whole_number("rounds_generations", self.rounds_generations, 0)
        if self.rounds_max is not None:
            check_whole_number("rounds_max", self.rounds_max, 1)
        first = self.rounds_first_generations
        if first is not None and not (is_whole_number(first)
                                      and self.budget_min_generations <= first <= self.num_generations):
            raise ValueError(
                f"rounds_first_generations must be a whole number from budget_min_generations="
                f"{self.budget_min_generations} "
                f"(every prompt's fewest rollouts) to num_generations={self.num_generations} (a first round of more "
                f"would exceed the batch's budget), or None for budget_min_generations; got {shown(first)}."
            )
        if self.rounds_generations and self.probe_generations:
            raise ValueError(
                f"rounds_generations={self.rounds_generations} and probe_generations="
                f"{self.probe_generations} are two ways of generating a batch in rounds; a probe is the "
                "two-round case. Set one of them to 0."
            )

    def check_dynamic_sampling(self) -> None:
        """Dynamic sampling: a metric, whole counts, and the one rule it runs with (uniform, one round per batch)."""
        if self.dynamic_sampling_metric not in DYNAMIC_SAMPLING_METRICS:
            raise ValueError(
                f"dynamic_sampling_metric={self.dynamic_sampling_metric!r} is not a metric: choose "
                "'reward' (the rollouts' weighted reward must differ) or 'success' (their outcomes must differ)."
            )
        check_whole_number("dynamic_sampling_oversample", self.dynamic_sampling_oversample, 1)
        check_whole_number("dynamic_sampling_max_gen_batches", self.dynamic_sampling_max_gen_batches, 0)
        if not self.dynamic_sampling:
            return
        if self.budget_allocator != "uniform":
            raise ValueError(
                f"dynamic_sampling=True trains num_generations rollouts of each kept prompt, as verl's DAPO recipe "
                f"does, so it runs with budget_allocator='uniform' only, and this run's is {allocator_in_words(self)}: "
                "its generation batches cannot yet be shared unevenly. Set budget_allocator='uniform', or "
                "dynamic_sampling=False to share the budget by the allocator."
            )
        for name in ("rounds_generations", "probe_generations"):
            if getattr(self, name):
                raise ValueError(
                    f"dynamic_sampling=True draws new prompts in rounds of its own, so {name}="
                    f"{getattr(self, name)} (more rollouts of the same prompts) cannot apply with it. Set {name}=0, "
                    "or dynamic_sampling=False."
                )
        if self.budget_token_cap is not None:
            raise ValueError(
                f"budget_token_cap={self.budget_token_cap!r} caps an uneven allocation's tokens, and dynamic sampling "
                "generates num_generations rollouts of every prompt. Remove budget_token_cap, or set "
                "dynamic_sampling=False."
            )

    def warn_if_checkpoints_split_generation_batches(self) -> None:
        """A checkpoint between the steps of one generation batch cannot be resumed exactly: say so now."""
        generate_every = self.steps_per_generation * self.num_iterations  # in micro-steps, as TRL counts them
        if self.save_strategy != "steps" or self.save_steps < 1 or generate_every <= 1:
            return
        if int(self.save_steps) * self.gradient_accumulation_steps % generate_every:
            whole = generate_every // math.gcd(generate_every, self.gradient_accumulation_steps)
            warnings.warn(
                f"save_steps={self.save_steps} puts checkpoints inside generation batches: a batch is generated "
                f"every {generate_every} micro-steps (steps_per_generation={self.steps_per_generation} x "
                f"num_iterations={self.num_iterations}) and a checkpoint comes every {int(self.save_steps)} x "
                f"{self.gradient_accumulation_steps} micro-steps. A run resumed from such a checkpoint generates a "
                "fresh batch and counts its prompts in the pass rates again, so it no longer matches an "
                f"uninterrupted run. Use a save_steps that is a multiple of {whole} to resume exactly.",
                UserWarning,
                stacklevel=3,
            )


TRL_GROUP_CHECK = re.compile(r"generation_batch_size \((\d+)\) must be divisible by num_generations")


def is_trl_group_check(message: str) -> bool:
    """TRL's refusal of a generation batch that its groups of num_generations do not divide."""
    return TRL_GROUP_CHECK.search(message) is not None


def trl_generation_batch(error: ValueError) -> int:
    """The generation batch TRL's refusal names."""
    return int(TRL_GROUP_CHECK.search(str(error)).group(1))


def sampler_group_size(generation_batch_size: int, num_generations: int) -> int:
    """Under SPO, the group size TRL's sampler deals the batch in (its rows are not read: SPO draws its own prompts):
    the largest divisor of the generation batch from 2 to `num_generations`, so that TRL's checks hold."""
    divisors = [size for size in range(2, min(num_generations, generation_batch_size) + 1)
                if generation_batch_size % size == 0]
    if not divisors:
        raise ValueError(
            f"generation_batch_size={generation_batch_size} holds no group of 2 rollouts, which TRL's sampler deals "
            "every batch in, even under budget_allocator='spo' (which reads no num_generations). Raise "
            "per_device_train_batch_size, steps_per_generation or generation_batch_size."
        )
    return divisors[-1]
