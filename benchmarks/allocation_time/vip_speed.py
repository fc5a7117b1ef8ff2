"""VIP's allocation time: the release's path (SLSQP from the even split, then its rounding bit for bit) against the
exact water-filling solver (then the same rounding rule with exact gains), side by side in one run, with the
objective each reaches (lower is better) before and after rounding.

    python benchmarks/allocation_time/vip_speed.py           # 512 and 4 096 prompts, 8 rollouts a prompt (minutes)
    python benchmarks/allocation_time/vip_speed.py --quick   # 64 and 256 prompts (seconds)

At 4 096 prompts SLSQP's dense subproblem makes one iteration take minutes, so the release's path is run for
`--slsqp-iterations` iterations (1 by default) and its time for the release's 100 (scipy's default maxiter, which
it keeps) is extrapolated from the time per iteration; the row says so (`slsqp_extrapolated`), and its objective is
the one reached after those iterations. Writes results/vip_speed.json with the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common

from trl_budget.allocators.vip import (  # noqa: E402
    VarianceObjective,
    round_as_released,
    round_by_gains,
    solve_by_slsqp,
    solve_by_water_filling,
)
from benchmark_record import write_record  # noqa: E402

RELEASE_ITERATIONS = 100  # scipy's SLSQP default maxiter; the release passes no options


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def slsqp_row(objective, budget, iterations):
    """The release's path; with `iterations`, SLSQP stops there and its full time is extrapolated."""
    from scipy.optimize import minimize

    if iterations is None:
        solve_s, (real, result) = timed(lambda: solve_by_slsqp(objective, budget, 4, 32))
    else:
        size = objective.rates.size
        solve_s, result = timed(lambda: minimize(
            objective.value, np.full(size, budget / size), method="SLSQP", bounds=[(4, 32)] * size,
            constraints=[{"type": "eq", "fun": lambda n: np.sum(n) - budget}], options={"maxiter": iterations}))
        real = result.x
    row = {"slsqp_solve_s": solve_s, "slsqp_iterations": int(result.nit), "slsqp_converged": bool(result.success),
           "slsqp_message": str(result.message), "slsqp_extrapolated": iterations is not None,
           "slsqp_real_objective": float(objective.value(real))}
    if iterations is not None:
        row["slsqp_solve_s"] = solve_s / max(int(result.nit), 1) * RELEASE_ITERATIONS
        row["slsqp_measured_s"] = solve_s
    return row, real


def run_case(prompts: int, rule: str, seed: int, slsqp_iterations):
    rates = np.random.default_rng(seed).beta(0.5, 0.5, prompts)  # spread-out predicted rates
    budget = 8 * prompts
    objective = VarianceObjective(rates, rule)
    exact_s, exact = timed(lambda: solve_by_water_filling(objective, budget, 4, 32))
    exact_round_s, exact_counts = timed(lambda: round_by_gains(exact, objective.variance, budget, 32))
    row = {"prompts": prompts, "budget": budget, "rule": rule, "rates": "beta(0.5, 0.5)",
           "exact_solve_s": exact_s, "exact_round_s": exact_round_s,
           "exact_real_objective": float(objective.value(exact)),
           "exact_rounded_objective": float(objective.value(exact_counts.astype(np.float64)))}
    slsqp, real = slsqp_row(objective, budget, slsqp_iterations)
    row.update(slsqp)
    # The release's rounding, timed on the solution it would round (SLSQP's, or where cut short, the exact one).
    start = exact if slsqp_iterations is not None else real
    row["release_round_s"], counts = timed(lambda: round_as_released(start, objective.variance, budget, 32))
    row["slsqp_rounded_objective"] = float(objective.value(counts.astype(np.float64)))
    row["release_path_s"] = row["slsqp_solve_s"] + row["release_round_s"]
    row["exact_path_s"] = exact_s + exact_round_s
    row["release_over_exact"] = row["release_path_s"] / row["exact_path_s"]
    print(json.dumps(row), flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 and 256 prompts, SLSQP run in full")
    parser.add_argument("--slsqp-iterations", type=int, default=1,
                        help="SLSQP iterations run at 4 096 prompts, the release's time extrapolated from them")
    parser.add_argument("--output", type=Path, default=RESULTS / "vip_speed.json")
    args = parser.parse_args(argv)
    sizes = [(64, None), (256, None)] if args.quick else [(512, None), (4096, args.slsqp_iterations)]
    rows = [run_case(prompts, rule, 0, iterations) for prompts, iterations in sizes
            for rule in (("rloo", "grpo") if iterations is None else ("rloo",))]
    return write_record(args.output, "benchmarks/allocation_time/vip_speed.py", argv,
                        scipy=__import__("scipy").__version__, rows=rows)


def markdown_table(record) -> str:
    """The table docs/vip.md states (tests/test_vip.py checks it against the stored result)."""
    lines = ["| prompts | rule | release path (SLSQP + its rounding) | exact path | ratio | objective: release / exact "
             "(real, rounded) |", "|---:|---|---:|---:|---:|---|"]
    for row in record["rows"]:
        note = " (extrapolated)" if row["slsqp_extrapolated"] else ""
        lines.append(f"| {row['prompts']:,} | {row['rule']} | {row['release_path_s']:.1f} s{note} | "
                     f"{row['exact_path_s'] * 1e3:.1f} ms | {row['release_over_exact']:,.0f}× | "
                     f"{row['slsqp_real_objective']:.4f} / {row['exact_real_objective']:.4f}, "
                     f"{row['slsqp_rounded_objective']:.4f} / {row['exact_rounded_objective']:.4f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
