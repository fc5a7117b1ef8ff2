"""Knapsack RL (Li et al., 2025), as its release allocates."""

from __future__ import annotations

import numpy as np

from ..checks import check_flag, check_whole_number, is_finite_number, shown
from .base import _BoundedAllocator
from .registry import register_allocator
from .solver import allocate_by_curves, spread_evenly


# Knapsack RL's release (`rl_dataset.py`: min_buffer_length=8, reward_buffer_length=16): a prompt is unseen until it
# has 8 scored rollouts; then its last visit's rate if that visit had 16, else its latest 16 rollouts across visits (16
# visits always hold them). It has no failure rate; the tracker's is only logged.
@register_allocator("knapsack", {"window": 16, "rollout_pool": 16, "min_rollouts": 8, "failure_rate_window": 1})
class KnapsackAllocator(_BoundedAllocator):
    """Knapsack RL (Li et al., 2025): value = P(non-zero gradient) x information gain, as its release allocates.

    Follows `sampling_budget_by_knapsack` of the release (`verl/trainer/ppo/exploration_utils.py`):

    1. Base counts: an unseen prompt (NaN) gets `default_generations`, a mixed prompt (0 < p < 1) `min_generations`,
       a never-solved one (p = 0) `zero_pass_generations`, an always-solved one (p = 1) `full_pass_generations`.
    2. With `fallback`, a mixed prompt needs `cost(p) = log(1 - alpha) / log(max(p, 1 - p))` rollouts to show a
       non-zero gradient with probability alpha = `fallback_confidence`. When the spare budget (after the base counts)
       is strictly larger than `S = sum(int(min(max_generations, cost)))` over the mixed prompts, the excess
       `spare - S` is spread in equal increments over the never-solved and the unseen prompts (the release holds a
       success rate of 0 for prompts without history), or over every prompt that is not mixed when there are none,
       and the mixed prompts share exactly `S` on top of their base counts.
    3. The mixed prompts' share is split to maximise the value (an exact optimum; the release runs a dynamic
       program). Without the fallback, or when it does not fire, they share the whole spare budget.
    4. With no mixed prompt, the spare budget goes in equal increments to the never-solved and unseen prompts, or,
       with none, to every prompt (the release then gives every prompt `n`: the same when the budget is prompts x n).

    Unlike the release, `max_generations` is a hard bound on every prompt: the release can give fallback receivers,
    and mixed prompts whose share exceeds their room, more than N_up. What a bound holds back goes to the other
    prompts in the same order (never-solved and unseen, then the rest of the non-mixed, then the mixed).

    Args:
        min_generations, max_generations: bounds N_low, N_up on each prompt's count.
        default_generations: count for a prompt without history (None: the even share `budget // prompts`).
        zero_pass_generations: base count of a prompt never solved (p = 0), `negative_n` in the release.
        full_pass_generations: base count of a prompt always solved (p = 1), `positive_n` in the release.
        fallback: the published fallback (`allow_fallback`), step 2 above.
        fallback_confidence: alpha in cost(p).
    """

    def __init__(
        self,
        min_generations: int = 2,
        max_generations: int = 128,
        default_generations: int | None = None,
        zero_pass_generations: int = 2,
        full_pass_generations: int = 2,
        fallback: bool = True,
        fallback_confidence: float = 0.9,
    ):
        super().__init__(min_generations, max_generations)
        if not (is_finite_number(fallback_confidence) and 0.0 < fallback_confidence < 1.0):
            raise ValueError(f"fallback_confidence must lie in (0, 1), got {shown(fallback_confidence)}.")
        for name, count in (
            ("default_generations", default_generations),
            ("zero_pass_generations", zero_pass_generations),
            ("full_pass_generations", full_pass_generations),
        ):
            if count is not None:
                check_whole_number(name, count, 1)
        self.default_generations = default_generations
        self.zero_pass_generations = zero_pass_generations
        self.full_pass_generations = full_pass_generations
        check_flag("fallback", fallback)
        self.fallback = fallback
        self.fallback_confidence = fallback_confidence

    @staticmethod
    def prompt_value(counts: np.ndarray, pass_rates: np.ndarray) -> np.ndarray:
        """(1 - p^N - (1 - p)^N) p (1 - p)^2 per prompt; 0 for unseen prompts."""
        p = np.nan_to_num(pass_rates, nan=0.0)
        q = 1.0 - p
        return (1.0 - p**counts - q**counts) * p * q**2

    def prompt_values(self, counts, pass_rates, failure_rate: float | None = None) -> np.ndarray:
        """Each prompt's value at its count (what `prompt_sampling="value"` weighs prompts by)."""
        counts, rates = self._check_counts(counts, pass_rates)
        return self.prompt_value(counts, rates)

    def value(self, counts, pass_rates, failure_rate: float | None = None) -> float:
        return float(self.prompt_values(counts, pass_rates, failure_rate).sum())

    def fallback_cost(self, pass_rates: np.ndarray) -> np.ndarray:
        """`int(min(max_generations, cost(p)))` per mixed prompt: the release's estimate, truncated as it truncates."""
        cost = np.log1p(-self.fallback_confidence) / np.log(np.maximum(pass_rates, 1.0 - pass_rates))
        return np.minimum(cost, self.max_generations).astype(np.int64)

    def base_counts(self, pass_rates: np.ndarray, budget: int) -> np.ndarray:
        """Step 1: the count each prompt starts from, within the bounds."""
        rates = np.asarray(pass_rates, dtype=np.float64)
        default = self.default_generations if self.default_generations is not None else budget // rates.size
        counts = np.where(rates == 0.0, self.zero_pass_generations, self.full_pass_generations)
        counts = np.where((rates > 0.0) & (rates < 1.0), self.min_generations, counts)
        counts = np.where(np.isnan(rates), default, counts)
        return np.clip(counts, self.min_generations, self.max_generations).astype(np.int64)

    class _Gains:
        """Marginal gains V(N + 1) - V(N) = p q^2 (p^N q + q^N p): a sum of two exponentials in N."""

        def __call__(self, pass_rates: np.ndarray, levels: np.ndarray, lower: np.ndarray) -> np.ndarray:
            p = pass_rates
            q = 1.0 - p
            return p * q**2 * (p**levels * q + q**levels * p)

        @staticmethod
        def exponential_terms(pass_rates: np.ndarray):
            p = np.asarray(pass_rates, dtype=np.float64).ravel()
            q = 1.0 - p
            return p * q**3, p, p**2 * q**2, q

    _gains = _Gains()

    def allocate(self, pass_rates, budget: int, failure_rate: float | None = None,
                 prices: np.ndarray | None = None) -> np.ndarray:
        """Counts per prompt. `prices`: a cost per rollout of each prompt, taken off the mixed prompts' gains where
        they share the budget by value (`token_cap`); the release's fixed rules (base counts, fallback) ignore it."""
        rates = self._check_request(pass_rates, budget, failure_rate)
        budget = int(budget)
        mixed = (rates > 0.0) & (rates < 1.0)
        base = self.base_counts(rates, budget)
        if int(base.sum()) > budget:  # the base counts do not fit: mixed prompts keep N_low, the others shrink evenly
            counts = np.full(rates.size, self.min_generations, dtype=np.int64)
            room = budget - int(mixed.sum()) * self.min_generations
            counts[~mixed] = spread_evenly(room, counts[~mixed], base[~mixed])
            return counts
        counts = base
        spare = budget - int(counts.sum())
        never_solved = np.isnan(rates) | (rates == 0.0)
        if not mixed.any():
            for receivers in (never_solved, np.ones_like(mixed)):
                spare -= self._raise_evenly(counts, receivers, spare)
            return counts
        mixed_share = spare
        if self.fallback:
            needed = int(self.fallback_cost(rates[mixed]).sum())
            if needed < spare and (~mixed).any():
                mixed_share = needed
                for receivers in (never_solved if never_solved.any() else ~mixed, ~mixed):
                    spare -= self._raise_evenly(counts, receivers, spare - mixed_share)
                mixed_share = spare  # what the bound held back from the receivers stays with the mixed prompts
        taken = min(mixed_share, int((self.max_generations - counts[mixed]).sum()))
        counts[mixed] = allocate_by_curves(rates[mixed, None], counts[mixed], self.max_generations, self._gains, taken,
                                           None if prices is None else np.asarray(prices, dtype=np.float64)[mixed])
        self._raise_evenly(counts, ~mixed, spare - taken)  # the mixed prompts are all at max_generations
        return counts

    def top_up(self, pass_rates, counts, spare: int, failure_rate: float | None = None) -> np.ndarray:
        """`counts` plus `spare` more rollouts, as `allocate` spends its spare budget: to the mixed prompts by value
        (the exact greedy from their current counts), then evenly to never-solved and unseen prompts, then to all.

        For the budget left after rounds until mixed; the release's base counts and fallback do not apply (the rounds
        already gave every prompt its rollouts)."""
        rates = np.asarray(pass_rates, dtype=np.float64)
        counts = np.array(counts, dtype=np.int64)
        mixed = (rates > 0.0) & (rates < 1.0)
        taken = min(int(spare), int((self.max_generations - counts[mixed]).sum()))
        counts[mixed] = allocate_by_curves(rates[mixed, None], counts[mixed], self.max_generations, self._gains, taken)
        spare = int(spare) - taken
        for receivers in (np.isnan(rates) | (rates == 0.0), np.ones_like(mixed)):
            spare -= self._raise_evenly(counts, receivers, spare)
        return counts

    def _raise_evenly(self, counts: np.ndarray, members: np.ndarray, amount: int) -> int:
        """Raise `members` in equal increments by up to `amount` in total (bounded); returns how much was placed."""
        if amount <= 0 or not members.any():
            return 0
        before = int(counts[members].sum())
        upper = np.full(int(members.sum()), self.max_generations)
        counts[members] = spread_evenly(before + amount, counts[members], upper, equal_increments=True)
        return int(counts[members].sum()) - before
