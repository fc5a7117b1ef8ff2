"""`loss_weighting="prompt"`: each prompt's rollouts together weigh as `num_generations` rollouts in the loss."""

import numpy as np
import pytest
import torch
from helpers import config_kwargs, make_trainer
from test_probe import RowRecorder

from trl_budget import BudgetGRPOConfig
from trl_budget.advantages import prompt_loss_weights
from trl_budget.settings.baselines import PROMPT_WEIGHTED_LOSSES


def test_prompt_loss_weights_by_hand():
    weights = prompt_loss_weights(torch.tensor([6, 2]), num_generations=4)
    np.testing.assert_allclose(weights.numpy(), [4 / 6] * 6 + [4 / 2] * 2)
    # Each prompt's rows now add up to num_generations: 6 x 4/6 = 4 and 2 x 2 = 4.
    assert weights[:6].sum().item() == pytest.approx(4) and weights[6:].sum().item() == pytest.approx(4)


def skewed(pass_rates, budget, failure_rate=None):
    """An allocator that gives the first prompt three quarters of the batch, from the first step on."""
    counts = np.full(pass_rates.size, 2)
    counts[0] = budget - 2 * (pass_rates.size - 1)
    return counts


def test_the_loss_sees_each_prompts_advantages_scaled_by_num_generations_over_its_count(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, allocator=skewed, loss_weighting="prompt", max_steps=3,
                           per_device_train_batch_size=8, num_generations=4)
    recorder = RowRecorder(trainer)
    trainer.train()
    for plan, advantages, _ in recorder.steps:
        assert plan.counts.tolist() == [6, 2]
    plan, advantages, _ = recorder.steps[-1]
    rewards = np.array(list(trainer._logs["rewards"]["parity_reward"])[-8:])
    expected = np.empty(8)
    for start, count in zip(np.cumsum(plan.counts) - plan.counts, plan.counts):  # GRPO's advantage, then 4 / N_i
        group = rewards[start : start + count]
        expected[start : start + count] = (group - group.mean()) / (group.std(ddof=1) + 1e-4) * 4 / count
    np.testing.assert_allclose(advantages.numpy(), expected, atol=1e-5)
    logs = [entry for entry in trainer.state.log_history if "budget/top_prompt_loss_share" in entry]
    assert len(logs) == 3 and all(0 <= entry["budget/top_prompt_loss_share"] <= 1 for entry in logs)


def test_token_weighting_leaves_the_advantages_alone(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, allocator=skewed, max_steps=1)
    recorder = RowRecorder(trainer)
    trainer.train()
    plan, advantages, _ = recorder.steps[0]
    rewards = np.array(list(trainer._logs["rewards"]["parity_reward"])[-8:])
    group = rewards[:6]
    np.testing.assert_allclose(advantages.numpy()[:6], (group - group.mean()) / (group.std(ddof=1) + 1e-4), atol=1e-5)


LOSS_SETTINGS = {"luspo": {"importance_sampling_level": "sequence"}}


@pytest.mark.parametrize("loss_type", PROMPT_WEIGHTED_LOSSES)
def test_trls_loss_scales_exactly_with_a_prompts_advantages(tmp_path, tokenizer, loss_type):
    # The claim behind "prompt" weighting, checked on TRL's own loss: scaling one row's advantage by s > 0 scales its
    # loss by s, for positive and negative advantages, with the ratio clipped (old log-probs far from the new ones).
    trainer = make_trainer(tmp_path, tokenizer, loss_type=loss_type, **LOSS_SETTINGS.get(loss_type, {}))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    output = trainer._generate_and_score_completions([{"prompt": "1+2=", "answer": "3"}] * 8)
    checked = 0
    for row in range(8):
        inputs = {name: value[row : row + 1] if torch.is_tensor(value) and value.ndim else value
                  for name, value in output.items()}
        if inputs["completion_mask"].sum() == 0:
            continue
        inputs["old_per_token_logps"] = torch.full_like(inputs["completion_mask"], -0.5, dtype=torch.float32)
        for advantage in (1.5, -0.75):
            losses = []
            for scale in (1.0, 2.5):
                inputs["advantages"] = torch.tensor([advantage * scale])
                losses.append(trainer._compute_loss(trainer.model, inputs).item())
            assert losses[1] == pytest.approx(2.5 * losses[0], rel=1e-5, abs=1e-7)
            checked += losses[0] != 0
    assert checked >= 2  # some rows had a non-zero loss to scale


def test_an_unknown_weighting_or_a_loss_of_unknown_form_is_refused(tmp_path):
    with pytest.raises(ValueError, match="loss_weighting='group' is not a weighting"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, loss_weighting="group"))
    config = BudgetGRPOConfig(**config_kwargs(tmp_path))
    config.loss_type, config.loss_weighting = "a_future_loss", "prompt"
    with pytest.raises(ValueError, match="loss_type='a_future_loss' is not known to be one"):
        config.check_loss_weighting()
