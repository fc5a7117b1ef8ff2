"""Straightforward reference solvers of the same separable problems, for the speed benchmark and the tests."""

from __future__ import annotations

import heapq

import numpy as np


def heap_greedy(gain, size: int, low: int, high: int, budget: int) -> np.ndarray:
    """One rollout at a time to the largest marginal gain `gain(i, n)` (n -> n + 1), ties to the lowest index."""
    counts = [low] * size
    heap = [(-gain(i, low), i) for i in range(size) if low < high]
    heapq.heapify(heap)
    for _ in range(budget - low * size):
        _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < high:
            heapq.heappush(heap, (-gain(i, counts[i]), i))
    return np.asarray(counts, dtype=np.int64)


def dynamic_program(values: np.ndarray, low: int, budget: int) -> float:
    """Best total of `values[i, n]` (prompt i given n rollouts, -inf where not allowed) spending exactly `budget`.

    The O(prompts x budget x max_generations) dynamic program of the Knapsack RL release.
    """
    best = np.full(budget + 1, -np.inf)
    best[0] = 0.0
    for row in values:
        new = np.full(budget + 1, -np.inf)
        for n in range(low, row.size):
            if n > budget:
                break
            np.maximum(new[n:], best[: budget + 1 - n] + row[n], out=new[n:])
        best = new
    return float(best[budget])
