"""Reinforce-Ada as released: exit rules, down-sampling and the global-statistics baseline checked by hand, its rounds
on scripted outcomes, and real runs of the trainer."""

import math

import numpy as np
import pytest
import torch
from helpers import config_kwargs, make_trainer, parity_reward
from test_probe import RowRecorder
from multiprocess_run import rows_as_text
from test_rounds import run_rule

from trl_budget import BudgetGRPOConfig, ReinforceAda
from trl_budget.advantages import advantages_against_all_rollouts
from trl_budget.allocators.reinforce_ada import down_sample, has_enough_signal

NAN = float("nan")


def test_exit_rules_by_hand():
    successes, failures = np.array([2, 1, 2, 0, 1]), np.array([2, 3, 1, 5, 0])
    assert has_enough_signal("balanced", successes, failures, 4).tolist() == [True, False, False, False, False]
    assert has_enough_signal("balanced", successes, failures, 3).tolist() == [True, True, False, False, False]
    assert has_enough_signal("positive_focused", successes, failures, 4).tolist() == [True, True, True, False, True]


@pytest.mark.parametrize(
    "choice, outcomes, finished, chosen",
    [
        # A prompt that left: K/2 successes then K/2 failures, the first ones generated.
        ("balanced", [0, 0, 1, 0, 1, 1, 0, 1], True, [2, 4, 0, 1]),
        # positive_focused left at its first success: 1 success, then failures fill the group.
        ("positive_focused", [0, 0, 0, 1, 0, 0, 0, 0], True, [3, 0, 1, 2]),
        # ... and with successes only, successes fill it.
        ("positive_focused", [1, 1, 1, 1, 1, 1, 1, 1], True, [0, 1, 2, 3]),
        # The fallback of a prompt that never left: balanced takes what it has, short sides filled from the other.
        ("balanced", [0, 0, 0, 0, 0, 0, 0, 0], False, [0, 1, 2, 3]),
        ("balanced", [1, 0, 0, 0, 0, 0, 0, 0], False, [0, 1, 2, 3]),
        ("balanced", [1, 1, 1, 0, 1, 1, 1, 1], False, [0, 1, 2, 3]),
        # positive_focused's fallback aims at ceil(share x K) successes, at least 1 and at most K - 1.
        ("positive_focused", [0, 0, 0, 0, 0, 0, 0, 0], False, [0, 1, 2, 3]),
        # Unscored rollouts count as neither, and are trained only when a group would fall short of K.
        ("balanced", [NAN, 1, 0, NAN, 1, 0], True, [1, 4, 2, 5]),
        ("balanced", [NAN, 0, 0, NAN, 0], False, [1, 2, 4, 0]),
    ],
)
def test_down_sampling_by_hand(choice, outcomes, finished, chosen):
    assert down_sample(choice, np.array(outcomes, dtype=float), 4, finished).tolist() == chosen


def test_positive_focused_fallback_keeps_the_share_of_successes():
    # The fallback's rule on its own (a positive_focused prompt with a success has always left): 2 successes among 8
    # give ceil(2/8 x 4) = 1 success, then 3 failures.
    assert down_sample("positive_focused", np.array([0, 1, 0, 0, 1, 0, 0, 0.0]), 4, False).tolist() == [1, 0, 2, 3]


def test_global_statistics_by_hand():
    # Prompt 0: 3 successes among 8 rollouts generated, 2 trained (rewards 1, 0). Prompt 1: one rollout, which agrees
    # with itself: advantage 0, as under GRPO's group (verl's rule would give it its raw reward, 1).
    trained, counts = torch.tensor([1.0, 0.0, 1.0]), np.array([2, 1])
    generated, generated_counts = torch.tensor([1.0, 0, 1, 0, 1, 0, 0, 0, 1]), np.array([8, 1])
    advantages, is_std_zero = advantages_against_all_rollouts(trained, counts, generated, generated_counts, scale=True)
    mean, std = 3 / 8, math.sqrt((3 * (5 / 8) ** 2 + 5 * (3 / 8) ** 2) / 7)
    np.testing.assert_allclose(advantages.numpy(), [(1 - mean) / (std + 1e-6), -mean / (std + 1e-6), 0.0],
                               rtol=1e-6)
    unscaled, _ = advantages_against_all_rollouts(trained, counts, generated, generated_counts, scale=False)
    np.testing.assert_allclose(unscaled.numpy(), [1 - mean, -mean, 0.0], rtol=1e-6)
    assert is_std_zero.tolist() == [False, False, True]
    _, agreeing = advantages_against_all_rollouts(torch.tensor([0.0]), np.array([1]), torch.zeros(6), np.array([6]),
                                                  scale=True)
    assert agreeing.tolist() == [True]


def test_the_baseline_of_weighted_rewards_by_hand():
    # Accuracy plus 0.5 x format. Prompt 0 generated [1.5, 1.5, 0.5, 0.5, 0, 1.5] and trains [1.5, 0.5, 0]: its failed
    # rollouts sit below its mean and must be pushed down. Prompt 1: a constant 0.7, whatever success_threshold says:
    # no spread, advantage 0. Prompt 2: rewards of -5 and -6 and one unscored rollout (NaN), which counts for nothing.
    generated = torch.tensor([1.5, 1.5, 0.5, 0.5, 0.0, 1.5, 0.7, 0.7, 0.7, -5.0, -6.0, NAN, -5.0])
    trained = torch.tensor([1.5, 0.5, 0.0, 0.7, 0.7, -6.0, NAN])
    advantages, is_std_zero = advantages_against_all_rollouts(trained, np.array([3, 2, 2]), generated,
                                                              np.array([6, 3, 4]), scale=True)
    first, third = np.array([1.5, 1.5, 0.5, 0.5, 0.0, 1.5]), np.array([-5.0, -6.0, -5.0])
    expected = [*((np.array([1.5, 0.5, 0.0]) - first.mean()) / (first.std(ddof=1) + 1e-6)), 0.0, 0.0,
                (-6.0 - third.mean()) / (third.std(ddof=1) + 1e-6), 0.0]
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-6)
    assert advantages[1] < 0 and advantages[2] < advantages[1] < advantages[0]
    assert is_std_zero.tolist() == [False] * 3 + [True] * 2 + [False] * 2
    unscaled, _ = advantages_against_all_rollouts(trained, np.array([3, 2, 2]), generated, np.array([6, 3, 4]),
                                                  scale=False)
    np.testing.assert_allclose(unscaled.numpy(), [*(np.array([1.5, 0.5, 0.0]) - first.mean()), 0, 0,
                                                  -6.0 - third.mean(), 0], rtol=1e-6)


def test_binary_rewards_give_the_releases_arithmetic_bit_for_bit():
    # The release's formula over 0/1 outcomes (successes x (1 - mean)^2 + failures x mean^2), which the third study's
    # runs trained with: the weighted-reward baseline must give the same floats, so that those runs re-train exactly.
    rng = np.random.default_rng(0)
    counts = rng.integers(4, 40, 64)
    generated = torch.as_tensor(rng.integers(0, 2, counts.sum()), dtype=torch.float32)
    trained_counts = np.full(64, 4)
    starts = np.cumsum(counts) - counts
    trained = torch.cat([generated[start : start + 4] for start in starts])
    advantages, _ = advantages_against_all_rollouts(trained, trained_counts, generated, counts, scale=True)
    wins = torch.as_tensor([float(generated[s : s + c].sum()) for s, c in zip(starts, counts)], dtype=torch.float64)
    trials = torch.as_tensor(counts, dtype=torch.float64)
    mean = wins / trials
    variance = (wins * (1 - mean) ** 2 + (trials - wins) * mean**2) / (trials - 1)
    std = variance.sqrt().clamp(min=1e-6)
    release = (trained.to(torch.float64) - mean.repeat_interleave(4)) / (std.repeat_interleave(4) + 1e-6)
    assert torch.equal(advantages, release.to(torch.float32))


OUTCOMES = [[1, 0, 1, 0] + [1] * 8, [0] * 12, [1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1]]


def test_rounds_until_each_prompt_leaves_by_hand():
    rule = ReinforceAda("balanced", samples_per_round=4, max_rounds=3, default_generations=4).round_rule(1)
    rounds, sizes = run_rule(rule, OUTCOMES)
    # Round 1: prompt 0 has 2 and 2 and leaves; prompt 2 has 1 success. Round 2: prompt 2 reaches 2 successes and
    # leaves. Round 3: prompt 1, still all failures; then the rounds run out.
    assert sizes == [[4, 4, 4], [0, 4, 4], [0, 4, 0]]
    assert rule.active_after_round == [2 / 3, 1 / 3, 1 / 3]
    chosen, counts = rule.trained_slots(rounds)
    # Plan slots: prompt 0 at 0-3, prompt 1 at 4-15, prompt 2 at 16-23 (its two rounds, in order).
    assert counts.tolist() == [4, 4, 4]
    assert chosen.tolist() == [0, 2, 1, 3, 4, 5, 6, 7, 16, 21, 17, 18]


def test_the_generation_cap_cuts_the_last_round_evenly():
    rule = ReinforceAda("balanced", samples_per_round=4, max_rounds=3, max_generated=18,
                        default_generations=4).round_rule(1)
    rounds, sizes = run_rule(rule, OUTCOMES)
    assert sizes == [[4, 4, 4], [0, 3, 3]] and rounds.counts.sum() == 18


def test_positive_focused_rounds_stop_at_a_first_success():
    rule = ReinforceAda("positive_focused", samples_per_round=4, max_rounds=4, default_generations=4).round_rule(2)
    rounds, sizes = run_rule(rule, [[0] * 6 + [1] + [0] * 9, [1] + [0] * 15])
    assert sizes == [[4, 4], [4, 0]]  # prompt 0 finds its success in round 2 (its 7th rollout)
    assert rule.trained_slots(rounds)[0].tolist() == [6, 0, 1, 2, 8, 9, 10, 11]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"choice": "balance"}, "^choice must be a Reinforce-Ada exit rule, got 'balance'"),
        ({"samples_per_round": 2}, r"^samples_per_round must be at least num_generations=4 \(K, the rollouts trained"),
        ({"max_rounds": 0}, "max_rounds must be a whole number of at least 1"),
        ({"global_statistics": "yes"}, "global_statistics must be True or False"),
    ],
)
def test_bad_settings_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        ReinforceAda(default_generations=4, **options)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"reinforce_ada_samples_per_round": 2}, "^reinforce_ada_samples_per_round must be at least num_generations=4"),
        ({"reinforce_ada_choice": "positive"}, "^reinforce_ada_choice must be a Reinforce-Ada exit rule, got 'positive'"),
        ({"reinforce_ada_max_generated": 12}, "reinforce_ada_max_generated=12 cannot hold the first round"),
        ({"rounds_generations": 2}, "generates each batch in rounds of its own"),
        ({"scale_rewards": "batch"}, "scale_rewards='batch' .* has no such meaning"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_the_model_loads(tmp_path, tokenizer, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_trainer(tmp_path, tokenizer, budget_allocator="reinforce_ada", model="no-such-org/no-such-model",
                     **overrides)


class ScoredRounds:
    """A reward (the parity reward by default), keeping every round's rewards in row order (TRL's logs keep only the
    last batch's rows)."""

    __name__ = "parity_reward"

    def __init__(self, reward=parity_reward):
        self.rounds, self.reward = [], reward

    def __call__(self, completions, answer, **kwargs):
        rewards = self.reward(completions=completions, answer=answer)
        self.rounds.append(np.array(rewards))
        return rewards


@pytest.mark.parametrize("choice", ["balanced", "positive_focused"])
def test_a_run_trains_k_rollouts_of_each_prompt_against_the_batch_baseline(tmp_path, tokenizer, choice):
    scored = ScoredRounds()
    trainer = make_trainer(tmp_path, tokenizer, budget_allocator="reinforce_ada", reinforce_ada_choice=choice,
                           reinforce_ada_samples_per_round=4, reinforce_ada_max_rounds=3, max_steps=4,
                           per_device_train_batch_size=16, reward_funcs=scored)
    recorder, trained_rows = RowRecorder(trainer), []
    recording = trainer._generate_and_score_completions

    def keeping_rows(inputs):
        output = recording(inputs)
        trained_rows.append(rows_as_text(output, tokenizer))
        return output

    trainer._generate_and_score_completions = keeping_rows
    trainer.train()
    for (plan, advantages, rows), texts in zip(recorder.steps, trained_rows):
        assert rows == 16 and plan.counts.tolist() == [4, 4, 4, 4]  # TRL's batch: K = num_generations of each
        # Each trained row is its slot's prompt, and its completion earns the reward the plan credits it.
        for slot, (prompt, completion) in enumerate(texts):
            row = plan.prompts[slot // 4]
            assert prompt == row["prompt"]
            assert parity_reward([completion], [row["answer"]])[0] == plan.rewards[slot]
        assert sum(plan.round_rows) >= 16 and plan.round_rows[0] == 16
    logs = [entry for entry in trainer.state.log_history if "budget/generated_rollouts" in entry]
    assert len(logs) == 4 and all(entry["budget/trained_rollouts"] == 16 for entry in logs)
    assert all(16 <= entry["budget/generated_rollouts"] <= 48 for entry in logs)
    # The last batch's advantages, by hand: its trained rewards against all its generated outcomes.
    plan, advantages, _ = recorder.steps[-1]
    in_plan, starts, offsets = generated_in_plan_order(plan, np.concatenate(scored.rounds[-len(plan.round_rows):]))
    expected = []
    for prompt, start in enumerate(starts):
        outcomes = in_plan[start : start + offsets[prompt]]
        mean, std = outcomes.mean(), outcomes.std(ddof=1)
        trained = plan.rewards[4 * prompt : 4 * prompt + 4]
        assert sorted(trained.tolist()) == sorted(outcomes[down_sample(choice, outcomes, 4, bool(
            has_enough_signal(choice, outcomes.sum(), (1 - outcomes).sum(), 4)))].tolist())
        expected += ((trained - mean) / (max(std, 1e-6) + 1e-6)).tolist()
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-5, atol=1e-5)


def generated_in_plan_order(plan, generated: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A one-process batch's generated rewards (each round's rows in the order generated, prompt by prompt) laid out
    in plan order; with each prompt's first slot and its number of rollouts."""
    totals = np.sum(plan.round_counts, axis=0)
    starts = np.cumsum(totals) - totals
    in_plan = np.empty(generated.size)
    rows_of_rounds = np.split(np.arange(generated.size), np.cumsum(plan.round_rows)[:-1])
    offsets = np.zeros(len(plan.keys), dtype=int)
    for counts, rows in zip(plan.round_counts, rows_of_rounds):  # one process: each round's rows in prompt order
        slots = np.concatenate([starts[i] + offsets[i] + np.arange(c) for i, c in enumerate(counts)])
        in_plan[slots] = generated[rows]
        offsets += counts
    return in_plan, starts, offsets


def short_completion_format(completions, **kwargs):
    """A format reward beside the parity reward: 1 for a completion of two characters or more."""
    return [float(len(completion) >= 2) for completion in completions]


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_a_run_with_weighted_rewards_trains_against_their_batch_mean_and_deviation(tmp_path, tokenizer, scale_rewards):
    # Accuracy (parity) plus 0.5 x format, success judged by accuracy alone: every trained advantage is recomputed by
    # hand from the weighted rewards of all the prompt's rollouts of the batch. Before, the baseline was the mean of
    # the 0/1 successes, and failed rollouts with the format reward were pushed up.
    parity, formatted = ScoredRounds(), ScoredRounds(short_completion_format)
    formatted.__name__ = "short_completion_format"
    trainer = make_trainer(tmp_path, tokenizer, budget_allocator="reinforce_ada", reinforce_ada_samples_per_round=4,
                           reinforce_ada_max_rounds=3, reinforce_ada_choice="positive_focused", max_steps=3,
                           per_device_train_batch_size=16, reward_funcs=[parity, formatted],
                           reward_weights=[1.0, 0.5], success_reward_func="parity_reward",
                           scale_rewards=scale_rewards)
    recorder = RowRecorder(trainer)
    trainer.train()
    rounds_seen = 0
    for plan, advantages, _ in recorder.steps:
        rounds = slice(rounds_seen, rounds_seen + len(plan.round_rows))
        rounds_seen += len(plan.round_rows)
        weighted = np.concatenate(parity.rounds[rounds]) + 0.5 * np.concatenate(formatted.rounds[rounds])
        in_plan, starts, offsets = generated_in_plan_order(plan, weighted)
        expected = []
        for prompt, start in enumerate(starts):
            rewards = in_plan[start : start + offsets[prompt]]
            trained = plan.rewards[4 * prompt : 4 * prompt + 4]
            assert all(reward in rewards for reward in trained)
            deviation = max(rewards.std(ddof=1), 1e-6) + 1e-6 if scale_rewards == "group" else 1.0
            expected += [0.0] * 4 if np.ptp(rewards) == 0 else ((trained - rewards.mean()) / deviation).tolist()
        np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-5, atol=1e-6)
        wrongly_pushed_up = [a > 0 for a, r, g in zip(advantages.numpy(), plan.rewards, np.repeat(
            [in_plan[s : s + o].mean() for s, o in zip(starts, offsets)], 4)) if r < g]
        assert not any(wrongly_pushed_up)
    assert rounds_seen == len(parity.rounds) and any(r % 1 for plan, _, _ in recorder.steps for r in plan.rewards)


def test_the_config_passes_its_settings_to_the_rule(tmp_path):
    config = BudgetGRPOConfig(**config_kwargs(tmp_path, budget_allocator="reinforce_ada",
                                              reinforce_ada_choice="positive_focused",
                                              reinforce_ada_samples_per_round=6, reinforce_ada_max_generated=40))
    allocator = config.make_allocator()
    assert (allocator.choice, allocator.samples_per_round, allocator.keep, allocator.generation_cap(2)) == (
        "positive_focused", 6, 4, 40)


def test_a_reinforce_ada_run_resumes_exactly(tmp_path, tokenizer):
    from helpers import assert_resumes_exactly

    assert_resumes_exactly(tmp_path, tokenizer, budget_allocator="reinforce_ada", reinforce_ada_samples_per_round=4,
                           reinforce_ada_max_rounds=3)
