"""CoBA-RL (Yao et al., 2026): a capability-oriented Beta value, solved exactly."""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_finite, check_flag, is_finite_number, shown
from .base import _BoundedAllocator, _check_failure_rate
from .registry import register_allocator
from .solver import allocate_by_curves, spread_evenly
from .uniform import UniformAllocator


# CoBA-RL's run script (sliding_window_size=1): the last visit, and the last batch's failure rate.
@register_allocator("coba", {"window": 1, "rollout_pool": 0, "min_rollouts": 1, "failure_rate_window": 1})
class CoBAAllocator(_BoundedAllocator):
    """CoBA-RL (Yao et al., 2026): capability-oriented Beta value with budget saturation, exact greedy optimum.

    Args:
        min_generations, max_generations: bounds N_low, N_up on each prompt's count.
        kappa: concentration of the Beta density (alpha + beta).
        gamma: steepness of the sigmoid that maps a low failure rate to the Beta's alpha.
        bucket_heuristic: the official release's extra rule, absent from the paper: only `exploration_share` of the
            spare budget is optimised over prompts with `hard_threshold <= p <= easy_threshold`; the rest goes to very
            hard prompts first, weighted by (1 - p).
        exploration_share, hard_threshold, easy_threshold: settings of that heuristic.
    """

    def __init__(
        self,
        min_generations: int = 2,
        max_generations: int = 128,
        kappa: float = 11.0,
        gamma: float = 10.0,
        bucket_heuristic: bool = False,
        exploration_share: float = 0.7,
        hard_threshold: float = 0.05,
        easy_threshold: float = 0.99,
    ):
        super().__init__(min_generations, max_generations)
        check_finite("kappa", kappa, 2.0, "above 2, so that alpha and beta can both be at least 1")
        check_finite("gamma", gamma, 0.0, "above 0 (the steepness of the sigmoid on failure rates below 0.5)")
        if not (is_finite_number(exploration_share) and 0.0 <= exploration_share <= 1.0):
            raise ValueError(f"exploration_share must lie in [0, 1], got {shown(exploration_share)}.")
        if not (is_finite_number(hard_threshold) and is_finite_number(easy_threshold)
                and 0.0 <= hard_threshold < easy_threshold <= 1.0):
            raise ValueError(
                f"need 0 <= hard_threshold < easy_threshold <= 1, got {shown(hard_threshold)} and {shown(easy_threshold)}."
            )
        self.kappa = kappa
        self.gamma = gamma
        check_flag("bucket_heuristic", bucket_heuristic)
        self.bucket_heuristic = bucket_heuristic
        self.exploration_share = exploration_share
        self.hard_threshold = hard_threshold
        self.easy_threshold = easy_threshold

    def beta_parameters(self, pass_rates, failure_rate: float | None = None) -> tuple[float, float]:
        """(alpha_t, beta_t) of the Beta density; `failure_rate` defaults to 1 - mean pass rate of seen prompts."""
        if failure_rate is None:
            rates = np.asarray(pass_rates, dtype=np.float64)
            seen = rates[~np.isnan(rates)]
            failure_rate = 1.0 - float(seen.mean()) if seen.size else 0.5
        if failure_rate <= 0.5:
            failure_rate = 1.0 / (1.0 + math.exp(-self.gamma * (failure_rate - 0.5)))
        alpha = min(max(1.0 + (self.kappa - 2.0) * failure_rate, 1.0), self.kappa - 1.0)
        return alpha, self.kappa - alpha

    def metrics(self, pass_rates, failure_rate: float | None = None) -> dict[str, float]:
        """What the trainer logs at each batch: the Beta parameter alpha (high: easy prompts; low: hard ones)."""
        return {"alpha": self.beta_parameters(pass_rates, failure_rate)[0]}

    def saturation_curve(self, pass_rates, failure_rate: float | None = None) -> "_SaturationCurve":
        """The batch's value curve: Beta density from the failure rate, tau from the spread of pass rates."""
        p = _clipped_pass_rates(pass_rates)
        alpha, beta = self.beta_parameters(pass_rates, failure_rate)
        tau = 3.0 + 9.0 * min(max(float(p.var()) / 0.1667, 0.0), 1.0)
        return _SaturationCurve(alpha, beta, tau)

    def prompt_values(self, counts, pass_rates, failure_rate: float | None = None) -> np.ndarray:
        """Each prompt's V(N, p) on the curve of these prompts (what `prompt_sampling="value"` weighs prompts by)."""
        counts, rates = self._check_counts(counts, pass_rates)
        _check_failure_rate(failure_rate)
        weight, rate = self.saturation_curve(rates, failure_rate).weight_and_rate(_clipped_pass_rates(rates))
        return -np.expm1(-counts * rate) * weight

    def value(self, counts, pass_rates, failure_rate: float | None = None) -> float:
        return float(np.sum(self.prompt_values(counts, pass_rates, failure_rate)))

    def allocate(self, pass_rates, budget: int, failure_rate: float | None = None,
                 prices: np.ndarray | None = None) -> np.ndarray:
        """Counts per prompt. `prices`: a cost per rollout of each prompt, taken off its gains (`token_cap`); under the
        bucket heuristic only the optimised share is priced."""
        rates = self._check_request(pass_rates, budget, failure_rate)
        budget = int(budget)
        if np.isnan(rates).all() and prices is None:
            return UniformAllocator(self.min_generations, self.max_generations).allocate(rates, budget)
        curve = self.saturation_curve(rates, failure_rate)
        counts = np.full(rates.size, self.min_generations, dtype=np.int64)
        prices = None if prices is None else np.asarray(prices, dtype=np.float64)
        if not self.bucket_heuristic:
            return self._optimise(curve, rates, counts, budget - int(counts.sum()), prices)
        return self._allocate_by_buckets(curve, rates, counts, budget, prices)

    def top_up(self, pass_rates, counts, spare: int, failure_rate: float | None = None) -> np.ndarray:
        """`counts` plus `spare` more rollouts by the capability-oriented value (the exact greedy from the current
        counts), for the budget left after rounds until mixed; the bucket heuristic does not apply."""
        rates = np.asarray(pass_rates, dtype=np.float64)
        counts = np.array(counts, dtype=np.int64)
        spare = min(int(spare), int((self.max_generations - counts).sum()))
        if np.isnan(rates).all():
            return spread_evenly(int(counts.sum()) + spare, counts, np.full(counts.size, self.max_generations))
        return self._optimise(self.saturation_curve(rates, failure_rate), rates, counts, spare)

    def _optimise(self, curve: "_SaturationCurve", rates: np.ndarray, lower: np.ndarray, spare: int,
                  prices: np.ndarray | None = None) -> np.ndarray:
        return allocate_by_curves(_clipped_pass_rates(rates)[:, None], lower, self.max_generations, curve, spare,
                                  prices)

    def _allocate_by_buckets(self, curve, rates, counts, budget: int, prices=None) -> np.ndarray:
        seen = ~np.isnan(rates)
        hard = seen & (rates < self.hard_threshold)
        easy = seen & (rates > self.easy_threshold)
        explore = ~(hard | easy)
        spare = budget - int(counts.sum())

        def optimise_exploration(amount: int) -> int:
            amount = min(amount, int((self.max_generations - counts[explore]).sum()))
            counts[explore] = self._optimise(curve, rates[explore], counts[explore], amount,
                                             None if prices is None else prices[explore])
            return amount

        spare -= optimise_exploration(int(self.exploration_share * spare))
        spare -= self._raise_in_proportion(counts, hard, 1.0 - rates, spare)
        spare -= optimise_exploration(spare)
        upper = np.full(int(easy.sum()), self.max_generations)
        counts[easy] = spread_evenly(int(counts[easy].sum()) + spare, counts[easy], upper)
        return counts

    def _raise_in_proportion(self, counts: np.ndarray, members: np.ndarray, weights: np.ndarray, amount: int) -> int:
        """D'Hondt apportionment of up to `amount` rollouts over `members` in proportion to `weights`."""
        amount = min(amount, int((self.max_generations - counts[members]).sum()))
        if amount <= 0:
            return 0
        counts[members] = allocate_by_curves(
            weights[members, None], counts[members], self.max_generations, _proportional_gains, amount
        )
        return amount


def _clipped_pass_rates(pass_rates) -> np.ndarray:
    """CoBA's view of pass rates: unseen prompts at 0.5, all clipped to [0.01, 0.99]."""
    return np.clip(np.nan_to_num(np.asarray(pass_rates, dtype=np.float64), nan=0.5), 0.01, 0.99)


class _SaturationCurve:
    """CoBA's V(N, p) = (1 - exp(-N p (1 - p) / tau)) BetaPDF(p; alpha, beta) for one batch."""

    def __init__(self, alpha: float, beta: float, tau: float):
        self.alpha, self.beta, self.tau = alpha, beta, tau
        self._log_norm = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)

    def weight_and_rate(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        weight = np.exp((self.alpha - 1.0) * np.log(p) + (self.beta - 1.0) * np.log1p(-p) - self._log_norm)
        return weight, p * (1.0 - p) / self.tau

    def exponential_terms(self, p: np.ndarray):
        weight, rate = self.weight_and_rate(np.asarray(p, dtype=np.float64).ravel())
        return weight * -np.expm1(-rate), np.exp(-rate), np.zeros_like(rate), np.zeros_like(rate)

    def __call__(self, p: np.ndarray, levels: np.ndarray, lower: np.ndarray) -> np.ndarray:
        """Marginal gains V(N + 1) - V(N) = w exp(-N c) (1 - exp(-c)), a geometric sequence in N."""
        weight, rate = self.weight_and_rate(p)
        return weight * -np.expm1(-rate) * np.exp(-levels * rate)


def _proportional_gains(weights: np.ndarray, levels: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """D'Hondt quotients: the k-th extra rollout of a prompt is worth w / k."""
    return weights / (np.maximum(levels - lower, 0.0) + 1.0)
