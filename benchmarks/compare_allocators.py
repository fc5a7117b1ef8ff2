"""Uniform GRPO, Knapsack RL and CoBA-RL at equal rollout budgets on the built-in arithmetic task.

Also runs Knapsack RL without its fallback, as an ablation.

Every allocator starts from the same warm-started model and trains with the same seeds; the runs are side by side in
one invocation. Writes a JSON of the figures and a PNG report.

    python benchmarks/compare_allocators.py                 # 3 seeds x 4 variants x 480 steps
    python benchmarks/compare_allocators.py --quick         # a smoke run of a few minutes or less
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from trl_budget.demo.report import format_table, plot_report, summarize
from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.settings import RLSettings, WarmStartSettings

# Label -> BudgetGRPOConfig settings. "knapsack-no-fallback" is an ablation: the published fallback sends the
# budget that mixed prompts do not need to never-solved prompts; without it, the optimisation spends it all.
VARIANTS = {
    "uniform": {"budget_allocator": "uniform"},
    "knapsack": {"budget_allocator": "knapsack"},
    "coba": {"budget_allocator": "coba"},
    "knapsack-no-fallback": {"budget_allocator": "knapsack", "knapsack_fallback": False},
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few steps, one seed, small warm start")
    parser.add_argument("--seeds", type=int, default=None, help="number of training seeds (default 3; quick: 1)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps per run (default 480; quick: 12)")
    parser.add_argument("--output-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where results go (default: benchmarks/results)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="warm-start cache (default: the demo's)")
    args = parser.parse_args(argv)

    seeds = args.seeds or (1 if args.quick else 3)
    steps = args.steps or (12 if args.quick else 480)
    warm = WarmStartSettings(steps=100) if args.quick else WarmStartSettings()
    settings = RLSettings.for_steps(steps, evaluations=8)
    if args.quick:
        settings.train_prompts, settings.eval_prompts = 48, 48

    args.output_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model_path = warm_start(warm, args.cache_dir)
    runs = []
    for seed in range(seeds):
        for label, config in VARIANTS.items():
            overrides = dict(config)
            allocator = overrides.pop("budget_allocator")
            run = run_rl(model_path, allocator, seed, settings, args.output_dir / "runs" / f"{label}-{seed}",
                         show_progress=False, label=label, **overrides)
            runs.append(run)
            print(f"{label:<20} seed {seed}: final held-out accuracy {run['curve'][-1]['accuracy']:.3f}, "
                  f"effective ratio {sum(run['effective_ratio']) / len(run['effective_ratio']):.3f}", flush=True)
    summary = summarize(runs)
    uniform = summary["uniform"]
    for row in summary.values():
        row["effective_ratio_vs_uniform"] = row["effective_ratio_mean"] / uniform["effective_ratio_mean"]
    result = {
        "command": "python benchmarks/compare_allocators.py" + (" --quick" if args.quick else ""),
        "seconds": time.perf_counter() - start,
        "warm_start": asdict(warm),
        "rl": asdict(settings),
        "summary": summary,
        "mean_curves": mean_curves(runs),
    }
    (args.output_dir / "compare_allocators.json").write_text(json.dumps(result, indent=2))
    # Every run's curves and histograms, for whoever wants them; too large to keep in git (runs/ is ignored).
    (args.output_dir / "runs").mkdir(parents=True, exist_ok=True)
    (args.output_dir / "runs" / "compare_allocators_runs.json").write_text(json.dumps(runs))
    plot_report(runs, args.output_dir / "compare_allocators.png",
                title=f"Allocators at equal rollout budget, built-in arithmetic ({seeds} seeds)")
    print(format_table(summary))
    for allocator, row in summary.items():
        print(f"{allocator:<20} effective ratio vs uniform: {row['effective_ratio_vs_uniform']:.2f}x; rollouts to reach "
              f"uniform's final held-out accuracy: {row.get('rollouts_to_uniform_final_accuracy')}, training-set "
              f"accuracy: {row.get('rollouts_to_uniform_final_train_accuracy')}")
    print(f"wrote {args.output_dir / 'compare_allocators.json'} and {args.output_dir / 'compare_allocators.png'}")
    return result


def mean_curves(runs: list[dict]) -> dict[str, dict[str, list[float]]]:
    """Per variant, held-out and training-set accuracy against rollouts spent, averaged over seeds."""
    curves = {}
    for label in dict.fromkeys(run["allocator"] for run in runs):
        group = [run["curve"] for run in runs if run["allocator"] == label]
        curves[label] = {
            "rollouts": [point["rollouts"] for point in group[0]],
            "accuracy": np.mean([[point["accuracy"] for point in curve] for curve in group], axis=0).tolist(),
            "train_accuracy": np.mean([[p["train_accuracy"] for p in curve] for curve in group], axis=0).tolist(),
        }
    return curves


if __name__ == "__main__":
    main()
