"""One generation batch's allocation: how many rollout slots each prompt gets, and which process generates which."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["RolloutPlan", "balanced_slot_order", "checked_allocation", "decided_on_main_process", "rounded_to_processes",
           "stage_slots"]


def checked_allocation(allocator, pass_rates: np.ndarray, budget: int, failure_rate, bounds: tuple[int, int]):
    """Call the allocator and make sure it returned one count per prompt, within bounds, summing to the budget.

    The allocator gets a copy of the pass rates: one that edits them in place cannot change what the plan records.
    """
    returned = allocator(np.array(pass_rates, dtype=np.float64), budget, failure_rate)
    try:
        counts = np.asarray(returned)
    except ValueError as error:  # e.g. a ragged list
        raise RuntimeError(f"Allocator {allocator!r} returned {returned!r}, which is not an array of counts: "
                           f"{error}.") from error
    low, high = bounds
    problem = None
    if counts.dtype == bool or not (np.issubdtype(counts.dtype, np.integer) or np.issubdtype(counts.dtype,
                                                                                              np.floating)):
        problem = f"counts of type {counts.dtype} (it must return integers)"
    elif counts.shape != pass_rates.shape:
        problem = f"{counts.shape[0] if counts.ndim == 1 else counts.shape} counts for {pass_rates.size} prompts"
    elif not np.issubdtype(counts.dtype, np.integer) and not np.array_equal(counts, np.round(counts)):
        problem = f"non-integer counts {counts.tolist()}"
    elif counts.sum() != budget:
        problem = f"counts summing to {counts.sum()} instead of the budget {budget}"
    elif counts.min() < low or counts.max() > high:
        problem = f"counts between {counts.min()} and {counts.max()}, outside [{low}, {high}]"
    if problem:
        raise RuntimeError(f"Allocator {allocator!r} returned {problem}: {counts.tolist()}.")
    return counts.astype(np.int64)


def decided_on_main_process(is_main_process: bool, what: str, decide) -> tuple[Any, float]:
    """`decide()` run on the main process and its result broadcast to every process, with the seconds it took there.

    A failure there stops every process at once with the same error: each process raises after the broadcast, so none
    waits in a collective that another never reaches.
    """
    from accelerate.utils import broadcast_object_list  # here: the allocators import this module, and need no torch

    decision = [None, None, 0.0]  # (result, error, seconds)
    if is_main_process:
        started = time.perf_counter()
        try:
            decision[0] = decide()
        except Exception as error:  # noqa: BLE001 - re-raised below, on every rank
            decision[1] = f"{type(error).__name__}: {error}"
        decision[2] = time.perf_counter() - started
    broadcast_object_list(decision, from_process=0)  # every rank follows the main process's decision
    result, error, seconds = decision
    if error is not None:
        raise RuntimeError(f"{what} failed on the main process, so every process stops: {error}")
    return result, seconds


def balanced_slot_order(counts: np.ndarray, processes: int, seed: int) -> np.ndarray:
    """Which plan slot each row of the batch generates, rows taken process by process.

    Plan slots are laid prompt by prompt. One process keeps that order. With several, the prompts are shuffled (by
    `seed`, the same on every process) and their slots dealt to the processes in turn, so that every prompt's slots
    spread over all processes: a prompt with many long rollouts no longer lands on one process while the others wait.
    """
    if processes == 1:
        return np.arange(int(np.sum(counts)))
    shuffled = np.random.default_rng(seed).permutation(len(counts))
    slots = _ranges((np.cumsum(counts) - counts)[shuffled], np.asarray(counts)[shuffled])
    return np.concatenate([slots[rank::processes] for rank in range(processes)])


def rounded_to_processes(wanted: np.ndarray, room: np.ndarray, left: int, processes: int) -> np.ndarray:
    """A round's `wanted` rollouts per prompt, made a multiple of `processes` so that every process generates as many
    rows: raised by one rollout for each prompt of the round in turn (then for the others), within each prompt's
    `room`, when the total stays within `left`; otherwise cut by one from the last prompts of the round."""
    wanted = np.array(wanted, dtype=np.int64)
    missing = -int(wanted.sum()) % processes
    room = np.asarray(room) - wanted
    if missing and wanted.sum() + missing <= left and room.sum() >= missing:
        turn = np.concatenate([np.flatnonzero(wanted > 0), np.flatnonzero(wanted == 0)])
        while missing:
            for prompt in turn:
                if missing and room[prompt] > 0:
                    wanted[prompt], room[prompt], missing = wanted[prompt] + 1, room[prompt] - 1, missing - 1
        return wanted
    excess = int(wanted.sum()) % processes
    while excess:
        for prompt in np.flatnonzero(wanted > 0)[::-1]:
            if excess:
                wanted[prompt], excess = wanted[prompt] - 1, excess - 1
    return wanted


def stage_slots(counts: np.ndarray, stage_counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Where a stage's slots sit in the batch's plan: prompt by prompt, `stage_counts[i]` slots from `offsets[i]`.

    The plan lays each prompt's `counts[i]` slots out contiguously; a probe stage holds the first k of them, the
    second stage the rest.
    """
    return _ranges(np.cumsum(counts) - counts + offsets, stage_counts)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`starts[0], ..., starts[0] + lengths[0] - 1, starts[1], ...`: consecutive ranges laid end to end."""
    lengths = np.asarray(lengths, dtype=np.int64)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + within


@dataclass
class RolloutPlan:
    """One generation batch's allocation, identical on every process."""

    prompts: list[dict[str, Any]]  # one input row per distinct prompt, in batch order
    keys: list[str]
    pass_rates: np.ndarray  # what the allocator saw (with a probe stage: history and probe together)
    failure_rate: float | None
    counts: np.ndarray  # rollouts of each prompt, probe included
    slot_order: np.ndarray  # the plan slot of every row of the batch, stage by stage and process by process
    history_rates: np.ndarray | None = None  # pass rates from history alone
    history_counts: np.ndarray | None = None  # with a probe stage, the allocation the history alone gave
    probe_generations: int = 0  # rollouts of each prompt in the probe stage
    round_counts: tuple[np.ndarray, ...] = ()  # rollouts of each prompt in each round of generation, in order
    rewards: np.ndarray | None = None  # the (weighted) reward of every trained row, in plan order

    @property
    def round_rows(self) -> list[int]:
        """Rows of each round, in order (one round: the whole batch)."""
        return [int(counts.sum()) for counts in self.round_counts]
