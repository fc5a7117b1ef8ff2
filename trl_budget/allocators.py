"""Rollout-budget allocators: how many rollouts each prompt of a generation batch receives.

Pure numpy, no torch and no TRL, so that every allocator can be used and tested alone on arrays.

Every allocator maximises a separable objective ``sum_i V(N_i, p_i)`` whose marginal gains ``V(N + 1) - V(N)`` do not
increase with ``N``. For such objectives handing out rollouts one at a time to the largest marginal gain is exactly
optimal, and so is taking the ``R`` largest marginal gains over all prompts at once. `take_largest_gains` does the
latter with one threshold search in numpy; prompts sharing a pass rate share a gain curve, so the work grows with the
number of distinct pass rates, not with the number of prompts or rollouts.
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Protocol

import numpy as np

from .checks import check_finite, check_whole_number

__all__ = [
    "Allocator",
    "CoBAAllocator",
    "KnapsackAllocator",
    "UniformAllocator",
    "allocator_class",
    "allocator_names",
    "register_allocator",
    "release_pass_rate_rule",
    "spread_evenly",
    "take_largest_gains",
]


class Allocator(Protocol):
    """What the trainer needs from an allocator: one call that returns a count per prompt.

    An allocator may also have `metrics(pass_rates, failure_rate) -> dict[str, float]`: the trainer logs each entry
    as `budget/<name>` at every generation batch (CoBA-RL logs its Beta parameter alpha this way).
    """

    def __call__(self, pass_rates: np.ndarray, budget: int, failure_rate: float | None = None) -> np.ndarray: ...


# ------------------------------------------------------------------------------------------------------ registry

# Pass rates as the tracker estimates them when a release says nothing: the last visit, the last batch's failure rate.
PLAIN_PASS_RATE_RULE = {"window": 1, "rollout_pool": 0, "min_rollouts": 1, "failure_rate_window": 1}

_REGISTRY: dict[str, tuple[type, dict[str, int]]] = {}


def register_allocator(name: str, pass_rate_rule: dict[str, int] | None = None):
    """Class decorator: make an allocator choosable by `name` (`BudgetGRPOConfig(budget_allocator=name)`).

    Args:
        name: the name; `BudgetGRPOConfig` fields named `<name>_<option>` become the constructor's `<option>`.
        pass_rate_rule: the `CapabilityTracker` settings (`window`, `rollout_pool`, `min_rollouts`,
            `failure_rate_window`) that this allocator's release estimates pass rates with; the plain rule (the last
            visit) when None.
    """

    def register(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name][0] is not cls:
            raise ValueError(f"an allocator named {name!r} is registered already ({_REGISTRY[name][0].__name__}).")
        _REGISTRY[name] = (cls, {**PLAIN_PASS_RATE_RULE, **(pass_rate_rule or {})})
        return cls

    return register


def allocator_names() -> list[str]:
    """The registered names."""
    return list(_REGISTRY)


def allocator_class(name: str) -> type:
    """The allocator class registered as `name`, or imported from a dotted path (`package.module:Class`)."""
    if name in _REGISTRY:
        return _REGISTRY[name][0]
    module_name, separator, attribute = name.partition(":") if ":" in name else name.rpartition(".")
    if not separator or not module_name or not attribute:
        raise ValueError(
            f"budget_allocator={name!r} is unknown: choose one of {', '.join(_REGISTRY)}, or give a dotted path to "
            "your allocator class (`my_package.my_module:MyAllocator`)."
        )
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(
            f"budget_allocator={name!r} cannot be imported ({type(error).__name__}: {error}); check the dotted path "
            "and that its package is installed."
        ) from error
    if not callable(found):
        raise ValueError(f"budget_allocator={name!r} is {found!r}, not an allocator class or factory.")
    return found


def release_pass_rate_rule(name: str) -> dict[str, Any]:
    """The tracker settings of the allocator registered as `name` (the plain rule for other allocators)."""
    return dict(_REGISTRY[name][1]) if name in _REGISTRY else dict(PLAIN_PASS_RATE_RULE)


def take_largest_gains(gains: np.ndarray, curve_of_prompt: np.ndarray, lower: np.ndarray, spare: int) -> np.ndarray:
    """Counts that take the `spare` largest marginal gains over all prompts.

    Args:
        gains: `(curves, K)` array; `gains[d, n]` is the gain of going from `n` to `n + 1` rollouts on curve `d`,
            non-increasing in `n`, and `-inf` where `n` is below the curve's lower bound or at/above its upper bound.
        curve_of_prompt: `(prompts,)` index of each prompt's curve.
        lower: `(curves,)` starting count of each curve.
        spare: how many rollouts to hand out on top of the lower bounds; at most the total capacity.

    Returns:
        `(prompts,)` int64 counts. Ties at the threshold go to the lowest prompt index, so the result is deterministic.
    """
    counts = lower[curve_of_prompt].astype(np.int64)
    if spare <= 0:
        return counts
    prompts_per_curve = np.bincount(curve_of_prompt, minlength=gains.shape[0])
    flat = gains.ravel()
    flat_weight = np.repeat(prompts_per_curve, gains.shape[1])
    live = (flat_weight > 0) & np.isfinite(flat)
    flat, flat_weight = flat[live], flat_weight[live]
    if flat.size > spare:
        # Each item stands for at least one rollout, so the `spare`-th largest item bounds the threshold from below.
        kth_largest = np.partition(flat, flat.size - spare)[flat.size - spare]
        candidates = flat >= kth_largest
        flat, flat_weight = flat[candidates], flat_weight[candidates]
    order = np.argsort(flat)[::-1]
    taken = np.cumsum(flat_weight[order])
    threshold = flat[order[np.searchsorted(taken, spare)]]

    counts += (gains > threshold).sum(axis=1)[curve_of_prompt]
    left = spare - int(counts.sum() - lower[curve_of_prompt].sum())
    ties = (gains == threshold).sum(axis=1)[curve_of_prompt]
    ties_before = np.cumsum(ties) - ties
    counts += np.clip(left - ties_before, 0, ties)
    return counts


# Above this many (distinct curve x level) gains, curves that are sums of exponentials are solved by a threshold search.
DENSE_GAINS_LIMIT = 2_000_000


def take_largest_gains_by_threshold(terms, lower: np.ndarray, width: int, spare: int) -> np.ndarray:
    """The same counts as `take_largest_gains`, for gains `g_i(n) = c_i a_i^n + d_i b_i^n`, without a gain matrix.

    A prompt's number of gains above a threshold has a closed form up to a level or two, which a few exact evaluations
    settle. A search on the threshold narrows the spare-th largest gain down to a band of a few thousand gains, which
    are then ranked one by one (ties at the threshold to the lowest prompt index, as `take_largest_gains`).

    Args:
        terms: `(c, a, d, b)` arrays, one entry per prompt, with `c, d >= 0` and bases in (0, 1).
        lower, width: each prompt's count starts at `lower` and stays below `width` (levels `lower ... width - 1`).
        spare: how many gains to take.
    """
    curve = _ExponentialSum(*terms)
    lower = np.asarray(lower, dtype=np.int64)
    upper = np.full(lower.size, width, dtype=np.int64)
    spare = min(spare, int((upper - lower).sum()))

    def probe(log_threshold: float) -> None:
        """Count, per prompt, the gains above the threshold, and move the matching end of the bracket there."""
        nonlocal high, low, taken_at_top, taken_at_bottom
        # Prompts taking as many gains at both ends of the bracket take that many at any threshold inside it.
        taken = taken_at_top.copy()
        open_ = np.flatnonzero(taken_at_top != taken_at_bottom)
        above = curve.levels_above(math.exp(log_threshold), open_)
        taken[open_] = np.clip(above, lower[open_], upper[open_]) - lower[open_]
        if taken.sum() >= spare:
            low, taken_at_bottom = log_threshold, taken
        else:
            high, taken_at_top = log_threshold, taken

    # Above the largest gain nothing is taken; below half the smallest, everything. A dense look at every k-th prompt
    # tells roughly where the threshold lies: probe around it first, so that both ends of the bracket move.
    high, low = math.log(curve.gain(lower).max()), math.log(curve.gain(upper - 1).min() / 2)
    taken_at_top, taken_at_bottom = np.zeros_like(lower), upper - lower
    band_limit = max(4096, lower.size // 8)
    step = max(1, lower.size // 1024)
    sampled = np.arange(0, lower.size, step)
    levels = np.arange(width)
    sample_gains = np.where((levels >= lower[sampled, None]) & (levels < upper[sampled, None]),
                            curve.gain(levels[None, :], sampled[:, None]), -np.inf).ravel()
    sample_gains = np.sort(sample_gains[np.isfinite(sample_gains) & (sample_gains > 0)])[::-1]
    rank = spare / step
    for share in (0.95, 1.05):  # from the higher threshold to the lower
        guess = math.log(sample_gains[min(int(rank * share), sample_gains.size - 1)])
        if low < guess < high:
            probe(guess)
    while (band := int(taken_at_bottom.sum() - taken_at_top.sum())) > band_limit:
        slope = band / (high - low)  # gains per unit of log-threshold, on average over the bracket
        estimate = high - (spare - taken_at_top.sum()) / slope
        guesses = [estimate + 0.25 * band_limit / slope, estimate - 0.25 * band_limit / slope]
        if band < 4 * band_limit:  # interpolation alone may creep towards one side; halve the bracket too
            guesses.append((high + low) / 2)
        moved = False
        for guess in sorted(guesses, reverse=True):
            if low < guess < high:
                probe(guess)
                moved = True
        if not moved:
            break
    # Rank the gains of the band one by one: the levels each prompt takes at the bracket's low end but not its high.
    start, stop = taken_at_top, np.maximum(taken_at_bottom, taken_at_top)
    prompt_of = np.repeat(np.arange(lower.size), stop - start)
    offsets = np.arange(prompt_of.size) - np.repeat(np.cumsum(stop - start) - (stop - start), stop - start)
    level = lower[prompt_of] + start[prompt_of] + offsets
    gains = curve.gain(level, prompt_of)
    order = np.lexsort((level, prompt_of, -gains))[: spare - int(start.sum())]
    return lower + start + np.bincount(prompt_of[order], minlength=lower.size)


class _ExponentialSum:
    """Gains `c a^n + d b^n` per prompt, with the base `a >= b`; counts of levels above a threshold."""

    def __init__(self, c, a, d, b):
        c, a, d, b = (np.broadcast_to(np.asarray(x, dtype=np.float64), np.shape(c)).ravel() for x in (c, a, d, b))
        swap = b > a
        self.c, self.a = np.where(swap, d, c), np.where(swap, b, a)
        self.d, self.b = np.where(swap, c, d), np.where(swap, a, b)
        self.log_a = np.log(self.a)
        with np.errstate(divide="ignore"):
            self.log_ratio = np.log(self.b) - self.log_a  # log(b / a) <= 0; -inf where b = 0

    def gain(self, level: np.ndarray, prompt: np.ndarray | None = None) -> np.ndarray:
        index = slice(None) if prompt is None else prompt
        return self.c[index] * self.a[index] ** level + self.d[index] * self.b[index] ** level

    def levels_above(self, threshold: float, prompts: np.ndarray) -> np.ndarray:
        """For each of `prompts`, the number of levels n >= 0 with gain(n) > threshold."""
        # The larger base dominates: c a^n <= gain(n) <= (c + d (b/a)^m) a^n for n >= m, so the count lies between
        # the closed forms of those two bounds (usually equal); exact gains settle it, and any rounding in the logs.
        c, d, log_a = self.c[prompts], self.d[prompts], self.log_a[prompts]
        count = self._closed_form(c, log_a, threshold)
        exponent = np.multiply(count, self.log_ratio[prompts], out=np.zeros(count.size), where=count > 0)
        shrink = np.exp(exponent)  # (b / a)^count
        most = np.maximum(count, self._closed_form(c + d * shrink, log_a, threshold))
        # The answer lies in [low, high], with one level of slack for rounding in the logarithms.
        low, high = np.maximum(count - 1, 0), most + 1
        unsettled = np.arange(prompts.size)
        while unsettled.size:  # bisection on the prompts whose bracket is still open
            middle = (low[unsettled] + high[unsettled]) // 2
            is_above = self.gain(middle, prompts[unsettled]) > threshold
            low[unsettled[is_above]] = middle[is_above] + 1
            high[unsettled[~is_above]] = middle[~is_above]
            unsettled = unsettled[low[unsettled] < high[unsettled]]
        return low

    @staticmethod
    def _closed_form(scale: np.ndarray, log_base: np.ndarray, threshold: float) -> np.ndarray:
        """Number of levels n >= 0 with scale * base^n > threshold."""
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = (math.log(threshold) - np.log(scale)) / log_base
        count = np.where(scale > threshold, np.ceil(np.nan_to_num(bound, nan=0.0, posinf=1e9)), 0.0)
        return np.clip(count, 0, 1e9).astype(np.int64)


def allocate_by_curves(features: np.ndarray, lower: np.ndarray, width: int, gain_curves, spare: int) -> np.ndarray:
    """Exact greedy optimum for prompts whose gain curves are described by rows of `features`.

    Args:
        features: `(prompts, F)` numbers that determine each prompt's gain curve (its pass rate, say).
        lower: `(prompts,)` starting counts.
        width: the upper bound on every count (curves may stop earlier by returning `-inf`).
        gain_curves: `f(unique_features, levels, lower) -> (curves, width)` marginal gains, non-increasing in the
            level from `lower` on.
        spare: rollouts to hand out on top of `lower`, at most the capacity.
    """
    lower = np.asarray(lower, dtype=np.int64)
    if lower.size == 0 or spare <= 0:
        return lower.copy()
    width = min(width, int(lower.max()) + spare)  # no prompt can rise by more than the spare budget
    if hasattr(gain_curves, "exponential_terms") and lower.size * width > DENSE_GAINS_LIMIT:
        # Many distinct curves: a threshold search, without a (curves x width) gain matrix. Few: the matrix is faster.
        if np.unique(features[:, 0]).size * width > DENSE_GAINS_LIMIT:
            return take_largest_gains_by_threshold(gain_curves.exponential_terms(features), lower, width, spare)
    keys, curve_of_prompt = _distinct_rows(np.column_stack([lower, features]))
    lo = keys[:, :1]
    levels = np.arange(width, dtype=np.float64)
    gains = np.where(levels >= lo, gain_curves(keys[:, 1:], levels, lo), np.inf)
    gains = np.minimum.accumulate(gains, axis=1)  # guards the greedy against rounding
    gains = np.where(levels >= lo, gains, -np.inf)
    return take_largest_gains(gains, curve_of_prompt, lo.ravel().astype(np.int64), spare)


def _distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a 2-D array and the index of each row's distinct row.

    Column-wise 1-D sorts combined into one integer code: much faster than `np.unique(axis=0)`, which sorts rows as
    opaque byte strings.
    """
    codes = np.zeros(table.shape[0], dtype=np.int64)
    for column in table.T:
        if column[0] == column[-1] and (column == column[0]).all():
            continue
        values, inverse = np.unique(column, return_inverse=True)
        codes = codes * values.size + inverse
    _, first, row_of = np.unique(codes, return_index=True, return_inverse=True)
    return table[first], row_of.ravel()


def spread_evenly(total: int, lower: np.ndarray, upper: np.ndarray, equal_increments: bool = False) -> np.ndarray:
    """Spread up to `total - sum(lower)` rollouts over prompts bounded by `lower` and `upper`.

    By default the counts are water-filled (the lowest counts rise first); with `equal_increments` every count rises by
    the same number instead, as the Knapsack RL release hands out its excess budget. Either way the remainder goes to
    the lowest indices, and a prompt at its upper bound passes its share on to the others.
    """
    lower = np.asarray(lower, dtype=np.int64)
    upper = np.asarray(upper, dtype=np.int64)
    if lower.size == 0:
        return lower.copy()
    spare = min(total - int(lower.sum()), int((upper - lower).sum()))
    gains = _equal_increment_gains if equal_increments else _even_gains
    return allocate_by_curves(upper[:, None], lower, int(upper.max()), gains, spare)


def _even_gains(upper: np.ndarray, levels: np.ndarray, lower: np.ndarray) -> np.ndarray:
    return np.where(levels < upper, -levels, -np.inf)


def _equal_increment_gains(upper: np.ndarray, levels: np.ndarray, lower: np.ndarray) -> np.ndarray:
    return np.where(levels < upper, lower - levels, -np.inf)


def _check_bounds(min_generations: int, max_generations: int) -> None:
    check_whole_number("min_generations", min_generations, 1)
    check_whole_number("max_generations", max_generations, 1)
    if min_generations > max_generations:
        raise ValueError(
            f"min_generations ({min_generations}) must not exceed max_generations ({max_generations})."
        )


def _check_pass_rates(pass_rates) -> np.ndarray:
    rates = np.asarray(pass_rates, dtype=np.float64)
    if rates.ndim != 1 or rates.size == 0:
        raise ValueError(f"pass_rates must be a non-empty 1-D array, got shape {rates.shape}.")
    seen = rates[~np.isnan(rates)]
    if np.any((seen < 0) | (seen > 1)):
        bad = seen[(seen < 0) | (seen > 1)][0]
        raise ValueError(f"pass_rates must lie in [0, 1] (NaN marks an unseen prompt); found {bad}.")
    return rates


def _check_failure_rate(failure_rate: float | None) -> None:
    if failure_rate is not None and not 0.0 <= failure_rate <= 1.0:
        raise ValueError(f"failure_rate must lie in [0, 1] or be None, got {failure_rate}.")


class _BoundedAllocator:
    """Validation shared by every allocator: bounds, pass rates and the budget they must meet."""

    def __init__(self, min_generations: int, max_generations: int):
        _check_bounds(min_generations, max_generations)
        self.min_generations = int(min_generations)
        self.max_generations = int(max_generations)

    def _check_request(self, pass_rates, budget: int, failure_rate: float | None) -> np.ndarray:
        rates = _check_pass_rates(pass_rates)
        _check_failure_rate(failure_rate)
        if int(budget) != budget:
            raise ValueError(f"budget must be an integer number of rollouts, got {budget}.")
        low, high = rates.size * self.min_generations, rates.size * self.max_generations
        if not low <= budget <= high:
            raise ValueError(
                f"budget {budget} cannot be split over {rates.size} prompts with between {self.min_generations} and "
                f"{self.max_generations} rollouts each: it must lie in [{low}, {high}]. Change the budget or the "
                "min_generations / max_generations bounds."
            )
        return rates

    def _check_counts(self, counts, pass_rates) -> tuple[np.ndarray, np.ndarray]:
        rates = _check_pass_rates(pass_rates)
        counts = np.asarray(counts)
        if counts.shape != rates.shape:
            raise ValueError(f"counts has shape {counts.shape} but pass_rates has shape {rates.shape}.")
        return counts.astype(np.float64), rates

    def __call__(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
        return self.allocate(pass_rates, budget, failure_rate)

    def __repr__(self) -> str:
        options = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({options})"


@register_allocator("uniform")
class UniformAllocator(_BoundedAllocator):
    """GRPO's rule: every prompt gets the same count (the remainder, if any, goes to the first prompts)."""

    def __init__(self, min_generations: int = 1, max_generations: int = 1 << 30):
        super().__init__(min_generations, max_generations)

    def allocate(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
        rates = self._check_request(pass_rates, budget, failure_rate)
        base, remainder = divmod(int(budget), rates.size)
        counts = np.full(rates.size, base, dtype=np.int64)
        counts[:remainder] += 1
        return counts

    def value(self, counts, pass_rates, failure_rate: float | None = None) -> float:
        """Minus the spread of the counts: 0 for an even split, lower for any other."""
        counts, _ = self._check_counts(counts, pass_rates)
        return -float(np.sum((counts - counts.mean()) ** 2))


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
        if not 0.0 < fallback_confidence < 1.0:
            raise ValueError(f"fallback_confidence must lie in (0, 1), got {fallback_confidence}.")
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
        self.fallback = fallback
        self.fallback_confidence = fallback_confidence

    @staticmethod
    def prompt_value(counts: np.ndarray, pass_rates: np.ndarray) -> np.ndarray:
        """(1 - p^N - (1 - p)^N) p (1 - p)^2 per prompt; 0 for unseen prompts."""
        p = np.nan_to_num(pass_rates, nan=0.0)
        q = 1.0 - p
        return (1.0 - p**counts - q**counts) * p * q**2

    def value(self, counts, pass_rates, failure_rate: float | None = None) -> float:
        counts, rates = self._check_counts(counts, pass_rates)
        return float(self.prompt_value(counts, rates).sum())

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

    def allocate(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
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
        counts[mixed] = allocate_by_curves(rates[mixed, None], counts[mixed], self.max_generations, self._gains, taken)
        self._raise_evenly(counts, ~mixed, spare - taken)  # the mixed prompts are all at max_generations
        return counts

    def _raise_evenly(self, counts: np.ndarray, members: np.ndarray, amount: int) -> int:
        """Raise `members` in equal increments by up to `amount` in total (bounded); returns how much was placed."""
        if amount <= 0 or not members.any():
            return 0
        before = int(counts[members].sum())
        upper = np.full(int(members.sum()), self.max_generations)
        counts[members] = spread_evenly(before + amount, counts[members], upper, equal_increments=True)
        return int(counts[members].sum()) - before


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
        if not 0.0 <= exploration_share <= 1.0:
            raise ValueError(f"exploration_share must lie in [0, 1], got {exploration_share}.")
        if not 0.0 <= hard_threshold < easy_threshold <= 1.0:
            raise ValueError(
                f"need 0 <= hard_threshold < easy_threshold <= 1, got {hard_threshold} and {easy_threshold}."
            )
        self.kappa = kappa
        self.gamma = gamma
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

    def value(self, counts, pass_rates, failure_rate: float | None = None) -> float:
        counts, rates = self._check_counts(counts, pass_rates)
        _check_failure_rate(failure_rate)
        weight, rate = self.saturation_curve(rates, failure_rate).weight_and_rate(_clipped_pass_rates(rates))
        return float(np.sum(-np.expm1(-counts * rate) * weight))

    def allocate(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
        rates = self._check_request(pass_rates, budget, failure_rate)
        budget = int(budget)
        if np.isnan(rates).all():
            return UniformAllocator(self.min_generations, self.max_generations).allocate(rates, budget)
        curve = self.saturation_curve(rates, failure_rate)
        counts = np.full(rates.size, self.min_generations, dtype=np.int64)
        if not self.bucket_heuristic:
            return self._optimise(curve, rates, counts, budget - int(counts.sum()))
        return self._allocate_by_buckets(curve, rates, counts, budget)

    def _optimise(self, curve: "_SaturationCurve", rates: np.ndarray, lower: np.ndarray, spare: int) -> np.ndarray:
        return allocate_by_curves(_clipped_pass_rates(rates)[:, None], lower, self.max_generations, curve, spare)

    def _allocate_by_buckets(self, curve, rates, counts, budget: int) -> np.ndarray:
        seen = ~np.isnan(rates)
        hard = seen & (rates < self.hard_threshold)
        easy = seen & (rates > self.easy_threshold)
        explore = ~(hard | easy)
        spare = budget - int(counts.sum())

        def optimise_exploration(amount: int) -> int:
            amount = min(amount, int((self.max_generations - counts[explore]).sum()))
            counts[explore] = self._optimise(curve, rates[explore], counts[explore], amount)
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
