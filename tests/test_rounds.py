"""Rounds of sampling: the round rules checked by hand on scripted outcomes, the allocators' top-ups against brute
force, and real runs of the trainer generating in rounds until every prompt is mixed."""

import itertools

import numpy as np
import pytest
from helpers import assert_resumes_exactly, config_kwargs, make_trainer
from test_probe import RowRecorder, assert_advantages_over_whole_groups

from trl_budget import BudgetGRPOConfig, CoBAAllocator, KnapsackAllocator, UniformAllocator
from trl_budget.round_rules import UntilMixed, top_up
from trl_budget.rounds import GeneratedRounds


def scripted(outcomes: list[list[int]]):
    """Generate rounds whose rollouts succeed as `outcomes[i]` lists, in order, for prompt i."""

    def generate(rounds: GeneratedRounds, counts: np.ndarray) -> None:
        rows = [outcomes[prompt][int(rounds.counts[prompt]) :][:count] for prompt, count in enumerate(counts)]
        rows = np.concatenate(rows).astype(float)
        rounds.add_evidence(counts, rows)

    return generate


def run_rule(rule, outcomes, processes=1):
    rounds = GeneratedRounds(len(outcomes), processes, 0)
    generate, sizes = scripted(outcomes), []
    while (counts := rule.next_round(rounds)) is not None:
        sizes.append(counts.tolist())
        generate(rounds, counts)
    return rounds, sizes


def even_top_up(pass_rates, counts, spare):
    return top_up(UniformAllocator(1, 8), pass_rates, counts, spare, None, most=8)


def no_history(wins, trials):
    return wins / trials


ALWAYS, NEVER = [1] * 8, [0] * 8
OUTCOMES = [ALWAYS, [1, 0] * 4, NEVER, [0, 0, 0, 1, 0, 0, 0, 0]]


def test_rounds_until_mixed_by_hand():
    rule = UntilMixed(first=2, per_round=2, most=8, budget=16, processes=1, max_rounds=None,
                      fresh_rates=no_history, top_up_by_value=even_top_up)
    rounds, sizes = run_rule(rule, OUTCOMES)
    # Round 1: 2 each; prompt 1 is mixed. Round 2: 2 more for 0, 2 and 3; prompt 3 succeeds at its 4th. Round 3: the 2
    # rollouts left, one each for the two prompts still all-success and all-fail. The budget is spent: no top-up.
    assert sizes == [[2, 2, 2, 2], [2, 0, 2, 2], [1, 0, 1, 0]]
    assert rounds.counts.tolist() == [5, 2, 5, 4] and rounds.mixed().tolist() == [False, True, False, True]
    assert rule.active_after_round == [0.75, 0.5, 0.5]
    np.testing.assert_allclose(rule.pass_rates, [1.0, 0.5, 0.0, 0.25])


def test_the_rounds_run_out_and_the_allocator_spreads_what_is_left():
    rule = UntilMixed(first=2, per_round=2, most=8, budget=16, processes=1, max_rounds=2,
                      fresh_rates=no_history, top_up_by_value=even_top_up)
    rounds, sizes = run_rule(rule, OUTCOMES)
    # After two rounds [4, 2, 4, 4]: the 2 left go evenly, to prompt 1, the one with fewest.
    assert sizes == [[2, 2, 2, 2], [2, 0, 2, 2], [0, 2, 0, 0]] and rounds.counts.tolist() == [4, 4, 4, 4]


def test_a_prompt_that_is_never_mixed_stops_at_the_cap():
    rule = UntilMixed(first=2, per_round=3, most=5, budget=20, processes=1, max_rounds=None,
                      fresh_rates=no_history, top_up_by_value=lambda rates, counts, spare: even_top_up(
                          rates, counts, spare))
    rounds, sizes = run_rule(rule, [NEVER, [1, 0] * 4, NEVER, ALWAYS])
    # Unmixed prompts take 3 more, then 0 more (2 + 3 = 5, the cap); the 5 left go evenly to the one below it.
    assert sizes[:2] == [[2, 2, 2, 2], [3, 0, 3, 3]]
    assert rounds.counts.tolist() == [5, 5, 5, 5] and rounds.counts.sum() == 20


def test_every_round_is_a_multiple_of_the_processes():
    rule = UntilMixed(first=2, per_round=1, most=8, budget=18, processes=3, max_rounds=None,
                      fresh_rates=no_history, top_up_by_value=even_top_up)
    rounds, sizes = run_rule(rule, OUTCOMES)
    # 8 first-round rollouts become 9 (prompt 0 gets one more); 3 unmixed prompts take 1 each: 3.
    assert sizes[0] == [3, 2, 2, 2] and sizes[1] == [1, 0, 1, 1]
    assert all(sum(size) % 3 == 0 for size in sizes) and rounds.counts.sum() == 18


@pytest.mark.parametrize("allocator", [KnapsackAllocator(2, 6), CoBAAllocator(2, 6)], ids=["knapsack", "coba"])
def test_top_ups_take_the_most_value_brute_force(allocator):
    rng = np.random.default_rng(0)
    for _ in range(20):
        rates = rng.integers(1, 8, 4) / 8  # mixed prompts: every top-up is by value alone
        counts, spare = rng.integers(2, 4, 4), int(rng.integers(1, 6))
        result = allocator.top_up(rates, counts, spare, 0.5)
        assert result.sum() == counts.sum() + spare and (result >= counts).all() and result.max() <= 6
        best = max(allocator.value(counts + np.array(extra), rates, 0.5)
                   for extra in itertools.product(range(5), repeat=4)
                   if sum(extra) == spare and (counts + np.array(extra)).max() <= 6)
        assert allocator.value(result, rates, 0.5) >= best - 1e-12


def test_knapsacks_top_up_feeds_mixed_prompts_then_never_solved_ones():
    allocator = KnapsackAllocator(2, 4)
    # The mixed prompt rises to its cap by value; the rest goes to the never-solved prompt, not the solved one.
    assert allocator.top_up(np.array([0.5, 0.0, 1.0]), np.array([2, 2, 2]), 4).tolist() == [4, 4, 2]


@pytest.mark.parametrize("allocator", ["uniform", "knapsack", "coba"])
def test_a_run_in_rounds_trains_every_rollout_over_whole_groups(tmp_path, tokenizer, allocator):
    trainer = make_trainer(tmp_path, tokenizer, budget_allocator=allocator, rounds_generations=2, max_steps=6,
                           per_device_train_batch_size=16, advantage_baseline="group")
    recorder = RowRecorder(trainer)
    trainer.train()
    assert len(recorder.steps) == 6
    for plan, _, rows in recorder.steps:
        assert rows == plan.counts.sum() == 16 and plan.counts.min() >= 2 and plan.counts.max() <= 8
        assert sum(plan.round_rows) == 16 and sorted(plan.slot_order.tolist()) == list(range(16))
    assert any(len(plan.round_rows) > 1 for plan, _, _ in recorder.steps)  # some batches needed more rounds
    logs = [entry for entry in trainer.state.log_history if "budget/rounds" in entry]
    assert len(logs) == 6 and all(1 <= entry["budget/rounds"] <= 8 for entry in logs)
    assert all(0 <= entry["budget/active_after_round_1"] <= 1 for entry in logs)
    assert_advantages_over_whole_groups(trainer, recorder)


def test_uniform_rounds_sample_again_exactly_the_prompts_not_yet_mixed(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, budget_allocator="uniform", rounds_generations=2, max_steps=1,
                           per_device_train_batch_size=16)
    recorder = RowRecorder(trainer)
    trainer.train()
    plan = recorder.steps[0][0]
    rewards = np.empty(16)
    rewards[plan.slot_order] = list(trainer._logs["rewards"]["parity_reward"])[-16:]
    first_round = rewards[(np.cumsum(plan.counts) - plan.counts)[:, None] + np.arange(2)]  # each prompt's first two
    unmixed = first_round.min(axis=1) == first_round.max(axis=1)
    assert plan.round_counts[0].tolist() == [2, 2, 2, 2]
    assert unmixed.any() and plan.round_counts[1].tolist() == np.where(unmixed, 2, 0).tolist()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"rounds_generations": -1}, "rounds_generations must be a whole number of at least 0"),
        ({"rounds_generations": 2, "probe_generations": 2}, "two ways of generating a batch in rounds"),
        ({"rounds_generations": 2, "rounds_first_generations": 1},
         "rounds_first_generations must be a whole number from budget_min_generations=2 .* got 1"),
        ({"rounds_generations": 2, "rounds_first_generations": 5}, "to num_generations=4"),
        ({"rounds_generations": 2, "rounds_max": 0}, "rounds_max must be a whole number of at "),
    ],
)
def test_round_settings_that_cannot_work_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **overrides))


def test_a_run_in_rounds_resumes_exactly(tmp_path, tokenizer):
    assert_resumes_exactly(tmp_path, tokenizer, rounds_generations=2)
