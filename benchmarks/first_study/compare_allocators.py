"""Allocators against uniform GRPO at equal rollout budgets on the built-in arithmetic task: the allocation study.

Every variant starts from the same warm-started model and trains with the same seeds (paired); the runs are side by
side in one invocation. Two regimes, fixed here before any run (pre-registered):

- `pool` (the study's regime, the default): the releases' batch shape — 64 prompts x 8 rollouts on average per
  generation batch, 8 optimizer updates per batch, each prompt between 2 and 128 rollouts — on a pool of 1 500
  problems from three levels of middling difficulty (2+1 digits, 2+2, 2x1), so that each prompt comes back only two or
  three times (thin history, as with a large RLVR dataset) and training-set and held-out accuracy measure the same
  skill. 480 updates = 30 720 rollouts per run; 5 seeds; held-out accuracy on 480 problems of the same levels.
- `small` (docs/benchmarks.md's earlier table): 240 prompts of all six levels, 8 prompts x 8 per batch, one update per
  batch, N up to 32, 3 seeds.

The metric: final held-out accuracy (exact match, mean of 4 samples at temperature 1); per variant the paired
difference to uniform with its 95% confidence interval, the effective gradient ratio, and the rollouts uniform needs
to reach the variant's final accuracy over the variant's own. Writes `compare_allocators[-small].json` (summary and
mean curves), a PNG, and every run's curves under `runs/` (not kept in git). The second allocation study, which
supersedes these regimes, is benchmarks/second_study/allocation_study.py.

    python benchmarks/first_study/compare_allocators.py                  # the study: 6 variants x 5 seeds
    python benchmarks/first_study/compare_allocators.py --regime small   # the earlier table: 4 variants x 3 seeds
    python benchmarks/first_study/compare_allocators.py --quick          # a smoke run of a few minutes or less
Until the move to benchmarks/first_study/ this script was benchmarks/compare_allocators.py (the path the commands stored
with its results name).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from trl_budget.demo.report import format_table, mean_curve, plot_report, summarize
from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.run_cache import cached_run
from trl_budget.demo.settings import RLSettings, WarmStartSettings

# Label -> BudgetGRPOConfig settings. "knapsack-no-fallback" is an ablation of the published fallback; "-probe2"
# variants spend 2 rollouts of every prompt on a probe stage, then allocate the rest from fresh pass rates.
VARIANTS = {
    "uniform": {"budget_allocator": "uniform"},
    "knapsack": {"budget_allocator": "knapsack"},
    "coba": {"budget_allocator": "coba"},
    "knapsack-no-fallback": {"budget_allocator": "knapsack", "knapsack_fallback": False},
    "knapsack-probe2": {"budget_allocator": "knapsack", "budget_probe_generations": 2},
    "coba-probe2": {"budget_allocator": "coba", "budget_probe_generations": 2},
    # Added after the first five variants' results (exploratory, not pre-registered): the 2-rollout probe labelled many
    # prompts 0/2 or 2/2, i.e. never or always solved; two pseudo-rollouts at the batch's probe pass rate prevent that.
    "knapsack-probe2-shrunk": {"budget_allocator": "knapsack", "budget_probe_generations": 2,
                               "budget_probe_prior_strength": 2.0},
}

REGIMES = {
    "pool": {
        "warm_start": WarmStartSettings(),
        "rl": RLSettings.pool(480),
        "variants": list(VARIANTS),  # the first six pre-registered, the last exploratory
        "seeds": 5,
    },
    # Secondary regime, fixed after the pool study's results: the same pool with the 3+3 level added, which the warm
    # start almost never solves, for a wider difficulty spread (more groups without a gradient under uniform).
    "spread": {
        "warm_start": WarmStartSettings(),
        "rl": replace(RLSettings.pool(480), levels=(1, 3, 4, 5)),
        "variants": ["uniform", "knapsack", "knapsack-no-fallback", "coba"],
        "seeds": 5,
    },
    "small": {
        "warm_start": WarmStartSettings(),
        "rl": RLSettings.for_steps(480, evaluations=8),
        "variants": ["uniform", "knapsack", "coba", "knapsack-no-fallback"],
        "seeds": 3,
    },
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime", choices=list(REGIMES), default="pool", help="which study (default: pool)")
    parser.add_argument("--quick", action="store_true", help="few steps, one seed, small warm start")
    parser.add_argument("--seeds", type=int, default=None, help="number of paired training seeds")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run are first-seed, first-seed + 1, ...")
    parser.add_argument("--from-runs", type=Path, nargs="+", default=None,
                        help="summarise the runs saved by earlier invocations (runs/*_runs.json) instead of training")
    parser.add_argument("--name", default=None, help="output file name (default: compare_allocators-REGIME)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer updates per run")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=None, help="a subset of variants")
    parser.add_argument("--output-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where results go (default: benchmarks/first_study/results)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="warm-start cache (default: the demo's)")
    parser.add_argument("--run-cache", type=Path, default=Path(__file__).resolve().parent / "results" / "run_cache",
                        help="finished runs, keyed by their settings, seed and code: a stopped study resumes from "
                        "them (default: benchmarks/first_study/results/run_cache)")
    args = parser.parse_args(argv)

    regime = REGIMES[args.regime]
    seeds = args.seeds or (1 if args.quick else regime["seeds"])
    variants = args.variants or regime["variants"]
    warm, settings = regime["warm_start"], replace(regime["rl"])
    if args.quick:
        warm = replace(warm, steps=100)
        settings = RLSettings.for_steps(args.steps or 12, evaluations=2)
        settings.train_prompts, settings.eval_prompts = 48, 48
    elif args.steps:
        settings = replace(settings, steps=args.steps, eval_every=max(1, args.steps // 8),
                           histogram_steps=(1, args.steps))

    args.output_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs = []
    if args.from_runs:
        for path in args.from_runs:
            runs += json.loads(path.read_text())
        runs.sort(key=lambda run: (run["seed"], variants.index(run["allocator"])))
        seeds = len({run["seed"] for run in runs})
    model_path = None if args.from_runs else warm_start(warm, args.cache_dir)
    for seed in [] if args.from_runs else range(args.first_seed, args.first_seed + seeds):
        for label in variants:
            overrides = dict(VARIANTS[label])
            allocator = overrides.pop("budget_allocator")
            key = {"warm_start": asdict(warm), "rl": asdict(settings), "variant": VARIANTS[label], "seed": seed}
            stored, reused = cached_run(
                args.run_cache, f"{label}-{seed}", key,
                lambda: run_rl(model_path, allocator, seed, settings, args.output_dir / "runs" / f"{label}-{seed}",
                               show_progress=False, label=label, **overrides))
            run = stored["result"]
            runs.append(run)
            print(f"{label:<22} seed {seed}: final held-out accuracy {run['curve'][-1]['accuracy']:.3f}, "
                  f"effective ratio {np.mean(run['effective_ratio']):.3f}" + (" (stored run)" if reused else ""),
                  flush=True)
    summary = summarize(runs)
    name = args.name or f"compare_allocators-{args.regime}"  # compare_allocators.json is the second study's
    command = ("python benchmarks/first_study/compare_allocators.py"
               + (f" --regime {args.regime}" if args.regime != "pool" else ""))
    result = {
        "command": command + (" --quick" if args.quick else ""),
        "seconds": sum(run["seconds"] for run in runs) if args.from_runs else time.perf_counter() - start,
        "regime": args.regime,
        "seeds": seeds,
        "warm_start": asdict(warm),
        "rl": asdict(settings),
        "summary": summary,
        "mean_curves": mean_curves(runs),
    }
    (args.output_dir / f"{name}.json").write_text(json.dumps(result, indent=2))
    # Every run's curves and histograms, for whoever wants them; too large to keep in git (runs/ is ignored).
    (args.output_dir / "runs").mkdir(parents=True, exist_ok=True)
    (args.output_dir / "runs" / f"{name}_runs.json").write_text(json.dumps(runs))
    plot_report(runs, args.output_dir / f"{name}.png",
                title=f"Allocators at equal rollout budget, built-in arithmetic, {args.regime} regime ({seeds} seeds)",
                eval_samples=settings.eval_samples, temperature=settings.temperature)
    print(format_table(summary))
    print(markdown_table(summary))
    print(f"wrote {args.output_dir / f'{name}.json'} and {args.output_dir / f'{name}.png'}")
    return result


def markdown_table(summary: dict[str, dict]) -> str:
    """The table docs/benchmarks.md cites: final accuracies, paired differences to uniform (95% intervals), ratios."""
    lines = ["| variant | held-out accuracy | vs uniform (95% CI) | training-set accuracy | effective ratio | "
             "uniform's rollouts to match |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, row in summary.items():
        ci = row.get("final_accuracy_ci95")
        difference = "—" if label == "uniform" else (
            f"{row['final_accuracy_diff']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""))
        ratio = row.get("uniform_rollouts_ratio")
        match = "—" if label == "uniform" else (f"{ratio:.2f}×" if ratio is not None else "not reached (> 1×)")
        lines.append(f"| {label} | {row['final_accuracy_mean']:.3f} ± {row['final_accuracy_std']:.3f} | {difference} | "
                     f"{row['final_train_accuracy_mean']:.3f} | {row['effective_ratio_mean']:.3f} "
                     f"({row.get('effective_ratio_vs_uniform', 1.0):.2f}×) | {match} |")
    return "\n".join(lines)


def mean_curves(runs: list[dict]) -> dict[str, dict[str, list[float]]]:
    """Per variant, held-out and training-set accuracy against rollouts spent, averaged over seeds."""
    curves = {}
    for label in dict.fromkeys(run["allocator"] for run in runs):
        group = [run for run in runs if run["allocator"] == label]
        curves[label] = {"rollouts": [point["rollouts"] for point in group[0]["curve"]],
                         **{metric: mean_curve(group, metric).tolist() for metric in ("accuracy", "train_accuracy")}}
    return curves


if __name__ == "__main__":
    main()
