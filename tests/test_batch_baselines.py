"""Baselines beyond a prompt's own group for the sixth study: the batch's mean reward (`advantage_baseline="batch"`),
the history baseline's first visit against the batch, the history of earlier visits alone, and their shorthand
`"earlier_or_batch"`; each checked against a recomputation from the rewards a real run trained on."""

import logging
import math
from collections import Counter

import numpy as np
import pytest
import torch
from datasets import concatenate_datasets
from helpers import config_kwargs, grpo_kwargs, make_dataset, make_trainer, parity_reward
from test_baselines import history_by_hand
from test_probe import RowRecorder
from trl import GRPOConfig, GRPOTrainer

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer, CapabilityTracker
from trl_budget.advantages import advantages_against_baseline
from trl_budget.demo.tiny import build_tiny_model
from trl_budget.spo import spo_advantages

WINDOW = 2.0  # each earlier visit weighs half the next: short histories that the runs below fill


def half_parity(completions, answer, **kwargs):
    """A reward of 0 or 0.5: not 0/1, so that no baseline's arithmetic leans on binary rewards."""
    return [0.5 * reward for reward in parity_reward(completions, answer)]


def scaled(advantages: np.ndarray, rewards: np.ndarray, scale_rewards: str) -> np.ndarray:
    """`advantages` divided by the batch's deviation as TRL's scale_rewards='batch' divides (0 where the batch's
    rewards all agree); as they are under 'none'."""
    if scale_rewards == "none":
        return advantages
    deviation = rewards.std(ddof=1)
    return np.zeros_like(advantages) if deviation == 0 else advantages / (deviation + 1e-4)


def visits_of(plan) -> dict[str, np.ndarray]:
    """Each prompt's rewards in a batch (a prompt text the data repeats: all its groups together, one visit)."""
    visits: dict[str, list[float]] = {}
    for prompt, rewards in zip(plan.prompts, np.split(plan.rewards, np.cumsum(plan.counts)[:-1])):
        visits.setdefault(prompt["prompt"], []).extend(rewards.tolist())
    return {prompt: np.array(rewards) for prompt, rewards in visits.items()}


def trained_rows(recorder, expected_per_step) -> None:
    """Each step's advantages as trained equal `expected_per_step(plan, earlier visits)` (in plan order)."""
    earlier: dict[str, list[np.ndarray]] = {}
    for plan, advantages, _ in recorder.steps:
        expected = expected_per_step(plan, earlier)
        np.testing.assert_allclose(advantages.numpy(), np.asarray(expected)[plan.slot_order], rtol=1e-5, atol=1e-6)
        for prompt, rewards in visits_of(plan).items():
            earlier.setdefault(prompt, []).append(rewards)


def repeating_prompts(prompts: int = 3, times: int = 4):
    return concatenate_datasets([make_dataset(prompts)] * times)


# ------------------------------------------------------------------------------------------------ the batch's mean


@pytest.mark.parametrize("scale", [1.0, -3.0, 250.0, 1e-3])
def test_the_batch_baseline_is_spos_normalization_on_a_first_visit_at_any_reward_scale(scale):
    # SPO's advantages on a batch of first visits (one prior estimate for every prompt): (r - p - mean) / std over the
    # batch, i.e. r against the batch's mean, divided by the batch's deviation.
    rng = np.random.default_rng(0)
    rewards = torch.as_tensor(rng.normal(size=16) * scale, dtype=torch.float64)
    rewards[3] = float("nan")  # a rollout no reward function could score
    counts = np.array([2] * 8)
    batch, _ = advantages_against_baseline("batch", rewards[:, None], counts, rewards, rewards, counts, ["k"] * 8,
                                           None, torch.ones(1), "batch", "sum_then_normalize")
    spo = spo_advantages(rewards.numpy(), np.full(16, 0.5))
    deviation = np.nanstd(rewards.numpy(), ddof=1)
    np.testing.assert_allclose(batch.numpy(), spo * (deviation + 1e-8) / (deviation + 1e-4), rtol=1e-9, atol=1e-12)
    assert batch[3] == 0 and np.isfinite(batch.numpy()).all()
    unscaled, _ = advantages_against_baseline("batch", rewards[:, None], counts, rewards, rewards, counts, ["k"] * 8,
                                              None, torch.ones(1), "none", "sum_then_normalize")
    np.testing.assert_allclose(unscaled.numpy(), np.nan_to_num(rewards.numpy() - np.nanmean(rewards.numpy())))


def test_a_batch_whose_rewards_all_agree_gets_no_advantage_under_the_batch_scale():
    rewards = torch.full((8,), 0.7, dtype=torch.float64)
    counts = np.array([4, 4])
    tracker = CapabilityTracker(reward_history_window=WINDOW)
    tracker.update(["a"] * 4, np.zeros(4), reward_values=np.zeros(4))  # "a" failed before: 0.7 now is above it
    for baseline in ("batch", "history"):
        advantages, agree = advantages_against_baseline(baseline, rewards[:, None], counts, rewards, rewards, counts,
                                                        ["a", "b"], tracker, torch.ones(1), "batch",
                                                        "sum_then_normalize", "batch", includes_batch=False)
        assert advantages.tolist() == [0.0] * 8 and agree.all()
    unscaled, _ = advantages_against_baseline("history", rewards[:, None], counts, rewards, rewards, counts,
                                              ["a", "b"], tracker, torch.ones(1), "none", "sum_then_normalize",
                                              "batch", includes_batch=False)
    np.testing.assert_allclose(unscaled.numpy(), [0.7] * 4 + [0.0] * 4)  # unscaled, "a" still learns from its past


@pytest.mark.parametrize("scale_rewards", ["batch", "none"])
def test_a_run_with_the_batch_baseline_trains_every_row_against_the_batchs_mean(tmp_path, tokenizer, scale_rewards):
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=half_parity, max_steps=3, budget_allocator="uniform",
                           advantage_baseline="batch", scale_rewards=scale_rewards, success_threshold=0.5)
    recorder = RowRecorder(trainer)
    trainer.train()
    trained_rows(recorder, lambda plan, earlier: scaled(plan.rewards - plan.rewards.mean(), plan.rewards,
                                                        scale_rewards))
    assert trainer.advantage_baseline == "batch" and len(recorder.steps) == 3


# ---------------------------------------------------------------------------------------- the history's first visit


def test_the_history_baseline_can_meet_a_first_visit_with_the_batchs_mean(tmp_path, tokenizer):
    # Prompts come back within the run: a first visit is compared with the batch's mean reward and deviation, never
    # its own group's; a later one with its history, this batch's rewards included, as before.
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=half_parity, max_steps=4, budget_allocator="uniform",
                           advantage_baseline="history", advantage_history_first_visit="batch",
                           advantage_history_window=WINDOW, dataset=repeating_prompts(), success_threshold=0.5)
    recorder = RowRecorder(trainer)
    trainer.train()

    def expected(plan, earlier):
        rows = []
        batch = (plan.rewards.size, plan.rewards.mean(), ((plan.rewards - plan.rewards.mean()) ** 2).sum())
        for prompt, group in zip(plan.prompts, np.split(plan.rewards, np.cumsum(plan.counts)[:-1])):
            past = earlier.get(prompt["prompt"], [])
            weight, mean, m2 = history_by_hand(past + [group], 1 - 1 / WINDOW) if past else batch
            rows += [0.0] * group.size if m2 == 0 else list((group - mean) / (math.sqrt(m2 / (weight - 1)) + 1e-4))
        return rows

    trained_rows(recorder, expected)
    seen = [{p["prompt"] for p in plan.prompts} for plan, _, _ in recorder.steps]
    assert len(seen[0]) > 1  # the first batch is not one group: its mean is no group's own
    assert any(now & set().union(*seen[:step]) for step, now in enumerate(seen[1:], start=1))  # histories read


# --------------------------------------------------------------------------- earlier visits alone; the shorthand


def test_earlier_or_batch_resolves_to_the_settings_it_stands_for(tmp_path):
    shorthand = BudgetGRPOConfig(**config_kwargs(tmp_path, budget_allocator="uniform", num_generations=2,
                                                 advantage_baseline="earlier_or_batch"))
    written_out = BudgetGRPOConfig(**config_kwargs(tmp_path, budget_allocator="uniform", num_generations=2,
                                                   advantage_baseline="history", scale_rewards="batch",
                                                   advantage_history_includes_batch=False,
                                                   advantage_history_first_visit="batch"))
    for config in (shorthand, written_out):
        assert (config.advantage_baseline, config.advantage_history_includes_batch,
                config.advantage_history_first_visit, config.scale_rewards) == ("history", False, "batch", "batch")
        assert config.num_generations == 2 and config.generation_batch_size == 8  # the user's, unchanged
    assert shorthand.baseline_shorthand() == "earlier_or_batch" and written_out.baseline_shorthand() is None
    assert shorthand.to_dict() == {**written_out.to_dict(), "output_dir": shorthand.output_dir}


def test_earlier_or_batch_compares_each_row_with_its_prompts_earlier_visits_or_the_batch(tmp_path, tokenizer,
                                                                                         caplog):
    # Groups of 2 over 4 prompts a batch; three prompts come back every batch or so. A row's baseline is its prompt's
    # mean over earlier visits (never this batch's rewards) or, on a first visit, the batch's mean, never the pair's.
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer = make_trainer(tmp_path, tokenizer, reward_funcs=half_parity, max_steps=4, budget_allocator="uniform",
                               num_generations=2, advantage_baseline="earlier_or_batch",
                               advantage_history_window=WINDOW, dataset=repeating_prompts(), success_threshold=0.5)
        recorder = RowRecorder(trainer)
        trainer.train()

    def expected(plan, earlier):
        baselines = []
        for prompt, count in zip(plan.prompts, plan.counts):
            past = earlier.get(prompt["prompt"], [])
            baselines += [history_by_hand(past, 1 - 1 / WINDOW)[1] if past else plan.rewards.mean()] * count
        return scaled(plan.rewards - np.array(baselines), plan.rewards, "batch")

    trained_rows(recorder, expected)
    revisited = [any(p["prompt"] in {q["prompt"] for q in before.prompts} for p in plan.prompts)
                 for before, plan in zip([p for p, _, _ in recorder.steps], [p for p, _, _ in recorder.steps[1:]])]
    assert any(revisited)
    assert all(plan.counts.tolist() == [2] * 4 for plan, _, _ in recorder.steps)
    [line] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert ("its earlier visits alone, not this batch's (advantage_baseline='earlier_or_batch', which sets "
            "advantage_baseline='history', advantage_history_includes_batch=False, advantage_history_first_visit="
            "'batch' and scale_rewards='batch'), and on a prompt's first visit with the batch's mean reward") in line


def large_negative(completions, answer, **kwargs):
    return [-250.0 * reward - 1e3 for reward in parity_reward(completions, answer)]


def test_earlier_or_batch_keeps_grpo_trainers_layout_at_any_reward_scale(tmp_path, tokenizer):
    # The contract: the user's num_generations (2), batch sizes and TRL's rows; a reward of any scale trains.
    runs = {}
    for name, trainer_class, config_class, extra in (
            ("grpo", GRPOTrainer, GRPOConfig, {}),
            ("budget", BudgetGRPOTrainer, BudgetGRPOConfig, {"advantage_baseline": "earlier_or_batch"})):
        runs[name] = trainer_class(model=build_tiny_model(tokenizer), reward_funcs=[large_negative],
                                   args=config_class(**grpo_kwargs(tmp_path / name, num_generations=2, max_steps=3,
                                                                   **extra)),
                                   train_dataset=make_dataset(12), processing_class=tokenizer)
        runs[name].train()
    grpo, budget = runs["grpo"], runs["budget"]
    assert list(budget._logs["prompt"]) == list(grpo._logs["prompt"])
    assert set(Counter(budget._logs["prompt"]).values()) == {2}
    assert list(budget._logs["completion"]) == list(grpo._logs["completion"])
    # The first batch is every prompt's first visit: its advantages are the batch's, as GRPO's under 'batch' scaling.
    first = slice(0, 8)
    rewards = np.array(list(budget._logs["rewards"]["large_negative"])[first])
    np.testing.assert_allclose(list(budget._logs["advantages"])[first],
                               (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-4), rtol=1e-4, atol=1e-5)
    assert all(np.isfinite(entry["loss"]) for entry in budget.state.log_history if "loss" in entry)


# ------------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"advantage_baseline": "batch"}, "^the advantage baseline 'batch' .* scale_rewards='group' .* Use "
                                          "scale_rewards='batch'"),
        ({"advantage_baseline": "batch", "scale_rewards": "batch", "multi_objective_aggregation": "normalize_then_sum"},
         "^the advantage baseline 'batch' compares each rollout's summed reward"),
        ({"advantage_baseline": "history", "advantage_history_includes_batch": False},
         "^advantage_history_includes_batch=False .* Use scale_rewards='batch'"),
        ({"advantage_baseline": "history", "advantage_history_first_visit": "pair"},
         "^advantage_history_first_visit='pair' is not a fallback: choose 'group'"),
        ({"advantage_baseline": "group", "advantage_history_first_visit": "batch"},
         "^advantage_history_first_visit='batch' is read only with advantage_baseline='history'"),
        ({"advantage_history_includes_batch": False, "scale_rewards": "batch"},
         r"^advantage_history_includes_batch=False is read only with advantage_baseline='history' \(this run's: "
         "'group'\\)"),
        ({"advantage_baseline": "earlier_or_batch", "scale_rewards": "none"},
         "^advantage_baseline='earlier_or_batch' stands for scale_rewards='batch', but scale_rewards='none'. Remove "
         "scale_rewards, or write the rule out with advantage_baseline='history', advantage_history_includes_batch="
         "False, advantage_history_first_visit='batch' and scale_rewards='none'."),
    ],
)
def test_settings_of_these_baselines_that_cannot_work_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(**config_kwargs(tmp_path, budget_allocator="uniform", **overrides))
