"""Allocation time under `budget_token_cap` against the uncapped allocation, side by side in one process.

    python benchmarks/allocation_time/token_cap_speed.py

A batch of 512 prompts with tracker pass rates (k/16) and 8 192 rollouts, completion lengths log-normal (median 300
tokens, hard prompts longer), caps 1.0 and 0.9 of the uniform allocation's expected tokens. The cap's bisection calls
the allocator about 40 times, with one price per prompt (so the gain matrix has one curve per prompt).
Writes benchmarks/allocation_time/results/token_cap_speed.json.
Until the move to benchmarks/allocation_time/ this script was benchmarks/token_cap_speed.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from trl_budget import CoBAAllocator, KnapsackAllocator
from trl_budget.allocators.token_cap import allocate_under_token_cap


def median_time(fn, repeats: int = 7) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def main() -> None:
    rng = np.random.default_rng(0)
    rates = rng.integers(1, 16, 512) / 16.0
    lengths = np.exp(rng.normal(np.log(300), 0.4, 512)) * (1.5 - rates)  # hard prompts (low p) run longer
    rows = []
    for allocator in (KnapsackAllocator(2, 128, default_generations=16), CoBAAllocator(2, 128)):
        free_s, free = median_time(lambda: allocator.allocate(rates, 8192, 0.4))
        for cap in (1.0, 0.9):
            capped_s, capped = median_time(lambda: allocate_under_token_cap(allocator, rates, 8192, 0.4, lengths, cap))
            rows.append({
                "allocator": type(allocator).__name__, "cap": cap, "uncapped_ms": free_s * 1e3,
                "capped_ms": capped_s * 1e3, "ratio": capped_s / free_s, "multiplier": capped.multiplier,
                "token_ratio_capped": capped.token_ratio,
                "token_ratio_uncapped": float(np.dot(free, lengths) / np.dot(np.full(512, 16), lengths)),
                "value_kept": allocator.value(capped.counts, rates, 0.4) / allocator.value(free, rates, 0.4),
            })
    Path(__file__).resolve().parent.joinpath("results", "token_cap_speed.json").write_text(json.dumps(rows, indent=2))
    print("| allocator | cap | expected tokens vs uniform, uncapped → capped | value kept | uncapped | capped |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['allocator'].removesuffix('Allocator')} | {row['cap']} | {row['token_ratio_uncapped']:.3f} → "
              f"{row['token_ratio_capped']:.3f} | {row['value_kept']:.3f} | {row['uncapped_ms']:.2f} ms | "
              f"{row['capped_ms']:.1f} ms ({row['ratio']:.0f}×) |")


if __name__ == "__main__":
    main()
