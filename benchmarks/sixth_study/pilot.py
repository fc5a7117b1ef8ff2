"""The sixth study's pilot, on seeds outside the study: the fresh-prompt regimes' room gates, chosen on uniform GRPO
alone, and the paired SDs that size the study's seeds.

    OMP_NUM_THREADS=1 python benchmarks/sixth_study/pilot.py                 # train every run not yet stored, judge
    python benchmarks/sixth_study/pilot.py --stored-only                     # judge the stored runs, train nothing
    python benchmarks/sixth_study/pilot.py --quick --output-dir /tmp/p       # a smoke run of a few minutes

Pre-registered here, before any run of this pilot:
- Regimes (`arms.REGIMES`): the fifth study's sorting and brackets regimes (levels, learning rate, warm start, 64 x 8
  rollouts a batch, 8 updates a batch, 960 updates), at the pool of 30 720 training problems (`*-fresh`): under SPO's
  layout a prompt comes back about twice a run (61 440 draws), under two rollouts a prompt never, under uniform n = 8
  a quarter of the pool is seen, once. The fifth study's pool of 1 500 (`*-revisited`) passed its room gates there
  on 20 seeds (sorting +1.24 [+0.85, +1.63], brackets +1.43 [+0.93, +1.93] points) and is not re-gated.
- Arms (`arms.ARMS`): `uniform-n8`, `uniform-n16` (the room gate), `spo` (SPO as the project runs it, without a
  prior), `n2-earlier-or-batch` (the contract-keeping candidate, from a pilot outside the project: groups of 2 over 256
  prompts, each row against its prompt's earlier rewards or, on a first visit, the batch's mean reward, advantages
  scaled over the batch). Seeds 600-603, paired; no earlier study or pilot used them, and the study will not.
- Order: the room gate's runs first (both fresh regimes, seed by seed, n = 8 before n = 16), then `spo` and the
  candidate, seed by seed.
- Metric: the studies' (greedy held-out accuracy on 1 000 problems, the mean of the evaluations at 840, 900, 960).
- A fresh regime is a study regime when (1) room: `uniform-n16 - uniform-n8` is at least 1 point with its 95% t
  interval above 0 (four seeds); (2) no early loss: uniform n = 8's accuracy at update 60 is not below the start, and
  its last three evaluations are above it. A regime that fails is reported with what failed and is not run by the
  study.
- Sizing (the study reads `sizing` from results/pilot.json): per regime the paired SD of `n2-earlier-or-batch - spo`
  and of `n2-earlier-or-batch - uniform-n8` over the four seeds; each revisited regime takes the larger of the two
  fresh regimes' SD of the same comparison (no pilot run there: its arms' SDs at 1 500 prompts are unmeasured for the
  candidate). The study's seeds: the smallest count from 12 to 20 whose MDE at 80% power at Holm's first level
  (0.05 / 8, eight primaries) is at most 1.0 point for every primary under its SD; 20 when none is (the MDE at 20
  reported).
- Also reported, not judged: every arm's metric, the candidate's and SPO's differences from uniform n = 8 with 95%
  intervals, the share of prompts without a gradient, seconds a run (two at once; not a cost figure).
Writes benchmarks/sixth_study/results/pilot.json; finished runs are stored (results/run_cache) and reused.

Pilot 2 (`--pilot 2`), pre-registered here after pilot 1's room gates and before any of its runs. Pilot 1's gates
(`--stored-only`, with 20 of its 32 runs stored, every room-gate run among them): `sorting-fresh` passed (+1.17
[+0.17, +2.16] points); `brackets-fresh` failed the room criterion (+1.31 [-0.67, +3.29]), so it is not a study
regime. Pilot 1's other runs go on as registered (its sizing reads them). Pilot 2 looks for the brackets family's
fresh regime:
- Candidate (`arms.PILOT_2_REGIMES`): 20 and 24 brackets (levels 4 and 5) at 1e-4 at the fresh pool of 30 720
  (`brackets-20-24-fresh`); the fifth study's pilot 3 qualified these levels at the pool of 1 500 (room +1.67 [+0.11,
  +3.24] points, seeds 420-423), which makes `brackets-20-24-revisited` its revisited regime.
- Arms `uniform-n8` and `uniform-n16`, seeds 604-607 (fresh), n = 8 before n = 16 seed by seed; pilot 1's criteria.
- If it passes, the study's brackets family is 20 and 24 brackets at both pools (one task on both sides of the
  pool-size interaction), its primaries sized on pilot 1's brackets SDs (the nearest measured); if it fails, the
  study has one fresh regime (sorting) and runs brackets at the revisited pool only, and says so.
Writes results/pilot_2.json.

As run (stated after the runs; nothing above changed): pilot 1 `OMP_NUM_THREADS=1 PYTHONPATH=<worktree> python
<worktree>/benchmarks/sixth_study/pilot.py` from a worktree of the commit that registered it (the package's code
frozen while it ran: `code` d3314a645575907a in every run), 11:33 to 13:04, two runs at once, on an AMD EPYC (family
25 model 1, AVX2, 2 cores), other work beside it for its first 90 minutes (runs took 120 to 660 s); all 32 runs are
stored. Pilot 2 `... pilot.py --pilot 2` likewise from the commit that registered it, 13:05 to 13:21, alone on the
machine; its 8 runs are stored. `--stored-only` reproduces both JSON files byte for byte. Answers: `sorting-fresh`
passed (+1.17 [+0.17, +2.16] points); `brackets-fresh` failed the room criterion (+1.31 [-0.67, +3.29]);
`brackets-20-24-fresh` failed it too (+1.71 [-0.73, +4.15]). So the study has one fresh regime, sorting's, and runs
brackets at the fifth study's revisited regime only, as pilot 2 registered. Sizing: the largest paired SD is 1.77
points (`n2-earlier-or-batch - uniform-n8` at `brackets-fresh`), which no count up to 20 brings to an MDE of 1 point:
20 seeds (MDE 1.56 points).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from trl_budget.demo.run import run_rl
from trl_budget.demo.run_cache import study_arguments, study_runs
from trl_budget.demo.study_stats import minimal_detectable_effect, paired_interval, study_metric

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from arms import ARMS, CANDIDATE_REGIMES, arm_settings  # noqa: E402
from study_run import stored_study_run  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = (600, 601, 602, 603)
PILOT_2_SEEDS = (604, 605, 606, 607)
FRESH = ("sorting-fresh", "brackets-fresh")
PILOT_2_FRESH = ("brackets-20-24-fresh",)
REVISITED = {"sorting-revisited": "sorting-fresh", "brackets-revisited": "brackets-fresh"}
CANDIDATE = "n2-earlier-or-batch"
ROOM_POINTS = 0.01
PRIMARIES_PER_REGIME = ((CANDIDATE, "spo"), (CANDIDATE, "uniform-n8"))
HOLM_FIRST_LEVEL = 0.05 / (4 * len(PRIMARIES_PER_REGIME))  # two families at two pools
SEED_RANGE, TARGET_MDE = (12, 20), 0.01


def pilot_run(regime: str, label: str, seed: int, quick: bool, run_cache: Path, train: bool = True) -> dict:
    return stored_study_run("sixth-pilot", regime, label, seed, CANDIDATE_REGIMES[regime][0],
                            arm_settings(regime, label, quick),
                            ARMS[label][1], run_cache, train, run_rl)


def job_order(seeds) -> list[tuple[str, str, int]]:
    room = [(regime, label, seed) for seed in seeds for regime in FRESH for label in ("uniform-n8", "uniform-n16")]
    return room + [(regime, label, seed) for seed in seeds for regime in FRESH for label in ("spo", CANDIDATE)]


def differences(runs: dict, regime: str, arm: str, reference: str, seeds) -> np.ndarray:
    return np.array([study_metric(runs[regime, arm, s]) - study_metric(runs[regime, reference, s]) for s in seeds
                     if (regime, arm, s) in runs and (regime, reference, s) in runs])


def described(values: np.ndarray) -> dict:
    if values.size < 2:
        return {"seeds": int(values.size)}
    mean, interval = paired_interval(values)
    return {"seeds": int(values.size), "diff": float(mean), "ci95": [float(v) for v in interval],
            "paired_sd": float(values.std(ddof=1))}


def gate(runs: dict, regime: str, seeds) -> dict:
    room = described(differences(runs, regime, "uniform-n16", "uniform-n8", seeds))
    eight = [runs[regime, "uniform-n8", s] for s in seeds if (regime, "uniform-n8", s) in runs]
    if room["seeds"] < len(seeds):
        return {"room": room, "passed": None}
    start = eight[0]["curve"][0]["accuracy"]
    at_60 = float(np.mean([run["curve"][1]["accuracy"] for run in eight]))  # the first evaluation: update 60
    final = float(np.mean([study_metric(run) for run in eight]))
    criteria = {"room": room["diff"] >= ROOM_POINTS and room["ci95"][0] > 0,
                "no_early_loss": at_60 >= start and final > start}
    return {"room": room, "start": start, "uniform_n8_at_60": at_60, "uniform_n8": final, "criteria": criteria,
            "passed": all(criteria.values())}


def sizing(runs: dict, seeds) -> dict:
    """The primaries' paired SDs per regime (a revisited regime: the larger fresh one) and the study's seed count."""
    sds = {regime: {f"{arm} - {ref}": described(differences(runs, regime, arm, ref, seeds)).get("paired_sd")
                    for arm, ref in PRIMARIES_PER_REGIME} for regime in FRESH}
    for regime in REVISITED:
        sds[regime] = {name: max((sds[fresh][name] for fresh in FRESH if sds[fresh][name] is not None), default=None)
                       for name in sds[FRESH[0]]}
    every = [sd for row in sds.values() for sd in row.values()]
    if None in every:
        return {"paired_sd": sds, "study_seeds": None}
    largest = max(every)
    count = next((n for n in range(SEED_RANGE[0], SEED_RANGE[1] + 1)
                  if minimal_detectable_effect(largest, n, alpha=HOLM_FIRST_LEVEL) <= TARGET_MDE), SEED_RANGE[1])
    return {"paired_sd": sds, "largest_paired_sd": largest, "study_seeds": count,
            "mde80_at_study_seeds": minimal_detectable_effect(largest, count, alpha=HOLM_FIRST_LEVEL),
            "holm_first_level": HOLM_FIRST_LEVEL}


def summarize(runs: dict, seeds) -> dict:
    arms = {regime: {label: {"seeds": len(have), "metric_mean": float(np.mean([study_metric(r) for r in have])),
                             "no_gradient_share": float(np.mean([1 - np.mean(r["prompts_with_gradient"]) for r in have])),
                             "seconds": [r["seconds"] for r in have]}
                     for label in ARMS if (have := [runs[regime, label, s] for s in seeds if (regime, label, s) in runs])}
            for regime in FRESH}
    versus = {regime: {f"{arm} - uniform-n8": described(differences(runs, regime, arm, "uniform-n8", seeds))
                       for arm in ("spo", CANDIDATE, "uniform-n16")} for regime in FRESH}
    return {"gates": {regime: gate(runs, regime, seeds) for regime in FRESH}, "sizing": sizing(runs, seeds),
            "arms": arms, "versus_uniform_n8": versus}


def pilot_2(args) -> dict:
    """Pilot 2: the candidate fresh regime's room gate, on uniform alone."""
    seeds = PILOT_2_SEEDS[:2] if args.quick else PILOT_2_SEEDS
    jobs = [(regime, label, seed) for seed in seeds for regime in PILOT_2_FRESH for label in ("uniform-n8", "uniform-n16")]
    runs = {job: run["result"] for job, run in study_runs(jobs, pilot_run, args).items()}
    return {"gates": {regime: gate(runs, regime, seeds) for regime in PILOT_2_FRESH}, "runs": runs}


def main(argv=None) -> dict:
    import argparse

    which = argparse.ArgumentParser(add_help=False)
    which.add_argument("--pilot", type=int, choices=(1, 2), default=1)
    chosen, rest = which.parse_known_args(argv)
    args = study_arguments(__doc__, RESULTS, rest)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.quick and args.output_dir == RESULTS:
        raise SystemExit("--quick trains smoke runs, which do not belong in the pilot's results: give --output-dir.")
    if chosen.pilot == 2:
        return write_pilot_2(args)
    seeds = SEEDS[:2] if args.quick else SEEDS
    runs = {job: run["result"] for job, run in study_runs(job_order(seeds), pilot_run, args).items()}
    summary = summarize(runs, seeds)
    summary["runs"] = len(runs)
    summary["machines"] = [json.loads(entry) for entry in sorted({json.dumps(run["machine"], sort_keys=True)
                                                                  for run in runs.values()})]
    summary["command"] = ("OMP_NUM_THREADS=1 python benchmarks/sixth_study/pilot.py" + (" --quick" if args.quick else ""))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "pilot.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({"gates": summary["gates"], "sizing": summary["sizing"],
                      "versus_uniform_n8": summary["versus_uniform_n8"]}, indent=1))
    return summary


def write_pilot_2(args) -> dict:
    result = pilot_2(args)
    runs = result.pop("runs")
    summary = {**result, "runs": len(runs),
               "machines": [json.loads(entry) for entry in sorted({json.dumps(run["machine"], sort_keys=True)
                                                                    for run in runs.values()})],
               "command": "OMP_NUM_THREADS=1 python benchmarks/sixth_study/pilot.py --pilot 2"
                          + (" --quick" if args.quick else "")}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "pilot_2.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["gates"], indent=1))
    return summary


if __name__ == "__main__":
    main()
