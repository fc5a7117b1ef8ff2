"""VIP (arXiv 2602.01601, ICLR 2026): rollouts split to minimise the variance of the batch's gradient.

As its release allocates (`allocate_rollout` in `src/vip/allocation/bernoulli_allocation.py` of `HieuNT91/VIP`):

1. Success rates are clipped to [1e-6, 1 - 1e-6]; a = p (1 - p) is a prompt's reward variance.
2. The counts n minimise a convex surrogate of the gradient's variance plus a price per rollout b n, with
   b = gamma log p (negative: a hard prompt's rollouts are cheap),
   `rloo`:  sum a / (n - 1) + b n      (gamma 0.0007)
   `grpo`:  sum a (n - 1) / n^2 + b n  (gamma 0.0004)
   subject to sum n = budget and lower <= n <= upper (4 and 32), relaxed to real n.
3. The real solution is rounded (`round_as_released`): floors, floors below 4 set to 0, the rest of the budget handed
   out one rollout at a time by the gain of sum a (n + 3) / (n + 4)^2, then counts in (0, 4) set to 0 again and their
   rollouts given one at a time to the largest counts below the upper bound (where every kept count is at the upper
   bound, to a 0: one prompt then keeps budget mod upper rollouts, which can be 1 to 3; the trainer's settings refuse
   such batches, `settings.vip.check_vip_batch`).
4. When all rates are equal the solver is skipped: an even split, or, when the budget cannot give every prompt 4,
   groups of 4 rollouts to prompts drawn with replacement.

The release solves step 2 with scipy's SLSQP from the even split (`solver="slsqp"`, faithful, including where SLSQP
stops at its iteration limit). The objective is separable and strictly convex on the bounds, so its exact optimum
satisfies one equation in a Lagrange multiplier: `solver="exact"` finds it by bisection (water-filling) in
milliseconds at any batch size, and never stops short.
"""

from __future__ import annotations

import logging
import math
import zlib

import numpy as np

from ..checks import check_whole_number
from .base import _BoundedAllocator
from .registry import register_allocator
from .solver import take_largest_gains

logger = logging.getLogger("trl_budget.trainer")  # where the run's other announcements and warnings go

RATE_CLIP = 1e-6
# The release's price per rollout, gamma in b = gamma log p, of each objective.
PRICE_SCALE = {"rloo": 0.0007, "grpo": 0.0004}
# The release's rounding keeps no count below 4 (hard-coded there, whatever the solver's lower bound).
MIN_KEEP = 4
SOLVERS = ("slsqp", "exact")


class VarianceObjective:
    """The release's objective for one batch: `value(n)` as it evaluates it, and its derivative per prompt."""

    def __init__(self, pass_rates, rule: str):
        if rule not in PRICE_SCALE:
            raise ValueError(f"rule must be one of {', '.join(PRICE_SCALE)} (the release's objectives), got {rule!r}.")
        self.rule = rule
        self.rates = np.clip(np.asarray(pass_rates, dtype=np.float64), RATE_CLIP, 1.0 - RATE_CLIP)
        self.variance = self.rates * (1.0 - self.rates)
        self.price = PRICE_SCALE[rule] * np.log(self.rates)

    def value(self, n: np.ndarray) -> float:
        """The objective, evaluated with the release's operations in its order (SLSQP's iterates depend on its bits)."""
        return np.sum(self.terms(n))

    def terms(self, n: np.ndarray) -> np.ndarray:
        """Each prompt's term at `n`: a count per prompt, or a `(prompts, levels)` table of counts."""
        a, b = self.variance, self.price
        if np.ndim(n) == 2:
            a, b = a[:, None], b[:, None]
        if self.rule == "rloo":
            return a / (n - 1) + b * n
        return (a * (n - 1) / n**2) + b * n

    def derivative(self, n: np.ndarray) -> np.ndarray:
        """d/dn of each prompt's term; increasing in n where the term is convex (n > 1 for rloo, n > 3 for grpo)."""
        a, b = self.variance, self.price
        if self.rule == "rloo":
            return b - a / (n - 1.0) ** 2
        return b + a * (2.0 - n) / n**3

    def lowest_convex_count(self) -> float:
        """The count above which every term is strictly convex."""
        return 1.0 if self.rule == "rloo" else 3.0


def solve_by_slsqp(objective: VarianceObjective, budget: int, lower: float, upper: float):
    """The release's solver: SLSQP from the even split, numerical gradients. Returns (n, scipy's result)."""
    from scipy.optimize import minimize  # scipy only where the release's solver is asked for

    size = objective.rates.size
    start = np.ones(size) * (budget / size)
    result = minimize(objective.value, start, method="SLSQP", bounds=[(lower, upper)] * size,
                      constraints=[{"type": "eq", "fun": lambda n: np.sum(n) - budget}])
    return result.x, result


def solve_by_water_filling(objective: VarianceObjective, budget: int, lower: float, upper: float,
                           steps: int = 200) -> np.ndarray:
    """The exact optimum of the relaxed problem: each n_i minimises its term plus mu n_i on [lower, upper], and a
    bisection on the multiplier mu makes the counts sum to the budget (their sum falls as mu rises)."""
    if lower <= objective.lowest_convex_count():
        raise ValueError(
            f"the exact solver needs min_generations above {objective.lowest_convex_count():g} for rule="
            f"{objective.rule!r} (where its objective is convex), got {lower}. Raise min_generations, or use "
            "solver='slsqp'."
        )
    # Every count is at `upper` when mu <= -max f'(upper), at `lower` when mu >= -min f'(lower).
    low, high = -float(objective.derivative(np.full_like(objective.rates, upper)).max()), \
        -float(objective.derivative(np.full_like(objective.rates, lower)).min())
    for _ in range(steps):
        middle = 0.5 * (low + high)
        total = _counts_at(objective, middle, lower, upper).sum()
        if middle in (low, high) or abs(total - budget) < 1e-11 * budget:
            break
        if total > budget:
            low = middle
        else:
            high = middle
    counts = _counts_at(objective, 0.5 * (low + high), lower, upper)
    return _meet_budget(counts, budget, lower, upper)


def _counts_at(objective: VarianceObjective, multiplier: float, lower: float, upper: float) -> np.ndarray:
    """Each prompt's minimiser of term(n) + multiplier n on [lower, upper]: the root of f'(n) = -multiplier."""
    if objective.rule == "rloo":  # closed form: 1 + sqrt(a / (b + mu))
        slope = objective.price + multiplier
        with np.errstate(divide="ignore", invalid="ignore"):
            root = np.where(slope > 0, 1.0 + np.sqrt(objective.variance / slope), np.inf)
        return np.clip(root, lower, upper)
    # grpo: f'(n) + mu = 0 is the cubic h(n) = c n^3 - a n + 2a = 0 with c = b + mu. h is convex for n > 0 and
    # increasing right of its largest root (which lies above 3, where the term is convex): Newton's method from
    # `upper` falls onto that root monotonically.
    a, slope = objective.variance, objective.price + multiplier
    root = np.full(a.size, float(upper))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(60):
            step = (slope * root**3 - a * root + 2.0 * a) / (3.0 * slope * root**2 - a)
            root = root - step
            if not np.nanmax(np.abs(step), initial=0.0) > 1e-12:  # converged (NaN only where the bounds decide)
                break
    at_lower = objective.derivative(np.full(a.size, float(lower))) + multiplier >= 0
    at_upper = objective.derivative(np.full(a.size, float(upper))) + multiplier <= 0
    return np.where(at_lower, lower, np.where(at_upper, upper, np.clip(np.nan_to_num(root, nan=upper), lower, upper)))


def _meet_budget(counts: np.ndarray, budget: int, lower: float, upper: float) -> np.ndarray:
    """Spread the bisection's last rounding error (far below one rollout) over the prompts inside the bounds."""
    inside = (counts > lower) & (counts < upper)
    if inside.any():
        counts = counts.copy()
        counts[inside] += (budget - counts.sum()) / inside.sum()
    return np.clip(counts, lower, upper)


def round_as_released(real_counts: np.ndarray, variance: np.ndarray, budget: int, upper: int) -> np.ndarray:
    """The release's rounding of a real solution to whole counts summing to `budget` (step 3 of the module), bit for
    bit: each gain is S(n) - S(n + e_i), two float sums of S(n) = sum a (n + 3) / (n + 4)^2, and the prompts are
    ranked by numpy's default `argsort`, whose order among equal gains (prompts with equal rates and counts) is
    numpy's and the CPU's. O(prompts^2) per rollout handed out, as the release."""
    counts, spare = _floored(real_counts, budget)
    if spare == 0:
        return counts
    for _ in range(spare):
        terms = variance * (counts + 3) / (counts + 4) ** 2
        _raise_first_open(counts, float(terms.sum()) - _sums_with_one_raised(terms, variance, counts), upper)
    return _keep_at_least_four(counts, upper, lambda ranked: _raise_first_open(counts, ranked, upper))


def round_by_gains(real_counts: np.ndarray, variance: np.ndarray, budget: int, upper: int) -> np.ndarray:
    """The same rounding with exact per-prompt gains, in O(prompts x max_generations): the largest gains of
    a (n + 3) / (n + 4)^2 taken at once (they fall with n, so this is what one at a time takes), equal gains to the
    lowest index, and freed rollouts to the largest count, the lowest index first. It differs from
    `round_as_released` only where gains tie."""
    counts, spare = _floored(real_counts, budget)
    if spare == 0:
        return counts
    _check_room(counts, spare, upper)
    levels = np.arange(upper + 1, dtype=np.float64)
    terms = variance[:, None] * (levels + 3) / (levels + 4) ** 2
    gains = np.full(terms.shape, -np.inf)
    gains[:, :-1] = terms[:, :-1] - terms[:, 1:]
    gains = np.where(levels >= counts[:, None], gains, -np.inf)
    counts = take_largest_gains(gains, np.arange(counts.size), counts, spare)
    return _keep_at_least_four(counts, upper, lambda ranked: _raise_first_open(counts, -np.arange(counts.size), upper,
                                                                               by=ranked))


def _floored(real_counts: np.ndarray, budget: int) -> tuple[np.ndarray, int]:
    """Floors, those below 4 set to 0, and the budget they leave."""
    counts = np.floor(real_counts).astype(np.int64)
    counts[counts < MIN_KEEP] = 0
    spare = budget - int(counts.sum())
    if spare < 0:
        raise ValueError(f"the solver's counts exceed the budget {budget} after flooring ({int(counts.sum())}); "
                         "its solution does not meet the budget constraint.")
    return counts, spare


def _check_room(counts: np.ndarray, spare: int, upper: int) -> None:
    if spare > int((upper - counts).sum()):
        raise ValueError(f"cannot hand out {spare} more rollouts: every prompt would pass max_generations={upper}.")


def _sums_with_one_raised(terms: np.ndarray, variance: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """S(n + e_i) for every i, each summed as numpy sums one array (rows of a matrix sum as 1-D arrays do)."""
    raised = variance * (counts + 4) / (counts + 5) ** 2
    sums = np.empty(terms.size)
    rows = max(1, (1 << 22) // terms.size)  # a few tens of MB at a time
    for first in range(0, terms.size, rows):
        block = np.repeat(terms[None, :], min(rows, terms.size - first), axis=0)
        index = np.arange(block.shape[0])
        block[index, first + index] = raised[first + index]
        sums[first:first + block.shape[0]] = block.sum(axis=1)
    return sums


def _raise_first_open(counts: np.ndarray, scores: np.ndarray, upper: int, by: np.ndarray | None = None) -> None:
    """+1 to the first prompt below `upper` in `np.argsort(scores)[::-1]` order (the release's ranking); `by` ranks
    by it first, `scores` breaking its ties."""
    order = np.argsort(scores)[::-1] if by is None else np.lexsort((scores, by))[::-1]
    open_ = order[counts[order] < upper]
    if open_.size == 0:
        raise ValueError(f"cannot place another rollout: every prompt is at max_generations={upper}.")
    counts[open_[0]] += 1


def _keep_at_least_four(counts: np.ndarray, upper: int, raise_largest) -> np.ndarray:
    """Counts in (0, 4) set to 0; `raise_largest(counts)` then gives their rollouts back one at a time."""
    small = (counts > 0) & (counts < MIN_KEEP)
    freed = int(counts[small].sum())
    counts[small] = 0
    for _ in range(freed):
        raise_largest(counts)
    return counts


def falls_from_counts(objective: VarianceObjective, counts: np.ndarray, upper: int) -> np.ndarray:
    """`(prompts, upper)` gains for `take_largest_gains`: at level n (from `counts` to upper - 1) the fall of the
    prompt's term from n to n + 1 rollouts, -inf elsewhere; over the first levels, where the term is not yet convex,
    their best average fall (the convex minorant), so that every prompt's gains fall with n. A pole's infinite fall
    (rloo at 1 rollout) becomes the largest float, so that it is taken first."""
    levels = np.arange(upper + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = objective.terms(np.broadcast_to(levels, (counts.size, upper + 1)))
        falls = terms[:, :-1] - terms[:, 1:]
    ahead = levels[:-1] >= counts[:, None]  # the levels a top-up can add
    falls = np.where(ahead, falls, 0.0)
    taken = np.cumsum(falls, axis=1) / np.maximum(levels[:-1] + 1 - counts[:, None], 1)  # mean fall from the count
    with np.errstate(invalid="ignore"):
        best = np.argmax(np.where(ahead, taken, -np.inf), axis=1)  # the first segment of the convex minorant
    first_segment = ahead & (levels[:-1] <= best[:, None])
    falls = np.where(first_segment, taken[np.arange(counts.size), best][:, None], falls)
    return np.where(ahead, np.minimum(falls, np.finfo(np.float64).max), -np.inf)


def groups_of_four(prompts: int, budget: int, seed: int, upper: int | None = None) -> np.ndarray:
    """The release's split when every rate is equal and the budget cannot give each prompt 4: `budget / 4` groups of
    4 rollouts, each to a prompt drawn with replacement. The release draws from numpy's global, unseeded generator;
    here the draw is seeded by `seed`, the prompt count and the budget, so every process (and a resumed run) draws
    the same groups. The release lets a prompt drawn often exceed its upper bound; here a group that would (above
    `upper`) goes to a prompt drawn from those with room, from the same generator."""
    if budget % MIN_KEEP:
        raise ValueError(f"budget {budget} must be a multiple of {MIN_KEEP} when it cannot give every one of {prompts} "
                         f"prompts {MIN_KEEP} rollouts (VIP then hands out groups of {MIN_KEEP}).")
    generator = np.random.default_rng([seed, prompts, budget, zlib.crc32(b"vip groups of four")])
    counts = MIN_KEEP * np.bincount(generator.integers(0, prompts, budget // MIN_KEEP), minlength=prompts)
    # Fewer groups than prompts (the budget is below 4 a prompt), so a prompt with room always exists.
    while upper is not None and counts.max() > upper:
        over = int(np.argmax(counts))
        room = np.flatnonzero(counts + MIN_KEEP <= upper)
        counts[over] -= MIN_KEEP
        counts[room[generator.integers(room.size)]] += MIN_KEEP
    return counts


@register_allocator("vip")
class VIPAllocator(_BoundedAllocator):
    """VIP's allocation as released (see the module): counts that minimise the gradient-variance surrogate.

    Args:
        min_generations, max_generations: the solver's bounds on each count (the release's 4 and 32). The rounding
            sets counts in (0, 4) to 0, as the release's, so a count can be 0 (the release then drops the prompt);
            where every kept count reaches max_generations, one can keep 1 to 3 (see the module).
        rule: "rloo" or "grpo", the release's two objectives.
        solver: "slsqp" (the release's solver, SLSQP from the even split, then its rounding bit for bit:
            `round_as_released`) or "exact" (water-filling on the Lagrange multiplier: the exact optimum of the same
            objective, then the same rounding rule with exact gains and ties to the lowest index: `round_by_gains`).
        seed: seeds the groups of four drawn when all rates are equal and the budget is below 4 per prompt.

    Pass rates are the predictor's success rates; NaN (an unseen prompt without a prediction) is refused.
    `last_solve` keeps the latest solve: its real counts and, for SLSQP, whether it converged.
    """

    def __init__(self, min_generations: int = 4, max_generations: int = 32, rule: str = "rloo",
                 solver: str = "slsqp", seed: int = 0):
        super().__init__(min_generations, max_generations)
        VarianceObjective([0.5], rule)  # refuses an unknown rule now
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}.")
        check_whole_number("seed", seed, 0)
        lowest = VarianceObjective([0.5], rule).lowest_convex_count()
        if solver == "exact" and min_generations <= lowest:
            raise ValueError(f"min_generations={min_generations} is too low for the exact solver, which needs "
                             f"min_generations above {lowest:g} for rule={rule!r} (where its objective is convex). "
                             "Raise min_generations, or use solver='slsqp'.")
        self.rule, self.solver, self.seed = rule, solver, int(seed)
        self.last_solve: dict | None = None
        self._warned_unconverged = False

    def allocate(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
        rates, budget = self._checked(pass_rates, budget, failure_rate)
        objective = VarianceObjective(rates, self.rule)
        if np.std(objective.rates) < 1e-6:  # the release's test for "all equal"
            self.last_solve = {"solver": "all-equal", "real_counts": None, "converged": True}
            return self._split_equal_rates(rates.size, budget)
        real_counts = self.solve(objective, budget)
        rounding = round_as_released if self.solver == "slsqp" else round_by_gains
        return rounding(real_counts, objective.variance, budget, self.max_generations)

    def solve(self, objective: VarianceObjective, budget: int) -> np.ndarray:
        """The real counts of step 2, by the chosen solver; `last_solve` records them."""
        lower, upper = self.min_generations, self.max_generations
        if self.solver == "exact":
            real_counts = solve_by_water_filling(objective, budget, lower, upper)
            self.last_solve = {"solver": "exact", "real_counts": real_counts, "converged": True}
            return real_counts
        real_counts, result = solve_by_slsqp(objective, budget, lower, upper)
        self.last_solve = {"solver": "slsqp", "real_counts": real_counts, "converged": bool(result.success),
                           "message": str(result.message), "iterations": int(result.nit)}
        if not result.success and not self._warned_unconverged:
            self._warned_unconverged = True
            logger.warning(
                f"VIP's SLSQP solve stopped without converging ({result.message}, {result.nit} iterations, "
                f"{objective.rates.size} prompts); the release rounds such a solve's counts as they are, and so does "
                "this allocator. budget/vip_solver_converged logs every batch's solve (0: stopped short); "
                "solver='exact' (vip_solver='exact') always reaches the optimum. This warning is not repeated.")
        return real_counts

    def metrics(self, pass_rates, failure_rate: float | None = None) -> dict[str, float]:
        """What the trainer logs at each batch: whether the latest SLSQP solve converged (1) or stopped short (0),
        and its iterations; nothing for the exact solver or equal rates, which need no iterations."""
        solve = self.last_solve
        if solve is None or solve["solver"] != "slsqp":
            return {}
        return {"vip_solver_converged": float(solve["converged"]), "vip_solver_iterations": float(solve["iterations"])}

    def top_up(self, pass_rates, counts, spare: int, failure_rate: float | None = None) -> np.ndarray:
        """`counts` plus `spare` more rollouts (at most `max_generations` a prompt) that lower the objective most, for
        the budget left after rounds until mixed. The rounds' rollouts are every prompt's floor and are all trained,
        so the rounding's rule of no count below 4 does not apply: nothing is taken away.

        The objective is separable, so handing out rollouts by the largest fall of a prompt's term is exact where
        each term is convex from the prompt's count on (rloo from 1 rollout, whose pole at 1 makes a second rollout
        come first; grpo from 3). Below that (grpo's surrogate grows from 1 to 2 rollouts) a prompt's first
        rollouts are each valued at their best average fall (the term's convex minorant from its count), so that
        the gains fall with the count as the exact greedy (`take_largest_gains`) requires."""
        rates, _ = self._checked(pass_rates, self.min_generations * np.size(pass_rates), failure_rate)
        counts = np.array(counts, dtype=np.int64)
        if counts.shape != rates.shape or counts.min(initial=1) < 1 or counts.max(initial=0) > self.max_generations:
            raise ValueError(f"top_up takes a count of 1 to max_generations={self.max_generations} for each of the "
                             f"{rates.size} prompts (the rollouts so far), got {counts.tolist()}.")
        spare = min(int(spare), int((self.max_generations - counts).sum()))
        gains = falls_from_counts(VarianceObjective(rates, self.rule), counts, self.max_generations)
        return take_largest_gains(gains, np.arange(rates.size), counts, spare)

    def __repr__(self) -> str:  # the options, not the latest solve
        return (f"VIPAllocator(min_generations={self.min_generations}, max_generations={self.max_generations}, "
                f"rule={self.rule!r}, solver={self.solver!r}, seed={self.seed})")

    def value(self, counts, pass_rates, failure_rate: float | None = None) -> float:
        """Minus the objective at `counts` (higher is better, as every allocator's value); -inf where a count is
        at or below the objective's pole (n <= 1 for rloo, n = 0 for grpo)."""
        counts, rates = self._check_counts(counts, pass_rates)
        with np.errstate(divide="ignore"):
            value = -float(VarianceObjective(rates, self.rule).value(counts))
        return value if math.isfinite(value) and counts.min() > 1 else -math.inf

    def _split_equal_rates(self, prompts: int, budget: int) -> np.ndarray:
        if budget < MIN_KEEP * prompts:
            return groups_of_four(prompts, budget, self.seed, self.max_generations)
        return np.bincount(np.arange(budget) % prompts, minlength=prompts).astype(np.int64)

    def _checked(self, pass_rates, budget, failure_rate) -> tuple[np.ndarray, int]:
        """The base checks, except that equal rates may take a budget below min_generations per prompt (the
        release's groups of four)."""
        rates = np.asarray(pass_rates, dtype=np.float64)
        if rates.ndim == 1 and rates.size and np.isnan(rates).any():
            raise ValueError(
                f"pass_rates has NaN at prompt {int(np.flatnonzero(np.isnan(rates))[0])}: VIP allocates from a "
                "success rate for every prompt. Predict unseen prompts first (trl_budget.success_prediction)."
            )
        equal = rates.ndim == 1 and rates.size > 0 and np.std(np.clip(rates, RATE_CLIP, 1 - RATE_CLIP)) < 1e-6
        if equal and isinstance(budget, (int, np.integer)) and 0 < budget < rates.size * self.min_generations:
            return self._check_request(rates, rates.size * self.min_generations, failure_rate), int(budget)
        return self._check_request(rates, budget, failure_rate), int(budget)
