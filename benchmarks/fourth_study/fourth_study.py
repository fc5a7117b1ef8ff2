"""The fourth study: does any budget rule, or any advantage baseline, beat uniform GRPO where the papers say it should,
and what caused the third study's win? Two tasks, two regimes, full cost.

    OMP_NUM_THREADS=1 python benchmarks/fourth_study/fourth_study.py        # train every run not yet stored, summarise
    python benchmarks/fourth_study/fourth_study.py --stored-only            # summarise the stored runs, train nothing
    python benchmarks/fourth_study/fourth_study.py --quick --output-dir /tmp/s   # a smoke run of a few minutes

Pre-registered here, committed before any run of a budget rule or of the history baseline in either regime.

- Regimes (`REGIMES`), each the third study's batch shape and budget (`RLSettings.study(960)`: 64 prompts per
  generation batch, 8 updates per batch, 960 updates in every arm, a pool of 1 500 training problems, a constant 1e-4
  after 16 warm-up steps, float32):
  - `arithmetic`: regime A, the third study's (2+1, 2+2 and 2x1 digit problems from the shipped arithmetic warm
    start); uniform n = 8 leaves 36-46% of its prompts without a gradient.
  - `sorting`: the waste-heavy regime, chosen on uniform GRPO alone by fourth_study_pilot.py's
    pre-registered rule (results/fourth_study_pilot.json, seeds 200-203): sorting 10 and 12 digits from the shipped
    sorting warm start; uniform n = 8 leaves 63% of its prompts without a gradient in the first epoch, greedy accuracy
    goes from 0.244 to 0.936 without an early dip, and uniform n = 16 gains +1.01 [+0.37, +1.64] over n = 8.
- Metric: greedy exact-match accuracy on 1 000 held-out problems of the regime's levels, the mean of the last three
  evaluations (updates 840, 900, 960), as in the second and third studies.
- Seeds: 300-319 in both regimes, paired within a regime; fresh (the earlier studies and pilots used 0-23, 40-59 and
  200-203). The third study's stored runs (seeds 40-59) are not reused: the ablations that first showed the history
  baseline and Reinforce-Ada's group baseline ran on those seeds, so the primaries would repeat them, not test them.
- Size: 420 runs (10 arms in arithmetic, 11 in sorting, 20 seeds). At two runs at once on 2 cores, about 7 hours (the
  third study's arms took 83-200 s a run, the pilot's sorting runs 120-150 s, dynamic sampling several generation
  batches a batch), over several sessions; the primaries and room gates (180 runs) come first, about 2.5 hours.
- Arms (`ARMS`), at 512 rollouts generated per batch unless said: `uniform-n8`; `uniform-n12` and `uniform-n16` (the
  cost curve: 768 and 1 024 per batch); `knapsack` (Knapsack RL's rule under a 128 cap); `reinforce-ada-positive`
  (Reinforce-Ada positive-focused with its release's baseline, all the prompt's rollouts of the batch: K = 4 trained,
  4 a round, up to 16 rounds, at most 512 generated) and `reinforce-ada-positive-group` (the same with GRPO's group
  baseline); `dynamic-sampling` (uniform n = 8 with DAPO's dynamic sampling on the reward, generation batches of 64
  prompts, verl's cap of 10 generation batches: 512 trained rollouts per batch, as many generated as it takes);
  `uniform-n8-history` (uniform n = 8 with `advantage_baseline="history"`, window 16 visits, the default),
  `uniform-n8-history-short` (window 2) and `knapsack-history` (Knapsack RL with the history baseline, window 16);
  and in the sorting regime only `coba` (CoBA-RL's rule under a 128 cap).
- Primary comparisons, one family of four, Holm-corrected (exact two-sided sign-flip p at 0.05), with 95% t intervals
  and intervals at the Bonferroni level (1 - 0.05/4):
  1. arithmetic: `uniform-n8-history` - `uniform-n8` (the history baseline, no rollout moved);
  2. arithmetic: `reinforce-ada-positive` - `reinforce-ada-positive-group` (what caused the third study's win: the
     baseline, with the allocation held fixed);
  3. sorting: `knapsack` - `uniform-n8` (the seeds' claim, where waste is heavy);
  4. sorting: `uniform-n8-history` - `uniform-n8` (the history baseline on a second task family).
- Minimal detectable effect at 80% power at Holm's first level (0.05/4), from the pilots' paired SDs in the repo:
  arithmetic 1.19 points (paired SD 1.47: the third study's reinforce-ada-positive - uniform-n8 over seeds 40-59),
  sorting 0.32 point (paired SD 0.40: the fourth pilot's n = 16 - n = 8 over seeds 200-203, the only paired figure in
  that regime before the study); the observed SD's MDE beside each primary.
- Room gate per regime: `uniform-n16` - `uniform-n8` at least 1 point with its 95% interval above 0; printed beside the
  answer, it says whether the regime had room for a rule to win.
- Secondary comparisons, one family per regime, Holm-corrected with Bonferroni intervals: every other arm at 512
  generated rollouts minus `uniform-n8` (`knapsack` in arithmetic, `reinforce-ada-positive`,
  `reinforce-ada-positive-group`, `knapsack-history`, and `coba` in sorting); `dynamic-sampling` - `uniform-n8` (at
  its own cost, which is reported); `knapsack-history` - `knapsack` (the history baseline on an allocator);
  `uniform-n8-history` - `uniform-n8-history-short` (the window); and in sorting `reinforce-ada-positive` -
  `reinforce-ada-positive-group`.
- Cost, counted in full per arm over the batches after the first epoch (23): rollouts generated and trained, trained
  completion tokens, rounds (engine requests) per batch, and engine time per batch relative to uniform n = 8. Engine
  time comes from the real-length engine benchmark (benchmarks/engine_cost/results/rounds_engine_cost-real.json and
  -real-more.json, colocate, reasoning-like lengths): its arms' median engine-time ratios to uniform n = 8 are fitted by
  least squares as a + b x (generated / 512) + c x (rounds - 1), and the fit gives each study arm's ratio from its own
  generated rollouts and rounds per batch (divided by the fit's value for uniform n = 8, so that uniform n = 8 is 1).
  Each arm's gain over `uniform-n8` is also stated against uniform's cost curve (n = 8, 12, 16: mean gains against their
  cost, linear between the points and along the end segments beyond them), at equal generated rollouts and at matched
  engine time: measured minus the curve's gain at the arm's cost, with a 95% paired-bootstrap interval over seeds (2 000
  resamples).
- Also reported per arm: the share of trained rollouts with a non-zero advantage under its own baseline, the share of
  prompts with a gradient, the policy's entropy (mean over the updates after the first epoch), the accuracy at update
  60 beside the start (the early dip), and seconds per run on this machine (two runs at once; not a cost figure).

Runs are trained primaries and room gates first (their arms over all seeds), then the other arms seed by seed; each
finished run is stored under its settings, seed and the package's code (results/run_cache). The code the runs execute
is frozen for the study: `STUDY_CODE` is its digest, and training refuses other code (the stored runs are read back
whatever the code). Writes results/fourth_study.json.

Amendment, made when the first `dynamic-sampling` run in sorting (seed 300) stopped, before any of the arm's figures
were read; the arms' settings are unchanged. Dynamic sampling stops a run, as verl does, when a batch is still short
after its cap of generation batches. Such a run is stored as stopped, with the update it reached and its curve until
then; its arm is reported by the seeds that stopped and where. A comparison of an arm with a stopped seed is
`unfinished`: its difference over the seeds that finished is descriptive only (those seeds are not a random draw),
and it keeps its place in its Holm family with p = 1, never rejected, so the family's other comparisons are corrected
at the registered size.
Until the move to benchmarks/fourth_study/ this script was benchmarks/fourth_study.py (the path the commands stored with
its results name).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import numpy as np

from trl_budget.demo.report import comparison_cells
from trl_budget.demo.run import run_rl
from trl_budget.demo.run_cache import refuse_other_code, study_arguments, study_runs
from trl_budget.demo.settings import REINFORCE_ADA_AT_EQUAL_COST, REINFORCE_ADA_TRAINED, RLSettings
from trl_budget.demo.study_stats import (answer_sentences, comparison_name, compare_runs, minimal_detectable_effect,
                                         paired_comparison, room_gate as study_room_gate, runs_family, study_metric)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the studies' run of an arm
from study_run import stored_study_run

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = range(300, 320)
BUDGET = 960  # updates, in every arm
FIRST_EPOCH = 23  # generation batches before any prompt comes back (1 500 prompts, 64 per batch)
ROOM_GATE = 0.01
# The digest of the package code every run of the study executes (`run_cache.code_digest`); training refuses other code.
STUDY_CODE = "7af5316499dc4561"
# How dynamic sampling's error begins when a batch is still short at its cap of generation batches
DYNAMIC_SAMPLING_CAP = "Dynamic sampling kept"

REGIMES = {  # name -> (task, levels; None: the task's study pool)
    "arithmetic": ("arithmetic", None),
    "sorting": ("sorting", (3, 4)),
}

RA_POSITIVE = {"budget_allocator": "reinforce_ada", "reinforce_ada_choice": "positive_focused",
               **REINFORCE_ADA_AT_EQUAL_COST}
HISTORY = {"advantage_baseline": "history", "advantage_history_window": 16.0}
ARMS = {  # label -> (num_generations, max_generations, BudgetGRPOConfig settings, regimes)
    "uniform-n8": (8, 128, {"budget_allocator": "uniform"}, ("arithmetic", "sorting")),
    "uniform-n12": (12, 128, {"budget_allocator": "uniform"}, ("arithmetic", "sorting")),
    "uniform-n16": (16, 128, {"budget_allocator": "uniform"}, ("arithmetic", "sorting")),
    "knapsack": (8, 128, {"budget_allocator": "knapsack"}, ("arithmetic", "sorting")),
    "coba": (8, 128, {"budget_allocator": "coba"}, ("sorting",)),
    "reinforce-ada-positive": (REINFORCE_ADA_TRAINED, 128, RA_POSITIVE, ("arithmetic", "sorting")),
    "reinforce-ada-positive-group": (REINFORCE_ADA_TRAINED, 128, {**RA_POSITIVE, "advantage_baseline": "group"},
                                     ("arithmetic", "sorting")),
    "dynamic-sampling": (8, 128, {"budget_allocator": "uniform", "budget_dynamic_sampling": True},
                         ("arithmetic", "sorting")),
    "uniform-n8-history": (8, 128, {"budget_allocator": "uniform", **HISTORY}, ("arithmetic", "sorting")),
    "uniform-n8-history-short": (8, 128, {"budget_allocator": "uniform", **HISTORY, "advantage_history_window": 2.0},
                                 ("arithmetic", "sorting")),
    "knapsack-history": (8, 128, {"budget_allocator": "knapsack", **HISTORY}, ("arithmetic", "sorting")),
}
BASELINE = "uniform-n8"
PRIMARY = [("arithmetic", "uniform-n8-history", "uniform-n8"),
           ("arithmetic", "reinforce-ada-positive", "reinforce-ada-positive-group"),
           ("sorting", "knapsack", "uniform-n8"),
           ("sorting", "uniform-n8-history", "uniform-n8")]
ROOM = "uniform-n16"
DOSES = ["uniform-n8", "uniform-n12", "uniform-n16"]
SECONDARY = {
    regime: [(regime, arm, BASELINE) for arm in ("knapsack", "coba", "reinforce-ada-positive",
                                                 "reinforce-ada-positive-group", "knapsack-history",
                                                 "dynamic-sampling")
             if regime in ARMS[arm][3] and (regime, arm, BASELINE) not in PRIMARY]
    + [(regime, "knapsack-history", "knapsack"), (regime, "uniform-n8-history", "uniform-n8-history-short")]
    + ([(regime, "reinforce-ada-positive", "reinforce-ada-positive-group")] if regime == "sorting" else [])
    for regime in REGIMES
}
METRIC = "greedy held-out accuracy, mean of the last three evaluations"
# The answer `trl-budget demo --allocator uniform` prints beside its pair, uniform GRPO with and without the history
# baseline (the demo's default pair until the fifth study)
DEMO_ANSWER = Path(__file__).resolve().parents[2] / "trl_budget" / "demo" / "baseline_answer.json"
ENGINE_BENCHMARKS = ("rounds_engine_cost-real.json", "rounds_engine_cost-real-more.json")
# The other benchmarks' results the study reads: the third study's (its paired SD) and the engine benchmark's
THIRD_STUDY_RESULTS = Path(__file__).resolve().parents[1] / "third_study" / "results"
ENGINE_RESULTS = Path(__file__).resolve().parents[1] / "engine_cost" / "results"
HOLM_FIRST_LEVEL = 0.05 / len(PRIMARY)


def pilot_paired_sd(regime: str) -> float:
    """The paired SD the study is sized on, from committed runs: the third study's reinforce-ada-positive minus
    uniform-n8 (arithmetic), the fourth pilot's n = 16 minus n = 8 (sorting)."""
    if regime == "arithmetic":
        third = json.loads((THIRD_STUDY_RESULTS / "rounds_study.json").read_text())
        return float(third["arms"]["reinforce-ada-positive"]["vs_uniform_n8"]["paired_sd"])
    pilot = json.loads((RESULTS / "fourth_study_pilot.json").read_text())
    return float(pilot["candidates"]["sort-10-12-1e-4"]["room_paired_sd"])


def mde80(regime: str, paired_sd: float | None = None) -> float:
    sd = pilot_paired_sd(regime) if paired_sd is None else paired_sd
    return minimal_detectable_effect(sd, len(SEEDS), alpha=HOLM_FIRST_LEVEL)


def arm_settings(regime: str, label: str, quick: bool) -> RLSettings:
    num_generations, most = ARMS[label][:2]
    settings = RLSettings.study(16 if quick else BUDGET)
    if quick:  # two generation batches of a small pool
        settings = replace(settings, train_prompts=64, eval_prompts=48, train_eval_prompts=24)
    levels = REGIMES[regime][1]
    return replace(settings, num_generations=num_generations, max_generations=most,
                   **({} if levels is None else {"levels": levels}))


def study_run(regime: str, label: str, seed: int, quick: bool, run_cache: Path, train: bool = True) -> dict:
    """One run, stored (or read back) under its settings and seed; single-threaded, for a process pool."""
    return stored_study_run("fourth", regime, label, seed, REGIMES[regime][0], arm_settings(regime, label, quick),
                            ARMS[label][2], run_cache, train, run_until_cap)


def run_until_cap(model: Path, allocator: str, seed: int, settings: RLSettings, output_dir: Path, *, label: str,
                  **options) -> dict:
    """`run_rl`, except that a run dynamic sampling stops at its cap of generation batches is a result, as verl stops
    (`stopped_at_cap`), not an error."""
    start = time.perf_counter()
    try:
        return run_rl(model, allocator, seed, settings, output_dir, label=label, **options)
    except RuntimeError as error:
        if not str(error).startswith(DYNAMIC_SAMPLING_CAP):
            raise
        return stopped_at_cap(error, label, seed, time.perf_counter() - start)


def stopped_at_cap(error: RuntimeError, label: str, seed: int, seconds: float) -> dict:
    """The record of a run that dynamic sampling stopped at its cap of generation batches, as verl stops: the update
    it reached and the held-out curve until then, read from the trainer in the failing call's frames."""
    frame = next(frame for frame, _ in traceback.walk_tb(error.__traceback__) if frame.f_code.co_name == "run_rl")
    trainer, recorder = frame.f_locals["trainer"], frame.f_locals["recorder"]
    return {"allocator": label, "seed": seed, "stopped": str(error), "stopped_at_update": trainer.state.global_step,
            "curve": recorder.curve, "seconds": seconds}


def job_order(seeds) -> list[tuple[str, str, int]]:
    """The primaries' arms and the room gates over all seeds first, then every other arm seed by seed."""
    first = list(dict.fromkeys((regime, arm, seed) for seed in seeds for regime in REGIMES
                               for arm in [*(a for r, *pair in PRIMARY if r == regime for a in pair), ROOM]))
    rest = [(regime, arm, seed) for seed in seeds for regime in REGIMES for arm in ARMS
            if regime in ARMS[arm][3] and (regime, arm, seed) not in first]
    return first + rest


# ------------------------------------------------------------------------------------------------------ the figures


metric = study_metric


def after_first_epoch(run: dict, name: str, skip: int) -> float:
    values = [value for value in run.get(name, [])[skip:] if value is not None]
    return float(np.mean(values)) if values else float("nan")


def run_cost(run: dict, label: str, skip: int) -> dict:
    """One run's cost and mechanism figures per generation batch after the first `skip` batches."""
    trained = after_first_epoch(run, "trained_rollouts", skip)
    generated = after_first_epoch(run, "generated_rollouts", skip)
    rows = trained if np.isfinite(trained) else float(run["rollouts_per_step"] * 8)
    updates = len(run.get("entropy", []))
    entropy = run.get("entropy", [])[skip * updates // max(1, len(run["effective_ratio"])):]
    return {"generated_rollouts": generated if np.isfinite(generated) else rows, "trained_rollouts": rows,
            "trained_tokens": after_first_epoch(run, "completion_tokens", skip),
            "rounds": after_first_epoch(run, "rounds", skip) if any(r is not None for r in run["rounds"]) else 1.0,
            "nonzero_advantage_share": after_first_epoch(run, "effective_ratio", skip),
            "prompts_with_gradient": after_first_epoch(run, "prompts_with_gradient", skip),
            "entropy": float(np.mean(entropy)) if entropy else float("nan"),
            # the first evaluation after the start (update 60 in the study): below the start is the early dip
            "accuracy_start": run["curve"][0]["accuracy"], "accuracy_update_60": run["curve"][1]["accuracy"],
            "seconds": run["seconds"]}


def engine_time_model(results: Path = ENGINE_RESULTS) -> dict:
    """Least squares of the real-length benchmark's engine-time ratios to uniform n = 8 on generated / 512 and the
    rounds beyond the first: the coefficients and the points they were fitted on."""
    points = []
    for name in ENGINE_BENCHMARKS:
        arms = json.loads((results / name).read_text())["modes"]["colocate"]["arms"]
        points += [(row["generated_per_batch"] / 512, row["rounds_per_batch"] - 1,
                    row["engine_ratio_to_uniform_n8_median"], f"{name}:{arm}") for arm, row in arms.items()]
    design = np.array([[1.0, generated, extra_rounds] for generated, extra_rounds, _, _ in points])
    ratios = np.array([ratio for *_, ratio, _ in points])
    coefficients = np.linalg.lstsq(design, ratios, rcond=None)[0]
    fitted = design @ coefficients
    return {"intercept": float(coefficients[0]), "per_512_generated": float(coefficients[1]),
            "per_extra_round": float(coefficients[2]),
            "points": [{"arm": arm, "measured": ratio, "fitted": float(fit)}
                       for (_, _, ratio, arm), fit in zip(points, fitted)]}


def engine_ratio(model: dict, generated: float, rounds: float) -> float:
    """The fit's engine time of a batch, relative to its own for uniform n = 8 (512 generated, one round)."""
    def fitted(generated, rounds):
        return (model["intercept"] + model["per_512_generated"] * generated / 512
                + model["per_extra_round"] * (rounds - 1))

    return fitted(generated, rounds) / fitted(512, 1)


def along(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear between the points (sorted by x), and along the end segments beyond them."""
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    i = 0 if x <= xs[0] else len(xs) - 2 if x >= xs[-1] else int(np.searchsorted(xs, x)) - 1
    if xs[i + 1] == xs[i]:
        return float(ys[i : i + 2].mean())
    return float(ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i]))


def against_cost_curve(runs: dict, regime: str, seeds: list[int], costs: dict, resamples: int = 2000) -> dict:
    """Every arm's gain over uniform-n8 beside uniform's gain at the same cost (generated rollouts; engine time), the
    difference with a paired-bootstrap interval over seeds."""
    have = [s for s in seeds if all((regime, d, s) in runs for d in DOSES)]
    arms = [a for a in ARMS if regime in ARMS[a][3] and a not in DOSES and all((regime, a, s) in runs for s in have)]
    if len(have) < 2 or not arms:
        return {}
    gain = {a: np.array([metric(runs[regime, a, s]) - metric(runs[regime, BASELINE, s]) for s in have])
            for a in [*DOSES, *arms]}
    rng = np.random.default_rng(0)
    draws = [np.arange(len(have))] + [rng.integers(0, len(have), len(have)) for _ in range(resamples)]
    result = {}
    for measure in ("generated_rollouts", "engine_ratio"):
        cost = {a: np.array([costs[regime, a, s][measure] for s in have]) for a in gain}
        rows = {}
        curve = [cost[x].mean() for x in DOSES]
        for arm in arms:
            departures = [gain[arm][d].mean() - along(cost[arm][d].mean(), np.array([cost[x][d].mean() for x in DOSES]),
                                                      np.array([gain[x][d].mean() for x in DOSES])) for d in draws]
            rows[arm] = {"cost": float(cost[arm].mean()), "measured_gain": float(gain[arm].mean()),
                         "uniform_gain_at_that_cost": float(gain[arm].mean() - departures[0]),
                         "difference": float(departures[0]),
                         "ci95": np.quantile(departures[1:], [0.025, 0.975]).tolist(),
                         # beyond the curve's ends uniform's gain is extrapolated along its end segment (a cap's
                         # last rollout left ungenerated in a batch is not beyond it: 1e-3 of slack)
                         "beyond_uniform_curve": bool(not min(curve) * (1 - 1e-3) <= cost[arm].mean()
                                                      <= max(curve) * (1 + 1e-3))}
        result[measure] = rows
    return result


def until_stopped(runs: dict, stopped: dict, regime: str, label: str, seeds: list[int]) -> dict:
    """Post hoc and descriptive (single evaluations, not the study's metric): where an arm dynamic sampling stopped
    stood against uniform-n8 on the same seed, at the update it stopped (its last evaluation) and at uniform-n8's whole
    run's generated rollouts (its first evaluation past them, against uniform-n8's last)."""
    same_update, ratios, equal_generated = [], [], []
    for seed in seeds:
        if (regime, label, seed) not in stopped or (regime, BASELINE, seed) not in runs:
            continue
        curve, uniform = stopped[regime, label, seed]["curve"], runs[regime, BASELINE, seed]["curve"]
        at_step = {point["step"]: point for point in uniform}
        last = curve[-1]
        same_update.append(last["accuracy"] - at_step[last["step"]]["accuracy"])
        ratios.append(last["generated"] / at_step[last["step"]]["generated"])
        past = [point for point in curve if point["generated"] >= uniform[-1]["generated"]]
        if past:
            equal_generated.append((past[0]["accuracy"] - uniform[-1]["accuracy"], past[0]["step"]))
    if not same_update:
        return {}
    return {"what": "post hoc, descriptive: single held-out evaluations against uniform-n8's on the same seeds",
            "at_the_update_it_stopped": paired_comparison(same_update, len(same_update)),
            "generated_per_uniform_n8_generated_there": float(np.mean(ratios)),
            "at_uniform_n8_generated_rollouts": {
                **paired_comparison([d for d, _ in equal_generated], len(equal_generated)),
                "updates": sorted({step for _, step in equal_generated})}}


compare = compare_runs


def family(runs: dict, comparisons: list[tuple[str, str, str]], seeds: list[int], stopped: dict) -> dict:
    """Each comparison paired over seeds; Holm and Bonferroni over those complete (all seeds paired). A comparison
    whose arm stopped on some seed is `unfinished`: its difference over the seeds that finished is descriptive only,
    and it keeps its place in the family, never rejected."""
    unfinished = [comparison_name(c) for c in comparisons
                  if any((c[0], arm, seed) in stopped for arm in c[1:] for seed in seeds)]
    return runs_family(runs, comparisons, seeds, unfinished)


def summarize(runs: dict, seeds: list[int], skip: int, stopped: dict | None = None) -> dict:
    """The study's figures from its finished `runs`; `stopped` holds the runs dynamic sampling stopped at its cap."""
    stopped = stopped or {}
    model = engine_time_model()
    costs = {}
    for (regime, label, seed), run in runs.items():
        cost = run_cost(run, label, skip)
        cost["engine_ratio"] = engine_ratio(model, cost["generated_rollouts"], cost["rounds"])
        costs[regime, label, seed] = cost
    arms = {}
    for regime in REGIMES:
        for label in ARMS:
            have = [s for s in seeds if (regime, label, s) in runs]
            halted = [{"seed": s, "update": stopped[regime, label, s]["stopped_at_update"]} for s in seeds
                      if (regime, label, s) in stopped]
            if halted:
                arms.setdefault(regime, {}).setdefault(label, {})["stopped"] = halted
            if not have:
                continue
            values = [metric(runs[regime, label, s]) for s in have]
            figures = [costs[regime, label, s] for s in have]
            arms.setdefault(regime, {}).setdefault(label, {}).update({
                "seeds": len(have), "metric_mean": float(np.mean(values)),
                "metric_sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                **{name: float(np.mean([f[name] for f in figures])) for name in figures[0]},
                **({} if label == BASELINE else {"vs_uniform_n8": compare(runs, (regime, label, BASELINE), seeds)})})
    primaries = family(runs, PRIMARY, seeds, stopped)
    for comparison in PRIMARY:
        test = primaries[comparison_name(comparison)]
        regime = comparison[0]
        test["mde80"] = mde80(regime)
        test["mde80_observed"] = mde80(regime, test["paired_sd"]) if "paired_sd" in test else None
        test["room_gate"] = room_gate(runs, regime, seeds)
    return {
        "primary": primaries,
        "secondary": {regime: family(runs, SECONDARY[regime], seeds, stopped) for regime in REGIMES},
        "room_gates": {regime: room_gate(runs, regime, seeds) for regime in REGIMES},
        "arms": arms,
        "against_cost_curve": {regime: against_cost_curve(runs, regime, seeds, costs) for regime in REGIMES},
        "engine_time_model": model,
        "post_hoc": {f"{regime}: {label} until it stopped": until_stopped(runs, stopped, regime, label, seeds)
                     for regime, label in sorted({(regime, label) for regime, label, _ in stopped})},
    }


def room_gate(runs: dict, regime: str, seeds: list[int]) -> dict:
    return study_room_gate(runs, regime, seeds, ROOM, BASELINE, ROOM_GATE)


def demo_answer(summary: dict) -> dict:
    """The first primary (arithmetic, the demo's regime: the history baseline on uniform GRPO) as the demo prints it."""
    test = summary["primary"][comparison_name(PRIMARY[0])]
    gate = test["room_gate"]
    low, high = test["ci95"]
    verdict = "significant" if test["holm"]["significant"] else "not significant"
    answer = (f"uniform GRPO with each prompt's history as its advantage baseline against GRPO's group baseline: "
              f"{test['diff'] * 100:+.2f} points of greedy held-out accuracy (95% interval [{low * 100:+.2f}, "
              f"{high * 100:+.2f}], exact p = {test['p']:.3f}, {test['seeds']} paired seeds; {verdict} after Holm over "
              f"the study's four primaries), at the same rollouts and updates. For scale: uniform with twice the "
              f"rollouts gains {gate['diff'] * 100:+.2f}.")
    return {"answer": answer, "comparison": comparison_name(PRIMARY[0]), "metric": METRIC,
            "primary": {name: test[name] for name in ("diff", "ci95", "p", "seeds", "complete")},
            "significant_after_holm": test["holm"]["significant"], "room_gate": gate}


def markdown_table(summary: dict) -> str:
    lines = []
    for regime, arms in summary["arms"].items():
        lines += [f"\n{regime}:", "| arm | seeds | metric | minus uniform-n8 (95% CI) | exact p | update 60 (start) | "
                  "generated | trained | trained tokens | rounds | engine time | non-zero advantage | coverage | "
                  "entropy | seconds |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for label, row in arms.items():
            seeds = f"{row.get('seeds', 0)}" + (f" ({len(row['stopped'])} stopped)" if "stopped" in row else "")
            if "metric_mean" not in row:
                lines.append(f"| {label} | {seeds} |" + " - |" * 13)
                continue
            cells = comparison_cells(row.get("vs_uniform_n8", {}))
            lines.append(f"| {label} | {seeds} | {row['metric_mean']:.4f} | {cells['diff']} | {cells['p']} | "
                         f"{row['accuracy_update_60']:.3f} ({row['accuracy_start']:.3f}) | "
                         f"{row['generated_rollouts']:.0f} | {row['trained_rollouts']:.0f} | "
                         f"{row['trained_tokens']:.0f} | {row['rounds']:.1f} | {row['engine_ratio']:.2f}x | "
                         f"{row['nonzero_advantage_share']:.3f} | {row['prompts_with_gradient']:.3f} | "
                         f"{row['entropy']:.3f} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = study_arguments(__doc__, RESULTS, argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not (args.stored_only or args.quick):
        refuse_other_code("fourth study", STUDY_CODE, "benchmarks/fourth_study.py (its path at that commit)",
                          "regime/arm:seed")
    seeds = list(SEEDS)[:2] if args.quick else list(SEEDS)
    stored = {job: run["result"] for job, run in study_runs(job_order(seeds), study_run, args).items()}
    stopped = {job: run for job, run in stored.items() if "stopped" in run}
    runs = {job: run for job, run in stored.items() if job not in stopped}
    summary = summarize(runs, seeds, 1 if args.quick else FIRST_EPOCH, stopped)
    summary["preregistered"] = {
        "seeds": [seeds[0], seeds[-1]], "budget_updates": BUDGET, "regimes": REGIMES,
        "arms": {label: {"num_generations": g, "max_generations": m, "settings": s, "regimes": r}
                 for label, (g, m, s, r) in ARMS.items()},
        "primary": [comparison_name(c) for c in PRIMARY],
        "secondary": {regime: [comparison_name(c) for c in comparisons] for regime, comparisons in SECONDARY.items()},
        "pilot_paired_sd": {regime: pilot_paired_sd(regime) for regime in REGIMES},
        "mde80": {regime: mde80(regime) for regime in REGIMES}, "holm_first_level": HOLM_FIRST_LEVEL,
        "room_gate": {"comparison": f"{ROOM} - {BASELINE}", "at_least": ROOM_GATE, "interval_above_zero": True},
        "study_code": STUDY_CODE}
    summary["answer"] = answer_sentences(summary["primary"])
    summary["command"] = ("OMP_NUM_THREADS=1 python benchmarks/fourth_study/fourth_study.py"
                          + (" --quick" if args.quick else ""))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "fourth_study.json").write_text(json.dumps(summary, indent=2) + "\n")
    if not args.quick and summary["primary"][comparison_name(PRIMARY[0])].get("complete"):
        DEMO_ANSWER.write_text(json.dumps(demo_answer(summary), indent=2) + "\n")
    print(markdown_table(summary))
    print("\n".join(summary["answer"]))
    return summary


if __name__ == "__main__":
    main()
