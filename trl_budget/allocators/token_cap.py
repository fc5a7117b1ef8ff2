"""A cap on an allocation's expected completion tokens: rollouts are not the cost, tokens are.

Allocators move rollouts to hard prompts, and on real math hard prompts have the longest completions, so the same
rollout budget can cost far more generation time. With `budget_token_cap = c`, the allocation's expected completion
tokens `sum_i N_i L_i` (L_i: prompt i's expected length) must not exceed c times those of the uniform allocation of
the same batch; the number of rollout slots stays what TRL's sampler brings.

The allocator maximises `sum_i V(N_i) - lambda sum_i N_i L_i` over the same slot count: each rollout of prompt i
costs `lambda L_i`, which keeps the marginal gains non-increasing, so the exact greedy solver still applies
(`allocate(..., prices=lambda L)`). Expected tokens fall as lambda rises; a bisection finds the smallest lambda whose
allocation fits under the cap.

What is exact: the allocation returned maximises `sum V - lambda sum N L` for its lambda, so no allocation of the same
slot count with at most as many expected tokens has a higher value. What is not: an allocation using more tokens, still
under the cap, can have a higher value (the gap of a Lagrangian relaxation of an integer problem); the tests measure it
against brute force on small batches. Knapsack RL's fixed rules (base counts, fallback) are not priced, only the share
it splits by value; when even lambda -> infinity cannot meet the cap, the cheapest allocation found is returned and
`fits` says so.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import numpy as np

from .uniform import UniformAllocator

__all__ = ["TokenCappedAllocation", "accepts_prices", "allocate_under_token_cap", "check_token_cap_allocator",
           "TokenCappedAllocator",
           "expected_tokens"]

BISECTION_STEPS = 40


@dataclass
class TokenCappedAllocation:
    counts: np.ndarray
    multiplier: float  # lambda: the value given up per expected token
    token_ratio: float  # the allocation's expected tokens over the uniform allocation's
    fits: bool  # False when no price could bring the allocation under the cap


def accepts_prices(allocator) -> bool:
    """Whether `allocator.allocate` takes `prices=` (the built-in Knapsack RL and CoBA-RL allocators do)."""
    allocate = getattr(allocator, "allocate", None)
    try:
        return allocate is not None and "prices" in inspect.signature(allocate).parameters
    except (TypeError, ValueError):
        return False


def check_token_cap_allocator(allocator, cap: float) -> None:
    """A `ValueError` unless `allocator` has what the cap uses: `allocate(..., prices=)`, and the bounds
    `min_generations` / `max_generations` that the uniform reference allocation is computed with."""
    if not accepts_prices(allocator):
        raise ValueError(
            f"budget_token_cap={cap} needs an allocator that prices rollouts (`allocate(..., prices=)`, as knapsack "
            f"and coba do); {allocator!r} does not. Set budget_token_cap=None, or choose budget_allocator='knapsack' "
            "or 'coba'."
        )
    missing = [name for name in ("min_generations", "max_generations") if not hasattr(allocator, name)]
    if missing:
        raise ValueError(
            f"budget_token_cap={cap} compares each allocation with the uniform one within the allocator's bounds, "
            f"but {allocator!r} has no {' or '.join(missing)} attribute. Give the allocator these attributes (its "
            "fewest and most rollouts per prompt), or set budget_token_cap=None."
        )


def expected_tokens(counts: np.ndarray, lengths: np.ndarray) -> float:
    return float(np.dot(np.asarray(counts, dtype=np.float64), lengths))


def allocate_under_token_cap(allocator, pass_rates, budget: int, failure_rate, lengths, cap: float
                             ) -> TokenCappedAllocation:
    """The allocator's counts with expected tokens at most `cap` x the uniform allocation's (see the module)."""
    lengths = np.asarray(lengths, dtype=np.float64)
    uniform = UniformAllocator(allocator.min_generations, allocator.max_generations).allocate(pass_rates, budget)
    reference = expected_tokens(uniform, lengths)
    limit = cap * reference
    if not (np.all(lengths >= 0) and math.isfinite(limit) and math.isfinite(expected_tokens(np.full_like(
            lengths, allocator.max_generations), lengths))):  # else every comparison below is False, or NaN
        raise ValueError(
            f"budget_token_cap cannot be enforced: the expected completion lengths (from {lengths.min():.3g} to "
            f"{lengths.max():.3g} tokens) make the batch's expected tokens overflow or go negative. They come from "
            "the tracker's 'lengths'; a tracker file edited by hand can hold such values."
        )

    def at(multiplier: float) -> np.ndarray:
        if multiplier == 0.0:
            return np.asarray(allocator.allocate(pass_rates, budget, failure_rate), dtype=np.int64)
        return np.asarray(allocator.allocate(pass_rates, budget, failure_rate, prices=multiplier * lengths),
                          dtype=np.int64)

    def result(counts: np.ndarray, multiplier: float) -> TokenCappedAllocation:
        tokens = expected_tokens(counts, lengths)
        return TokenCappedAllocation(counts, multiplier, tokens / reference if reference else 1.0, tokens <= limit)

    counts = at(0.0)
    if expected_tokens(counts, lengths) <= limit:
        return result(counts, 0.0)
    # An upper multiplier that fits: at this price a rollout of the shortest prompt already costs one unit of value.
    high, previous = 1.0 / max(float(lengths.min()), 1e-12), None
    while expected_tokens(counts := at(high), lengths) > limit:
        if previous is not None and np.array_equal(counts, previous):  # the price no longer moves anything
            return result(counts, high)
        previous, high = counts, high * 4.0
    low, best = 0.0, counts
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2.0
        counts = at(middle)
        if expected_tokens(counts, lengths) <= limit:
            high, best = middle, counts
        else:
            low = middle
    return result(best, high)


class TokenCappedAllocator:
    """`allocator` under a cap on expected completion tokens (`allocate_under_token_cap`), as one allocation call;
    `last` keeps the latest call's outcome for the logs."""

    def __init__(self, allocator, lengths: np.ndarray, cap: float):
        self.allocator, self.lengths, self.cap, self.last = allocator, lengths, cap, None

    @classmethod
    def for_expected_lengths(cls, allocator, lengths: np.ndarray, cap: float) -> "TokenCappedAllocator":
        """Under the cap with each prompt's expected completion length, NaN where never measured: those take the
        batch's mean of the measured ones (none measured: all alike)."""
        lengths = np.array(lengths, dtype=np.float64)
        known = np.isfinite(lengths)
        lengths[~known] = lengths[known].mean() if known.any() else 1.0
        return cls(allocator, lengths, cap)

    def __call__(self, pass_rates, budget, failure_rate=None):
        self.last = allocate_under_token_cap(self.allocator, pass_rates, budget, failure_rate, self.lengths, self.cap)
        return self.last.counts

    def __repr__(self) -> str:
        return f"{self.allocator!r} under budget_token_cap={self.cap}"
