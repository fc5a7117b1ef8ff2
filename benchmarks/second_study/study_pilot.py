"""The allocation study's pilot: choose the regime on uniform GRPO alone, before any allocator runs.

    python benchmarks/second_study/study_pilot.py --seeds 2  # uniform at 1x and 2x rollouts, each candidate, seeds 0-1

Pre-registered here, before any run of this pilot (the study's criteria; no allocator runs in it):
- Candidates: the allocation study's pool regime (64 prompts x 8 per generation batch, 8 updates per batch, N in
  [2, 128], 1 500 training problems of levels 2+1, 2+2, 2x1), float32, from the shipped warm start, with a constant
  learning rate after 16 warm-up steps at 2e-4 and 4e-4 (the schedule uniform is expected to like: a linear decay to 0
  spends most of its rate before allocation has history), 480 updates (30 720 rollouts).
- Metric: greedy exact-match accuracy on 1 000 held-out problems of the same levels, the mean of the last three
  evaluations (every 60 updates).
- Room gate: uniform with twice the rollouts (960 updates) must end at least 3 points above uniform at 480, on the mean
  over seeds. Also reported: the share of uniform's rollouts without a gradient (room for allocation: at least 35%
  wanted) and the share of generation batches after the first epoch (allocated from history: at least 80% wanted;
  with 1 500 prompts and 64 per batch the first epoch is 23 of 60 batches, so this regime has 62%).
- Seeds 0-1 (0-3 when time allows: `--seeds 4`; stored runs are reused), paired across the two budgets; the paired SD
  of (2x - 1x) is kept for the study's power analysis.

Second round, added after the first round's results (both rates lowered greedy held-out accuracy below the start, and
62% of batches were allocated from history), before running it: constant rates 1e-4 and 5e-5 on the same pool, and a
pool of 400 problems (each prompt back about 10 times: 88% of batches from history) at 1e-4; and one more criterion,
that uniform at 1x must end above the start.
Third round, added after the second round's results (5e-5 and 1e-4 recovered to the start or above it by 960 updates,
and 960 updates of the 1 500-problem pool allocate 80% of generation batches from history), before running it: the
same pool at constant 5e-5, 1e-4 and 2e-4 with a budget of 960 updates (61 440 rollouts), so that the room gate
compares 960 with 1 920 updates; the 960-update runs are the earlier rounds' 2x runs, read back.
Writes benchmarks/second_study/results/study_pilot.json; finished runs are stored (results/run_cache) and reused.
Until the move to benchmarks/second_study/ this script was benchmarks/study_pilot.py.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.run_cache import cached_run
from trl_budget.demo.settings import RLSettings, WarmStartSettings

RESULTS = Path(__file__).resolve().parent / "results"
# Name -> (learning rate, training problems, budget in updates, name of its stored runs).
CANDIDATES = {
    **{f"pool-constant-{rate:g}": (rate, 1500, 480, f"pool-constant-{rate:g}") for rate in (2e-4, 4e-4)},  # round 1
    **{f"pool-constant-{rate:g}": (rate, 1500, 480, f"pool-constant-{rate:g}") for rate in (1e-4, 5e-5)},  # round 2
    "pool400-constant-0.0001": (1e-4, 400, 480, "pool400-constant-0.0001"),
    **{f"pool-constant-{rate:g}-960": (rate, 1500, 960, f"pool-constant-{rate:g}") for rate in (5e-5, 1e-4, 2e-4)},
}
ROOM_GATE_POINTS = 0.03


def budget(candidate: str) -> int:
    return CANDIDATES[candidate][2]


def settings_for(candidate: str, steps: int) -> RLSettings:
    rate, train_prompts = CANDIDATES[candidate][:2]
    pool = RLSettings.pool(steps)
    return replace(pool, learning_rate=rate, lr_scheduler_type="constant_with_warmup", warmup_steps=16,
                   train_prompts=train_prompts, eval_prompts=1000, eval_samples=0, eval_every=60,
                   train_eval_prompts=240)


def first_epoch_batches(candidate: str) -> int:
    return -(-CANDIDATES[candidate][1] // 64)  # generation batches of 64 prompts before prompts come back


def last_three(run: dict) -> float:
    return float(np.mean([point["accuracy"] for point in run["curve"][-3:]]))


def pilot_run(name: str, steps: int, seed: int) -> tuple[dict, bool]:
    """One uniform run of the pilot, stored (or read back) under its settings; single-threaded, for a process pool."""
    import torch

    torch.set_num_threads(1)
    warm, settings = WarmStartSettings(), settings_for(name, steps)
    key = {"warm_start": asdict(warm), "rl": asdict(settings), "variant": {"budget_allocator": "uniform"}, "seed": seed}
    stored, reused = cached_run(
        RESULTS / "run_cache", f"pilot-{CANDIDATES[name][3]}-{steps}-{seed}", key,
        lambda: run_rl(warm_start(warm), "uniform", seed, settings, Path("pilot_runs") / f"{name}-{steps}",
                       show_progress=False, label="uniform"))
    return stored["result"], reused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--candidates", nargs="+", choices=list(CANDIDATES), default=list(CANDIDATES))
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    jobs = [(name, steps, seed) for name in args.candidates for steps in (2 * budget(name), budget(name))
            for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.processes) as pool:
        done = dict(zip(jobs, pool.map(pilot_run, *zip(*jobs))))
    report = {}
    for name in args.candidates:
        finals, one_x, two_x = {}, budget(name), 2 * budget(name)
        for steps in (one_x, two_x):
            for seed in range(args.seeds):
                run, reused = done[(name, steps, seed)]
                finals.setdefault(steps, []).append(run)
                print(f"{name} {steps} updates seed {seed}: last-three held-out {last_three(run):.3f}, start "
                      f"{run['curve'][0]['accuracy']:.3f}" + (" (stored)" if reused else ""), flush=True)
        one, two = np.array([last_three(r) for r in finals[one_x]]), np.array([last_three(r) for r in finals[two_x]])
        ratio = [np.mean(run["effective_ratio"]) for run in finals[one_x]]
        report[name] = {
            "budget_updates": one_x,
            "start_accuracy": finals[one_x][0]["curve"][0]["accuracy"],
            "uniform_1x": float(one.mean()), "uniform_2x": float(two.mean()),
            "room": float((two - one).mean()), "room_paired_sd": float((two - one).std(ddof=1)),
            "passes_room_gate": bool((two - one).mean() >= ROOM_GATE_POINTS),
            "uniform_1x_above_start": bool(one.mean() > finals[one_x][0]["curve"][0]["accuracy"]),
            "rollouts_without_gradient": float(1 - np.mean(ratio)),
            "batches_from_history": 1 - first_epoch_batches(name) / (one_x // 8),
        }
    (RESULTS / "study_pilot.json").write_text(json.dumps({"candidates": report, "seeds": args.seeds}, indent=2))
    print("| candidate | start | uniform 1x | uniform 2x | room (2x - 1x) | gate (>= +3 points) | 1x above start | "
          "rollouts without a gradient | batches from history |")
    print("|---|---:|---:|---:|---:|---|---|---:|---:|")
    for name, row in report.items():
        print(f"| {name} | {row['start_accuracy']:.3f} | {row['uniform_1x']:.3f} | {row['uniform_2x']:.3f} | "
              f"{row['room'] * 100:+.1f} points (SD {row['room_paired_sd'] * 100:.1f}) | "
              f"{'passes' if row['passes_room_gate'] else 'fails'} | {'yes' if row['uniform_1x_above_start'] else 'no'}"
              f" | {row['rollouts_without_gradient']:.2f} | {row['batches_from_history']:.2f} |")


if __name__ == "__main__":
    main()
