"""The fifth study's arms pilot: SPO as released and the project's candidate combinations in the fourth study's two
regimes, off the study's seeds, to choose the "best project rule" the study puts against SPO and to size the study.

    OMP_NUM_THREADS=1 python benchmarks/fifth_study/arms_pilot.py --processes 2   # train every run not yet stored
    python benchmarks/fifth_study/arms_pilot.py --stored-only                     # judge the stored runs, train nothing

Pre-registered here, before any run of SPO or of these combinations in either regime:
- Regimes: the fourth study's (`benchmarks/fourth_study/fourth_study.py`): `arithmetic` (regime A, the task's study
  pool) and `sorting` (10 and 12 digits), each `RLSettings.study(960)`: 64 prompts of 8 rollouts per generation batch
  (512 rollouts), 8 updates per batch, 960 updates, a pool of 1 500 training problems, constant 1e-4 after 16 warm-up
  steps; greedy held-out accuracy, the mean of the last three evaluations.
- Arms (`ARMS`), all at 512 rollouts generated per batch and 960 updates:
  - `uniform-n8`: GRPO (group baseline), the reference;
  - `uniform-n8-history`: the history baseline (window 16), the fourth study's replicated rule;
  - `spo`: SPO as released (`budget_allocator="spo"`): one rollout a prompt, 512 prompts a batch drawn by SPO's
    weights from the whole pool, SPO's leave-out baseline normalized over the batch, KL-adaptive rho, the prior from
    8 rollouts of every training prompt sampled by the run itself before its first batch (its cost recorded);
  - candidates for the best project rule: `history-spo-sampling` (uniform n = 8, the history baseline, prompts drawn by
    SPO's weights from the whole pool, SPO's tracker without an offline prior) and `knapsack-history-value` (Knapsack
    RL's allocation, the history baseline, prompts drawn by Knapsack RL's value); and `uniform-n8-history` itself.
- Seeds 410-413, paired within a regime; none is a seed of an earlier study or pilot, nor of the fifth study (which
  will use seeds from 500).
- Choice of the best project rule: among `uniform-n8-history`, `history-spo-sampling` and `knapsack-history-value`,
  the largest mean over the two regimes of its paired mean minus `uniform-n8`; `uniform-n8-history` unless another
  beats it by at least 0.5 point on that mean (it has the evidence of a study; a pilot of four seeds does not
  overturn it on less). The study then runs the chosen rule with the same settings.
- Sizing: per regime the paired SDs of `spo - uniform-n8` and of `best - spo` over the four seeds; the study's seeds
  are the fewest (at least 20) whose minimal detectable effect at 80% power at Holm's first level (0.05 over its
  primaries) is at most 1 point, stated in the study's pre-registration.
- Order: seed by seed, regime by regime, arm by arm in the order listed; stored runs are reused.
Every run is stored with the machine that trained it (`run_rl`'s record: CPU model, SIMD flags, torch's CPU capability,
threads, package versions and the package code's digest). Writes benchmarks/fifth_study/results/arms_pilot.json.

As run (stated after the runs; nothing above changed): `OMP_NUM_THREADS=1 PYTHONPATH=<worktree> python
<worktree>/benchmarks/fifth_study/arms_pilot.py --processes 1` from a worktree of commit c63a3ad, 15:09 to 16:17 on an
AMD EPYC (family 25 model 17, AVX-512), the test suites beside it until 15:48; from 15:58 a second process
trained the remaining jobs in reverse order from the repository's checkout, whose package code had the same digest
(9ee195990d871643), until the two met. Both trained the last two jobs (arithmetic `spo` and `uniform-n8-history`, seed
413): the same runs bit for bit but for their wall times. All 40 runs are stored; `--stored-only` gives the table.
Answer, in points of held-out accuracy against `uniform-n8` (4 paired seeds, 95% t intervals):
arithmetic: history +0.57 [-1.04, +2.17], spo +2.38 [+1.04, +3.73], history-spo-sampling
+0.15 [-1.51, +1.81], knapsack-history-value +0.75 [-0.35, +1.85];
sorting: history -0.17 [-0.39, +0.06], spo +2.39 [+1.39, +3.39], history-spo-sampling
+0.21 [-1.83, +2.24], knapsack-history-value +0.61 [-0.47, +1.68].
By the rule above the best project rule stays `uniform-n8-history` (knapsack-history-value's mean over the two regimes
is +0.68, the history baseline's +0.20: short of the 0.5 point it needed). SPO's arm
generated 12 000 more rollouts than the others (its prior, before the first batch): a pilot's figure at unequal cost,
not a result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.run_cache import cached_run, stored_run
from trl_budget.demo.settings import RLSettings, WarmStartSettings
from trl_budget.demo.study_stats import paired_interval, study_metric
from trl_budget.demo.task import task_named

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = (410, 411, 412, 413)
REGIMES = {"arithmetic": ("arithmetic", None), "sorting": ("sorting", (3, 4))}  # name -> (task, levels)
HISTORY = {"advantage_baseline": "history", "advantage_history_window": 16.0}
ARMS = {  # label -> BudgetGRPOConfig settings
    "uniform-n8": {"budget_allocator": "uniform", "advantage_baseline": "group"},
    "uniform-n8-history": {"budget_allocator": "uniform", **HISTORY},
    "spo": {"budget_allocator": "spo", "spo_offline_sampling": True},
    "history-spo-sampling": {"budget_allocator": "uniform", **HISTORY, "prompt_sampling": "spo"},
    "knapsack-history-value": {"budget_allocator": "knapsack", **HISTORY, "prompt_sampling": "value"},
}
REFERENCE, INCUMBENT = "uniform-n8", "uniform-n8-history"
CANDIDATES = ("uniform-n8-history", "history-spo-sampling", "knapsack-history-value")
OVERTURN = 0.005  # accuracy (0.5 point)


def settings_for(regime: str) -> RLSettings:
    levels = REGIMES[regime][1]
    return replace(RLSettings.study(960), **({} if levels is None else {"levels": levels}))


def run_key(regime: str, label: str, seed: int) -> dict:
    return {"task": REGIMES[regime][0], "warm_start": asdict(WarmStartSettings()), "rl": asdict(settings_for(regime)),
            "arm": ARMS[label], "seed": seed}


def run_name(regime: str, label: str, seed: int) -> str:
    return f"fifth-arms-pilot-{regime}-{label}-{seed}"


def pilot_run(regime: str, label: str, seed: int) -> dict:
    """One run, stored (or read back) under its settings, with the machine that trained it; one thread."""
    import torch

    torch.set_num_threads(1)
    task = task_named(REGIMES[regime][0])
    options = dict(ARMS[label])
    allocator = options.pop("budget_allocator")

    def train() -> dict:
        result = run_rl(warm_start(WarmStartSettings(), task=task), allocator, seed, settings_for(regime),
                        Path("arms_pilot_runs") / regime / label, show_progress=False, label=label, task=task,
                        **options)
        return {k: v for k, v in result.items() if k != "histograms"}  # with the machine that trained it

    stored, reused = cached_run(RESULTS / "run_cache", run_name(regime, label, seed), run_key(regime, label, seed),
                                train)
    print(f"{regime} {label} seed {seed}: {'stored' if reused else 'trained'}, {stored['result']['seconds']:.0f} s, "
          f"metric {study_metric(stored['result']):.3f}", flush=True)
    return stored["result"]


def paired(runs: dict, regime: str, arm: str, reference: str) -> dict:
    """`arm - reference` in points over the seeds with both stored."""
    seeds = [seed for seed in SEEDS if (regime, arm, seed) in runs and (regime, reference, seed) in runs]
    differences = np.array([study_metric(runs[regime, arm, seed]) - study_metric(runs[regime, reference, seed])
                            for seed in seeds]) * 100
    if len(seeds) < 2:
        return {"seeds": seeds}
    mean, interval = paired_interval(differences)
    return {"seeds": seeds, "mean": mean, "ci95": interval, "paired_sd": float(differences.std(ddof=1))}


def judge(runs: dict) -> dict:
    """Every arm against uniform-n8 per regime, the best project rule by the pre-registered rule, and the paired SDs
    the study is sized on."""
    report = {"vs_uniform_n8": {regime: {arm: paired(runs, regime, arm, REFERENCE) for arm in ARMS if arm != REFERENCE}
                                for regime in REGIMES}}
    complete = all((regime, arm, seed) in runs for regime in REGIMES for arm in ARMS for seed in SEEDS)
    means = {arm: float(np.mean([report["vs_uniform_n8"][regime][arm].get("mean", np.nan) for regime in REGIMES]))
             for arm in CANDIDATES}
    best = max(CANDIDATES, key=lambda arm: means[arm])
    if means[best] < means[INCUMBENT] + OVERTURN * 100:
        best = INCUMBENT
    report.update({"candidates_mean_vs_uniform_n8": means, "complete": complete, "best": best if complete else None,
                   "sizing": {regime: {"spo - uniform-n8": paired(runs, regime, "spo", REFERENCE),
                                       "best - spo": paired(runs, regime, best, "spo")} for regime in REGIMES}})
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=1, help="runs trained at once (default: 1)")
    parser.add_argument("--stored-only", action="store_true", help="judge the stored runs; train nothing")
    args = parser.parse_args(argv)
    jobs = [(regime, label, seed) for seed in SEEDS for regime in REGIMES for label in ARMS]
    if args.stored_only:
        runs = {job: stored["result"] for job in jobs
                if (stored := stored_run(RESULTS / "run_cache", run_name(*job), run_key(*job))) is not None}
    else:
        with ProcessPoolExecutor(args.processes) as pool:
            runs = dict(zip(jobs, pool.map(pilot_run, *zip(*jobs))))
    report = judge(runs)
    report["runs"] = len(runs)
    report["machines"] = [json.loads(entry) for entry in sorted({json.dumps(run["machine"], sort_keys=True)
                                                                  for run in runs.values() if "machine" in run})]
    threads = os.environ.get("OMP_NUM_THREADS")
    report["command"] = " ".join(([f"OMP_NUM_THREADS={threads}"] if threads else []) + ["python", *sys.argv])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "arms_pilot.json").write_text(json.dumps(report, indent=2) + "\n")
    for regime in REGIMES:
        for arm, row in report["vs_uniform_n8"][regime].items():
            shown = (f"{row['mean']:+.2f} [{row['ci95'][0]:+.2f}, {row['ci95'][1]:+.2f}]" if "mean" in row else
                     f"{len(row['seeds'])} seeds")
            print(f"{regime}: {arm} - uniform-n8: {shown}")
    print(f"best project rule: {report['best']}")


if __name__ == "__main__":
    main()
