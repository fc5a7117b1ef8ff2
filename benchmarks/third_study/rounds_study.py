"""The third allocation study: what a batch's rollouts buy, and whether sampling in rounds spends them better.

    OMP_NUM_THREADS=1 python benchmarks/third_study/rounds_study.py          # train every run not yet stored, summarise
    python benchmarks/third_study/rounds_study.py --stored-only              # summarise the stored runs, train nothing
    python benchmarks/third_study/rounds_study.py --quick --output-dir /tmp/s   # a smoke run of a few minutes

Pre-registered here, committed before any RL run of a rule of rounds. The rounds settings were chosen by
benchmarks/third_study/coverage_replay.py on the warm start's own answers alone (results/coverage_replay.json).

- Regime: the second study's, `RLSettings.study()` from the shipped warm start: the pool of 1 500 problems (2+1, 2+2,
  2x1), 64 prompts per generation batch, 8 updates per batch, float32, a constant 1e-4 after 16 warm-up steps, 960
  updates in every arm (the arms differ in the rollouts of a batch, never in the number of updates).
- Metric: greedy exact-match accuracy on 1 000 held-out problems, the mean of the last three evaluations (updates 840,
  900 and 960), as in the second study.
- Seeds: 40-59, paired (fresh: the second study used 0-19, its pilot 0-3, this study's pilot 20-23).
- Arms:
  - dose-response of uniform: `uniform-n4`, `uniform-n8`, `uniform-n12`, `uniform-n16`, n rollouts of every prompt
    per batch (64 n per batch, 8 n per update);
  - at 512 rollouts generated per batch (n = 8 on average): `rounds-uniform` (rounds until mixed with uniform: first
    round 2, 1 more a round for every prompt not yet mixed, at most 32 per prompt, the rest evenly), `rounds-knapsack`
    (the same rounds, the rest by Knapsack RL's value), `knapsack` and `coba` as released (at most 128 per prompt), and
    Reinforce-Ada as released, `reinforce-ada-balanced` and `reinforce-ada-positive` (K = 4 trained of each prompt, 4
    a round, up to 16 rounds, at most 512 generated per batch: the trained batch is 256 rollouts, 32 per update).
- Primary comparison (one): `rounds-uniform` minus `uniform-n8`: mean paired difference, 95% t interval, exact
  two-sided sign-flip test at 0.05.
- Minimal detectable effect at 80% power: from the second study's observed paired SD (0.93 point, knapsack minus
  uniform over 20 seeds): (t(0.975, 19) + t(0.8, 19)) x 0.93 / sqrt(20) = 0.61 point; the observed SD's MDE beside it.
- Room gate: `uniform-n16` minus `uniform-n8` (twice the rollouts of a batch, the same updates; the pilot: +1.98 over
  seeds 20-23) passes when its mean is at least 1 point and its 95% interval lies above 0; printed beside the answer.
- Secondary comparisons, each minus `uniform-n8`, Holm-corrected as one family of 5 (exact sign-flip p-values), with
  intervals at the Bonferroni level (1 - 0.05/5, simultaneous) and at each Holm step: rounds-knapsack, knapsack, coba,
  reinforce-ada-balanced, reinforce-ada-positive.
- Mechanism analysis, reported with intervals: per arm, over the batches after the first epoch (23), the trained
  rollouts with a gradient per batch, the share of prompts with a gradient (coverage), the largest prompt's share of
  the loss, rollouts generated per trained rollout and rounds per batch. Uniform's dose-response (its four arms' mean
  gains over uniform-n8 against their rollouts with a gradient per batch, and separately against their coverage,
  linear between points and beyond the ends) predicts a gain for every n = 8 arm; reported: measured gain,
  predicted gain, and their difference with a 95% paired-bootstrap interval over seeds (2 000 resamples), for both
  predictors; the predictor with the smaller mean squared difference over the six n = 8 arms predicts better.
- Also reported: each arm's seconds per run on this machine, and curves of held-out accuracy against rollouts
  generated.

Runs are trained primary first (uniform-n8, rounds-uniform, uniform-n16 over all seeds), then the other arms seed by
seed; each finished run is stored under its settings, seed and the package's code (results/run_cache), so a stopped
study resumes, and `--stored-only` summarises what is there, whatever code trained it. Writes
results/rounds_study.json and results/rounds_study.png.
Until the move to benchmarks/third_study/ this script was benchmarks/rounds_study.py (the path the commands stored with
its results name).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from trl_budget.demo.report import comparison_cells
from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.run_cache import NotStored, cached_run, stored_run, study_arguments, study_runs
from trl_budget.demo.settings import (REINFORCE_ADA_AT_EQUAL_COST, REINFORCE_ADA_TRAINED, RLSettings,
                                      WarmStartSettings)
from trl_budget.demo.study_stats import (corrected_family, mean_after, minimal_detectable_effect, paired_comparison,
                                         study_metric)

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = range(40, 60)
BUDGET = 960  # updates, in every arm
SECOND_STUDY_PAIRED_SD = 0.0093  # 0.93 point: knapsack minus uniform over seeds 0-19 (compare_allocators.json)
ROOM_GATE = 0.01
ROUNDS = {"budget_first_round_generations": 2, "budget_round_generations": 1}  # coverage_replay.json's choice
ROUNDS_MAX_GENERATIONS = 32

ARMS = {  # label -> (num_generations, max_generations, BudgetGRPOConfig settings)
    "uniform-n4": (4, 128, {"budget_allocator": "uniform"}),
    "uniform-n8": (8, 128, {"budget_allocator": "uniform"}),
    "uniform-n12": (12, 128, {"budget_allocator": "uniform"}),
    "uniform-n16": (16, 128, {"budget_allocator": "uniform"}),
    "rounds-uniform": (8, ROUNDS_MAX_GENERATIONS, {"budget_allocator": "uniform", **ROUNDS}),
    "rounds-knapsack": (8, ROUNDS_MAX_GENERATIONS, {"budget_allocator": "knapsack", **ROUNDS}),
    "knapsack": (8, 128, {"budget_allocator": "knapsack"}),
    "coba": (8, 128, {"budget_allocator": "coba"}),
    "reinforce-ada-balanced": (REINFORCE_ADA_TRAINED, 128, {"budget_allocator": "reinforce_ada",
                                                            "reinforce_ada_choice": "balanced",
                                                            **REINFORCE_ADA_AT_EQUAL_COST}),
    "reinforce-ada-positive": (REINFORCE_ADA_TRAINED, 128, {"budget_allocator": "reinforce_ada",
                                                            "reinforce_ada_choice": "positive_focused",
                                                            **REINFORCE_ADA_AT_EQUAL_COST}),
}
PRIMARY, BASELINE, ROOM = "rounds-uniform", "uniform-n8", "uniform-n16"
DOSES = ["uniform-n4", "uniform-n8", "uniform-n12", "uniform-n16"]
SECONDARY = ["rounds-knapsack", "knapsack", "coba", "reinforce-ada-balanced", "reinforce-ada-positive"]
EQUAL_COST = [PRIMARY, *SECONDARY]
METRIC = "greedy held-out accuracy, mean of the last three evaluations"
FIRST_EPOCH = 23  # generation batches before any prompt comes back (1 500 prompts, 64 per batch, whole batches)


def mde80() -> float:
    return minimal_detectable_effect(SECOND_STUDY_PAIRED_SD, len(SEEDS))


def arm_settings(label: str, quick: bool) -> RLSettings:
    num_generations, most, _ = ARMS[label]
    settings = RLSettings.study(16 if quick else BUDGET)
    if quick:  # two generation batches of a small pool
        settings = replace(settings, train_prompts=64, eval_prompts=48, train_eval_prompts=24)
    return replace(settings, num_generations=num_generations, max_generations=most)


def study_run(label: str, seed: int, quick: bool, run_cache: Path, train: bool = True) -> dict:
    """One run, stored (or read back) under its settings and seed; single-threaded, for a process pool."""
    import torch

    torch.set_num_threads(1)
    warm, settings = WarmStartSettings(), arm_settings(label, quick)
    options = dict(ARMS[label][2])
    allocator = options.pop("budget_allocator")
    key = {"warm_start": asdict(warm), "rl": asdict(settings), "arm": ARMS[label][2], "seed": seed}
    name = f"rounds-study-{label}-{seed}"
    if not train:
        stored = stored_run(run_cache, name, key)
        if stored is None:
            raise NotStored(f"{label} seed {seed}")
        return stored

    def train_it() -> dict:
        result = run_rl(warm_start(warm), allocator, seed, settings, Path("study_runs") / label, show_progress=False,
                        label=label, **options)
        return {k: v for k, v in result.items() if k != "histograms"}

    return cached_run(run_cache, name, key, train_it)[0]


def job_order(seeds) -> list[tuple[str, int]]:
    """The primary comparison and the room gate over all seeds first, then every other arm seed by seed."""
    first = [(label, seed) for seed in seeds for label in (BASELINE, PRIMARY, ROOM)]
    return first + [(label, seed) for seed in seeds for label in ARMS if label not in (BASELINE, PRIMARY, ROOM)]


# ------------------------------------------------------------------------------------------------------ the figures


metric = study_metric


def per_seed_mechanism(run: dict, skip: int) -> dict:
    """One run's mechanism figures over its batches after the first `skip`."""
    trained = np.array([value for value in run["trained_rollouts"][skip:]], dtype=float) if any(
        value is not None for value in run["trained_rollouts"]) else None
    rows = float(np.mean(trained)) if trained is not None else float(run["rollouts_per_step"] * 8)
    generated = mean_after(run, "generated_rollouts", skip)
    return {"gradient_rollouts": mean_after(run, "effective_ratio", skip) * rows,
            "coverage": mean_after(run, "prompts_with_gradient", skip),
            "top_prompt_loss_share": mean_after(run, "top_prompt_loss_share", skip),
            "generated_per_trained": (generated if np.isfinite(generated) else rows) / rows,
            "rounds": mean_after(run, "rounds", skip) if any(r is not None for r in run["rounds"]) else 1.0,
            "seconds": run["seconds"]}


def extrapolated(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear between the points (sorted by x), and along the end segments beyond them."""
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    if x <= xs[0] or x >= xs[-1]:
        i = 0 if x <= xs[0] else len(xs) - 2
        if xs[i + 1] == xs[i]:  # two doses alike: no slope to follow
            return float(ys[i : i + 2].mean())
        return float(ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i]))
    return float(np.interp(x, xs, ys))


def dose_response(runs: dict, seeds: list[int], skip: int, resamples: int = 2000) -> dict:
    """For every n = 8 arm: its measured gain over uniform-n8 beside the gain uniform's dose-response predicts from its
    rollouts with a gradient, and from its coverage; the differences with paired-bootstrap intervals over seeds."""
    have = [s for s in seeds if all((label, s) in runs for label in DOSES)]
    if len(have) < 2:
        return {}
    gains = {label: np.array([metric(runs[label, s]) - metric(runs[BASELINE, s]) for s in have]) for label in ARMS
             if all((label, s) in runs for s in have)}
    mechanism = {label: {s: per_seed_mechanism(runs[label, s], skip) for s in have} for label in gains}
    rng = np.random.default_rng(0)
    draws = [np.arange(len(have))] + [rng.integers(0, len(have), len(have)) for _ in range(resamples)]
    result, misses = {}, {}
    for predictor in ("gradient_rollouts", "coverage"):
        rows = {}
        for label in (label for label in EQUAL_COST if label in gains):
            departures = []
            for rows_drawn in draws:
                picked = [have[i] for i in rows_drawn]
                xs = np.array([np.mean([mechanism[d][s][predictor] for s in picked]) for d in DOSES])
                ys = np.array([gains[d][rows_drawn].mean() for d in DOSES])
                x = np.mean([mechanism[label][s][predictor] for s in picked])
                departures.append((gains[label][rows_drawn].mean(), extrapolated(x, xs, ys)))
            measured, predicted = departures[0]
            misses[predictor, label] = np.array([m - p for m, p in departures])
            rows[label] = {"measured": measured, "predicted": predicted, "difference": measured - predicted,
                           "ci95": np.quantile(misses[predictor, label][1:], [0.025, 0.975]).tolist()}
        result[predictor] = {"arms": rows,
                             "mean_squared_difference": float(np.mean([row["difference"] ** 2
                                                                       for row in rows.values()]))}
    better = min(result, key=lambda name: result[name]["mean_squared_difference"])
    result["predicts_better"] = better
    result["prediction_error"] = prediction_error(misses)
    return result


def prediction_error(misses: dict) -> dict:
    """How far each predictor misses, over the n = 8 arms with and without CoBA-RL (whose concentrated loss neither
    predictor sees): the root mean squared miss with its 95% bootstrap interval, the arms missed by more than 0.8
    point, and the share of bootstrap draws in which coverage misses less than rollouts with a gradient."""
    result = {}
    labels = sorted({label for _, label in misses})
    for name, arms in (("all_arms", labels), ("without_coba", [label for label in labels if label != "coba"])):
        rms = {predictor: np.sqrt(np.mean([misses[predictor, label] ** 2 for label in arms], axis=0))
               for predictor in ("gradient_rollouts", "coverage")}
        result[name] = {
            **{predictor: {"rms_miss": float(values[0]), "ci95": np.quantile(values[1:], [0.025, 0.975]).tolist(),
                           "arms_missed_by_over_0_8_point": int(sum(abs(misses[predictor, label][0]) > 0.008
                                                                    for label in arms))}
               for predictor, values in rms.items()},
            "coverage_misses_less_share": float(np.mean(rms["coverage"][1:] < rms["gradient_rollouts"][1:]))}
    return result


def summarize(runs: dict, seeds: list[int], skip: int) -> dict:
    arms = {}
    for label in ARMS:
        have = [s for s in seeds if (label, s) in runs]
        if not have:
            continue
        values = [metric(runs[label, s]) for s in have]
        figures = [per_seed_mechanism(runs[label, s], skip) for s in have]
        row = {"seeds": len(have), "metric_mean": float(np.mean(values)),
               "metric_sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
               **{name: float(np.mean([f[name] for f in figures])) for name in figures[0]}}
        if label != BASELINE:
            paired = [s for s in have if (BASELINE, s) in runs]
            row["vs_uniform_n8"] = paired_comparison([metric(runs[label, s]) - metric(runs[BASELINE, s])
                                                      for s in paired], len(seeds))
        arms[label] = row
    complete = [label for label in SECONDARY if arms.get(label, {}).get("vs_uniform_n8", {}).get("complete")]
    family = corrected_family({label: arms[label]["vs_uniform_n8"] for label in complete})
    for label, test in family.items():
        arms[label]["vs_uniform_n8"]["holm"] = test
    primary = arms.get(PRIMARY, {}).get("vs_uniform_n8", {})
    gate = arms.get(ROOM, {}).get("vs_uniform_n8", {})
    return {
        "primary": {"comparison": f"{PRIMARY} - {BASELINE}", "metric": METRIC,
                    **{k: primary.get(k) for k in ("diff", "ci95", "p", "seeds", "complete")},
                    "significant": primary.get("p") is not None and primary["p"] <= 0.05,
                    "mde80": mde80(), "mde80_observed": minimal_detectable_effect(primary["paired_sd"], len(seeds))
                    if "paired_sd" in primary else None,
                    "room_gate": {"comparison": f"{ROOM} - {BASELINE}", "diff": gate.get("diff"),
                                  "ci95": gate.get("ci95"), "required": ROOM_GATE,
                                  "passes": gate.get("diff") is not None and gate["diff"] >= ROOM_GATE
                                  and gate["ci95"][0] > 0}},
        "holm_family": sorted(family),
        "secondaries_incomplete": [label for label in SECONDARY if label not in complete],
        "arms": arms,
        "dose_response": dose_response(runs, seeds, skip),
        "mean_curves": {label: {"generated": [p.get("generated", p["rollouts"]) for p in runs[label, have[0]]["curve"]],
                                "accuracy": np.mean([[p["accuracy"] for p in runs[label, s]["curve"]] for s in have],
                                                    axis=0).tolist()}
                        for label in ARMS if (have := [s for s in seeds if (label, s) in runs])},
    }


def answer_sentence(summary: dict) -> str:
    primary, gate = summary["primary"], summary["primary"]["room_gate"]
    if primary.get("diff") is None:
        return "The third study has not finished its primary comparison yet."
    low, high = primary["ci95"]
    verdict = ("Rounds until mixed beat uniform GRPO" if low > 0 else "Rounds until mixed lose to uniform GRPO"
               if high < 0 else "Rounds until mixed and uniform GRPO cannot be told apart")
    return (f"{verdict} at 512 rollouts generated per batch: {primary['diff'] * 100:+.2f} points of greedy held-out "
            f"accuracy (95% interval [{low * 100:+.2f}, {high * 100:+.2f}], exact p = {primary['p']:.3f}, "
            f"{primary['seeds']} paired seeds; sized for {primary['mde80'] * 100:.2f} points at 80% power). Room: "
            f"uniform with twice the rollouts per batch at the same updates gains "
            f"{gate['diff'] * 100:+.2f} points ({'passed' if gate['passes'] else 'not passed'}).")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, bars, dose) = plt.subplots(1, 3, figsize=(19, 5.5))
    for label, curve in summary["mean_curves"].items():
        curves.plot(np.array(curve["generated"]) / 1000, curve["accuracy"], label=label, marker=".",
                    linestyle="--" if label in DOSES else "-")
    curves.set(xlabel="rollouts generated (thousands)", ylabel="greedy held-out accuracy (mean over seeds)",
               title="Held-out accuracy against rollouts generated")
    curves.legend(fontsize=7)
    rows = [(label, row["vs_uniform_n8"]) for label, row in summary["arms"].items()
            if row.get("vs_uniform_n8", {}).get("diff") is not None]
    for y, (label, comparison) in enumerate(rows):
        low, high = comparison.get("holm", {}).get("ci_bonferroni") or comparison["ci95"]
        bars.errorbar(comparison["diff"] * 100, y, xerr=[[(comparison["diff"] - low) * 100],
                                                         [(high - comparison["diff"]) * 100]], fmt="o", capsize=4)
    bars.axvline(0, color="grey", linewidth=1)
    bars.set_yticks(range(len(rows)), [label for label, _ in rows])
    bars.set(xlabel="metric minus uniform-n8's, points (95%; Bonferroni for secondaries)",
             title="Paired differences to uniform, 8 rollouts per prompt")
    arms = summary["arms"]
    gain = {label: 0.0 if label == BASELINE else arms[label]["vs_uniform_n8"].get("diff") for label in arms}
    doses = [label for label in DOSES if label in arms and gain[label] is not None]
    dose.plot([arms[d]["gradient_rollouts"] for d in doses], [gain[d] * 100 for d in doses], "k--o",
              label="uniform, n = 4, 8, 12, 16")
    for label in EQUAL_COST:
        if label in arms and gain[label] is not None:
            dose.plot(arms[label]["gradient_rollouts"], gain[label] * 100, "o", label=label)
    dose.set(xlabel="trained rollouts with a gradient per batch", ylabel="gain over uniform-n8, points",
             title="What a batch's rollouts buy")
    dose.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def markdown_table(summary: dict) -> str:
    lines = ["| arm | seeds | metric | minus uniform-n8 (95% CI) | exact p | Bonferroni CI | Holm step's CI, Holm p | "
             "rollouts with a gradient per batch | coverage | largest prompt's loss share | generated per trained | "
             "rounds per batch | seconds per run |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, row in summary["arms"].items():
        cells = comparison_cells(row.get("vs_uniform_n8", {}))
        lines.append(f"| {label} | {row['seeds']} | {row['metric_mean']:.4f} | {cells['diff']} | {cells['p']} | "
                     f"{cells['bonferroni']} | {cells['holm']} | "
                     f"{row['gradient_rollouts']:.0f} | {row['coverage']:.3f} | {row['top_prompt_loss_share']:.3f} | "
                     f"{row['generated_per_trained']:.2f} | {row['rounds']:.1f} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = study_arguments(__doc__, RESULTS, argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    seeds = list(SEEDS)[:2] if args.quick else list(SEEDS)
    runs = {job: stored["result"] for job, stored in study_runs(job_order(seeds), study_run, args).items()}
    summary = summarize(runs, seeds, 1 if args.quick else FIRST_EPOCH)
    summary["preregistered"] = {"seeds": [seeds[0], seeds[-1]], "budget_updates": BUDGET, "arms": ARMS,
                                "primary": f"{PRIMARY} - {BASELINE}", "secondary": SECONDARY,
                                "second_study_paired_sd": SECOND_STUDY_PAIRED_SD, "mde80": mde80(),
                                "room_gate": {"comparison": f"{ROOM} - {BASELINE}", "at_least": ROOM_GATE,
                                              "interval_above_zero": True}}
    summary["answer"] = answer_sentence(summary)
    summary["command"] = ("OMP_NUM_THREADS=1 python benchmarks/third_study/rounds_study.py"
                          + (" --quick" if args.quick else ""))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "rounds_study.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(summary, args.output_dir / "rounds_study.png")
    print(markdown_table(summary))
    print(summary["answer"])
    return summary


if __name__ == "__main__":
    main()
