"""The advantage baseline as a setting: GRPO's group, all the prompt's rollouts of the batch, or the prompt's reward
history from the capability tracker; checked by hand on scripted rewards and on real runs, resumed exactly."""

import math

import numpy as np
import pytest
import torch
from helpers import assert_resumes_exactly, config_kwargs, make_trainer, parity_reward
from test_probe import RowRecorder

from trl_budget import BudgetGRPOConfig, CapabilityTracker
from trl_budget.advantages import advantages_against_baseline, advantages_against_moments
from trl_budget.tracker import merged_moments


def history_by_hand(visits: list[np.ndarray], decay: float) -> tuple[float, float, float]:
    """A prompt's reward moments over its visits (oldest first, the current one last): each reward weighs
    decay ** (the number of visits after its own)."""
    weights = np.concatenate([np.full(len(v), decay ** (len(visits) - 1 - age)) for age, v in enumerate(visits)])
    rewards = np.concatenate(visits)
    total = weights.sum()
    mean = (weights * rewards).sum() / total
    return total, mean, (weights * (rewards - mean) ** 2).sum()


def test_moments_merge_visit_by_visit_as_their_weighted_sums_by_hand():
    visits = [np.array([1.0, 0.0, 0.0, 0.0]), np.array([1.5, 0.5]), np.array([-2.0, 1.0, 1.0])]
    for decay in (0.0, 0.5, 15 / 16, 1.0):
        moments = (np.zeros(1), np.zeros(1), np.zeros(1))
        for end, visit in enumerate(visits, start=1):
            moments = merged_moments(*moments, [visit], decay)
            np.testing.assert_allclose([m[0] for m in moments], history_by_hand(visits[:end], decay), rtol=1e-12)


def test_unscored_rewards_leave_the_history_as_it_was():
    weight, mean, m2 = merged_moments(np.array([3.0]), np.array([0.5]), np.array([0.75]), [np.array([np.nan])], 0.5)
    assert (weight[0], mean[0], m2[0]) == (3.0, 0.5, 0.75)


def test_advantages_against_the_history_by_hand():
    # Prompt 0: history of 8 failures and one success, now a group of 4 failures: every rollout is pushed down.
    # Prompt 1: history of failures only, now all 4 succeed: every rollout is pushed up.
    # Prompt 2: a constant reward of 0.7 in history and now: advantage 0.
    # Prompt 3: first visit, weighted rewards: GRPO's advantages over the batch's group.
    visits = {0: [np.array([0.0] * 8 + [1.0]), np.zeros(4)], 1: [np.zeros(8), np.ones(4)],
              2: [np.full(4, 0.7), np.full(4, 0.7)], 3: [np.array([1.5, 0.5, 0.0, 1.5])]}
    tracker = CapabilityTracker(reward_history_window=4)
    for prompt in (0, 1, 2):
        past = visits[prompt][0]
        tracker.update([f"p{prompt}"] * past.size, past, reward_values=past)
    keys = [f"p{prompt}" for prompt in range(4) for _ in range(4)]
    now = np.concatenate([visits[prompt][-1] for prompt in range(4)])
    names, *moments = tracker.reward_moments_after(keys, now)
    assert names == ["p0", "p1", "p2", "p3"]
    advantages, is_std_zero = advantages_against_moments(torch.tensor(now, dtype=torch.float32), np.full(4, 4),
                                                         *moments, scale=True)
    expected = []
    for prompt in range(4):
        weight, mean, m2 = history_by_hand(visits[prompt], 0.75)
        deviation = math.sqrt(m2 / (weight - 1))
        expected += [0.0] * 4 if m2 == 0 else list((visits[prompt][-1] - mean) / (deviation + 1e-4))
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-6)
    assert (advantages[:4] < 0).all() and (advantages[4:8] > 0).all() and (advantages[8:12] == 0).all()
    assert is_std_zero.tolist() == [False] * 8 + [True] * 4 + [False] * 4
    group = now[12:]  # a first visit: GRPO's own advantages
    np.testing.assert_allclose(advantages[12:].numpy(), (group - group.mean()) / (group.std(ddof=1) + 1e-4), rtol=1e-6)
    tracker.update(keys, now >= 1, reward_values=now)  # what was pooled is what is kept
    np.testing.assert_array_equal(np.stack(tracker.reward_moments(names)), np.stack(moments))


class ScoredSteps:
    """The parity reward, keeping each step's (prompt, reward) pairs."""

    __name__ = "parity_reward"

    def __init__(self, scale=1.0):
        self.steps, self.scale = {}, scale

    def __call__(self, prompts, completions, answer, trainer_state, **kwargs):
        rewards = [self.scale * reward for reward in parity_reward(completions, answer)]
        self.steps.setdefault(trainer_state.global_step, []).extend(zip(prompts, rewards))
        return rewards


@pytest.mark.parametrize("rule", [{"budget_allocator": "uniform"}, {"budget_allocator": "knapsack"},
                                  {"budget_allocator": "uniform", "rounds_generations": 2}])
def test_a_run_with_the_history_baseline_trains_each_prompt_against_its_history(tmp_path, tokenizer, rule):
    from datasets import concatenate_datasets
    from helpers import make_dataset

    scored = ScoredSteps(scale=0.5)  # non-binary: 0 or 0.5
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=scored, max_steps=6, advantage_baseline="history",
                           advantage_history_window=2.0, dataset=concatenate_datasets([make_dataset(3)] * 4),
                           success_threshold=0.5, **rule)
    recorder = RowRecorder(trainer)
    trainer.train()
    visits: dict[str, list[np.ndarray]] = {}  # each prompt's earlier visits: a step's rewards of it, pooled
    for step, (plan, advantages, _) in enumerate(recorder.steps):
        expected = []
        for prompt, count in zip(plan.prompts, plan.counts):  # a group: its history merged with its own rewards
            trained = plan.rewards[len(expected) : len(expected) + count]
            weight, mean, m2 = history_by_hand(visits.get(prompt["prompt"], []) + [trained], 0.5)
            expected += [0.0] * count if m2 == 0 else list((trained - mean) / (math.sqrt(m2 / (weight - 1)) + 1e-4))
        # The rows as trained: plan slot `slot_order[i]` in row i (rounds merge their rows round after round).
        np.testing.assert_allclose(advantages.numpy(), np.array(expected)[plan.slot_order], rtol=1e-5, atol=1e-6)
        for prompt in dict.fromkeys(p for p, _ in scored.steps[step]):
            visits.setdefault(prompt, []).append(np.array([r for p, r in scored.steps[step] if p == prompt]))
    assert any(len(plan.prompts) > len({row["prompt"] for row in plan.prompts}) for plan, _, _ in recorder.steps)
    logs = [entry for entry in trainer.state.log_history if "budget/effective_ratio" in entry]
    assert len(logs) == 6


def test_the_history_baseline_gives_zero_variance_groups_a_gradient(tmp_path, tokenizer):
    # One prompt whose every rollout earns the step's parity of the step number: all-success and all-failure groups
    # in turn, each of which GRPO's baseline leaves without gradient; against its history each carries one.
    def alternating(completions, trainer_state, **kwargs):
        return [float(trainer_state.global_step % 2)] * len(completions)

    from helpers import make_dataset

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=alternating, max_steps=4, budget_allocator="uniform",
                           advantage_baseline="history", dataset=make_dataset(2), per_device_train_batch_size=8)
    recorder = RowRecorder(trainer)
    trainer.train()
    first, *later = [advantages for _, advantages, _ in recorder.steps]
    assert (first == 0).all()  # a first visit: the batch alone, all agreeing
    assert all((advantages != 0).all() for advantages in later)
    assert all(np.sign(a[0].item()) == (1 if step % 2 else -1) for step, a in enumerate(later, start=1))


@pytest.mark.parametrize("baseline", ["group", "all_rollouts", "history"])
def test_every_rule_takes_every_baseline(tmp_path, tokenizer, baseline):
    for rule in ({"budget_allocator": "coba"}, {"budget_allocator": "knapsack", "probe_generations": 2},
                 {"budget_allocator": "reinforce_ada", "reinforce_ada_samples_per_round": 4}):
        trainer = make_trainer(tmp_path / str(len(rule)), tokenizer, max_steps=2, advantage_baseline=baseline, **rule)
        trainer.train()
        assert trainer.advantage_baseline == baseline and trainer.state.global_step == 2


class OneLoneRollout:
    """Gives the batch's first prompt a single rollout and shares the rest evenly: a group of one in every batch."""

    def __call__(self, pass_rates, budget, failure_rate=None):
        counts = np.full(len(pass_rates), (budget - 1) // (len(pass_rates) - 1))
        counts[0] = 1
        counts[1] += budget - counts.sum()
        return counts


@pytest.mark.parametrize("baseline", ["group", "all_rollouts", "history"])
@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_a_lone_rollout_gets_no_advantage_under_every_baseline(tmp_path, tokenizer, baseline, scale_rewards):
    # A rollout alone in its group agrees with itself: its reward is its own baseline, however large. Before,
    # 'all_rollouts' gave it its raw reward (1e6 here) as its advantage. Under 'history' a first visit of one rollout
    # has nothing else to compare with; a prompt seen before is compared with its history.
    def large(completions, answer, **kwargs):
        return [1e6 + reward for reward in parity_reward(completions, answer)]

    from helpers import make_dataset

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=large, max_steps=2, budget_min_generations=1,
                           per_device_train_batch_size=16, advantage_baseline=baseline, scale_rewards=scale_rewards,
                           allocator=OneLoneRollout(), dataset=make_dataset(8))  # every prompt visited once
    recorder = RowRecorder(trainer)
    trainer.train()
    assert len(recorder.steps) == 2
    for plan, advantages, _ in recorder.steps:
        assert plan.counts[0] == 1
        lone_row = plan.slot_order.tolist().index(0)  # the row that holds plan slot 0, the lone rollout
        assert advantages[lone_row].item() == 0.0
        assert advantages.abs().max() > 0  # the other groups do train


def test_reinforce_adas_global_statistics_is_the_all_rollouts_baseline(tmp_path, tokenizer):
    options = dict(budget_allocator="reinforce_ada", reinforce_ada_samples_per_round=4)
    assert make_trainer(tmp_path, tokenizer, **options).advantage_baseline == "all_rollouts"
    assert make_trainer(tmp_path, tokenizer, reinforce_ada_global_statistics=False,
                        **options).advantage_baseline == "group"
    assert make_trainer(tmp_path, tokenizer).advantage_baseline == "group"


def test_a_run_with_the_history_baseline_resumes_exactly(tmp_path, tokenizer):
    assert_resumes_exactly(tmp_path, tokenizer, advantage_baseline="history", advantage_history_window=4.0)


def test_a_tracker_state_from_before_the_reward_history_loads_with_an_empty_history():
    old = CapabilityTracker(window=2)
    old.update(["a", "a", "b"], [1, 0, 1])
    state = old.state_dict()
    state = {key: value for key, value in state.items() if key not in ("reward_moments", "reward_history_window")}
    state["version"] = 3
    restored = CapabilityTracker(window=2, reward_history_window=8)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.pass_rates(["a", "b"]), old.pass_rates(["a", "b"]))
    assert all((moment == 0).all() for moment in restored.reward_moments(["a", "b"]))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"advantage_baseline": "mean"}, "^advantage_baseline='mean' is not a baseline"),
        ({"advantage_baseline": "history", "advantage_history_window": 0.5},
         "^advantage_history_window must be a finite number of visits, at least 1, got 0.5"),
        ({"advantage_history_window": 8.0}, "^advantage_history_window=8.0 is read only with "
                                            "advantage_baseline='history'"),
        ({"budget_allocator": "reinforce_ada", "reinforce_ada_global_statistics": False,
          "advantage_baseline": "history"}, "^reinforce_ada_global_statistics=False and advantage_baseline='history'"),
        ({"advantage_baseline": "history", "scale_rewards": "batch"}, "scale_rewards='batch' .* has no such meaning"),
    ],
)
def test_baseline_settings_that_cannot_work_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **overrides))


def test_the_scale_check_follows_the_baseline_in_use(tmp_path, tokenizer):
    # Reinforce-Ada with GRPO's group baseline divides by each trained group's deviation: scale_rewards='batch' has its
    # meaning there. Before, the check looked at reinforce_ada_global_statistics alone and refused it.
    options = dict(budget_allocator="reinforce_ada", reinforce_ada_samples_per_round=4, scale_rewards="batch")
    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, advantage_baseline="group", **options)
    trainer.train()
    assert trainer.advantage_baseline == "group" and trainer.state.global_step == 1
    with pytest.raises(ValueError, match="the advantage baseline 'all_rollouts' .* scale_rewards='batch' .* has no "
                                         "such meaning"):
        make_trainer(tmp_path, tokenizer, **options)
    from trl_budget import ReinforceAda

    with pytest.raises(ValueError, match="the advantage baseline 'all_rollouts'"):  # an allocator object's own
        make_trainer(tmp_path, tokenizer, scale_rewards="batch", budget_allocator="uniform",
                     allocator=ReinforceAda(samples_per_round=4, default_generations=4))


@pytest.mark.parametrize(
    "tracker_window, message",
    [(None, "^advantage_baseline='history' compares each reward with its prompt's reward history, but the tracker "
            "passed to the trainer keeps none"),
     (2.0, r"^the tracker passed to the trainer keeps reward histories with reward_history_window=2.0, but "
           r"advantage_history_window=16.0: .* or set advantage_history_window=2.0.")],
)
def test_a_tracker_that_cannot_serve_the_history_baseline_is_refused_when_the_trainer_is_built(
        tmp_path, tokenizer, tracker_window, message):
    # Before, a tracker without history failed after the first generation with an internal message, and one with
    # another window trained with its own window under a config naming 16.
    with pytest.raises(ValueError, match=message):
        make_trainer(tmp_path, tokenizer, advantage_baseline="history",
                     tracker=CapabilityTracker(reward_history_window=tracker_window))
    # Each fix the message names works.
    make_trainer(tmp_path, tokenizer, advantage_baseline="history",
                 tracker=CapabilityTracker(reward_history_window=16.0)).train()
    if tracker_window is not None:
        make_trainer(tmp_path, tokenizer, advantage_baseline="history", advantage_history_window=tracker_window,
                     tracker=CapabilityTracker(reward_history_window=tracker_window)).train()


def test_a_tracker_keeping_a_history_trains_under_the_group_baseline(tmp_path, tokenizer):
    # The history is kept up to date (a later run may resume it under 'history'); before, the trainer gave the tracker
    # no rewards for it and the first update failed.
    tracker = CapabilityTracker(reward_history_window=4.0)
    trainer = make_trainer(tmp_path, tokenizer, max_steps=2, tracker=tracker)
    trainer.train()
    weight, _, _ = tracker.reward_moments(list(tracker.state_dict()["keys"]))
    assert trainer.advantage_baseline == "group" and (weight > 0).all()


@pytest.mark.parametrize(
    "before, after, history_kept",
    [({}, {"advantage_baseline": "history"}, "each prompt's history starts at its next visit"),
     ({"advantage_baseline": "history"}, {}, "dropped"),
     ({"advantage_baseline": "history", "advantage_history_window": 4.0}, {"advantage_baseline": "history"},
      "carry over")],
)
def test_a_run_resumes_with_another_baseline_or_window(tmp_path, tokenizer, before, after, history_kept):
    # Before, switching to (or from) the history baseline on resume was refused with a fix that could not be applied
    # (advantage_history_window=None is itself refused): the only way on was deleting the tracker's file.
    import json

    from datasets import concatenate_datasets
    from helpers import make_dataset

    options = dict(dataset=concatenate_datasets([make_dataset(3)] * 4), save_strategy="steps", save_steps=2)
    make_trainer(tmp_path, tokenizer, max_steps=2, **options, **before).train()
    saved = json.loads((tmp_path / "checkpoint-2" / "budget_tracker_state.json").read_text())
    resumed = make_trainer(tmp_path, tokenizer, max_steps=4, **options, **after)
    restored = []
    original_restore = resumed.tracker.load_state_dict

    def restore(state):
        original_restore(state)
        restored.append(np.stack(resumed.tracker.reward_moments(state["keys"]), axis=1))

    resumed.tracker.load_state_dict = restore
    with pytest.warns(UserWarning, match=f"reward_history_window=.* this run's is .*{history_kept}"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.state.global_step == 4 and resumed.advantage_baseline == after.get("advantage_baseline", "group")
    if history_kept == "carry over":  # the moments as saved, the window as now
        np.testing.assert_array_equal(restored[0].ravel(), saved["reward_moments"])
        assert saved["reward_history_window"] == 4.0 and resumed.tracker.reward_history_window == 16.0
    else:
        assert (restored[0] == 0).all()


@pytest.mark.parametrize("stated, tracker_settings, message", [
    ({"success_threshold": 0.5}, {}, "has success_threshold=1.0, but success_threshold=0.5"),
    ({"pass_rate_window": 4}, {"window": 2}, "has window=2, but pass_rate_window=4"),
])
def test_a_tracker_that_disagrees_with_a_setting_the_config_states_is_refused(tmp_path, tokenizer, stated,
                                                                                tracker_settings, message):
    # Before: the tracker passed to the trainer silently won (success judged at 1.0 under a config saying 0.5).
    with pytest.raises(ValueError, match=f"^the tracker passed to the trainer {message}"):
        make_trainer(tmp_path, tokenizer, tracker=CapabilityTracker(**tracker_settings), **stated)
    # A setting the config leaves to the allocator's release is the tracker's to choose.
    make_trainer(tmp_path, tokenizer, max_steps=1, tracker=CapabilityTracker(window=2)).train()


def test_equal_rewards_whose_float_residue_is_not_zero_agree_as_grpo_tells_them():
    # Before: three rewards of 0.1 left m2 of about 6e-34, counted as a spread: advantages of about 1e-13 instead of 0,
    # and rows counted as carrying a gradient.
    tracker = CapabilityTracker(reward_history_window=16.0)
    rewards = torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64)  # their mean is 0.1 + 1.4e-17
    advantages, agree = advantages_against_baseline("history", rewards[:, None], np.array([3]), rewards, rewards,
                                                    np.array([3]), ["p"], tracker, torch.ones(1), "group",
                                                    "sum_then_normalize")
    assert advantages.tolist() == [0.0, 0.0, 0.0] and agree.all()
