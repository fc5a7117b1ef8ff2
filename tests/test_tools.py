"""Tool calling under per-prompt budgets, with a real tool-calling model (tests/tool_task.py): every rollout runs its
own tool loop, calls the tool with its own prompt's arguments, gets its own reply, and is credited to its prompt."""

import numpy as np
import pytest
import torch
from helpers import config_kwargs, grpo_kwargs, make_trainer
from test_agent import misplaced, recording_outputs
from tool_task import add, build_tool_tokenizer, called_with, final_answer, tool_dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer

pytestmark = pytest.mark.slow


class ToolReward:
    """1 when the final answer is the sum of the prompt's digits; keeps (prompt's digits, the call's arguments, the
    reply) of every rollout that called the tool."""

    __name__ = "tool_reward"

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, completions, **kwargs):
        rewards = []
        for prompt, completion in zip(prompts, completions):
            a, b = int(prompt[-1]["content"][0]), int(prompt[-1]["content"][2])
            called = called_with(completion)
            if called is not None:
                self.calls.append(([a, b], list(called[0]), called[1]))
            rewards.append(float(final_answer(completion) == str(a + b)))
        return rewards


def answer_of_row(output, row, tokenizer) -> str:
    """The last answer in a row's own completion tokens (after the tool's reply)."""
    ids = output["completion_ids"][row][output["completion_mask"][row].bool()]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    return text.split("<|im_start|>assistant\n")[-1].split("<|im_end|>")[0]


@pytest.mark.parametrize("budget", [dict(budget_allocator="knapsack", pass_rate_min_rollouts=1),
                                    dict(budget_allocator="coba"),
                                    dict(budget_allocator="knapsack", probe_generations=2),
                                    dict(budget_allocator="uniform", rounds_generations=2)],
                         ids=["knapsack", "coba", "knapsack-probe", "rounds"])
def test_tool_rollouts_are_credited_to_their_prompts(tmp_path, tool_model, budget):
    tokenizer, reward = build_tool_tokenizer(), ToolReward()
    trainer = make_trainer(tmp_path, tokenizer, model=AutoModelForCausalLM.from_pretrained(tool_model),
                           reward_funcs=reward, tools=[add], dataset=tool_dataset(), max_steps=4,
                           per_device_train_batch_size=16, max_completion_length=128, **budget)
    kept = recording_outputs(trainer)
    trainer.train()
    assert any(len(set(plan.counts.tolist())) > 1 for plan, _ in kept)  # budgets moved
    # Each rollout ran its own loop: the reply it got is add() of the arguments it called with, and those are its own
    # prompt's digits (a rollout handed another prompt would call with that prompt's digits).
    assert len(reward.calls) >= 0.8 * 4 * 16
    assert all(reply == str(sum(arguments)) for _, arguments, reply in reward.calls)
    assert np.mean([arguments == digits for digits, arguments, _ in reward.calls]) > 0.8
    calls = [entry["tools/call_frequency"] for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert calls and min(calls) > 0.5
    # Each trained row shows the prompt the plan credits it to, and its own answer earns the reward credited to it.
    assert not misplaced(kept, tokenizer, lambda row: row["prompt"][-1]["content"])
    for plan, output in kept:
        prompt_of_slot = np.repeat(np.arange(len(plan.prompts)), plan.counts)
        assert "tool_mask" in output and output["tool_mask"].shape == output["completion_ids"].shape
        for row, slot in enumerate(plan.slot_order.tolist()):
            content = plan.prompts[prompt_of_slot[slot]]["prompt"][-1]["content"]
            expected = str(int(content[0]) + int(content[2]))
            assert float(answer_of_row(output, row, tokenizer) == expected) == plan.rewards[slot]


def test_spo_with_tools_runs_each_rollouts_loop_and_keeps_its_tool_turns_in_the_response(tmp_path, tool_model):
    # One rollout a prompt, each its own tool loop; the response SPO keeps for KL-adaptive rho is the whole completion
    # the policy trained on, tool replies included (the release keeps its whole row), for its own prompt.
    tokenizer, reward = build_tool_tokenizer(), ToolReward()
    trainer = make_trainer(tmp_path, tokenizer, model=AutoModelForCausalLM.from_pretrained(tool_model),
                           reward_funcs=reward, tools=[add], dataset=tool_dataset(), max_steps=3,
                           per_device_train_batch_size=16, max_completion_length=128, budget_allocator="spo",
                           budget_max_generations=128)
    kept = recording_outputs(trainer)
    trainer.train()
    assert all((plan.counts == 1).all() and len(plan.counts) == 16 for plan, _ in kept)
    assert all(reply == str(sum(arguments)) for _, arguments, reply in reward.calls)
    assert not misplaced(kept, tokenizer, lambda row: row["prompt"][-1]["content"])
    for response in trainer.spo.tracker.responses.values():
        prompt = tokenizer.decode(response["prompt_ids"], skip_special_tokens=True)
        completion = tokenizer.decode(response["completion_ids"], skip_special_tokens=False)
        assert len(response["log_probs"]) == len(response["completion_ids"]) and "<tool_call>" in completion
        digits = prompt.split("user")[-1].strip()[:3]
        assert digits[0] in completion and digits[2] in completion


def test_uniform_with_tools_is_grpo_trainer(tmp_path, tool_model):
    common = grpo_kwargs(tmp_path / "grpo", max_steps=3, max_completion_length=128)
    runs = []
    for trainer_class, config_class, extra in ((GRPOTrainer, GRPOConfig, {}),
                                               (BudgetGRPOTrainer, BudgetGRPOConfig, {"budget_allocator": "uniform"})):
        trainer = trainer_class(model=AutoModelForCausalLM.from_pretrained(tool_model), reward_funcs=ToolReward(),
                                args=config_class(**common, **extra), train_dataset=tool_dataset(),
                                processing_class=build_tool_tokenizer(), tools=[add])
        trainer.train()
        runs.append(trainer)
    grpo, budget = runs
    assert list(budget._logs["advantages"]) == list(grpo._logs["advantages"])
    for ours, theirs in zip(budget.model.parameters(), grpo.model.parameters()):
        assert torch.equal(ours, theirs)


class AddingEnvironment:
    """An environment whose tool is `add`: it keeps the row it was reset with and every call made to it."""

    episodes = []

    def reset(self, **row):
        self.episode = {"prompt": row["prompt"][-1]["content"], "calls": []}
        AddingEnvironment.episodes.append(self.episode)

    def add(self, a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        self.episode["calls"].append((a, b))
        return a + b


@pytest.mark.parametrize("factories", ["single", "dict"])
def test_an_environments_tool_is_called_by_the_rollout_it_was_reset_for(tmp_path, tool_model, factories):
    AddingEnvironment.episodes = []
    data = tool_dataset()
    factory = AddingEnvironment
    if factories == "dict":
        data = data.map(lambda row, i: {"environment": ["left", "right"][i % 2]}, with_indices=True)
        factory = {"left": AddingEnvironment, "right": AddingEnvironment}
    trainer = make_trainer(tmp_path, build_tool_tokenizer(), model=AutoModelForCausalLM.from_pretrained(tool_model),
                           reward_funcs=ToolReward(), environment_factory=factory, dataset=data, max_steps=3,
                           per_device_train_batch_size=16, max_completion_length=128, probe_generations=2)
    trainer.train()
    calls = [(episode["prompt"], call) for episode in AddingEnvironment.episodes for call in episode["calls"]]
    assert len(calls) >= 0.8 * 3 * 16
    # An environment answers the rollout that its row's reset began: the calls it gets name that row's digits.
    assert np.mean([call == (int(prompt[0]), int(prompt[2])) for prompt, call in calls]) > 0.8
