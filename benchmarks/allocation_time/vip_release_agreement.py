"""How often VIP's release path here (SLSQP from the even split, then the release's rounding) gives the counts its
release recorded, on the 126 solved cases of `tests/data/vip_release_cases.json`, and why it does not elsewhere.

    python benchmarks/allocation_time/vip_release_agreement.py    # about 10 s a setting on 2 idle cores

Each case is solved twice, in a fresh process each: with OpenBLAS's default threads (one a core) and with one
thread (`OPENBLAS_NUM_THREADS=1`), since SLSQP's BLAS calls sum in an order that depends on the thread count. A case
whose counts differ from the recorded ones falls in one of three causes, in this order:
- `whole_number_ulps`: every count whose floors differ agrees to 1e-9: it sits at a whole number (a bound, 4 or 32)
  in one solution and ulps below it in the other, so its floors differ by one;
- `stopped_short`: either solve (here or recorded) stopped at SLSQP's iteration limit;
- `other_stopping_point`: both converged, to points whose floors differ (SLSQP's tolerance on a flat objective).
Writes results/vip_release_agreement.json with the CPU it ran on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
CASES_FILE = ROOT / "tests" / "data" / "vip_release_cases.json"
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

CAUSES = ("whole_number_ulps", "stopped_short", "other_stopping_point")


def cause_of_difference(real, recorded, converged_here: bool, converged_there: bool) -> str:
    floors_differ = np.floor(real) != np.floor(recorded)
    if np.abs(real - recorded)[floors_differ].max() < 1e-9:
        return "whole_number_ulps"
    return "other_stopping_point" if converged_here and converged_there else "stopped_short"


def agreement() -> dict:
    """This process's solves of every solved case, with the BLAS threads it was started with."""
    from trl_budget.allocators.vip import VIPAllocator

    cases = [case for case in json.loads(CASES_FILE.read_text())["cases"] if case["solver_x"]]
    tally = dict.fromkeys(("release_converged", "same_real_solution", "same_counts",
                           "same_counts_where_release_converged", *CAUSES), 0)
    for case in cases:
        allocator = VIPAllocator(case["lower"], case["upper"], rule=case["rule"])
        counts = allocator.allocate(case["pass_rates"], case["budget"]).tolist()
        real, recorded = allocator.last_solve["real_counts"], np.array(case["solver_x"])
        tally["same_real_solution"] += bool(np.array_equal(real, recorded))
        tally["release_converged"] += case["solver_success"]
        if counts == case["counts"]:
            tally["same_counts"] += 1
            tally["same_counts_where_release_converged"] += case["solver_success"]
        else:
            converged = allocator.last_solve["converged"]
            tally[cause_of_difference(real, recorded, converged, case["solver_success"])] += 1
    return {"solved_cases": len(cases), **tally}


def in_fresh_process(threads: str | None) -> dict:
    environment = dict(os.environ)
    environment.pop("OPENBLAS_NUM_THREADS", None)
    if threads is not None:
        environment["OPENBLAS_NUM_THREADS"] = threads
    output = subprocess.run([sys.executable, __file__, "--one"], env=environment, capture_output=True, text=True,
                            check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:] == ["--one"]:
        print(json.dumps(agreement()))
        return
    from benchmark_record import write_record

    import scipy

    settings = {"default_threads": in_fresh_process(None), "one_thread": in_fresh_process("1")}
    record = write_record(RESULTS / "vip_release_agreement.json", "benchmarks/allocation_time/vip_release_agreement.py",
                          [], scipy=scipy.__version__, recorded_with=json.loads(CASES_FILE.read_text())["scipy"],
                          **settings)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
