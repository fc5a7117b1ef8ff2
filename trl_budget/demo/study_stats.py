"""The allocation study's statistics over paired seeds: intervals, power, Holm's correction, rollouts to match.

Pure numpy, so that the study's figures need nothing beyond the
package's own dependencies. Every function takes per-seed values paired by index: element i of a variant's values
and of the baseline's come from runs with the same seed.
"""

from __future__ import annotations

from collections.abc import Iterable
import numpy as np


def t_quantile(probability: float, df: int) -> float:
    """Student's t quantile with a whole number of degrees of freedom, exact to float precision.

    The t distribution function has a closed form for whole `df` (Abramowitz & Stegun 26.7.3 and 26.7.4, in the
    angle theta = atan(t / sqrt(df))), rising with theta; bisection on theta inverts it. A series expansion in 1/df
    is good only from about 5 degrees of freedom, and the demo's intervals have 3.
    """
    if int(df) != df or df < 1:
        raise ValueError(f"df must be a whole number of at least 1, got {df}")
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must be strictly between 0 and 1, got {probability}")
    if probability < 0.5:
        return -t_quantile(1.0 - probability, df)
    target, low, high = 2.0 * probability - 1.0, 0.0, np.pi / 2  # P(|T| <= t), and theta's range
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if _central_t_mass(middle, int(df)) < target else (low, middle)
    return float(np.sqrt(df) * np.tan((low + high) / 2))


def _central_t_mass(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan(theta)) for T with `df` degrees of freedom (Abramowitz & Stegun 26.7.3, 26.7.4)."""
    sine, cosine2 = np.sin(theta), np.cos(theta) ** 2
    odd = df % 2 == 1
    term = total = 1.0 if not odd else np.cos(theta)
    # Even df: sin(theta) * sum of (1*3*...(2k-1)) / (2*4*...2k) cos^2k; odd df: the same shape from cos(theta), with
    # the ratios (2*4*...2k) / (3*5*...(2k+1)), added to theta.
    for k in range(1, (df - 1) // 2 if odd else df // 2):
        term *= cosine2 * ((2 * k) / (2 * k + 1) if odd else (2 * k - 1) / (2 * k))
        total += term
    if not odd:
        return float(sine * total)
    return float(2 / np.pi * (theta + (sine * total if df > 1 else 0.0)))


def paired_interval(differences, level: float = 0.95) -> tuple[float, list[float]]:
    """Mean of the paired differences and its two-sided t interval at `level` (n - 1 degrees of freedom)."""
    differences = np.asarray(differences, dtype=np.float64)
    if differences.size < 2:
        raise ValueError(f"a paired interval needs at least 2 seeds, got {differences.size}")
    mean = float(differences.mean())
    half = t_quantile(0.5 + level / 2, differences.size - 1) * differences.std(ddof=1) / np.sqrt(differences.size)
    return mean, [mean - float(half), mean + float(half)]


def minimal_detectable_effect(paired_sd: float, seeds: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest true mean difference a two-sided paired t test at `alpha` detects with `power`, for `seeds`."""
    df = seeds - 1
    return float((t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * paired_sd / np.sqrt(seeds))


EXACT_SIGN_FLIPS_UP_TO = 24  # seeds: 2^24 sign patterns, enumerated in chunks, take a few seconds


def sign_flip_p_value(differences, flips: int = 20_000, seed: int = 0) -> float:
    """Two-sided p-value of a zero mean difference by sign flips (a paired permutation test).

    Under the null each paired difference is as likely positive as negative; the p-value is the share of sign patterns
    whose mean is at least as far from zero as the observed one (which is among them, so it is never 0). Up to
    `EXACT_SIGN_FLIPS_UP_TO` differences every one of the 2^n patterns is enumerated, so the p-value is exact; beyond,
    `flips` random patterns (and the observed one) estimate it.
    """
    differences = np.asarray(differences, dtype=np.float64)
    observed = abs(differences.sum()) - 1e-12 * max(1.0, float(np.abs(differences).sum()))
    if differences.size <= EXACT_SIGN_FLIPS_UP_TO:
        return _exact_sign_flip_share(differences, observed)
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(flips, differences.size))
    flipped = np.abs(signs @ differences)
    return float((1 + np.count_nonzero(flipped >= observed)) / (flips + 1))


def _exact_sign_flip_share(differences: np.ndarray, observed: float) -> float:
    """The share of all 2^n sign patterns whose |sum| reaches `observed`: the patterns of the first n - k differences
    (k = up to 16) in turn, each against every pattern of the last k at once."""
    n = differences.size
    tail = min(n, 16)
    bits = (np.arange(2**tail)[:, None] >> np.arange(tail)) & 1
    tail_sums = (1.0 - 2.0 * bits) @ differences[n - tail :]
    head = differences[: n - tail]
    reached = 0
    for pattern in range(2 ** (n - tail)):
        head_signs = 1.0 - 2.0 * ((pattern >> np.arange(n - tail)) & 1)
        reached += np.count_nonzero(np.abs(head_signs @ head + tail_sums) >= observed)
    return float(reached / 2.0**n)


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, dict]:
    """Holm's step-down correction: per comparison, its adjusted p-value, the level of its step, the Bonferroni level,
    and whether it is significant in the family.

    The k-th smallest of m p-values (k from 0) is tested at alpha / (m - k), and only while every smaller one passed.
    An interval drawn at its step's level, 1 - alpha / (m - k), matches that test but the intervals of a family drawn
    so are not simultaneous; intervals at the Bonferroni level, 1 - alpha / m, are (every one covers its true value
    with probability at least 1 - alpha, together).
    """
    ordered = sorted(p_values, key=p_values.get)
    m, running, still_rejecting, result = len(ordered), 0.0, True, {}
    for k, name in enumerate(ordered):
        running = max(running, min(1.0, (m - k) * p_values[name]))
        still_rejecting = still_rejecting and p_values[name] <= alpha / (m - k)
        result[name] = {"p": p_values[name], "p_holm": running, "level": 1 - alpha / (m - k),
                        "level_bonferroni": 1 - alpha / m, "significant": still_rejecting}
    return result


def paired_comparison(differences, seeds: int) -> dict:
    """A variant minus the baseline over paired seeds: mean, 95% t interval, exact sign-flip p, paired SD; `complete`
    when every one of the study's `seeds` is paired."""
    differences = np.asarray(differences, dtype=np.float64)
    if differences.size < 2:
        return {"seeds": int(differences.size), "complete": False}
    diff, ci = paired_interval(differences)
    return {"seeds": int(differences.size), "complete": int(differences.size) == seeds, "diff": diff, "ci95": ci,
            "paired_sd": float(differences.std(ddof=1)), "p": sign_flip_p_value(differences),
            "differences": differences.tolist()}


def corrected_family(comparisons: dict[str, dict], unfinished: Iterable[str] = ()) -> dict[str, dict]:
    """Holm's correction over a family of `paired_comparison`s, each test with its interval at its Holm step's level
    (`ci_holm`) and at the Bonferroni level (`ci_bonferroni`, simultaneous).

    `unfinished` names comparisons whose arm could not finish every run: they keep their place in the family (the
    pre-registered size) with p = 1, never rejected and without an interval, so that a failing arm cannot make the
    others' correction milder."""
    family = holm({**{label: comparison["p"] for label, comparison in comparisons.items()},
                   **{label: 1.0 for label in unfinished}})
    for label, test in family.items():
        if label not in comparisons:
            continue
        differences = comparisons[label]["differences"]
        test["ci_holm"] = paired_interval(differences, test["level"])[1]
        test["ci_bonferroni"] = paired_interval(differences, test["level_bonferroni"])[1]
    return family


def study_metric(run: dict, name: str = "accuracy") -> float:
    """The studies' metric: the mean of a run's last three evaluations (`name`: overall or a level's), on trained
    points only, so that a short run never averages in its untrained start."""
    return float(np.mean([point[name] for point in run["curve"] if point["step"] > 0][-3:]))


def mean_after(run: dict, name: str, skip: int) -> float:
    """The mean of a run's per-batch figure `name` over its batches after the first `skip` (NaN if none)."""
    values = [value for value in run[name][skip:] if value is not None]
    return float(np.mean(values)) if values else float("nan")


def trailing_mean(values, window: int = 3) -> np.ndarray:
    """Each point's mean with the points before it, `window` in all (fewer at the start): the study's metric along a
    curve, so that a curve is compared with a final figure on the same footing."""
    values = np.asarray(values, dtype=np.float64)
    return np.array([values[max(0, i - window + 1) : i + 1].mean() for i in range(values.size)])


def first_reach(rollouts, curve, target: float) -> float | None:
    """Rollouts at which `curve` first reaches `target` after its start, linear between points; None if never."""
    for i in range(1, len(curve)):
        if curve[i] >= target:
            before, after = curve[i - 1], curve[i]
            share = 1.0 if before >= target or after == before else (target - before) / (after - before)
            return float(rollouts[i - 1] + share * (rollouts[i] - rollouts[i - 1]))
    return None


def rollouts_to_match(baseline_rollouts, baseline_curves, targets, budget: float, resamples: int = 2000,
                      seed: int = 0) -> dict:
    """How many rollouts the baseline needs to reach a variant's metric, over the variant's budget, with a paired
    bootstrap interval.

    `baseline_curves` (seeds x points) are the baseline's held-out curves over a longer run (e.g. twice the budget)
    at `baseline_rollouts`; `targets` the variant's per-seed metric. Each resample draws seeds with replacement, the
    same seeds for both, and finds where the mean baseline curve (trailing mean of three trained points, as the
    metric) first reaches the mean target. A resample whose baseline never gets there counts as beyond the longer run.
    """
    curves, targets = np.asarray(baseline_curves, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    longest = float(baseline_rollouts[-1]) / budget

    def ratio(rows) -> float:
        mean = curves[rows].mean(axis=0)
        smoothed = np.concatenate([mean[:1], trailing_mean(mean[1:])])  # the start never enters a trained point's mean
        reached = first_reach(baseline_rollouts, smoothed, targets[rows].mean())
        return np.inf if reached is None else reached / budget

    rng = np.random.default_rng(seed)
    draws = np.array([ratio(rng.integers(0, len(targets), len(targets))) for _ in range(resamples)])
    low, high = np.quantile(draws, [0.025, 0.975], method="inverted_cdf")  # no interpolation: draws can be inf
    point = ratio(np.arange(len(targets)))
    as_figure = lambda value: None if not np.isfinite(value) else float(value)  # noqa: E731 (JSON has no inf)
    return {"ratio": as_figure(point), "ci95": [as_figure(low), as_figure(high)], "longest_ratio": longest,
            "share_beyond_longest": float(np.mean(~np.isfinite(draws)))}


def comparison_name(comparison: tuple[str, str, str]) -> str:
    """A study's comparison `(regime, arm, reference)` as its results name it."""
    regime, arm, reference = comparison
    return f"{regime}: {arm} - {reference}"


def compare_runs(runs: dict, comparison: tuple[str, str, str], seeds: list[int], metric=study_metric) -> dict:
    """`arm - reference` in `regime` over the seeds with both runs in (`runs` keyed by (regime, arm, seed))."""
    regime, arm, reference = comparison
    paired = [s for s in seeds if (regime, arm, s) in runs and (regime, reference, s) in runs]
    return paired_comparison([metric(runs[regime, arm, s]) - metric(runs[regime, reference, s]) for s in paired],
                             len(seeds))


def runs_family(runs: dict, comparisons: list[tuple[str, str, str]], seeds: list[int],
                unfinished: Iterable[str] = ()) -> dict:
    """Each comparison paired over seeds; Holm and Bonferroni over those complete (every seed paired). `unfinished`
    names comparisons whose arm could not finish some run: descriptive only, kept in the family, never rejected."""
    tests = {comparison_name(c): compare_runs(runs, c, seeds) for c in comparisons}
    for name in unfinished:
        tests[name]["unfinished"] = True
    complete = {name: test for name, test in tests.items() if test.get("complete") and name not in unfinished}
    for name, corrected in corrected_family(complete, unfinished).items():
        tests[name]["holm"] = corrected
    return tests


def room_gate(runs: dict, regime: str, seeds: list[int], room: str, baseline: str, required: float) -> dict:
    """Whether `regime` had room for a rule to win: `room` (uniform with more rollouts) minus `baseline` at least
    `required`, with its 95% interval above 0."""
    gate = compare_runs(runs, (regime, room, baseline), seeds)
    return {"comparison": f"{regime}: {room} - {baseline}", "diff": gate.get("diff"), "ci95": gate.get("ci95"),
            "required": required,
            "passes": gate.get("diff") is not None and gate["diff"] >= required and gate["ci95"][0] > 0}


def answer_sentences(primary: dict) -> list[str]:
    """One sentence per primary comparison (each with its `room_gate`): the difference in points, its interval, p,
    seeds, whether it survives Holm, and the room."""
    sentences = []
    for name, test in primary.items():
        if test.get("diff") is None:
            sentences.append(f"{name}: not yet run on enough seeds.")
            continue
        low, high = test["ci95"]
        verdict = ("significant after Holm" if test.get("holm", {}).get("significant") else
                   "not significant after Holm" if "holm" in test else "incomplete, not tested")
        gate = test["room_gate"]
        sentences.append(f"{name}: {test['diff'] * 100:+.2f} points [{low * 100:+.2f}, {high * 100:+.2f}], exact p = "
                         f"{test['p']:.3f}, {test['seeds']} seeds, {verdict}; room "
                         f"{(gate['diff'] or 0) * 100:+.2f} ({'passed' if gate['passes'] else 'not passed'}).")
    return sentences
