"""Rounds decided prompt by prompt: a prompt's next round as soon as its own round has finished, exactly as the
round-synchronous rule would decide it.

A round rule decides each round from every prompt's outcomes so far (`round_rules`). Most of what it decides is each
prompt's own: rounds until mixed gives a prompt `per_round` more while it is not mixed, Reinforce-Ada
`samples_per_round` while it lacks its signal. Some of it is shared: when the prompts still running ask for more than
the batch's budget has left, the rule cuts the round over all of them; rounds until mixed spreads what the budget left
over every prompt at the end; a round's rollouts are rounded to a multiple of the processes. A shared decision taken
on whichever prompts happened to finish first would depend on timing, and differ from run to run and from process to
process. So `PerPromptSchedule` lets a prompt go on alone only while its next round is provably its own:

- the rule cuts no round up to round r as long as every prompt's rollouts through round r, each round not yet decided
  counted at the most a round gives a prompt (within its cap), fit the budget; then each prompt's round r is what its
  own outcomes ask (`rule.own_asks`);
- the rounding to the processes moves nothing while every amount the rule asks is a multiple of the processes
  (`rule.bounds_of_asks` is None otherwise, and no prompt goes on alone).

What is known only grows, so the bound only falls: *when* a prompt goes on depends on timing, *what* it is given never
does. Once every prompt has stopped or waits, every prompt waits at the same round (a prompt is released as soon as any
prompt could be at its round), and the rest is the rule's, round by round, on every prompt's outcomes:
`synchronous_rounds()` hands the rounds over as the rule sees them, having replayed the rule over them (which also
checks that each was decided as the rule decides it).
"""

from __future__ import annotations

import numpy as np

from .rounds import GeneratedRounds

__all__ = ["PerPromptSchedule"]


class PerPromptSchedule:
    """One batch's rounds, prompt by prompt, for a round rule with `own_asks` and `bounds_of_asks` (rounds until mixed,
    Reinforce-Ada); any other rule, or one whose rounding may move rollouts, decides everything after its first round
    on every prompt, as the synchronous path does.

    `first_round()` gives the first round's rollouts of every prompt; `finished(prompt, round, outcomes)` records one
    prompt's round (its outcomes: 1, 0 or NaN for unscored, one per rollout) and returns the rounds that may go now, as
    (prompt, round, rollouts); once every prompt has stopped or waits (`waits_for_all()`), `synchronous_rounds()` hands
    the batch back to the rule.
    """

    def __init__(self, rule, num_prompts: int):
        self.rule, self.num_prompts = rule, num_prompts
        own = getattr(rule, "bounds_of_asks", None)
        bounds = own(num_prompts) if callable(own) else None
        self.alone = bounds is not None  # prompts may go on alone
        self.budget, self.most_a_round, self.cap = bounds if self.alone else (0, 0, 0)
        self.rounds: list[np.ndarray] = []  # each round's rollouts of every prompt, as decided so far
        self.outcomes: dict[tuple[int, int], np.ndarray] = {}  # (prompt, round) -> its outcomes, once finished
        self.counts = np.zeros(num_prompts, dtype=np.int64)  # rollouts decided so far, each prompt
        self.wins, self.trials = np.zeros(num_prompts), np.zeros(num_prompts)  # over its scored rollouts
        self.last_round = np.zeros(num_prompts, dtype=np.int64)  # each prompt's last round decided
        self.stopped = np.zeros(num_prompts, dtype=bool)
        self.waiting: dict[int, tuple[int, int | None]] = {}  # prompt -> (the round it waits for, its ask)

    def first_round(self) -> np.ndarray:
        first = np.asarray(self.rule.next_round(GeneratedRounds(self.num_prompts, 1, 0)), dtype=np.int64)
        self._decide(np.arange(self.num_prompts), 0, first)
        for prompt in np.flatnonzero(first == 0):  # no round to finish: it asks from no evidence at all
            self._ask_next(int(prompt), 0)
        return first

    def finished(self, prompt: int, round_index: int, outcomes) -> list[tuple[int, int, int]]:
        """Prompt `prompt`'s round `round_index` has finished with `outcomes`; the rounds that may go now."""
        outcomes = np.asarray(outcomes, dtype=np.float64)
        if (prompt, round_index) in self.outcomes or outcomes.size != self.rounds[round_index][prompt]:
            raise RuntimeError(f"prompt {prompt}'s round {round_index} finished twice, or with {outcomes.size} "
                               f"outcomes for its {self.rounds[round_index][prompt]} rollouts.")
        self.outcomes[(prompt, round_index)] = outcomes
        scored = ~np.isnan(outcomes)
        self.wins[prompt] += outcomes[scored].sum()
        self.trials[prompt] += scored.sum()
        self._ask_next(prompt, round_index)
        return self._release()

    def waits_for_all(self) -> bool:
        """Every prompt has stopped or waits: nothing more is decided prompt by prompt."""
        return len(self.waiting) == int((~self.stopped).sum())

    def synchronous_rounds(self) -> GeneratedRounds:
        """Once every prompt has stopped or waits: the rounds decided so far with their outcomes, as the rule sees
        them, and the rule replayed over them into the state the synchronous path leaves it in; the rest of the batch
        is `rule.next_round` on these rounds, round by round.

        Raises a RuntimeError if a round was not decided as the rule decides it on every prompt's outcomes."""
        if not self.waits_for_all():
            raise RuntimeError("the rest of the batch is decided only once every prompt has stopped or waits.")
        rounds = GeneratedRounds(self.num_prompts, 1, 0)
        for round_index, counts in enumerate(self.rounds):
            if round_index:  # the first was the rule's own
                decided = self.rule.next_round(rounds)
                if decided is None or not np.array_equal(decided, counts):
                    raise RuntimeError(
                        f"round {round_index} was decided prompt by prompt as {counts.tolist()}, where the rule "
                        f"decides {None if decided is None else np.asarray(decided).tolist()} on every prompt's "
                        "outcomes.")
            outcomes = [self.outcomes[(prompt, round_index)] for prompt in np.flatnonzero(counts)]
            rounds.add_evidence(counts, np.concatenate(outcomes) if outcomes else np.zeros(0))
        return rounds

    def _ask_next(self, prompt: int, round_index: int) -> None:
        """The prompt's round `round_index` is its last: it stops, or waits with what its own outcomes ask next
        (None where the rule decides every round on every prompt)."""
        if not self.alone:
            self.waiting[prompt] = (round_index + 1, None)
            return
        ask = int(self.rule.own_asks(self.counts[prompt : prompt + 1], self.wins[prompt : prompt + 1],
                                     self.trials[prompt : prompt + 1], round_index + 1)[0])
        if ask == 0:
            self.stopped[prompt] = True
        else:
            self.waiting[prompt] = (round_index + 1, ask)

    def _release(self) -> list[tuple[int, int, int]]:
        going = []
        for prompt, (round_index, ask) in sorted(self.waiting.items()):
            if ask is not None and self._worst_case_through(round_index) <= self.budget:
                del self.waiting[prompt]
                self._decide(np.array([prompt]), round_index, np.array([ask]))
                going.append((prompt, round_index, ask))
        return going

    def _worst_case_through(self, round_index: int) -> int:
        """The most rollouts the rule can give all prompts through round `round_index`, from what is known now."""
        undecided = np.where(self.stopped, 0, np.maximum(round_index - self.last_round, 0))
        return int(np.minimum(self.counts + undecided * self.most_a_round, np.maximum(self.cap, self.counts)).sum())

    def _decide(self, prompts: np.ndarray, round_index: int, counts: np.ndarray) -> None:
        while len(self.rounds) <= round_index:
            self.rounds.append(np.zeros(self.num_prompts, dtype=np.int64))
        self.rounds[round_index][prompts] = counts
        self.counts[prompts] += counts
        self.last_round[prompts] = round_index
