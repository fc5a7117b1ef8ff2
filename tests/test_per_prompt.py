"""Rounds decided prompt by prompt (`trl_budget.per_prompt`): whatever order the prompts' rounds finish in, the batch
gets exactly the rounds the round-synchronous rule decides, and the rule is left as the synchronous path leaves it."""

import numpy as np
import pytest

from trl_budget.allocators.reinforce_ada import ReinforceAda
from trl_budget.allocators.solver import spread_evenly
from trl_budget.per_prompt import PerPromptSchedule
from trl_budget.round_rules import ProbeThenAllocate, UntilMixed
from trl_budget.rounds import GeneratedRounds

PROMPTS = 24


def until_mixed(first: int, per_round: int, most: int, budget: int, processes: int = 1, max_rounds=None):
    def evenly(pass_rates, counts, spare):
        return spread_evenly(int(counts.sum()) + spare, counts, np.full(counts.size, most))

    return lambda: UntilMixed(first, per_round, most, budget, processes, max_rounds,
                              lambda wins, trials: wins / np.maximum(trials, 1), evenly)


def reinforce_ada(choice: str, per_round: int, rounds: int, budget: int, processes: int = 1):
    return lambda: ReinforceAda(choice, samples_per_round=per_round, max_rounds=rounds, max_generated=budget,
                                default_generations=4).round_rule(processes)


def drawn_outcomes(rng: np.random.Generator) -> np.ndarray:
    """Each prompt's outcomes in the order its rollouts earn them: a drawn pass rate (many never or always solved),
    and now and then an unscored rollout (NaN)."""
    rates = rng.choice([0.0, 0.0, 0.05, 0.3, 0.7, 1.0], PROMPTS)
    outcomes = (rng.random((PROMPTS, 128)) < rates[:, None]).astype(np.float64)
    outcomes[rng.random(outcomes.shape) < 0.03] = np.nan
    return outcomes


def add_round(rounds: GeneratedRounds, counts: np.ndarray, outcomes: np.ndarray) -> None:
    """A round of `counts[p]` rollouts of each prompt p, each earning p's next outcome."""
    used = rounds.counts
    rows = np.concatenate([outcomes[p, used[p] : used[p] + count] for p, count in enumerate(counts)])
    rounds.add_evidence(counts, rows)


def synchronous(rule, outcomes: np.ndarray, rounds: GeneratedRounds | None = None) -> GeneratedRounds:
    rounds = GeneratedRounds(PROMPTS, 1, 0) if rounds is None else rounds
    while (counts := rule.next_round(rounds)) is not None:
        add_round(rounds, np.asarray(counts, dtype=np.int64), outcomes)
    return rounds


def prompt_by_prompt(rule, outcomes: np.ndarray, rng: np.random.Generator) -> tuple[GeneratedRounds, int]:
    """The rounds of `PerPromptSchedule`, each prompt's round finishing in a drawn order, then the rule's own to the
    end; and how many rounds were decided prompt by prompt."""
    schedule, earned = PerPromptSchedule(rule, PROMPTS), np.zeros(PROMPTS, dtype=np.int64)
    in_flight = [(p, 0) for p in np.flatnonzero(schedule.first_round())]
    while in_flight:
        prompt, round_index = in_flight.pop(int(rng.integers(len(in_flight))))
        count = int(schedule.rounds[round_index][prompt])
        result = outcomes[prompt, earned[prompt] : earned[prompt] + count]
        earned[prompt] += count
        in_flight += [(p, r) for p, r, _ in schedule.finished(prompt, round_index, result)]
    assert schedule.waits_for_all()
    ahead = len(schedule.rounds)
    return synchronous(rule, outcomes, schedule.synchronous_rounds()), ahead


RULES = {
    "until mixed, +1": until_mixed(2, 1, 32, 8 * PROMPTS),
    "until mixed, few large rounds": until_mixed(4, 4, 16, 8 * PROMPTS),
    "until mixed, 3 rounds at most": until_mixed(2, 2, 16, 8 * PROMPTS, max_rounds=3),
    "reinforce-ada positive": reinforce_ada("positive_focused", 4, 16, 8 * PROMPTS),
    "reinforce-ada balanced": reinforce_ada("balanced", 4, 6, 8 * PROMPTS),
    "reinforce-ada, 2 processes": reinforce_ada("positive_focused", 4, 16, 8 * PROMPTS, processes=2),
    "until mixed, 2 processes, even amounts": until_mixed(2, 2, 16, 8 * PROMPTS, processes=2),
    "until mixed, 2 processes, +1 (rounding shared)": until_mixed(2, 1, 32, 8 * PROMPTS, processes=2),
}


@pytest.mark.parametrize("name", RULES)
def test_prompt_by_prompt_gives_the_synchronous_rounds_whatever_finishes_first(name):
    rng = np.random.default_rng(7)
    ahead_anywhere = False
    for _ in range(4):
        outcomes = drawn_outcomes(rng)
        expected_rule = RULES[name]()
        expected = synchronous(expected_rule, outcomes)
        for _ in range(3):
            rule = RULES[name]()
            rounds, ahead = prompt_by_prompt(rule, outcomes, rng)
            assert [c.tolist() for c in rounds.counts_per_round()] == [c.tolist() for c in
                                                                        expected.counts_per_round()]
            np.testing.assert_array_equal(rounds.wins, expected.wins)
            # the rule is left as the synchronous path leaves it: its logs and its final pass rates
            assert rule.active_after_round == expected_rule.active_after_round
            np.testing.assert_array_equal(rule.pass_rates, expected_rule.pass_rates)
            ahead_anywhere |= ahead > 1
    # a rule whose rounding to the processes may move rollouts between prompts decides nothing prompt by prompt
    assert ahead_anywhere == ("rounding shared" not in name)


def test_a_prompt_runs_ahead_while_the_budget_cannot_bind_and_waits_where_it_might():
    rule = reinforce_ada("positive_focused", 4, 16, 8 * PROMPTS)()
    schedule = PerPromptSchedule(rule, PROMPTS)
    assert schedule.first_round().tolist() == [4] * PROMPTS
    # prompt 0 fails its first round: 96 + 4 fits the budget of 192 whatever the others do, so it goes on alone
    assert schedule.finished(0, 0, [0, 0, 0, 0]) == [(0, 1, 4)]
    assert schedule.finished(0, 1, [0, 0, 0, 0]) == []  # round 2 might not fit (96 + 2 x 96 > 192): it waits
    assert schedule.waiting == {0: (2, 4)}
    # the others are solved in their first round; once 12 have stopped, prompt 0's round 2 fits whatever the other 11
    # do (12 of its own + 12 x 4 + 11 x 12 = 192)
    released = {prompt: schedule.finished(prompt, 0, [1, 0, 0, 0]) for prompt in range(1, PROMPTS)}
    assert {prompt: went for prompt, went in released.items() if went} == {12: [(0, 2, 4)]}
    # a solved prompt stops for good
    assert schedule.stopped[1:].all() and not schedule.waits_for_all()


def test_a_round_decided_otherwise_than_the_rule_decides_it_is_refused_at_the_hand_over():
    rule = until_mixed(2, 2, 16, 8 * PROMPTS)()
    schedule = PerPromptSchedule(rule, PROMPTS)
    schedule.first_round()
    for prompt in range(PROMPTS):
        schedule.finished(prompt, 0, [1.0, 0.0])  # every prompt mixed: all stop
    assert schedule.waits_for_all() and len(schedule.rounds) == 1
    schedule.rounds.append(np.full(PROMPTS, 2))  # a round the rule never decided
    schedule.outcomes.update({(prompt, 1): np.zeros(2) for prompt in range(PROMPTS)})
    with pytest.raises(RuntimeError, match="round 1 was decided prompt by prompt as"):
        schedule.synchronous_rounds()


def test_a_round_finished_twice_or_with_other_rollouts_is_refused():
    schedule = PerPromptSchedule(until_mixed(2, 2, 16, 8 * PROMPTS)(), PROMPTS)
    schedule.first_round()
    with pytest.raises(RuntimeError, match="with 3 outcomes for its 2 rollouts"):
        schedule.finished(0, 0, [0, 0, 0])
    schedule.finished(0, 0, [0, 0])
    with pytest.raises(RuntimeError, match="prompt 0's round 0 finished twice"):
        schedule.finished(0, 0, [0, 0])
    with pytest.raises(RuntimeError, match="only once every prompt has stopped or waits"):
        schedule.synchronous_rounds()


def test_a_rule_that_shares_every_later_round_decides_nothing_prompt_by_prompt():
    # a probe and then an allocation over every prompt: its second round is shared through and through
    rule = ProbeThenAllocate(2, np.full(PROMPTS, 0.5), lambda rates: (np.full(PROMPTS, 8), None),
                             lambda wins, trials: wins / trials)
    schedule = PerPromptSchedule(rule, PROMPTS)
    schedule.first_round()
    for prompt in range(PROMPTS):
        assert schedule.finished(prompt, 0, [0.0, 0.0]) == []
    rounds = schedule.synchronous_rounds()
    assert rule.next_round(rounds).tolist() == [6] * PROMPTS


def test_rows_scored_prompt_by_prompt_are_logged_in_the_order_scored_and_the_rest_round_by_round():
    # two prompts; rounds 0 and 1 generated prompt by prompt, scored in the order: prompt 1's round 0, prompt 0's
    # round 0 and 1; then a synchronous round 2 of one rollout each
    rounds = GeneratedRounds(2, 1, 0)
    for counts in ([1, 2], [1, 0], [1, 1]):
        counts = np.array(counts)
        rows = int(counts.sum())
        rounds.add_evidence(counts, np.zeros(rows))
    # plan: prompt 0's slots 0-2 (rounds 0, 1, 2), prompt 1's slots 3-5 (round 0 twice, round 2)
    assert rounds.slot_order().tolist() == [0, 3, 4, 1, 2, 5]
    rounds.rounds_ahead, rounds.logged_ahead = 2, np.array([1, 2, 0, 3])  # rows by index among rounds 0 and 1
    assert rounds.logged_slot_order().tolist() == [3, 4, 0, 1, 2, 5]


def test_completions_generated_prompt_by_prompt_go_only_to_the_prompts_they_were_generated_from():
    from trl_budget.per_prompt_engine import Replayed

    replayed = Replayed([[5, 6], [7]], [[1, 2], [3]], [[-0.1, -0.2], [-0.3]])
    assert replayed.take([[5, 6], [7]]) == ([[1, 2], [3]], [[-0.1, -0.2], [-0.3]])
    with pytest.raises(RuntimeError, match="a completion would be credited to another prompt"):
        replayed.take([[7], [5, 6]])


def test_rounds_scored_on_two_processes_are_read_back_in_rollout_order_and_logged_as_gathered():
    import torch

    from trl_budget.per_prompt_engine import _logged_order, _Scored

    # Round 0 gives prompt 0 four rollouts and prompt 1 two, round 1 gives prompt 0 two; each process scores half of
    # every round. Gathered rows are process 0's then process 1's, each holding its share of the keys in order.
    outcomes = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 0.0])  # p0 (0,0) rollouts 0-1, (1,0) 0 | p1: (0,0) 2-3, (1,0) 1
    piece = _Scored([(0, 0), (1, 0)], [2, 1], 2, {}, torch.zeros(6, 1), torch.zeros(6), outcomes)
    assert piece.round_outcomes((0, 0)).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert piece.round_outcomes((1, 0)).tolist() == [1.0, 0.0]
    assert piece.gathered_rows((1, 0), 1).tolist() == [5]

    # Logged piece by piece, each process by process; the rounds' rows are round by round, process by process,
    # prompt by prompt: round 0 p0 = (0,0)x2 (rows 0-1), (1,0) (2); p1 = (0,0)x2 (3-4), (1,0) (5); round 1 = 6 | 7.
    first = _Scored([(1, 0)], [1], 2, {}, torch.zeros(2, 1), torch.zeros(2), np.zeros(2))
    second = _Scored([(0, 0)], [2], 2, {}, torch.zeros(4, 1), torch.zeros(4), np.zeros(4))
    third = _Scored([(0, 1)], [1], 2, {}, torch.zeros(2, 1), torch.zeros(2), np.zeros(2))
    rounds = [np.array([4, 2]), np.array([2, 0])]
    assert _logged_order([first, second, third], rounds, 2).tolist() == [2, 5, 0, 1, 3, 4, 6, 7]
