"""DAPO's dynamic sampling: the rule and the prompt stream by hand, and real runs of the trainer that keep exactly the
prompts whose rollouts differ, in the data's order, resume exactly, and stop at the cap as verl's recipe does."""

import numpy as np
import pytest
import torch
from datasets import Dataset, IterableDataset
from helpers import assert_resumes_exactly, make_dataset, make_trainer, parameters_of
from test_probe import RowRecorder
from test_rounds import scripted
from trl.trainer.utils import RepeatSampler

from trl_budget import BudgetGRPOConfig, KnapsackAllocator
from trl_budget.dynamic_sampling import DynamicSampling, PromptStream
from trl_budget.rounds import GeneratedRounds

ALWAYS, NEVER, MIXED = [1] * 4, [0] * 4, [1, 0, 0, 1]


def run_dynamic(outcomes_by_batch: list[list[list[int]]], needed: int, cap: int):
    """The rule over generation batches of scripted outcomes (`outcomes_by_batch[b][i]`: prompt i of batch b)."""
    batches = iter(outcomes_by_batch[1:])
    outcomes = list(outcomes_by_batch[0])

    def draw():
        batch = next(batches)
        outcomes.extend(batch)
        return [{"prompt": str(len(outcomes) - len(batch) + i)} for i in range(len(batch))], [None] * len(batch)

    prompts = [{"prompt": str(i)} for i in range(len(outcomes))]
    rule = DynamicSampling(prompts, [None] * len(prompts), draw, GeneratedRounds.mixed, needed, 4, cap, "success")
    rounds, sizes = GeneratedRounds(len(prompts), 1, 0), []
    while (counts := rule.next_round(rounds)) is not None:
        sizes.append(counts.tolist())
        scripted(outcomes)(rounds, counts)
    return rule, rounds, sizes


def test_the_rule_keeps_the_first_varied_prompts_in_the_datas_order_by_hand():
    rule, rounds, sizes = run_dynamic([[ALWAYS, MIXED, NEVER], [MIXED, ALWAYS, MIXED], [MIXED] * 3], needed=2, cap=3)
    # Batch 1 holds one mixed prompt of the two needed; batch 2 brings two more: the first, prompt 3, fills the batch;
    # prompt 5 is mixed too but left out, as verl's batch[:train_batch_size] leaves it. Batch 3 is never drawn.
    assert sizes == [[4, 4, 4], [0, 0, 0, 4, 4, 4]]
    assert rule.kept.tolist() == [1, 3] and rule.varied_prompts == 3 and len(rule.prompts) == 6
    chosen, counts = rule.trained_slots(rounds)
    assert chosen.tolist() == [4, 5, 6, 7, 12, 13, 14, 15] and counts.tolist() == [0, 4, 0, 4, 0, 0]
    np.testing.assert_allclose(rule.pass_rates, [1, 0.5, 0, 0.5, 1, 0.5])


def test_the_rule_stops_at_the_cap_naming_the_fix():
    with pytest.raises(RuntimeError, match=r"kept 1 of the 2 prompts .* after 2 generation batches of 2 prompts "
                                           r"\(budget_dynamic_sampling_max_gen_batches=2\).*Raise"):
        run_dynamic([[ALWAYS, MIXED], [NEVER, ALWAYS], [MIXED, MIXED]], needed=2, cap=2)
    rule, _, sizes = run_dynamic([[ALWAYS, MIXED], [NEVER, ALWAYS], [MIXED, MIXED]], needed=2, cap=0)  # no cap
    assert len(sizes) == 3 and rule.kept.tolist() == [1, 4]


def test_the_stream_walks_the_data_as_trls_sampler_does_pass_after_pass():
    data = make_dataset(7)
    stream = PromptStream(data, 3, shuffle=True, seed=5)
    drawn = [stream.next_indices() for _ in range(5)]
    # TRL's sampler for batches of 3 prompts, its generator seeded once: each pass a permutation cut to whole batches.
    trls = RepeatSampler(data, mini_repeat_count=4, batch_size=3, repeat_count=2, shuffle=True, seed=5)
    passes = [list(iter(trls))[::4] for _ in range(3)]  # each index repeated 4 times, each batch twice
    expected = [batch[:3] for one_pass in passes for batch in (one_pass[:6], one_pass[6:12])]
    assert drawn == expected[:5] and stream.passes == 3 and stream.drawn == 5
    assert all(len(set(batch)) == 3 for batch in drawn) and len(set(drawn[0] + drawn[1])) == 6  # no repeat in a pass
    resumed = PromptStream(data, 3, shuffle=True, seed=5)
    resumed.load_state_dict(stream.state_dict(), "state.json")
    assert resumed.next_indices() == expected[5] and resumed.passes == 3
    with pytest.raises(ValueError, match="seed 5 there, 6 now.*delete the file"):
        PromptStream(data, 3, shuffle=True, seed=6).load_state_dict(stream.state_dict(), "state.json")


def constant_for_multiples_of_three(completions, answer, **kwargs):
    """Answers divisible by 3 earn 1 on every rollout; the others alternate 0, 1 over their rows (groups of 4 lie
    consecutively on one process), so they are always mixed."""
    return [1.0 if int(a) % 3 == 0 else float(row % 2) for row, a in enumerate(answer)]


def test_a_run_trains_the_first_varied_prompts_and_drops_the_constant_ones(tmp_path, tokenizer):
    data = make_dataset(12, seed=3)
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=constant_for_multiples_of_three, dataset=data,
                           budget_allocator="uniform", budget_dynamic_sampling=True,
                           budget_dynamic_sampling_oversample=2, max_steps=4)
    recorder = RowRecorder(trainer)
    trainer.train()
    # By hand: the data in the order of TRL's own sampler for this run (each index repeated num_generations times),
    # pass after pass, in generation batches of 2 x 2 prompts.
    sampler = trainer._get_train_sampler()
    order = [index for _ in range(3) for index in list(iter(sampler))[::4]]
    varied = [int(data[index]["answer"]) % 3 != 0 for index in order]
    position = 0
    for plan, advantages, rows in recorder.steps:
        batches = 1
        while sum(varied[position : position + 4 * batches]) < 2:
            batches += 1
        drawn = order[position : position + 4 * batches]
        kept = [index for index in drawn if int(data[index]["answer"]) % 3 != 0][:2]
        assert [prompt["prompt"] for prompt in plan.prompts] == [data[index]["prompt"] for index in drawn]
        assert [plan.prompts[i]["prompt"] for i in np.flatnonzero(plan.counts)] == [data[i]["prompt"] for i in kept]
        assert plan.counts.sum() == 8 and set(plan.counts.tolist()) <= {0, 4} and rows == 8
        assert plan.rewards.tolist() == [0.0, 1.0] * 4 and (advantages != 0).all()
        assert len(plan.round_counts) == batches
        position += 4 * batches
    assert any(len(plan.round_counts) > 1 for plan, _, _ in recorder.steps)  # the data forced a second batch
    logs = [entry for entry in trainer.state.log_history if "budget/varied_prompts" in entry]
    for entry, (plan, _, _) in zip(logs, recorder.steps):
        assert entry["budget/rounds"] == len(plan.round_counts)
        assert entry["budget/generated_prompts"] == len(plan.prompts) == 4 * len(plan.round_counts)
        assert entry["budget/generated_rollouts"] == 4 * len(plan.prompts) and entry["budget/trained_rollouts"] == 8
        assert entry["budget/varied_prompts"] == int((plan.pass_rates == 0.5).sum())
        assert entry["budget/zero_std_groups"] == 0 and entry["budget/rollouts_min"] == 4
    assert trainer.prompt_stream.drawn == position // 4


def alternating(completions, **kwargs):
    return [float(row % 2) for row in range(len(completions))]


def test_a_batch_whose_prompts_all_vary_trains_what_uniform_grpo_trains_bit_for_bit(tmp_path, tokenizer):
    trained = []
    for name, options in (("uniform", {}), ("dynamic", {"budget_dynamic_sampling": True})):
        trainer = make_trainer(tmp_path / name, tokenizer, reward_funcs=alternating, budget_allocator="uniform",
                               max_steps=3, **options)
        trainer.train()
        trained.append(parameters_of(trainer))
    assert all(torch.equal(trained[0][name], trained[1][name]) for name in trained[0])


def test_the_cap_stops_training_naming_the_fix(tmp_path, tokenizer):
    calls = []

    def always_one(completions, **kwargs):
        calls.append(len(completions))
        return [1.0] * len(completions)

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=always_one, budget_allocator="uniform",
                           budget_dynamic_sampling=True, budget_dynamic_sampling_max_gen_batches=3)
    before = parameters_of(trainer)
    with pytest.raises(RuntimeError, match=r"kept 0 of the 2 prompts .* after 3 generation batches .* agreed on the "
                                           r"reward \(budget_dynamic_sampling_metric\)"):
        trainer.train()
    assert calls == [8, 8, 8]
    assert all(torch.equal(before[name], value) for name, value in parameters_of(trainer).items())


def test_the_success_metric_keeps_prompts_whose_outcomes_differ(tmp_path, tokenizer):
    # The reward always differs (0.1 or 0.2 more), the outcome (above success_threshold 0.5) only for odd answers.
    def graded(completions, answer, **kwargs):
        return [float(int(a) % 2) * (row % 2) + 0.1 * (1 + row % 2) for row, a in enumerate(answer)]

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=graded, budget_allocator="uniform",
                           budget_dynamic_sampling=True, budget_dynamic_sampling_metric="success",
                           budget_dynamic_sampling_max_gen_batches=0, success_threshold=0.5, max_steps=3,
                           dataset=make_dataset(12, seed=1))
    recorder = RowRecorder(trainer)
    trainer.train()
    for plan, _, _ in recorder.steps:
        odd = [int(prompt["answer"]) % 2 == 1 for prompt in plan.prompts]
        assert (plan.counts > 0).tolist() == [o and sum(odd[: i + 1]) <= 2 for i, o in enumerate(odd)]


def test_a_resumed_run_draws_and_trains_as_an_uninterrupted_one(tmp_path, tokenizer):
    options = dict(reward_funcs=constant_for_multiples_of_three, budget_allocator="uniform",
                   budget_dynamic_sampling=True, advantage_baseline="history")
    assert_resumes_exactly(tmp_path, tokenizer, **options)
    full = make_trainer(tmp_path / "again", tokenizer, dataset=make_dataset(9), max_steps=4, save_strategy="steps",
                        save_steps=2, **options)
    full.train()
    resumed = make_trainer(tmp_path / "again", tokenizer, dataset=make_dataset(9), max_steps=4, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "again" / "checkpoint-2"))
    assert resumed.prompt_stream.drawn == full.prompt_stream.drawn > 4
    assert resumed.last_rollout_plan.keys == full.last_rollout_plan.keys
    expected = parameters_of(full)
    assert all(torch.equal(expected[name], value) for name, value in parameters_of(resumed).items())


@pytest.mark.parametrize("settings, match", [
    ({"budget_allocator": "knapsack"}, "budget_allocator='uniform' only"),
    ({"budget_allocator": "uniform", "budget_round_generations": 2}, "budget_round_generations=2"),
    ({"budget_allocator": "uniform", "budget_probe_generations": 2}, "budget_probe_generations=2"),
    ({"budget_allocator": "uniform", "budget_dynamic_sampling_metric": "acc"}, "'acc' is not a metric"),
    ({"budget_allocator": "uniform", "budget_dynamic_sampling_oversample": 0}, "oversample must be a whole number"),
])
def test_settings_dynamic_sampling_cannot_run_with_are_refused(tmp_path, settings, match):
    from helpers import config_kwargs

    with pytest.raises(ValueError, match=match):
        BudgetGRPOConfig(**config_kwargs(tmp_path, budget_dynamic_sampling=True, **settings))


def test_its_settings_without_it_are_refused(tmp_path):
    from helpers import config_kwargs

    with pytest.raises(ValueError, match="budget_dynamic_sampling_oversample=3 is read only with "
                                         "budget_dynamic_sampling=True"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, budget_allocator="uniform", budget_dynamic_sampling_oversample=3))


def test_data_it_cannot_draw_from_and_other_allocators_are_refused_before_building(tmp_path, tokenizer):
    options = dict(budget_allocator="uniform", budget_dynamic_sampling=True)
    with pytest.raises(ValueError, match="uniform allocator only; the trainer was given KnapsackAllocator"):
        make_trainer(tmp_path, tokenizer, allocator=KnapsackAllocator(min_generations=2, max_generations=8), **options)
    streamed = IterableDataset.from_generator(lambda: iter(make_dataset().to_list()))
    with pytest.raises(ValueError, match="cannot be indexed.*streaming=True"):
        make_trainer(tmp_path, tokenizer, dataset=streamed, max_steps=1, **options)
    with pytest.raises(ValueError, match="generation batches of 6 prompts .* has 4"):
        make_trainer(tmp_path, tokenizer, dataset=Dataset.from_list(make_dataset(4).to_list()),
                     budget_dynamic_sampling_oversample=3, **options)


@pytest.mark.parametrize("agent", ["rollout_func", "environments"])
def test_agent_rollouts_are_credited_to_their_prompts_under_dynamic_sampling(tmp_path, tokenizer, agent):
    from helpers import build_chat_tokenizer
    from test_agent import (CopyingRollouts, EnvironmentCredit, RecordingEnvironment, conversational,
                            last_digit_parity, misplaced, recording_outputs)

    from trl_budget.demo.tiny import build_tiny_model

    options = dict(budget_allocator="uniform", budget_dynamic_sampling=True, budget_dynamic_sampling_oversample=2,
                   budget_dynamic_sampling_max_gen_batches=0, max_steps=4, dataset=make_dataset(12))
    if agent == "rollout_func":  # last_digit_parity itself checks each completion against its prompt
        trainer = make_trainer(tmp_path, tokenizer, reward_funcs=last_digit_parity, rollout_func=CopyingRollouts(),
                               **options)
        text_of_prompt, shown_by = (lambda row: row["prompt"]), tokenizer
    else:  # each environment checks it was reset with its own row, and owns the reward
        chat = build_chat_tokenizer()
        credit = EnvironmentCredit()
        trainer = make_trainer(tmp_path, chat, model=build_tiny_model(chat), reward_funcs=credit,
                               environment_factory=RecordingEnvironment,
                               **{**options, "dataset": conversational(12)}, max_completion_length=3)
        text_of_prompt, shown_by = (lambda row: row["prompt"][0]["content"]), chat
    kept = recording_outputs(trainer)
    trainer.train()
    assert len(kept) == 4
    for plan, output in kept:
        assert output["completion_ids"].shape[0] == plan.counts.sum() == 8
        starts = np.cumsum(plan.counts) - plan.counts
        assert all(len(set(plan.rewards[start : start + 4])) > 1 for start in starts[plan.counts > 0])
    assert not misplaced(kept, shown_by, text_of_prompt)
