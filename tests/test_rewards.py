"""Rewards the trainer cannot train on: an infinite reward stops the batch where it appears, under every rule, naming
the function, the prompt and the value; rewards whose spread overflows float32 train nothing, as in GRPOTrainer, and
are reported once."""

import logging

import numpy as np
import pytest
import torch
from helpers import grpo_kwargs, make_dataset, make_trainer, parameters_of, parity_reward
from trl import GRPOConfig, GRPOTrainer

from trl_budget.demo.tiny import build_tiny_model

RULES = {
    "uniform": {"budget_allocator": "uniform", "advantage_baseline": "group"},  # GRPO's, as the checks compare
    "knapsack": {"budget_allocator": "knapsack"},
    "probe": {"budget_allocator": "knapsack", "probe_generations": 2},
    "rounds": {"budget_allocator": "uniform", "rounds_generations": 2},
    "reinforce_ada": {"budget_allocator": "reinforce_ada", "reinforce_ada_samples_per_round": 4},
}


def reward_with_one(value):
    """The parity reward, except that the second rollout of every call earns `value`."""

    def spoiled_reward(completions, answer, **kwargs):
        rewards = parity_reward(completions, answer)
        rewards[1] = value
        return rewards

    return spoiled_reward


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), 1e300])
def test_an_infinite_reward_stops_the_first_batch_under_every_rule(tmp_path, tokenizer, rule, value):
    # Before: TRL's rules zeroed the group's advantages silently and the tracker counted +inf as a success;
    # Reinforce-Ada trained NaN weights with a logged loss of 0.0 and crashed a step later in sampling.
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=reward_with_one(value), **RULES[rule])
    before = parameters_of(trainer)
    with pytest.raises(ValueError, match=r"^The reward function 'spoiled_reward' gave (-)?inf to a completion of the "
                                         r"prompt '\d\+\d=' \(generated on process 0\): a reward must be finite"):
        trainer.train()
    assert trainer.state.global_step == 0 and len(trainer.tracker) == 0
    assert all(torch.equal(before[name], p) for name, p in trainer.model.named_parameters())


def test_a_reward_left_unscored_stays_what_it_is_in_trl(tmp_path, tokenizer):
    # None (NaN) is TRL's mark for a rollout a function could not score: still accepted, left out of the baseline.
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=reward_with_one(None), max_steps=2)
    trainer.train()
    assert trainer.state.global_step == 2


def spread_too_wide(completions, answer, **kwargs):
    """The parity reward at a scale whose squared spread overflows float32 (1e40 > 3.4e38)."""
    return [1e20 * reward for reward in parity_reward(completions, answer)]


def test_a_spread_that_overflows_float32_trains_nothing_as_in_grpo_trainer_and_is_reported_once(tmp_path, tokenizer,
                                                                                              caplog):
    common = grpo_kwargs(tmp_path / "grpo", max_steps=3)
    grpo = GRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=spread_too_wide, args=GRPOConfig(**common),
                       train_dataset=make_dataset(), processing_class=tokenizer)
    grpo.train()
    assert not any(grpo._logs["advantages"])  # TRL: every advantage 0, without a word
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        for rule in ("uniform", "knapsack"):
            budget = make_trainer(tmp_path / rule, tokenizer, reward_funcs=spread_too_wide, max_steps=3,
                                  **RULES[rule])
            budget.train()
            assert not any(budget._logs["advantages"])
            assert caplog.text.count("the squared spread of their rewards overflows float32") == 1
            caplog.clear()
    logs = [entry for entry in budget.state.log_history if "budget/effective_ratio" in entry]
    assert all(entry["budget/effective_ratio"] == 0 for entry in logs)


def test_large_rewards_that_fit_are_trained_without_a_warning(tmp_path, tokenizer, caplog):
    def large(completions, answer, **kwargs):
        return [1e9 * reward for reward in parity_reward(completions, answer)]

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=large, max_steps=2)
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer.train()
    assert "overflows float32" not in caplog.text
    assert any(np.asarray(trainer._logs["advantages"]) != 0)
