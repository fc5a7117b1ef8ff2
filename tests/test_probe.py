"""Probe, then allocate: the pure pieces, and real runs of the trainer with a probe stage."""

import numpy as np
import pytest
import torch
from helpers import make_trainer

from trl_budget import BudgetGRPOConfig
from trl_budget.probe import fresh_pass_rates
from trl_budget.rollout_plan import stage_slots
from trl_budget.rounds import merge_outputs


def test_fresh_pass_rates_weigh_history_below_the_probe():
    rates = fresh_pass_rates(history_wins=[4, 0, 0, 3], history_trials=[16, 0, 8, 8], probe_wins=[2, 1, 0, 0],
                             probe_trials=[2, 2, 2, 0], history_weight=0.5)
    np.testing.assert_allclose(rates, [(2 + 2) / (2 + 8), 0.5, 0.0, 3 / 8])
    assert np.isnan(fresh_pass_rates([0], [0], [0], [0], 0.5)[0])  # no evidence at all: unseen


def test_an_empirical_bayes_prior_keeps_a_small_probe_from_deciding_alone():
    # Batch probe pass rate: 3 successes in 6 rollouts = 0.5; two pseudo-rollouts at 0.5 join every prompt.
    rates = fresh_pass_rates([0, 0, 0], [0, 0, 0], [0, 2, 1], [2, 2, 2], history_weight=0.5, prior_strength=2)
    np.testing.assert_allclose(rates, [1 / 4, 3 / 4, 2 / 4])


def test_stage_slots_lay_the_probe_first_within_each_prompt():
    counts = np.array([3, 5, 2])
    probe = np.array([2, 2, 2])
    np.testing.assert_array_equal(stage_slots(counts, probe, np.zeros(3, dtype=int)), [0, 1, 3, 4, 8, 9])
    np.testing.assert_array_equal(stage_slots(counts, counts - probe, probe), [2, 5, 6, 7])


def test_merge_outputs_pads_prompts_left_and_completions_right():
    first = {"prompt_ids": torch.tensor([[5, 6]]), "prompt_mask": torch.tensor([[1, 1]]),
             "completion_ids": torch.tensor([[7, 8, 9]]), "completion_mask": torch.tensor([[1, 1, 1]]),
             "advantages": torch.tensor([0.5]), "num_items_in_batch": torch.tensor(3)}
    second = {"prompt_ids": torch.tensor([[4, 5, 6]]), "prompt_mask": torch.tensor([[1, 1, 1]]),
              "completion_ids": torch.tensor([[7]]), "completion_mask": torch.tensor([[1]]),
              "advantages": torch.tensor([-0.5]), "num_items_in_batch": torch.tensor(1)}
    merged = merge_outputs([first, second], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[0, 5, 6], [4, 5, 6]]
    assert merged["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert merged["completion_ids"].tolist() == [[7, 8, 9], [7, 0, 0]]
    assert merged["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert merged["advantages"].tolist() == [0.5, -0.5] and merged["num_items_in_batch"].item() == 4
    with pytest.raises(RuntimeError, match="cannot merge the generation output 'pixel_values'"):
        merge_outputs([{**first, "pixel_values": torch.zeros(1)}, {**second, "pixel_values": torch.zeros(1)}], 0)


class RowRecorder:
    """Keeps, per step, the plan and the rows' rewards and advantages as the loss will see them."""

    def __init__(self, trainer):
        self.steps, original = [], trainer._generate_and_score_completions

        def recording(inputs):
            output = original(inputs)
            if trainer.model.training:
                plan = trainer.last_rollout_plan
                self.steps.append((plan, output["advantages"].clone(), output["completion_mask"].shape[0]))
            return output

        trainer._generate_and_score_completions = recording


def test_a_probe_run_allocates_from_fresh_rates_and_keeps_whole_groups(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, probe_generations=2, max_steps=6, logging_steps=1,
                           per_device_train_batch_size=16)
    recorder = RowRecorder(trainer)
    trainer.train()
    assert len(recorder.steps) == 6
    for plan, advantages, rows in recorder.steps:
        assert rows == 16 and plan.counts.sum() == 16 and plan.counts.min() >= 2
        assert len(plan.slot_order) == 16 and sorted(plan.slot_order.tolist()) == list(range(16))
    first = recorder.steps[0][0]
    assert np.isnan(first.history_rates).all() and not np.isnan(first.pass_rates).any()  # blind before: fresh now
    assert any(len(set(plan.counts.tolist())) > 1 for plan, _, _ in recorder.steps)
    logs = [entry for entry in trainer.state.log_history if "budget/probe_share" in entry]
    assert len(logs) == 6 and all(entry["budget/probe_share"] == pytest.approx(0.5) for entry in logs)
    assert all(0 <= entry["budget/probe_moved_share"] <= 1 for entry in logs)
    assert_advantages_over_whole_groups(trainer, recorder)


def assert_advantages_over_whole_groups(trainer, recorder):
    """The advantages the loss sees are GRPO's over each prompt's whole group, probe and second stage together."""
    plan = recorder.steps[-1][0]
    rows = int(plan.counts.sum())
    logged = np.array(list(trainer._logs["advantages"])[-rows:])
    rewards = np.array(list(trainer._logs["rewards"]["parity_reward"])[-rows:])
    in_plan = np.empty(rows)
    in_plan[plan.slot_order] = rewards
    expected = np.empty(rows)
    for start, count in zip(np.cumsum(plan.counts) - plan.counts, plan.counts):
        group = in_plan[start : start + count]
        expected[start : start + count] = (group - group.mean()) / (group.std(ddof=1) + 1e-4)
    np.testing.assert_allclose(logged, expected[plan.slot_order], atol=1e-5)
    np.testing.assert_allclose(recorder.steps[-1][1].numpy(), expected[plan.slot_order], atol=1e-5)


@pytest.mark.parametrize(
    "shape",
    [
        # 3 prompts: a probe of 6 rows and a second stage of 6, neither a multiple of num_generations=4
        dict(generation_batch_size=12, per_device_train_batch_size=4, num_generations=4),
        dict(num_generations=3, per_device_train_batch_size=6),  # 2 prompts: 4 probe rows, groups of 3
        dict(budget_min_generations=1, budget_max_generations=8, probe_generations=1),  # 2 prompts: 2 probe rows
    ],
    ids=["12-rows-groups-of-4", "6-rows-groups-of-3", "probe-of-1"],
)
def test_a_probe_whose_stages_are_no_multiple_of_num_generations_trains(tmp_path, tokenizer, shape):
    # Before: TRL's `rewards.view(-1, num_generations)` inside the probe stage raised on the first step.
    options = {"probe_generations": 2, "max_steps": 6, **shape}
    trainer = make_trainer(tmp_path, tokenizer, **options)
    recorder = RowRecorder(trainer)
    trainer.train()
    assert trainer.state.global_step == 6
    assert len(recorder.steps) == 6 // trainer.args.steps_per_generation
    for plan, _, rows in recorder.steps:
        assert rows == plan.counts.sum() == trainer.args.generation_batch_size
        assert (plan.counts >= options["probe_generations"]).all()
    assert_advantages_over_whole_groups(trainer, recorder)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"probe_generations": 3}, "must lie between 0 .* and budget_min_generations=2"),
        ({"probe_generations": -1}, "^probe_generations must be a whole number of at least 0"),
        ({"probe_generations": "2"}, "^probe_generations must be a whole number .* got '2'"),
        ({"probe_history_weight": -0.5}, "probe_history_weight must be a finite number, 0 or more"),
        ({"probe_prior_strength": -1}, "probe_prior_strength must be a finite number, 0 or more"),
    ],
)
def test_probe_settings_that_cannot_work_are_refused(tmp_path, overrides, message):
    from helpers import config_kwargs

    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **overrides))


def test_a_probe_that_takes_the_whole_budget_still_has_advantages(tmp_path, tokenizer):
    # probe_generations = budget_min_generations = num_generations: the probe stage is the whole batch, every count is
    # num_generations. Its rows were scored with TRL's grouping off, so TRL's advantages are no GRPO advantages.
    trainer = make_trainer(tmp_path, tokenizer, probe_generations=2, budget_min_generations=2, num_generations=2,
                           max_steps=4)
    recorder = RowRecorder(trainer)
    trainer.train()
    for plan, _, _ in recorder.steps:
        assert (plan.counts == 2).all()
    assert any(advantages.abs().sum() > 0 for _, advantages, _ in recorder.steps)
    assert_advantages_over_whole_groups(trainer, recorder)
