"""The exact solver every allocator shares: the R largest marginal gains over all prompts.

Every allocator maximises a separable objective ``sum_i V(N_i, p_i)`` whose marginal gains ``V(N + 1) - V(N)`` do not
increase with ``N``. For such objectives handing out rollouts one at a time to the largest marginal gain is exactly
optimal, and so is taking the ``R`` largest marginal gains over all prompts at once. `take_largest_gains` does the
latter with one threshold search in numpy; prompts sharing a pass rate share a gain curve, so the work grows with the
number of distinct pass rates, not with the number of prompts or rollouts.
"""

from __future__ import annotations

import math

import numpy as np


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


def allocate_by_curves(features: np.ndarray, lower: np.ndarray, width: int, gain_curves, spare: int,
                       prices: np.ndarray | None = None) -> np.ndarray:
    """Exact greedy optimum for prompts whose gain curves are described by rows of `features`.

    With `prices`, each rollout of prompt i costs `prices[i]` (a token cap's multiplier times its expected length):
    every gain of prompt i is lowered by it, which keeps the gains non-increasing, so the optimum stays exact.

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
    if prices is not None:  # a price per prompt: one more feature, and the gain matrix (no closed form for an offset)
        return allocate_by_curves(np.column_stack([features, prices]), lower, width, _Priced(gain_curves), spare)
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


class _Priced:
    """Gain curves whose last feature is a price per rollout, subtracted from every gain."""

    def __init__(self, gain_curves):
        self.gain_curves = gain_curves

    def __call__(self, features: np.ndarray, levels: np.ndarray, lower: np.ndarray) -> np.ndarray:
        return self.gain_curves(features[:, :-1], levels, lower) - features[:, -1:]


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
