"""TRL's agent training under per-prompt budgets: `rollout_func` and environments, each rollout checked to be credited
to the prompt it was generated for (its reward, its advantage, the tracker), with uneven allocations and the probe."""

import numpy as np
import pytest
import torch
from helpers import (
    build_chat_tokenizer,
    config_kwargs,
    grpo_kwargs,
    make_dataset,
    make_trainer,
    parameters_of,
)
from trl import GRPOConfig, GRPOTrainer

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.demo.tiny import build_tiny_model

BUDGETS = [dict(budget_allocator="knapsack", pass_rate_min_rollouts=1),
           dict(budget_allocator="coba"),
           dict(budget_allocator="knapsack", probe_generations=2),
           dict(budget_allocator="uniform", rounds_generations=2)]
BUDGET_IDS = ["knapsack", "coba", "knapsack-probe", "rounds"]


class CopyingRollouts:
    """A `rollout_func`: each row's completion is its prompt's two digits, then a digit drawn at random (its own
    generator, so that two trainers given fresh copies see the same rollouts). Keeps the group size it was shown."""

    def __init__(self, seed: int = 0):
        self.rng, self.group_sizes = np.random.default_rng(seed), []

    def __call__(self, prompts, trainer):
        tokenizer = trainer.processing_class
        self.group_sizes.append(trainer.num_generations)
        completions = [prompt[0] + prompt[2] + str(self.rng.integers(10)) for prompt in prompts]
        completion_ids = [tokenizer(text)["input_ids"] + [tokenizer.eos_token_id] for text in completions]
        return {"prompt_ids": [tokenizer(prompt)["input_ids"] for prompt in prompts],
                "completion_ids": completion_ids, "logprobs": [[0.0] * len(ids) for ids in completion_ids]}


def last_digit_parity(prompts, completions, **kwargs):
    """1 when the completion's drawn digit is even; every completion must begin with its own prompt's digits."""
    for prompt, completion in zip(prompts, completions):
        assert completion[:2] == prompt[0] + prompt[2], f"{completion!r} scored against {prompt!r}"
    return [float(int(completion[2]) % 2 == 0) for completion in completions]


def recording_outputs(trainer):
    """Keeps every training batch's plan and output."""
    kept, generate = [], trainer._generate_and_score_completions

    def recording(inputs):
        output = generate(inputs)
        if trainer.model.training:
            kept.append((trainer.last_rollout_plan, output))
        return output

    trainer._generate_and_score_completions = recording
    return kept


def misplaced(kept, tokenizer, text_of_prompt) -> list:
    """Rows whose tokens show another prompt than the one the plan credits them to."""
    wrong = []
    for plan, output in kept:
        prompt_of_slot = np.repeat(np.arange(len(plan.prompts)), plan.counts)
        for row, slot in enumerate(plan.slot_order.tolist()):
            credited = text_of_prompt(plan.prompts[prompt_of_slot[slot]])
            shown = tokenizer.decode(output["prompt_ids"][row][output["prompt_mask"][row].bool()],
                                     skip_special_tokens=True)
            completion = tokenizer.decode(output["completion_ids"][row][output["completion_mask"][row].bool()],
                                          skip_special_tokens=True)
            if credited not in shown:
                wrong.append((credited, shown, completion))
    return wrong


@pytest.mark.parametrize("budget", BUDGETS, ids=BUDGET_IDS)
def test_a_rollout_func_trains_under_budgets_every_row_credited_to_its_prompt(tmp_path, tokenizer, budget):
    rollouts = CopyingRollouts()
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=last_digit_parity, rollout_func=rollouts, max_steps=6,
                           per_device_train_batch_size=16, **budget)
    kept = recording_outputs(trainer)
    before = parameters_of(trainer)
    trainer.train()
    assert len(kept) == 6 and any(len(set(plan.counts.tolist())) > 1 for plan, _ in kept)  # budgets moved
    for plan, output in kept:
        assert output["completion_ids"].shape[0] == plan.counts.sum() == 16
        # The row's own completion earns the reward the plan credits its slot.
        for row, slot in enumerate(plan.slot_order.tolist()):
            completion = tokenizer.decode(output["completion_ids"][row][output["completion_mask"][row].bool()],
                                          skip_special_tokens=True)
            assert float(int(completion[2]) % 2 == 0) == plan.rewards[slot]
    assert not misplaced(kept, tokenizer, lambda row: row["prompt"])
    # The group size the rollout_func is shown is true of the rows it gets: 1 (each row its own rollout) in the
    # budget's layout, or num_generations when a batch is TRL's own layout (equal groups, in order).
    assert 1 in rollouts.group_sizes and set(rollouts.group_sizes) <= {1, 4}
    assert any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())


def test_uniform_with_a_rollout_func_is_grpo_trainer(tmp_path, tokenizer):
    common = grpo_kwargs(tmp_path / "grpo", max_steps=3)
    runs = []
    for trainer_class, config_class, extra in ((GRPOTrainer, GRPOConfig, {}),
                                               (BudgetGRPOTrainer, BudgetGRPOConfig, {"budget_allocator": "uniform"})):
        rollouts = CopyingRollouts()
        trainer = trainer_class(model=build_tiny_model(tokenizer), reward_funcs=last_digit_parity,
                                args=config_class(**common, **extra), train_dataset=make_dataset(),
                                processing_class=tokenizer, rollout_func=rollouts)
        trainer.train()
        runs.append((trainer, rollouts))
    (grpo, grpo_rollouts), (budget, budget_rollouts) = runs
    assert budget_rollouts.group_sizes == grpo_rollouts.group_sizes == [4] * 3  # TRL's groups, shown alike
    assert list(budget._logs["advantages"]) == list(grpo._logs["advantages"])
    for ours, theirs in zip(budget.model.parameters(), grpo.model.parameters()):
        assert torch.equal(ours, theirs)


class RecordingEnvironment:
    """An environment that owns the reward: `reset` keeps the row it was reset with, `get_reward` draws 0 or 1 from
    a generator of its own (the groups are mixed)."""

    created = 0

    def __init__(self):
        self.row, self.rng = None, np.random.default_rng(RecordingEnvironment.created)
        RecordingEnvironment.created += 1

    def reset(self, **row):
        self.row = row

    def get_reward(self) -> float:
        return float(self.rng.random() < 0.5)


class OtherEnvironment(RecordingEnvironment):
    """A second kind of environment, for a dict of factories."""


class EnvironmentCredit:
    """A reward of 0 that checks every rollout's environment was reset with the rollout's own row."""

    __name__ = "environment_credit"

    def __init__(self):
        self.checked = 0

    def __call__(self, prompts, completions, environments, environment=None, **kwargs):
        for index, (prompt, instance) in enumerate(zip(prompts, environments)):
            assert instance.row["prompt"] == prompt, f"{prompt!r} scored by an environment reset with {instance.row}"
            if environment is not None:  # a dict of factories: the row's own kind
                assert type(instance) is {"first": RecordingEnvironment, "other": OtherEnvironment}[environment[index]]
        self.checked += len(prompts)
        return [0.0] * len(prompts)


def conversational(size: int = 6, with_environment: bool = False):
    data = make_dataset(size).map(lambda row: {"prompt": [{"role": "user", "content": row["prompt"]}]})
    if with_environment:
        data = data.map(lambda row, i: {"environment": ["first", "other"][i % 2]}, with_indices=True)
    return data


@pytest.mark.parametrize("factories", ["single", "dict"])
@pytest.mark.parametrize("budget", BUDGETS[:3], ids=BUDGET_IDS[:3])
def test_environments_are_reset_with_their_own_row_and_score_their_rollout(tmp_path, factories, budget):
    chat = build_chat_tokenizer()
    credit = EnvironmentCredit()
    factory = RecordingEnvironment if factories == "single" else {"first": RecordingEnvironment,
                                                                  "other": OtherEnvironment}
    trainer = make_trainer(tmp_path, chat, model=build_tiny_model(chat), reward_funcs=credit,
                           environment_factory=factory, dataset=conversational(with_environment=factories == "dict"),
                           max_steps=4, per_device_train_batch_size=16, max_completion_length=3, **budget)
    kept = recording_outputs(trainer)
    trainer.train()
    assert credit.checked >= 4 * 16
    assert any(len(set(plan.counts.tolist())) > 1 for plan, _ in kept)
    assert not misplaced(kept, chat, lambda row: row["prompt"][0]["content"])
    # The environments' rewards are the rewards: the tracker saw mixed outcomes for the batch's prompts.
    assert 0 < trainer.tracker.failure_rate < 1


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(environment_factory=RecordingEnvironment, dataset=None), "without a train_dataset"),
        (dict(environment_factory={"first": RecordingEnvironment}, dataset="routing"),
         "rows have no `prompt` .* Set prompt_id_column"),
    ],
)
def test_environments_per_prompt_budgets_cannot_key_are_refused_before_the_model_loads(tmp_path, options, message):
    chat = build_chat_tokenizer()
    if options.get("dataset") == "routing":
        options["dataset"] = conversational(with_environment=True).remove_columns(["prompt"])
    dataset = options.pop("dataset")
    with pytest.raises(ValueError, match=message):
        BudgetGRPOTrainer(model="no-such-org/no-such-model", reward_funcs=EnvironmentCredit(),
                          args=BudgetGRPOConfig(**config_kwargs(tmp_path)), train_dataset=dataset,
                          processing_class=chat, **options)
