"""The fifth study's pilot: a waste-heavy regime the model can learn, on the third task family, chosen on uniform GRPO
alone, before any budget rule runs in it.

    OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py --describe-start   # the warm start per level (no RL)
    OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py --processes 1      # uniform n = 8 and 16, every candidate
    python benchmarks/fifth_study/pilot.py --stored-only                        # judge the stored runs, train nothing

Pre-registered here, before any RL run of this pilot:
- Task: equations (`trl_budget/demo/equations.py`: fill in the signs of 2 to 7 digits so that they make the target;
  one answer per problem), from its shipped warm start (`warm_start_equations/`, digest checked), which learned from
  every level: greedy accuracy on its record's held-out problems 0.54 (3 digits), 0.27 (4), 0.17 (5), 0.07 (6),
  0.02 (7), 0.214 over the five.
- The third and fourth studies' batch shape and budget (`RLSettings.study(960)`): 64 prompts per generation batch, 8
  updates per batch, 960 updates, a pool of 1 500 training problems (23 generation batches before prompts come back),
  greedy exact-match accuracy on 1 000 held-out problems of the same levels every 60 updates; the metric is the mean
  of the last three evaluations. Learning rate constant after 16 warm-up steps.
- Arms: uniform n = 8 and uniform n = 16 (twice the rollouts per batch, the same updates). Seeds 400-403, paired; none
  of them is a seed of an earlier study or pilot.
- Candidates (`CANDIDATES`): levels chosen from the warm start's sampled pass rates (`--describe-start`, no RL; its
  output is in the JSON), so that at 8 rollouts many prompts are all-fail or all-pass while some are mixed. At 8
  rollouts at temperature 1 every rollout agrees on 21% of 3-digit prompts, 31% of 4-digit, 61% of 5-digit and 79%
  of 6-digit ones (greedy accuracy 0.555, 0.350, 0.125, 0.050 on 200 of each): 4, 5 and 6 digits (57% agree at the
  start) and 3, 4 and 5 digits (38%, more as RL saturates the 3-digit prompts), each at constant learning rates 1e-4
  (the earlier studies') and 2e-4. Trained in the order listed, candidate by candidate, seed by seed, n = 8 before
  n = 16, as far as the time given to the pilot goes; a candidate with fewer than four seeds in is not judged.
- A candidate qualifies when (1) waste: uniform n = 8's share of prompts whose rollouts all agree (1 -
  `budget/prompts_with_gradient`) is at least 0.4 over the generation batches after the first epoch (the share over
  the first epoch is reported beside it); (2) room: n = 16 minus n = 8 is at least 1 point with its 95% t interval
  above 0; (3) no early loss: uniform n = 8's accuracy at update 60 is not below the start, and its last three
  evaluations are above it. Among qualifying candidates the one with the largest waste share is the regime; none
  qualifying is reported as such, with what failed. Seconds per run are reported (one thread), not a criterion.
Every run is stored with the machine that trained it (CPU model, family, SIMD flags, torch's CPU capability, threads,
package versions, the package code's digest): a run re-trains bit for bit on one machine, not across machines.
Writes benchmarks/fifth_study/results/pilot.json; finished runs are stored (results/run_cache) and reused.

As run (stated after the runs; nothing above changed): `OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py
--processes 1` from 09:10 to 10:17 on one of 2 cores of an AMD EPYC (family 26 model 2, AVX-512; the other core busy
with other work), given about an hour; its process ended without a message during the 30th run (eq-3-4-5-2e-4,
n = 16, seed 402) and was not restarted, the hour being spent: 29 of the 32 runs are stored, eq-3-4-5-2e-4 has two
complete seeds and is not judged. The table comes from `python benchmarks/fifth_study/pilot.py --stored-only`. The
runs stored then record the package's digest on disk when each ended (`code`: 2520d166093fc429 for the first 17,
e66b648ffd0c3d4d after others' changes to the package); the one process that trained them all had imported the
package at 09:10 and trained with that. Later runs record both digests.

Pilot 1's answer: no candidate qualifies. Uniform GRPO does not learn this task at these steps: held-out accuracy
stays at the start (3-4-5 at 1e-4: 0.325 -> 0.334 with n = 8, 0.334 with n = 16), training accuracy barely moves
(0.35 -> 0.38) while the policy's entropy halves: the policy sharpens onto the answers it already gives.

Pilot 2 (`--pilot 2`), pre-registered here after pilot 1's table and before any of its runs: larger steps, and a mix
with more mixed prompts. Candidates: 3, 4 and 5 digits at constant learning rates 5e-4 and 1e-3; 2, 3 and 4 digits
(level 0 added: 3 sign strings to choose from, most of its prompts all-pass at the start, so the waste criterion is
met by easy prompts as well as hard ones) at 5e-4 and 1e-3. Seeds 404-407, paired, fresh. Everything else as pilot 1:
the budget, the arms, the criteria, the order of training; results in results/pilot_2.json.

Pilot 2 as run (stated after the runs; nothing above changed): `OMP_NUM_THREADS=1 PYTHONPATH=<worktree> python
<worktree>/benchmarks/fifth_study/pilot.py --pilot 2 --processes 2` from a worktree of commit e75eeb8 (the package's
code frozen while it ran), on an AMD EPYC (family 25 model 17, AVX-512), 14:31 to 15:05, other work on the machine
beside it. The 16 runs of the two 3-4-5 candidates are stored; the 2-3-4 candidates could not be built: level 0 has
241 distinct two-digit problems, fewer than the 834 a level needs for 1 500 training and 1 000 held-out problems over
three levels (`split_problems` refused it at the first 2-3-4 run, which ended the pool). Answer: no candidate
qualifies. Larger steps do not make this task learnable here, they break it: n = 8 falls from 0.325 to 0.230 at 5e-4
and to 0.046 at 1e-3 (n = 16 to 0.251 and 0.140), below the start at update 60 on both. With pilot 1, uniform GRPO on
the equations task either stays at its start (1e-4, 2e-4) or loses accuracy (5e-4, 1e-3): the task is not a regime
for the study with this model, and the study needs another third family (or a larger warm start) before its
pre-registration. The table comes from `python benchmarks/fifth_study/pilot.py --pilot 2 --stored-only`.

Pilot 3 (`--pilot 3`), pre-registered here after pilot 2's table and before any RL run on its task: another family,
the brackets task (`trl_budget/demo/brackets.py`: close every bracket a well-nested prefix of four kinds of brackets
leaves open; one answer per problem), from its shipped warm start (`warm_start_brackets/`, digest checked), which
learned prompts of 4 to 12 brackets only, as sorting's learned 4 to 8 digits. Its start per level
(`--pilot 3 --describe-start`, no RL; 200 held-out problems a level, 8 samples at temperature 1): greedy accuracy 1.00
(4, 8 brackets), 0.995 (12), 0.725 (16), 0.365 (20), 0.185 (24); every sample agrees on 79% (16), 78% (20) and 82% (24)
of prompts, most of them all-fail at 20 and 24 brackets (54%, 71%). Candidates: 20 and 24 brackets at constant 1e-4
(the earlier studies' rate) and 2e-4, and 16, 20 and 24 brackets at 1e-4; trained in the order `br-20-24-1e-4`,
`br-16-20-24-1e-4`, `br-20-24-2e-4`. Seeds 420-423, paired, fresh. Everything else as pilots 1 and 2: the budget, the
arms (uniform n = 8 and 16), the criteria, the order of training within a candidate, as far as the time given to it
goes; results in results/pilot_3.json. If one qualifies, the largest waste share among those qualifying is the study's
third regime.

Pilot 3 as run (stated after the runs; nothing above changed): `OMP_NUM_THREADS=1 PYTHONPATH=<worktree> python
<worktree>/benchmarks/fifth_study/pilot.py --pilot 3 --processes 2` from a worktree of commit 392f5ac (the commit
that registered it), on an AMD EPYC (family 25 model 17, AVX-512), other work on the machine beside it; every
candidate's 8 runs are stored, in the order registered. Answer (`--pilot 3 --stored-only`, which adds the choice to
the JSON): two candidates qualify, `br-20-24-1e-4` (0.307 -> 0.805 with n = 8, room +1.67 [+0.11, +3.24], waste 0.85
after the first epoch) and `br-16-20-24-1e-4` (0.425 -> 0.840, room +1.62 [+0.03, +3.21], waste 0.86); by the
registered rule (the largest waste share) the regime is `br-16-20-24-1e-4`: 16, 20 and 24 brackets at 1e-4.
`br-20-24-2e-4` fails the room criterion (+1.17 [-2.47, +4.82]). Unlike the equations task, uniform GRPO learns this
one fast (held-out accuracy 0.46-0.54 by update 60), and its waste is mostly prompts it has learned: all-pass groups.
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

from trl_budget.demo.build_warm_start import describe_by_level
from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.machine import machine_record
from trl_budget.demo.run_cache import cached_run, code_digest, stored_run
from trl_budget.demo.settings import RLSettings, WarmStartSettings
from trl_budget.demo.study_stats import mean_after, paired_interval, study_metric
from trl_budget.demo.task import task_named

RESULTS = Path(__file__).resolve().parent / "results"
PILOT_TASKS = {1: "equations", 2: "equations", 3: "brackets"}
PILOT_SEEDS = {1: (400, 401, 402, 403), 2: (404, 405, 406, 407), 3: (420, 421, 422, 423)}
BUDGET = 960
FIRST_EPOCH_BATCHES = 23  # 1 500 prompts, 64 per batch
# Name -> (levels of the equations task, constant learning rate).
CANDIDATES: dict[str, tuple[tuple[int, ...], float]] = {
    "eq-4-5-6-1e-4": ((2, 3, 4), 1e-4), "eq-4-5-6-2e-4": ((2, 3, 4), 2e-4),
    "eq-3-4-5-1e-4": ((1, 2, 3), 1e-4), "eq-3-4-5-2e-4": ((1, 2, 3), 2e-4),
}
# Pilot 2's candidates, after pilot 1's table.
PILOT_2_CANDIDATES: dict[str, tuple[tuple[int, ...], float]] = {
    "eq-3-4-5-5e-4": ((1, 2, 3), 5e-4), "eq-3-4-5-1e-3": ((1, 2, 3), 1e-3),
    "eq-2-3-4-5e-4": ((0, 1, 2), 5e-4), "eq-2-3-4-1e-3": ((0, 1, 2), 1e-3),
}
# Pilot 3's candidates, on the brackets task (levels 3, 4, 5: 16, 20 and 24 brackets).
PILOT_3_CANDIDATES: dict[str, tuple[tuple[int, ...], float]] = {
    "br-20-24-1e-4": ((4, 5), 1e-4), "br-16-20-24-1e-4": ((3, 4, 5), 1e-4), "br-20-24-2e-4": ((4, 5), 2e-4),
}
# The levels `--describe-start` describes: the equations task's first level has too few distinct problems.
DESCRIBED_LEVELS = {1: (1, 2, 3, 4, 5), 2: (1, 2, 3, 4, 5), 3: (0, 1, 2, 3, 4, 5)}
PILOTS = {1: CANDIDATES, 2: PILOT_2_CANDIDATES, 3: PILOT_3_CANDIDATES}
ALL_CANDIDATES = {**CANDIDATES, **PILOT_2_CANDIDATES, **PILOT_3_CANDIDATES}
WASTE_SHARE, ROOM_POINTS = 0.4, 0.01
# The package's code as this script imported it (its worker processes train with that code, whatever changes on disk).
CODE_AT_IMPORT = code_digest()


def task_of(candidate: str) -> str:
    return next(PILOT_TASKS[pilot] for pilot, candidates in PILOTS.items() if candidate in candidates)


def settings_for(candidate: str, num_generations: int) -> RLSettings:
    levels, rate = ALL_CANDIDATES[candidate]
    return replace(RLSettings.study(BUDGET), levels=levels, learning_rate=rate, num_generations=num_generations)


def machine() -> dict:
    """What a run's floats depend on (`machine_record`: the CPU, torch's CPU kernels and threads, the packages'
    versions), with the package code's digest as imported and as on disk when the run ended."""
    record = {name: value for name, value in machine_record().items() if name != "code"}
    return {**record, "code_at_import": CODE_AT_IMPORT, "code_on_disk": code_digest()}


def run_name(candidate: str, num_generations: int, seed: int) -> str:
    return f"fifth-pilot-{candidate}-n{num_generations}-{seed}"


def run_key(candidate: str, num_generations: int, seed: int) -> dict:
    return {"task": task_of(candidate), "warm_start": asdict(WarmStartSettings()), "rl": asdict(settings_for(candidate, num_generations)),
            "variant": {"budget_allocator": "uniform"}, "seed": seed}


def pilot_run(candidate: str, num_generations: int, seed: int) -> dict:
    """One uniform run, stored (or read back) under its settings, with the machine that trained it; one thread."""
    import torch

    torch.set_num_threads(1)
    task = task_named(task_of(candidate))

    def train() -> dict:
        result = run_rl(warm_start(WarmStartSettings(), task=task), "uniform", seed,
                        settings_for(candidate, num_generations), Path("pilot_runs") / f"{candidate}-n{num_generations}",
                        show_progress=False, label=f"uniform-n{num_generations}", task=task)
        return {**result, "machine": machine()}

    stored, reused = cached_run(RESULTS / "run_cache", run_name(candidate, num_generations, seed),
                                run_key(candidate, num_generations, seed), train)
    print(f"{candidate} n = {num_generations} seed {seed}: {'stored' if reused else 'trained'}, "
          f"{stored['result']['seconds']:.0f} s, metric {study_metric(stored['result']):.3f}", flush=True)
    return stored["result"]


def waste(run: dict, first_epoch: bool) -> float:
    """The share of a run's prompts whose rollouts all agree, over the first epoch's batches or those after it."""
    shares = run["prompts_with_gradient"]
    with_gradient = np.mean(shares[:FIRST_EPOCH_BATCHES]) if first_epoch else mean_after(
        run, "prompts_with_gradient", FIRST_EPOCH_BATCHES)
    return float(1 - with_gradient)


def judge(candidate: str, runs: dict, pilot_seeds: tuple[int, ...]) -> dict:
    """The candidate's criteria from its runs keyed by (num_generations, seed), over the seeds with both arms in."""
    seeds = [seed for seed in pilot_seeds if (8, seed) in runs and (16, seed) in runs]
    row = {"levels": ALL_CANDIDATES[candidate][0], "learning_rate": ALL_CANDIDATES[candidate][1], "seeds": seeds}
    if not seeds:
        return {**row, "qualifies": None}
    eight, sixteen = [runs[8, seed] for seed in seeds], [runs[16, seed] for seed in seeds]
    room = np.array([study_metric(b) - study_metric(a) for a, b in zip(eight, sixteen)])
    low, high = paired_interval(room)[1] if len(seeds) > 1 else (float("nan"), float("nan"))
    start = eight[0]["curve"][0]["accuracy"]
    at_60 = float(np.mean([next(p["accuracy"] for p in run["curve"] if p["step"] == 60) for run in eight]))
    final = float(np.mean([study_metric(run) for run in eight]))
    after = float(np.mean([waste(run, first_epoch=False) for run in eight]))
    criteria = {"waste": after >= WASTE_SHARE, "room": bool(room.mean() >= ROOM_POINTS and low > 0),
                "no_early_loss": at_60 >= start and final > start}
    return {**row, "start_accuracy": start, "uniform_n8": final,
            "uniform_n16": float(np.mean([study_metric(run) for run in sixteen])), "accuracy_at_update_60": at_60,
            "waste_after_first_epoch": after,
            "waste_first_epoch": float(np.mean([waste(run, first_epoch=True) for run in eight])),
            "n16_waste_after_first_epoch": float(np.mean([waste(run, first_epoch=False) for run in sixteen])),
            "train_accuracy_start": eight[0]["curve"][0]["train_accuracy"],
            "train_accuracy_n8": float(np.mean([study_metric(run, "train_accuracy") for run in eight])),
            "entropy_n8_first_update": float(np.mean([run["entropy"][0] for run in eight])),
            "entropy_n8_after_first_epoch": float(np.mean([mean_after(run, "entropy", 8 * FIRST_EPOCH_BATCHES)
                                                           for run in eight])),
            "room": float(room.mean()), "room_ci95": [float(low), float(high)],
            "room_paired_sd": float(room.std(ddof=1)) if len(seeds) > 1 else None,
            "seconds_n8": [run["seconds"] for run in eight], "seconds_n16": [run["seconds"] for run in sixteen],
            "criteria": criteria, "qualifies": all(criteria.values()) if len(seeds) == len(pilot_seeds) else None}


def chosen_regime(candidates: dict) -> dict | None:
    """The pre-registered choice: among the qualifying candidates, the one with the largest waste share."""
    qualifying = [name for name, row in candidates.items() if row["qualifies"]]
    if not qualifying:
        return None
    name = max(qualifying, key=lambda name: candidates[name]["waste_after_first_epoch"])
    return {"candidate": name, "levels": candidates[name]["levels"], "learning_rate": candidates[name]["learning_rate"]}


def print_table(candidates: dict) -> None:
    print("| candidate | seeds | start | n = 8 | n = 16 | room [95% CI] | waste after / in first epoch | at update 60 "
          "| qualifies |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, row in candidates.items():
        if not row["seeds"]:
            print(f"| {name} | 0 | | | | | | | not run |")
            continue
        failed = ", ".join(name for name, passed in row["criteria"].items() if not passed)
        verdict = {None: "not judged", True: "yes", False: f"no: {failed}"}[row["qualifies"]]
        print(f"| {name} | {len(row['seeds'])} | {row['start_accuracy']:.3f} | {row['uniform_n8']:.3f} | "
              f"{row['uniform_n16']:.3f} | {row['room'] * 100:+.2f} [{row['room_ci95'][0] * 100:+.2f}, "
              f"{row['room_ci95'][1] * 100:+.2f}] | {row['waste_after_first_epoch']:.2f} / "
              f"{row['waste_first_epoch']:.2f} | {row['accuracy_at_update_60']:.3f} | {verdict} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--describe-start", action="store_true", help="the warm start per level; no RL")
    parser.add_argument("--pilot", type=int, choices=list(PILOTS), default=1, help="which pilot (default: 1)")
    parser.add_argument("--candidates", nargs="+", choices=list(ALL_CANDIDATES),
                        help="some of the pilot's candidates (default: all of them)")
    parser.add_argument("--processes", type=int, default=1, help="runs trained at once (default: 1)")
    parser.add_argument("--stored-only", action="store_true", help="judge the stored runs; train nothing")
    args = parser.parse_args(argv)
    candidates, seeds = args.candidates or list(PILOTS[args.pilot]), PILOT_SEEDS[args.pilot]
    output = RESULTS / ("pilot.json" if args.pilot == 1 else f"pilot_{args.pilot}.json")
    report = json.loads(output.read_text()) if output.exists() else {}
    if args.describe_start:
        report["warm_start_by_level"] = describe_by_level(task_named(PILOT_TASKS[args.pilot]), DESCRIBED_LEVELS[args.pilot])
        report["describe_start_machine"] = machine()
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=2) + "\n")
        return
    jobs = [(name, n, seed) for name in candidates for seed in seeds for n in (8, 16)]
    if args.stored_only:
        done = {job: stored["result"] for job in jobs
                if (stored := stored_run(RESULTS / "run_cache", run_name(*job), run_key(*job))) is not None}
    else:
        with ProcessPoolExecutor(args.processes) as pool:
            done = dict(zip(jobs, pool.map(pilot_run, *zip(*jobs))))
    report["candidates"] = {name: judge(name, {(n, seed): run for (job_name, n, seed), run in done.items()
                                               if job_name == name}, seeds) for name in candidates}
    report["regime"] = chosen_regime(report["candidates"])
    report["machines"] = [json.loads(entry) for entry in sorted({json.dumps(run["machine"], sort_keys=True)
                                                                  for run in done.values()})]
    threads = os.environ.get("OMP_NUM_THREADS")
    report["command"] = " ".join(([f"OMP_NUM_THREADS={threads}"] if threads else []) + ["python", *sys.argv])
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report["candidates"])
    print(f"regime: {report['regime']}")


if __name__ == "__main__":
    main()
