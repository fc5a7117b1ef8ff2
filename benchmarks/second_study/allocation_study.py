"""The second allocation study: does Knapsack RL buy held-out accuracy over uniform GRPO at the same rollout budget?

    OMP_NUM_THREADS=1 python benchmarks/second_study/allocation_study.py     # train every run not yet stored, summarise
    python benchmarks/second_study/allocation_study.py --stored-only         # summarise the stored runs, train nothing
    python benchmarks/second_study/allocation_study.py --quick --output-dir /tmp/s   # a smoke run of a minute

Pre-registered here, before any allocator run of this study (the regime was chosen on uniform alone by
study_pilot.py beside this script, whose results are in results/study_pilot.json):

- Regime: `RLSettings.study()` from the shipped warm start (the same on every machine): the pool of 1 500 problems of
  levels 2+1, 2+2 and 2x1; 64 prompts x 8 rollouts on average per generation batch, 8 updates per batch, each prompt
  between 2 and 128 rollouts; float32; a constant learning rate of 1e-4 after 16 warm-up steps; 960 updates
  (61 440 rollouts), so 97 of 120 generation batches (81%) are allocated from history (the first epoch is 23 full
  batches: TRL's sampler drops the 28 prompts that do not fill a 24th; registered as "96 of 120 (80%)").
- Metric: greedy exact-match accuracy on 1 000 held-out problems of the same levels, the mean of the last three
  evaluations (updates 840, 900 and 960).
- Seeds: 0-19, paired: every variant trains with the same seeds, so data order and sampling start alike. Seeds 0-3 were
  also the pilot's (study_pilot.py, uniform alone); the summary also reports the primary on seeds 4-19.
- Primary comparison: `knapsack` (the release's rule, with its fallback) minus `uniform`: the mean paired difference
  and its 95% t interval; a two-sided sign-flip test at 0.05.
- Minimal detectable effect at 80% power: from the pilot's paired SD of uniform's own 2x-minus-1x difference at this
  budget (the only paired SD measured before any allocator ran), 0.65 point over 4 seeds; with 20 seeds that is
  (t(0.975, 19) + t(0.8, 19)) x 0.65 / sqrt(20) = 0.43 point. That SD may understate the allocators' (a 2x run
  repeats its 1x run exactly for the first half), so the observed paired SD and its MDE are reported beside it.
- Room gate: `uniform-2x` (uniform with twice the updates, hence twice the rollouts) minus `uniform` must be at least
  3 points; printed beside the answer whichever way it goes. It doubles the *updates* (its first half is uniform's run
  exactly), so it measures training longer, not room for spending a batch's rollouts differently; the third study
  (benchmarks/third_study/rounds_study.py) gates on uniform with twice the rollouts per batch at the same updates
  instead.
- Secondary comparisons, each minus uniform, Holm-corrected as one family (sign-flip p-values, intervals at the
  level of each one's Holm step, and at the Bonferroni level, which are simultaneous): knapsack-no-fallback, coba,
  coba-prompt-weighted, knapsack-column-prior,
  knapsack-group-prior, knapsack-prompt-weighted, knapsack-token-cap.
- Also reported, not tested: rollouts uniform needs to reach each variant's metric, over the variant's (paired
  bootstrap over seeds, from uniform-2x's curves); per variant over the allocated batches only (after the first 24):
  the share of rollouts with a gradient, of prompts with a gradient, the largest prompt's share of the loss, and
  completion tokens against uniform's.

Added after the primary results, exploratory and untested: each variant's paired difference per level
(`per_level_vs_uniform`; levels 1, 3, 4 are 2+1, 2+2, 2x1). Added after an independent audit: the sign-flip p-value
enumerates all 2^20 sign patterns (it was estimated from 20 000 random ones), Bonferroni intervals beside the Holm
ones, the first epoch counted as 23 batches, and the primary on seeds 4-19 alone.

Runs are trained in that order, primary first (uniform, knapsack, uniform-2x over all seeds), then the secondaries
seed by seed; each finished run is stored under its settings, seed and the package's code
(results/run_cache), so a stopped study resumes, and `--stored-only` summarises what is there, whatever
code trained it (a secondary with fewer seeds is marked incomplete). Writes results/compare_allocators.json (`primary`,
`room_gate`, `variants`, mean curves), compare_allocators.png, and the answer the demo prints
(trl_budget/demo/study_answer.json).
Until the move to benchmarks/second_study/ this script was benchmarks/allocation_study.py (the path the commands stored
with its results name).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from trl_budget.demo.report import comparison_cells
from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.run_cache import NotStored, cached_run, stored_run, study_arguments, study_runs
from trl_budget.demo.settings import RLSettings, WarmStartSettings
from trl_budget.demo.study_stats import (
    corrected_family,
    mean_after,
    minimal_detectable_effect,
    paired_comparison,
    rollouts_to_match,
    study_metric,
)

RESULTS = Path(__file__).resolve().parent / "results"
ANSWER = Path(__file__).resolve().parents[2] / "trl_budget" / "demo" / "study_answer.json"

SEEDS = 20
BUDGET = 960  # updates
PILOT_CANDIDATE = "pool-constant-0.0001-960"  # its row of study_pilot.json holds the paired SD below
PILOT_PAIRED_SD = 0.0065  # 0.65 point: SD over seeds 0-3 of uniform's 1 920-minus-960-update metric
PILOT_SEEDS = range(4)  # the pilot's seeds, also the study's first four
ROOM_GATE = 0.03

VARIANTS = {  # label -> BudgetGRPOConfig settings
    "uniform": {"budget_allocator": "uniform"},
    "knapsack": {"budget_allocator": "knapsack"},
    "uniform-2x": {"budget_allocator": "uniform"},
    "knapsack-no-fallback": {"budget_allocator": "knapsack", "knapsack_fallback": False},
    "coba": {"budget_allocator": "coba"},
    "coba-prompt-weighted": {"budget_allocator": "coba", "budget_loss_weighting": "prompt"},
    "knapsack-column-prior": {"budget_allocator": "knapsack", "pass_rate_prior_column": "prior"},
    "knapsack-group-prior": {"budget_allocator": "knapsack", "prompt_group_column": "level"},
    "knapsack-prompt-weighted": {"budget_allocator": "knapsack", "budget_loss_weighting": "prompt"},
    "knapsack-token-cap": {"budget_allocator": "knapsack", "budget_token_cap": 1.0},
}
PRIMARY, BASELINE, DOUBLED = "knapsack", "uniform", "uniform-2x"
SECONDARY = [label for label in VARIANTS if label not in (PRIMARY, BASELINE, DOUBLED)]
# The column prior: each training prompt's solve rate by the warm start, 8 answers at temperature 1 (what a public
# dataset's "reference model pass rate" column holds).
PRIOR = {"source": "warm start", "samples": 8, "temperature": 1.0, "seed": 12345}


def mde80() -> float:
    return minimal_detectable_effect(PILOT_PAIRED_SD, SEEDS)


def study_settings(label: str, quick: bool) -> tuple[WarmStartSettings, RLSettings]:
    steps = BUDGET * (2 if label == DOUBLED else 1)
    if quick:  # two generation batches of a small pool, on the shipped warm start
        steps = 16 * (2 if label == DOUBLED else 1)
        return WarmStartSettings(), replace(RLSettings.study(steps), train_prompts=64, eval_prompts=48,
                                            train_eval_prompts=24)
    return WarmStartSettings(), RLSettings.study(steps)


@lru_cache(maxsize=2)
def column_prior(quick: bool) -> dict[str, float]:
    """Each training prompt's solve rate by the warm start (`PRIOR`), for the column-prior variant."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from trl_budget.demo.run import solve_rates
    from trl_budget.demo.task import split_problems

    warm, settings = study_settings(BASELINE, quick)
    train, _ = split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed, settings.levels)
    path = warm_start(warm)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), PreTrainedTokenizerFast.from_pretrained(path)
    rates = solve_rates(model, tokenizer, train, samples=PRIOR["samples"], temperature=PRIOR["temperature"],
                        seed=PRIOR["seed"])
    return {problem["prompt"]: float(rate) for problem, rate in zip(train, rates)}


def study_run(label: str, seed: int, quick: bool, run_cache: Path, train: bool = True) -> dict:
    """One run of the study, stored (or read back) under its settings and seed; single-threaded, for a process pool.

    With `train` off, a run that is not stored raises `NotStored` instead of training.
    """
    import torch

    torch.set_num_threads(1)
    warm, settings = study_settings(label, quick)
    options = dict(VARIANTS[label])
    allocator = options.pop("budget_allocator")
    uses_prior = "pass_rate_prior_column" in options
    key = {"warm_start": asdict(warm), "rl": asdict(settings), "variant": VARIANTS[label], "seed": seed,
           **({"prior": PRIOR} if uses_prior else {})}

    def train_it() -> dict:
        priors = column_prior(quick) if uses_prior else None
        result = run_rl(warm_start(warm), allocator, seed, settings, Path("study_runs") / label, show_progress=False,
                        label=label, prompt_priors=priors, **options)
        return {k: v for k, v in result.items() if k != "histograms"}  # per-batch figures kept; the lists are large

    if not train:
        stored = stored_run(run_cache, f"study-{label}-{seed}", key)
        if stored is None:
            raise NotStored(f"{label} seed {seed}")
        return stored
    return cached_run(run_cache, f"study-{label}-{seed}", key, train_it)[0]


METRIC = "greedy held-out accuracy, mean of the last three evaluations"


def metric(run: dict, name: str = "accuracy") -> float:
    """The study's metric (`METRIC`); with `name` a level's (`level_3`), on the same three evaluations."""
    return study_metric(run, name)


def paired_seeds(runs: dict, label: str, seeds: list[int]) -> list[int]:
    """The seeds with both a `label` run and a uniform run."""
    return [seed for seed in seeds if (label, seed) in runs and (BASELINE, seed) in runs]


def first_epoch_batches(settings: RLSettings) -> int:
    """Generation batches before any prompt comes back: TRL's sampler fills whole batches only and drops the rest of
    an epoch (23 in the study: 1 500 prompts, 64 per batch, the last 28 dropped)."""
    return settings.train_prompts // settings.prompts_per_step


def job_order(seeds: range) -> list[tuple[str, int]]:
    """The primary comparison and the room gate over all seeds first, then the secondaries seed by seed."""
    first = [(label, seed) for seed in seeds for label in (DOUBLED, BASELINE, PRIMARY)]
    return first + [(label, seed) for seed in seeds for label in SECONDARY]


def per_level(runs: dict, label: str, seeds: list[int]) -> dict[str, float]:
    """Exploratory (added after the primary results): `label` minus uniform per level, mean over paired seeds."""
    paired = paired_seeds(runs, label, seeds)
    levels = [name for name in runs[BASELINE, paired[0]]["curve"][-1] if name.startswith("level_")] if paired else []
    return {level: float(np.mean([metric(runs[label, s], level) - metric(runs[BASELINE, s], level) for s in paired]))
            for level in levels}


def compare(runs: dict, label: str, seeds: list[int]) -> dict:
    """`label` minus uniform on the seeds both have: paired mean, 95% interval, sign-flip p-value."""
    differences = [metric(runs[label, s]) - metric(runs[BASELINE, s]) for s in paired_seeds(runs, label, seeds)]
    return paired_comparison(differences, len(seeds))


def mechanism(runs: dict, label: str, seeds: list[int], skip: int) -> dict:
    """What the variant did with its rollouts over the allocated batches (after the first `skip`), mean over seeds."""
    group = [runs[label, s] for s in seeds if (label, s) in runs]
    uniform = [runs[BASELINE, s] for s in paired_seeds(runs, label, seeds)]
    figure = lambda name, runs_: float(np.mean([mean_after(run, name, skip) for run in runs_]))  # noqa: E731
    row = {name: figure(name, group) for name in ("effective_ratio", "prompts_with_gradient", "top_prompt_loss_share")}
    if uniform and label != DOUBLED:
        row["effective_ratio_vs_uniform"] = row["effective_ratio"] / figure("effective_ratio", uniform)
        row["completion_tokens_vs_uniform"] = figure("completion_tokens", group) / figure("completion_tokens", uniform)
    return row


def summarize(runs: dict, seeds: list[int], skip: int) -> dict:
    """The study's figures from the runs stored so far; mechanism figures over batches after the first `skip`."""
    budget_rollouts = runs[BASELINE, seeds[0]]["curve"][-1]["rollouts"]
    doubled = [s for s in seeds if (DOUBLED, s) in runs]
    variants = {}
    for label in VARIANTS:
        have = [s for s in seeds if (label, s) in runs]
        if not have:
            continue
        values = [metric(runs[label, s]) for s in have]
        row = {"seeds": len(have), "metric_mean": float(np.mean(values)), "metric_sd": float(np.std(values, ddof=1))
               if len(values) > 1 else None, **mechanism(runs, label, have, skip)}
        if label != BASELINE:
            row["vs_uniform"] = compare(runs, label, seeds)
            row["per_level_vs_uniform"] = per_level(runs, label, seeds)
        both = [s for s in have if s in doubled]
        if label not in (BASELINE, DOUBLED) and len(both) >= 2:
            curves = [runs[DOUBLED, s]["curve"] for s in both]
            row["uniform_rollouts_to_match"] = rollouts_to_match(
                [point["rollouts"] for point in curves[0]], [[point["accuracy"] for point in c] for c in curves],
                [metric(runs[label, s]) for s in both], budget_rollouts)
        variants[label] = row
    complete = [label for label in SECONDARY if variants.get(label, {}).get("vs_uniform", {}).get("complete")]
    family = corrected_family({label: variants[label]["vs_uniform"] for label in complete})
    for label, test in family.items():
        variants[label]["vs_uniform"]["holm"] = test
    primary = variants.get(PRIMARY, {}).get("vs_uniform", {})
    gate = variants.get(DOUBLED, {}).get("vs_uniform", {})
    after_pilot = compare(runs, PRIMARY, [seed for seed in seeds if seed not in PILOT_SEEDS])
    return {
        "start_accuracy": runs[BASELINE, seeds[0]]["curve"][0]["accuracy"],
        "budget_rollouts": budget_rollouts,
        "primary": {"comparison": f"{PRIMARY} - {BASELINE}", "metric": METRIC,
                    **{k: primary.get(k) for k in ("diff", "ci95", "p", "seeds", "complete")},
                    "significant": primary.get("p") is not None and primary["p"] <= 0.05,
                    "mde80": mde80(), "mde80_observed": minimal_detectable_effect(primary["paired_sd"], SEEDS)
                    if "paired_sd" in primary else None,
                    "room_gate": {"uniform": variants.get(BASELINE, {}).get("metric_mean"),
                                  "uniform_2x": variants.get(DOUBLED, {}).get("metric_mean"),
                                  "diff": gate.get("diff"), "ci95": gate.get("ci95"), "required": ROOM_GATE,
                                  "passes": gate.get("diff") is not None and gate["diff"] >= ROOM_GATE,
                                  "what_it_doubles": "updates (its first half is uniform's run)"},
                    "without_pilot_seeds": {k: after_pilot.get(k) for k in ("diff", "ci95", "p", "seeds")}},
        "holm_family": sorted(family),
        "secondaries_incomplete": [label for label in SECONDARY if label not in complete],
        "variants": variants,
        "mean_curves": {label: {"rollouts": [p["rollouts"] for p in runs[label, have[0]]["curve"]],
                                "accuracy": np.mean([[p["accuracy"] for p in runs[label, s]["curve"]] for s in have],
                                                    axis=0).tolist()}
                        for label in VARIANTS if (have := [s for s in seeds if (label, s) in runs])},
    }


def answer_sentence(primary: dict) -> str:
    """The study's answer in one paragraph, as the README and the demo state it."""
    gate = primary["room_gate"]
    if primary.get("diff") is None:
        return "The allocation study has not finished its primary comparison yet."
    low, high = primary["ci95"]
    verdict = ("Knapsack RL beats uniform GRPO" if low > 0 else "Knapsack RL loses to uniform GRPO" if high < 0 else
               "Knapsack RL and uniform GRPO cannot be told apart")
    return (f"{verdict} at the same rollout budget: {primary['diff'] * 100:+.2f} points of greedy held-out accuracy "
            f"(95% interval [{low * 100:+.2f}, {high * 100:+.2f}], p = {primary['p']:.2f}, {primary['seeds']} paired "
            f"seeds; the study was sized to find {primary['mde80'] * 100:.2f} points 80% of the time, "
            f"{primary['mde80_observed'] * 100:.2f} with the spread it met). Room: uniform with twice the updates "
            f"(and so twice the rollouts) gains {gate['diff'] * 100:+.2f} points (the gate asks "
            f"{gate['required'] * 100:.0f}: {'passed' if gate['passes'] else 'not passed'}); it measures training "
            "longer, not room for spending a batch's rollouts differently.")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, bars) = plt.subplots(1, 2, figsize=(14, 5.5))
    for label, curve in summary["mean_curves"].items():
        curves.plot(np.array(curve["rollouts"]) / 1000, curve["accuracy"], label=label, marker=".",
                    linestyle="--" if label == DOUBLED else "-",  # its first half is uniform's run itself
                    linewidth=2.5 if label in (PRIMARY, BASELINE, DOUBLED) else 1)
    curves.set(xlabel="rollouts spent (thousands)", ylabel="greedy held-out accuracy (mean over seeds)",
               title="Held-out accuracy against rollouts spent")
    curves.legend(fontsize=8)
    rows = [(label, row["vs_uniform"]) for label, row in summary["variants"].items()
            if "vs_uniform" in row and row["vs_uniform"].get("diff") is not None]
    for y, (label, comparison) in enumerate(rows):
        low, high = comparison.get("holm", {}).get("ci_bonferroni") or comparison["ci95"]
        bars.errorbar(comparison["diff"] * 100, y, xerr=[[(comparison["diff"] - low) * 100],
                                                         [(high - comparison["diff"]) * 100]], fmt="o", capsize=4)
    bars.axvline(0, color="grey", linewidth=1)
    bars.set_yticks(range(len(rows)), [f"{label} ({c['seeds']} seeds)" for label, c in rows])
    bars.set(xlabel="metric minus uniform's, points (95% interval; Bonferroni-adjusted for secondaries)",
             title="Paired differences to uniform GRPO")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv=None) -> dict:
    args = study_arguments(__doc__, RESULTS, argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    seeds = range(2 if args.quick else SEEDS)
    runs = {job: stored["result"] for job, stored in study_runs(job_order(seeds), study_run, args).items()}
    summary = summarize(runs, list(seeds), first_epoch_batches(study_settings(BASELINE, args.quick)[1]))
    summary["preregistered"] = {"seeds": len(seeds), "budget_updates": BUDGET, "primary": f"{PRIMARY} - {BASELINE}",
                                "secondary": SECONDARY, "pilot_candidate": PILOT_CANDIDATE,
                                "pilot_paired_sd": PILOT_PAIRED_SD, "mde80": mde80(), "room_gate": ROOM_GATE}
    summary["answer"] = answer_sentence(summary["primary"])
    summary["command"] = ("OMP_NUM_THREADS=1 python benchmarks/second_study/allocation_study.py"
                          + (" --quick" if args.quick else ""))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "compare_allocators.json").write_text(json.dumps(summary, indent=2))
    plot(summary, args.output_dir / "compare_allocators.png")
    if not args.quick:
        ANSWER.write_text(json.dumps({"answer": summary["answer"], "primary": summary["primary"]}, indent=2) + "\n")
    print(markdown_table(summary))
    print(summary["answer"])
    return summary


def markdown_table(summary: dict) -> str:
    """The table docs/benchmarks.md cites."""
    lines = ["| variant | seeds | metric | minus uniform (95% CI) | exact p | Holm step's CI, Holm p | Bonferroni CI | "
             "rollouts with a gradient (vs uniform) | prompts with a gradient | largest prompt's loss share | tokens "
             "vs uniform | uniform's rollouts to match |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, row in summary["variants"].items():
        cells = comparison_cells(row.get("vs_uniform", {}))
        match = row.get("uniform_rollouts_to_match")
        match_text = "—" if match is None else (
            f"{match['ratio']:.2f}×" if match["ratio"] is not None else f"> {match['longest_ratio']:.0f}×") + (
            "" if match is None else " [" + ", ".join("—" if v is None else f"{v:.2f}" for v in match["ci95"]) + "]")
        lines.append(
            f"| {label} | {row['seeds']} | {row['metric_mean']:.4f} | {cells['diff']} | {cells['p']} | {cells['holm']} | "
            f"{cells['bonferroni']} | "
            f"{row['effective_ratio']:.3f} ({row.get('effective_ratio_vs_uniform', 1.0):.2f}×) | "
            f"{row['prompts_with_gradient']:.3f} | {row['top_prompt_loss_share']:.3f} | "
            f"{row.get('completion_tokens_vs_uniform', 1.0):.3f} | {match_text} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
