"""Re-train stored runs of the third, fourth, fifth or sixth study with the current code and compare them with the stored ones, field
by field.

    OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py reinforce-ada-positive:40 uniform-n8:41   # the third
    OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py sorting/uniform-n8-history:300   # the fourth study
    OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py fifth:brackets/spo:500   # the fifth study
    OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py sixth:sorting-fresh/spo:610   # the sixth study

A run re-trains bit for bit when every figure it records (held-out and training accuracy at every evaluation, every
batch's logged budget figures and rewards) equals the stored one exactly (`SKIPPED` says what is not compared); then the code it executes behaves as the
code that trained the stored run, and a later study may pair new arms with those runs. Each run re-trains in a
temporary run cache, so the committed one is left as it is. Prints one line per run, and exits 1 if any differs.

Runs re-train bit for bit only on the kind of CPU that trained them. On another, show that a later code behaves as the
study's in two steps on that machine: re-train with the study's code (its commit, or any whose `code_digest` is
`STUDY_CODE`) keeping the runs (`--keep DIR`), then with the later code against them (`--against DIR`):

    OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py --keep /tmp/here fifth:brackets/spo:500   # study code
    OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py --against /tmp/here fifth:brackets/spo:500  # later

`--record FILE` also writes the check as JSON: its command, the reference, the machine and code, each run's outcome.
Until the move to benchmarks/common/ this script was benchmarks/retrain_stored.py (the path the commands stored with its
results name).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCHMARKS / "third_study"), str(BENCHMARKS / "fourth_study"),
                str(BENCHMARKS / "fifth_study"), str(BENCHMARKS / "sixth_study")]  # the studies' scripts

import fifth_study  # noqa: E402
import fourth_study  # noqa: E402
import rounds_study  # noqa: E402
import sixth_study  # noqa: E402

# Not compared: wall time (`seconds`, and `spo_prior_seconds`, the time SPO's prior took), the one kind of figure not
# decided by the code and the seed; `unseen_prompts`, whose meaning became one in every mode (before: on the batch's
# fresh rates in rounds modes); and `machine`, the record of where and by which code the run trained (the package's
# digest differs whenever its code does), no figure of the run. A figure the stored run did not record (None: its code
# logged it only in rounds modes) is not compared either.
SKIPPED = ("seconds", "spo_prior_seconds", "unseen_prompts", "machine")


def differences(stored: dict, retrained: dict, where: str = "") -> list[str]:
    """The paths at which two results differ (exact equality, floats included)."""
    if isinstance(stored, dict) and isinstance(retrained, dict):
        # a figure runs record since the stored one trained (e.g. `entropy`) is not compared; one they lost is
        found = [f"{where}.{key} (only the stored run has it)" for key in set(stored) - set(retrained)]
        for key in sorted(set(stored) & set(retrained)):
            if key not in SKIPPED:
                found += differences(stored[key], retrained[key], f"{where}.{key}")
        return found
    if isinstance(stored, list) and isinstance(retrained, list) and len(stored) == len(retrained):
        return [found for i, (a, b) in enumerate(zip(stored, retrained)) for found in differences(a, b, f"{where}[{i}]")]
    if stored is None or stored == retrained:
        return []
    return [f"{where}: stored {str(stored)[:60]}, re-trained {str(retrained)[:60]}"]


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="study runs: 'sixth:regime/arm:seed', 'fifth:regime/arm:seed', 'regime/arm:seed' or 'arm:seed'")
    parser.add_argument("--keep", type=Path, help="store the re-trained runs in this run cache (default: a temporary one)")
    parser.add_argument("--against", type=Path,
                        help="compare with the runs stored in this run cache instead of the study's committed ones")
    parser.add_argument("--record", type=Path,
                        help="also write what was compared, on which machine and code, and each outcome, as JSON")
    args = parser.parse_args(argv)
    failed, outcomes = 0, []
    for run in args.runs:
        arm, seed = run.rsplit(":", 1)
        # "sixth:regime/label" and "fifth:regime/label" name a run of those studies, "regime/label" one of the
        # fourth, a bare label one of the third
        study = (sixth_study if arm.startswith("sixth:") else fifth_study if arm.startswith("fifth:")
                 else fourth_study if "/" in arm else rounds_study)
        arm = arm.removeprefix("fifth:").removeprefix("sixth:")
        job = (*arm.split("/"), int(seed)) if "/" in arm else (arm, int(seed))
        study_run = study.study_run
        reference = args.against or study.RESULTS / "run_cache"
        stored = study_run(*job, quick=False, run_cache=reference, train=False)["result"]
        with tempfile.TemporaryDirectory() as folder:
            retrained = study_run(*job, quick=False, run_cache=args.keep or Path(folder))["result"]
        found = differences(stored, retrained)
        failed += bool(found)
        outcome = "bit for bit" if not found else f"{len(found)} figures differ, first: {'; '.join(found[:3])}"
        outcomes.append({"run": run, "stored_code": stored.get("machine", {}).get("code"), "bit_for_bit": not found,
                         "figures_differing": len(found), "outcome": outcome})
        print(f"{arm} seed {seed}: {outcome}")
    if args.record:
        write_record(args, outcomes)
    return 1 if failed else 0


def write_record(args, outcomes: list[dict]) -> None:
    """The check as run: its command, the reference it compared with, the machine and code that re-trained."""
    import json

    from trl_budget.demo.machine import machine_record

    command = "OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py " + " ".join(
        [*(["--keep", str(args.keep)] if args.keep else []), *(["--against", str(args.against)] if args.against else []),
         *args.runs])
    args.record.write_text(json.dumps({
        "command": command, "reference": str(args.against) if args.against else "the study's committed runs",
        "machine": machine_record(), "runs": outcomes}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
