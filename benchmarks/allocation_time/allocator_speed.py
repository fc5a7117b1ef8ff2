"""Allocation time of the trl_budget allocators against a one-rollout-at-a-time heap greedy and a dynamic program.

All solvers maximise the same objective (Knapsack RL without fallback, and CoBA-RL), so their values must agree; the
figures are ratios measured side by side in one run.

    python benchmarks/allocation_time/allocator_speed.py          # 512 prompts / B = 8192, 1e5 / B = 1e6, N_up 400 000
    python benchmarks/allocation_time/allocator_speed.py --quick  # small sizes, seconds
Until the move to benchmarks/allocation_time/ this script was benchmarks/allocator_speed.py.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the reference solvers
from reference_allocators import dynamic_program, heap_greedy  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

from trl_budget import CoBAAllocator, KnapsackAllocator


def best_time(fn, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def knapsack_gain(rates):
    def gain(i, n):
        p = rates[i]
        q = 1.0 - p
        return p * q * q * (p**n * q + q**n * p)

    return gain


def coba_gain(allocator, rates, failure_rate):
    weight, rate = allocator.saturation_curve(rates, failure_rate).weight_and_rate(rates)

    def gain(i, n):
        return weight[i] * -math.expm1(-rate[i]) * math.exp(-n * rate[i])

    return gain


def value_table(allocator, rates, failure_rate, high):
    levels = np.arange(high + 1, dtype=np.float64)
    if isinstance(allocator, KnapsackAllocator):
        return KnapsackAllocator.prompt_value(levels[None, :], rates[:, None])
    weight, rate = allocator.saturation_curve(rates, failure_rate).weight_and_rate(rates)
    return -np.expm1(-levels[None, :] * rate[:, None]) * weight[:, None]


def run_case(name, rates, budget, low, high, run_dp, repeats):
    failure_rate = 0.4
    rows = []
    for allocator, gain in (
        (KnapsackAllocator(low, high, fallback=False), knapsack_gain(rates)),
        (CoBAAllocator(low, high), coba_gain(CoBAAllocator(low, high), rates, failure_rate)),
    ):
        fast_s, counts = best_time(lambda: allocator.allocate(rates, budget, failure_rate), repeats)
        heap_s, heap_counts = best_time(lambda: heap_greedy(gain, rates.size, low, high, budget), 1)
        row = {
            "case": name,
            "objective": type(allocator).__name__,
            "prompts": int(rates.size),
            "budget": int(budget),
            "max_generations": int(high),
            "distinct_pass_rates": int(np.unique(rates).size),
            "trl_budget_ms": fast_s * 1e3,
            "heap_greedy_ms": heap_s * 1e3,
            "heap_over_trl_budget": heap_s / fast_s,
            "same_value_as_heap": math.isclose(
                allocator.value(counts, rates, failure_rate), allocator.value(heap_counts, rates, failure_rate),
                rel_tol=1e-9,
            ),
        }
        if run_dp:
            dp_s, dp_best = best_time(
                lambda: dynamic_program(value_table(allocator, rates, failure_rate, high), low, budget), 1
            )
            row["dynamic_program_ms"] = dp_s * 1e3
            row["dp_over_trl_budget"] = dp_s / fast_s
            row["same_value_as_dp"] = math.isclose(allocator.value(counts, rates, failure_rate), dp_best, rel_tol=1e-9)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes only (a few seconds)")
    parser.add_argument("--output", type=Path, default=RESULTS / "allocator_speed.json",
                        help="where the rows go as JSON (default: results/allocator_speed.json, beside this script)")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    sizes = [(64, 64 * 16, True), (2000, 2000 * 10, False)] if args.quick else [(512, 8192, True), (100_000, 1_000_000, False)]
    rows = []
    for prompts, budget, run_dp in sizes:
        # Pass rates as the tracker produces them: successes out of the 16 rollouts of the last visit.
        tracked = rng.integers(1, 16, prompts) / 16.0
        continuous = rng.uniform(0.01, 0.99, prompts)
        rows += run_case("tracked k/16 rates", tracked, budget, 2, 128, run_dp, repeats=5)
        rows += run_case("continuous rates", continuous, budget, 2, 128, run_dp, repeats=3)
    if not args.quick:  # a max_generations far above what the budget allows: the work must follow the budget
        rows += run_case("wide bounds, tracked k/16 rates", rng.integers(1, 16, 256) / 16.0, 2048, 2, 400_000, False,
                         repeats=3)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(rows, indent=2))
    print(markdown_table(rows))
    return rows


def markdown_table(rows) -> str:
    """The table docs/benchmarks.md cites."""
    lines = ["| objective, pass rates | prompts | budget | trl_budget | heap greedy | dynamic program |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        kind = "k/16" if "k/16" in row["case"] else "continuous"
        if row["max_generations"] != 128:
            kind += f", N_up {row['max_generations']:,}"
        dp = (f"{row['dynamic_program_ms']:.0f} ms ({row['dp_over_trl_budget']:.0f}×)" if "dynamic_program_ms" in row
              else "not run")
        lines.append(f"| {row['objective'].removesuffix('Allocator')}, {kind} | {row['prompts']:,} | "
                     f"{row['budget']:,} | {_ms(row['trl_budget_ms'])} | {_ms(row['heap_greedy_ms'])} "
                     f"({row['heap_over_trl_budget']:.1f}×) | {dp} |")
    return "\n".join(lines)


def _ms(milliseconds: float) -> str:
    return f"{milliseconds / 1e3:.2f} s" if milliseconds >= 1000 else f"{milliseconds:.2f} ms"


if __name__ == "__main__":
    main()
