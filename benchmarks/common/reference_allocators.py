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


def release_knapsack_counts(
    pass_rates: np.ndarray,
    n: int,
    min_n: int = 2,
    max_n: int = 128,
    alpha: float = 0.9,
    negative_n: int = 2,
    positive_n: int = 2,
    fallback: bool = True,
) -> np.ndarray:
    """Knapsack RL's release rule (`sampling_budget_by_knapsack`), written out plainly for `len(pass_rates) x n`.

    NaN marks a prompt without a valid history. Like the release, it can give a prompt more than `max_n` (fallback
    receivers, and mixed prompts whose share exceeds their room). Where the release would divide by zero (the fallback
    fires but every prompt is mixed) it does not fire here.
    """
    rates = np.asarray(pass_rates, dtype=np.float64)
    size = rates.size
    seen = ~np.isnan(rates)
    as_held = np.where(seen, rates, 0.0)  # the release's array holds 0 for prompts without history
    mixed = seen & (rates > 0) & (rates < 1)
    counts = np.full(size, n, dtype=np.int64)
    counts[mixed] = min_n
    counts[seen & (rates == 0)] = negative_n
    counts[seen & (rates == 1)] = positive_n
    spare = size * n - int(counts.sum())

    def add_in_equal_parts(indices: np.ndarray, amount: int) -> None:
        share, remainder = divmod(amount, indices.size)
        counts[indices] += share
        counts[indices[:remainder]] += 1

    zero = np.flatnonzero(as_held == 0)
    if spare > 0 and not mixed.any():
        if zero.size:
            add_in_equal_parts(zero, spare)
        else:
            counts[:] = n
        return counts
    if spare <= 0:
        return counts
    if fallback:
        p = rates[mixed]
        cost = np.log(1 - alpha) / np.log(np.maximum(p, 1 - p))
        needed = sum(int(min(max_n, c)) for c in cost)
        receivers = zero if zero.size else np.flatnonzero(~mixed)
        if needed < spare and receivers.size:
            add_in_equal_parts(receivers, spare - needed)
            spare = needed
    mixed_indices = np.flatnonzero(mixed)
    room = (max_n - min_n) * mixed_indices.size
    used = min(spare, room)
    p = rates[mixed_indices]

    def gain(i: int, count: int) -> float:  # value(count + 1) - value(count) of mixed prompt i
        return p[i] * (1 - p[i]) ** 2 * (p[i] ** count * (1 - p[i]) + (1 - p[i]) ** count * p[i])

    split = heap_greedy(gain, mixed_indices.size, min_n, max_n, min_n * mixed_indices.size + used)
    counts[mixed_indices] = split
    if spare > used:
        add_in_equal_parts(mixed_indices, spare - used)
    return counts
