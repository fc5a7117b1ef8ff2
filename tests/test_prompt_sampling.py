"""Prompt selection by the allocator's value (`prompt_sampling="value"`): the weights by hand, the draw they make in the
trainer replayed from the sampler's seed, resume, and the allocators and values it refuses. SPO's own weights are tested
in test_spo.py and test_spo_trainer.py."""

import numpy as np
import pytest
from datasets import Dataset
from helpers import make_trainer
from test_probe import RowRecorder

from trl_budget import CoBAAllocator, KnapsackAllocator, UniformAllocator, prompt_key
from trl_budget.prompt_sampling import selected_shares, value_sampling_weights
from trl_budget.spo import draw_prompts

VALUE = dict(budget_allocator="knapsack", prompt_sampling="value", per_device_train_batch_size=16,
             pass_rate_min_rollouts=4)


def test_value_weights_by_hand():
    # values 0.1, 0.2 (unseen), 0 and 0.4: the most valuable seen prompt 0.4 weighs 0.55, the unseen one as much.
    weights = value_sampling_weights([0.1, 0.2, 0.0, 0.4], [0.5, np.nan, 1.0, 0.3])
    np.testing.assert_allclose(weights, [0.5 * 0.25 + 0.05, 0.55, 0.05, 0.55])
    np.testing.assert_allclose(value_sampling_weights([0.0, 0.0], [np.nan, 0.0]), [0.55, 0.05])  # no value seen
    np.testing.assert_allclose(value_sampling_weights([0.0, 0.0], [np.nan, np.nan]), [0.55, 0.55])  # none seen


def test_each_allocators_prompt_values_add_up_to_its_value():
    rates, counts = np.array([0.0, 0.25, 0.5, 0.9, np.nan]), np.array([4, 4, 8, 2, 4])
    knapsack = KnapsackAllocator().prompt_values(counts, rates)
    p = np.array([0.0, 0.25, 0.5, 0.9, 0.0])
    np.testing.assert_allclose(knapsack, (1 - p**counts - (1 - p)**counts) * p * (1 - p) ** 2)  # 0: unseen, p = 0
    coba = CoBAAllocator()
    assert coba.prompt_values(counts, rates, 0.4).sum() == pytest.approx(coba.value(counts, rates, 0.4))


def test_selected_shares_count_unseen_prompts_in_a_band_of_their_own():
    shares = selected_shares(np.array([0.1, 0.15, np.nan, np.nan, 0.9]), np.array([0, 0, 2, 4]))
    assert shares == {"prompt_sampling/selected_share/p0.0-0.2": 1.0, "prompt_sampling/selected_share/p0.8-1.0": 1.0,
                      "prompt_sampling/selected_share/unseen": 0.5}


def easy_half_reward(completions, answer, **kwargs):
    """Prompts whose answer is below 9 always earn 1 (p = 1, worth nothing to Knapsack RL); the rest are mixed."""
    return [1.0 if int(a) < 9 else float(len(c) % 2) for c, a in zip(completions, answer)]


def split_dataset() -> Dataset:
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in
                              [(1, 2), (2, 3), (3, 1), (0, 4), (1, 1), (2, 2), (5, 6), (7, 8), (9, 4), (6, 6), (8, 5),
                               (7, 7)]])


def test_value_sampling_draws_by_knapsacks_value_of_each_prompt_at_the_trackers_pass_rate(tmp_path, tokenizer):
    dataset = split_dataset()
    trainer = make_trainer(tmp_path, tokenizer, max_steps=8, dataset=dataset, reward_funcs=easy_half_reward, **VALUE)
    recorder, sampler, calls = RowRecorder(trainer), trainer.prompt_sampler, []
    original = sampler.weights_of

    def recording(keys, rows_of):
        rates = trainer.tracker.pass_rates(keys)  # the tracker as the draw sees it
        weights, estimates = original(keys, rows_of)
        calls.append((list(keys), rates, weights, estimates))
        return weights, estimates

    sampler.weights_of = recording
    trainer.train()
    assert len(calls) == 8 and np.isnan(calls[0][1]).all() and not np.isnan(calls[-1][1]).all()
    easy = {prompt_key(row) for row in dataset if int(row["answer"]) < 9}
    replay, drawn = np.random.default_rng(trainer.args.seed), {True: 0, False: 0}
    for (keys, rates, weights, estimates), (plan, _, _) in zip(calls, recorder.steps):
        p = np.nan_to_num(rates)
        value = (1 - p**4 - (1 - p) ** 4) * p * (1 - p) ** 2  # Knapsack RL's value at num_generations = 4 rollouts
        top = value[~np.isnan(rates)].max(initial=0.0)
        np.testing.assert_allclose(weights, np.where(np.isnan(rates), 0.55,
                                                     0.5 * (value / top if top > 0 else 0.0) + 0.05))
        np.testing.assert_array_equal(estimates, rates)
        chosen = [keys[index] for index in draw_prompts(weights, 4, replay)]  # the sampler's seed, these weights
        assert plan.keys == chosen
        for key in chosen:
            drawn[key in easy] += 1
    assert drawn[False] > drawn[True]  # six of each in the data; the always-solved ones are worth nothing
    assert any("prompt_sampling/selected_share/unseen" in entry for entry in trainer.state.log_history)


def test_value_sampling_resumes_exactly(tmp_path, tokenizer):
    options = dict(dataset=split_dataset(), reward_funcs=easy_half_reward, save_strategy="steps", save_steps=2,
                   prompt_sampling_pool=8, lr_scheduler_type="constant", **VALUE)
    full = make_trainer(tmp_path / "full", tokenizer, max_steps=4, **options)
    full.train()
    make_trainer(tmp_path / "part", tokenizer, max_steps=2, **options).train()
    resumed = make_trainer(tmp_path / "part", tokenizer, max_steps=4, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "part" / "checkpoint-2"))
    assert resumed.prompt_sampler.state_dict() == full.prompt_sampler.state_dict()
    assert resumed.tracker.state_dict() == full.tracker.state_dict()
    assert resumed.last_rollout_plan.keys == full.last_rollout_plan.keys


def test_an_allocator_without_values_is_refused_before_the_model_loads(tmp_path, tokenizer):
    with pytest.raises(ValueError, match=r"^prompt_sampling='value' weighs each prompt by the allocator's value, but "
                                         r"UniformAllocator\(.*\) \(budget_allocator='uniform'\) values no prompt"):
        make_trainer(tmp_path, tokenizer, model="not-loaded", **{**VALUE, "budget_allocator": "uniform"})


class NegativeValues(UniformAllocator):
    def prompt_values(self, counts, pass_rates, failure_rate=None):
        return -np.ones(len(pass_rates))


def test_values_that_cannot_weigh_a_prompt_are_refused_before_the_model_loads(tmp_path, tokenizer):
    with pytest.raises(ValueError, match=r"NegativeValues.prompt_values, which must give one finite value >= 0 per "
                                         r"prompt with a pass rate \(5 prompts\), but gave"):
        make_trainer(tmp_path, tokenizer, model="not-loaded", allocator=NegativeValues(2, 8), **VALUE)


class NoValueUnseen(KnapsackAllocator):
    """Knapsack RL's values, NaN for a prompt without a pass rate."""

    def prompt_values(self, counts, pass_rates, failure_rate=None):
        return np.where(np.isnan(pass_rates), np.nan, super().prompt_values(counts, pass_rates, failure_rate))


def test_an_unseen_prompts_value_is_never_read(tmp_path, tokenizer):
    make_trainer(tmp_path, tokenizer, max_steps=2, dataset=split_dataset(), allocator=NoValueUnseen(2, 8),
                 reward_funcs=easy_half_reward, **VALUE).train()
