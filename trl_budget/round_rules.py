"""Round rules: how many rollouts of each prompt the next round of a generation batch generates.

A rule answers `next_round(rounds)` with the next round's count for each prompt, or None once the batch is complete;
`rounds` (a `GeneratedRounds`) holds what was generated so far and its in-batch successes. After the last round,
`pass_rates` is what the final allocation saw and `history_counts` (with a probe) what history alone would have given.

- `OneShot`: both releases. One round, allocated from the pass rates of earlier visits.
- `ProbeThenAllocate`: `probe_generations = k`. k rollouts of every prompt, then the allocation of the whole
  budget from pass rates that include them, whose remainder is the second round.
- `UntilMixed`: `rounds_generations = m`. A first round of every prompt, then rounds of m more rollouts for each
  prompt whose rollouts so far are all successes or all failures (a zero-variance group), until every prompt is mixed,
  reaches `max_generations`, or the rounds run out; the budget left is then spread by the allocator's value over all
  prompts (`top_up`). Every rollout is trained.

The rules never generate more than the batch's budget in total, and each round's rollouts are a multiple of the
number of processes, so every process generates the same number of rows in every round.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .allocators.solver import spread_evenly
from .rollout_plan import rounded_to_processes
from .rounds import GeneratedRounds

__all__ = ["OneShot", "ProbeThenAllocate", "UntilMixed", "top_up"]


class OneShot:
    """One round, allocated from history: `allocate(pass_rates) -> counts`."""

    single_round = True

    def __init__(self, history_rates: np.ndarray, allocate: Callable[[np.ndarray], np.ndarray]):
        self.pass_rates, self.allocate, self.history_counts = history_rates, allocate, None

    def next_round(self, rounds: GeneratedRounds) -> np.ndarray | None:
        return self.allocate(self.pass_rates) if len(rounds) == 0 else None


class ProbeThenAllocate:
    """k rollouts of every prompt; then the rest of the allocation made from fresh pass rates.

    `allocate(pass_rates) -> (counts, history_counts)`: the counts from the fresh rates and, for the logs, those that
    history alone would have given. `fresh_rates(wins, trials)`: pass rates from the probe's evidence and history.
    """

    single_round = False

    def __init__(self, probe: int, history_rates: np.ndarray, allocate, fresh_rates):
        self.probe, self.pass_rates, self.history_counts = probe, history_rates, None
        self.allocate, self.fresh_rates = allocate, fresh_rates

    def next_round(self, rounds: GeneratedRounds) -> np.ndarray | None:
        if len(rounds) == 0:
            return np.full(rounds.num_prompts, self.probe, dtype=np.int64)
        if len(rounds) > 1:
            return None
        self.pass_rates = self.fresh_rates(rounds.wins, rounds.trials)
        counts, self.history_counts = self.allocate(self.pass_rates)
        rest = counts - rounds.counts
        return rest if rest.any() else None


class UntilMixed:
    """Rounds until every prompt is mixed, then the budget left by the allocator's value.

    Args:
        first: rollouts of every prompt in the first round.
        per_round: rollouts added in each later round to every prompt not yet mixed.
        most: the most rollouts of one prompt in the batch (`max_generations`).
        budget: the batch's rollouts in total.
        processes: every round's rollouts are a multiple of it.
        max_rounds: the most rounds of sampling until mixed (the first included); None: until the budget is spent.
        fresh_rates: `(wins, trials) -> pass rates` from the batch's evidence and history.
        top_up: `(pass_rates, counts, spare) -> counts` that add `spare` rollouts by the allocator's value.
    """

    single_round = False

    def __init__(self, first: int, per_round: int, most: int, budget: int, processes: int, max_rounds: int | None,
                 fresh_rates, top_up_by_value):
        self.first, self.per_round, self.most, self.budget = first, per_round, most, budget
        self.processes, self.max_rounds = processes, max_rounds
        self.fresh_rates, self.top_up = fresh_rates, top_up_by_value
        self.pass_rates, self.history_counts = None, None
        self.active_after_round: list[float] = []  # share of prompts still active (not mixed, below the cap)
        self._topped_up = False  # the budget left was spread: the batch is complete

    def next_round(self, rounds: GeneratedRounds) -> np.ndarray | None:
        counts = rounds.counts
        if len(rounds) == 0:
            return self._for_processes(np.full(counts.size, self.first, dtype=np.int64), counts)
        if self._topped_up:
            return None
        self.active_after_round.append(float((~rounds.mixed() & (counts < self.most)).mean()))
        left = self.budget - int(counts.sum())
        wanted = self.own_asks(counts, rounds.wins, rounds.trials, len(rounds))
        if wanted.any() and left > 0:
            if wanted.sum() > left:  # the last round that fits: the budget left, spread evenly over the wants
                wanted = spread_evenly(left, np.zeros_like(wanted), wanted)
            return self._for_processes(wanted, counts)
        self._topped_up = True
        self.pass_rates = self.fresh_rates(rounds.wins, rounds.trials)
        extra = self.top_up(self.pass_rates, counts.copy(), left) - counts if left else np.zeros_like(counts)
        return extra if extra.any() else None

    def _for_processes(self, wanted: np.ndarray, counts: np.ndarray) -> np.ndarray:
        # The budget left is a multiple of the processes, and so is the room below the cap: raising always fits.
        return rounded_to_processes(wanted, self.most - counts, self.budget - int(counts.sum()), self.processes)

    # ------------------------------------------------------------- prompt by prompt (`per_prompt.PerPromptSchedule`)

    def own_asks(self, counts: np.ndarray, wins: np.ndarray, trials: np.ndarray, round_index: int) -> np.ndarray:
        """What each prompt's own rollouts ask of round `round_index` (after the first), before the rule's shared
        decisions (the budget's cut, the rounding to the processes, the top-up): `per_round` more while it is neither
        mixed nor at its cap and rounds are left, else 0 (for good: a mixed prompt stays mixed)."""
        going = ~((wins > 0) & (wins < trials)) & (counts < self.most)
        if self.max_rounds is not None:
            going &= round_index < self.max_rounds
        return np.where(going, np.minimum(self.per_round, self.most - counts), 0)

    def bounds_of_asks(self, prompts: int) -> tuple[int, int, int] | None:
        """The batch's budget, the most one round asks of a prompt and the most a prompt gets; None where a round's
        rounding to the processes may move rollouts between prompts (then no prompt decides alone)."""
        if any(amount % self.processes for amount in (self.first, self.per_round, self.most)):
            return None
        return self.budget, self.per_round, self.most


def top_up(allocator, pass_rates: np.ndarray, counts: np.ndarray, spare: int, failure_rate, most: int) -> np.ndarray:
    """`counts` plus `spare` rollouts, spread by the allocator's value: its own `top_up` where it has one (knapsack,
    coba, VIP's objective); otherwise evenly (uniform, and allocators that define no top-up), up to `most` per prompt."""
    own = getattr(allocator, "top_up", None)
    if callable(own):
        return np.asarray(own(pass_rates, counts, spare, failure_rate), dtype=np.int64)
    return spread_evenly(int(counts.sum()) + spare, counts, np.full(counts.size, most))
