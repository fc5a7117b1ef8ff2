"""DAPO's dynamic sampling: the rule and the prompt stream by hand, and real runs of the trainer that keep exactly the
prompts whose rollouts differ, in the data's order (a prompt at most once a pass), resume exactly, log each generation
batch and warn of a batch that draws on, and stop at the cap as verl's recipe does, with fixes that resume."""

import logging
import re

import numpy as np
import pytest
import torch
from datasets import Dataset, IterableDataset
from helpers import assert_resumes_exactly, make_dataset, make_trainer, parameters_of
from test_probe import RowRecorder
from test_rounds import scripted
from trl.trainer.utils import RepeatSampler

from trl_budget import BudgetGRPOConfig, KnapsackAllocator
from trl_budget.dynamic_sampling import GEN_BATCHES_BEFORE_WARNING, DynamicSampling, PromptStream
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
                                           r"\(dynamic_sampling_max_gen_batches=2\).*Raise"):
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


def test_a_stream_restored_with_another_batch_size_goes_on_from_the_same_place_in_the_pass():
    data = make_dataset(7)
    stream = PromptStream(data, 3, shuffle=True, seed=5)
    for _ in range(3):
        stream.next_indices()  # pass 1: two batches; pass 2: one, up to the third prompt of its permutation
    state = stream.state_dict()
    whole = RepeatSampler(data, mini_repeat_count=1, batch_size=7, shuffle=True, seed=5)  # one permutation a pass
    _, second, third = (list(iter(whole)) for _ in range(3))
    smaller = PromptStream(data, 2, shuffle=True, seed=5)
    smaller.load_state_dict(state, "state.json")
    assert [smaller.next_indices() for _ in range(3)] == [second[3:5], second[5:7], third[:2]]
    larger = PromptStream(data, 6, shuffle=True, seed=5)  # 4 prompts left of pass 2: too few, so pass 3 begins
    larger.load_state_dict(state, "state.json")
    assert larger.next_indices() == third[:6] and larger.passes == 3 and larger.drawn == 4
    # A file that holds only the batches drawn (as the stream saved it before) restores the same place.
    earlier = PromptStream(data, 3, shuffle=True, seed=5)
    earlier.load_state_dict({name: state[name] for name in state if name not in ("passes", "pass_offset")}, "s.json")
    assert earlier.next_indices() == stream.next_indices() == second[3:6]
    with pytest.raises(ValueError, match="state.json holds no stream position: .*pass 2 at prompt 9 of 7.*delete"):
        PromptStream(data, 3, shuffle=True, seed=5).load_state_dict({**state, "pass_offset": 9}, "state.json")


def varied_for_two(completions, prompts, **kwargs):
    """The rollouts of '0+1=' and '1+1=' alternate 0, 1 over their rows; every other prompt's all earn 1."""
    return [float(row % 2) if prompt in ("0+1=", "1+1=") else 1.0 for row, prompt in enumerate(prompts)]


def test_a_training_batch_that_spans_the_end_of_a_pass_trains_a_prompt_once_from_each_pass(tmp_path, tokenizer):
    # Five prompts, generation batches of two: a pass holds two batches (one prompt left out), and only two prompts
    # vary, so training batches often need the next pass, which brings the same prompts again.
    data = Dataset.from_list([{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(5)])
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=varied_for_two, dataset=data, budget_allocator="uniform",
                           dynamic_sampling=True, dynamic_sampling_max_gen_batches=0, max_steps=6)
    recorder = RowRecorder(trainer)
    trainer.train()
    sampler = trainer._get_train_sampler()  # TRL's own order, by hand: each pass cut into batches of two prompts
    batches = [(one_pass[i : i + 2], number) for number in range(20)
               for one_pass in [list(iter(sampler))[::4]] for i in (0, 2)]
    repeats = 0
    for plan, advantages, _ in recorder.steps:
        drawn = []
        while sum(data[i]["prompt"] in ("0+1=", "1+1=") for i, _ in drawn) < 2:
            indices, number = batches.pop(0)
            drawn += [(index, number) for index in indices]
        kept = [(index, number) for index, number in drawn if data[index]["prompt"] in ("0+1=", "1+1=")][:2]
        assert [prompt["prompt"] for prompt in plan.prompts] == [data[index]["prompt"] for index, _ in drawn]
        trained = np.flatnonzero(plan.counts)
        assert [plan.prompts[i]["prompt"] for i in trained] == [data[index]["prompt"] for index, _ in kept]
        # The rule: never twice from one pass; a prompt trained twice came from two passes, as two groups of 4.
        assert len(set(kept)) == len(kept) and plan.counts[trained].tolist() == [4, 4]
        if len({index for index, _ in kept}) < len(kept):
            repeats += 1
            assert plan.keys[trained[0]] == plan.keys[trained[1]] and kept[0][1] != kept[1][1]
        assert (advantages != 0).all()
    assert repeats > 0  # the data made a training batch span two passes with the same prompt kept in both


def constant_for_multiples_of_three(completions, answer, **kwargs):
    """Answers divisible by 3 earn 1 on every rollout; the others alternate 0, 1 over their rows (groups of 4 lie
    consecutively on one process), so they are always mixed."""
    return [1.0 if int(a) % 3 == 0 else float(row % 2) for row, a in enumerate(answer)]


def test_a_run_trains_the_first_varied_prompts_and_drops_the_constant_ones(tmp_path, tokenizer):
    data = make_dataset(12, seed=3)
    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=constant_for_multiples_of_three, dataset=data,
                           budget_allocator="uniform", dynamic_sampling=True,
                           dynamic_sampling_oversample=2, max_steps=4)
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
    for name, options in (("uniform", {}), ("dynamic", {"dynamic_sampling": True})):
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
                           dynamic_sampling=True, dynamic_sampling_max_gen_batches=3)
    before = parameters_of(trainer)
    with pytest.raises(RuntimeError, match=r"kept 0 of the 2 prompts .* after 3 generation batches .* agreed on the "
                                           r"reward \(dynamic_sampling_metric\)"):
        trainer.train()
    assert calls == [8, 8, 8]
    assert all(torch.equal(before[name], value) for name, value in parameters_of(trainer).items())


@pytest.mark.parametrize("cap", [GEN_BATCHES_BEFORE_WARNING + 1, 0])
def test_a_batch_that_draws_on_logs_each_generation_batch_and_is_warned_about(tmp_path, tokenizer, caplog, cap):
    scored = []

    def agreeing_until_the_thirteenth(completions, **kwargs):
        """Every rollout earns 1; from the thirteenth generation batch on (no cap), they alternate 0, 1."""
        scored.append(len(completions))
        return [float(row % 2) if len(scored) > 12 else 1.0 for row in range(len(completions))]

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=agreeing_until_the_thirteenth, max_steps=1,
                           budget_allocator="uniform", dynamic_sampling=True,
                           dynamic_sampling_max_gen_batches=cap)
    with caplog.at_level(logging.INFO, logger="trl_budget.dynamic_sampling"):
        if cap:
            with pytest.raises(RuntimeError, match=f"after {cap} generation batches"):
                trainer.train()
        else:
            trainer.train()
    records = [record for record in caplog.records if record.name == "trl_budget.dynamic_sampling"]
    batches = 13 if cap == 0 else cap
    expected = [f"Dynamic sampling, generation batch {k} (2 prompts): 0 kept; 0 of the 2 the training batch needs "
                "kept so far." for k in range(1, batches)]
    expected.append(f"Dynamic sampling, generation batch {batches} (2 prompts): " + (
        "2 kept; 2 of the 2 the training batch needs kept so far." if cap == 0 else
        "0 kept; 0 of the 2 the training batch needs kept so far."))
    infos = [record.getMessage() for record in records if record.levelno == logging.INFO]
    assert infos == expected and len(scored) == batches
    warnings = [(index, record.getMessage()) for index, record in enumerate(records)
                if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0][0] == GEN_BATCHES_BEFORE_WARNING  # after the tenth line, once
    warning = warnings[0][1]
    assert warning.startswith(f"Dynamic sampling has drawn {GEN_BATCHES_BEFORE_WARNING} generation batches (20 "
                              "prompts) for this training batch and kept 0 of the 2 prompts it needs")
    assert "train on prompts the model sometimes solves and sometimes fails" in warning
    assert (("dynamic_sampling_max_gen_batches=0 lets it draw until the batch is full" in warning
             and "Set dynamic_sampling_max_gen_batches (10 in verl's DAPO recipe and by default)" in warning) if cap == 0 else
            (f"draws on up to dynamic_sampling_max_gen_batches={cap}" in warning
             and "Lower dynamic_sampling_max_gen_batches" in warning))


def rare_success(completions, hard, **kwargs):
    """An easy prompt's rollouts alternate 0, 1; a hard prompt earns 1 only on the last four rows of every eight (the
    rows of a generation batch lie prompt by prompt, from row 0), so its rollouts all agree in groups of 4, not 8."""
    return [float(row % 8 >= 4) if is_hard else float(row % 2) for row, is_hard in enumerate(hard)]


def test_every_fix_the_cap_error_names_resumes_from_the_last_checkpoint(tmp_path, tokenizer):
    # Twelve prompts, training batches of 2, one generation batch each at most: the third generation batch holds the
    # two hard prompts, so the run stops at step 3, after the checkpoints of steps 1 and 2.
    order = list(iter(RepeatSampler(range(12), mini_repeat_count=1, batch_size=12, shuffle=True, seed=0)))
    data = Dataset.from_list([{"prompt": f"{a}+{a % 5}=", "hard": a in order[4:6]} for a in range(12)])
    options = dict(reward_funcs=rare_success, dataset=data, budget_allocator="uniform", dynamic_sampling=True,
                   dynamic_sampling_max_gen_batches=1, save_strategy="steps", save_steps=1)
    stopped = make_trainer(tmp_path / "stopped", tokenizer, **options)
    with pytest.raises(RuntimeError) as error:
        stopped.train()
    assert stopped.state.global_step == 2 and stopped.prompt_stream.drawn == 3
    suggested = re.search(r"Raise (.*?)\. Each of them can be changed when resuming", str(error.value)).group(1)
    fixes = {"dynamic_sampling_max_gen_batches": 2, "dynamic_sampling_oversample": 2,
             "num_generations": 8}
    assert set(re.findall(r"\b(dynamic_sampling_\w+|num_generations)\b \(", suggested)) == set(fixes)
    for setting, value in fixes.items():
        resumed = make_trainer(tmp_path / setting, tokenizer, **{**options, setting: value})
        recorder = RowRecorder(resumed)
        resumed.train(resume_from_checkpoint=str(tmp_path / "stopped" / "checkpoint-2"))
        assert resumed.state.global_step == 4
        # The stream went on where it stood: the step that stopped draws the hard prompts first, and now trains.
        plan = recorder.steps[0][0]
        size = resumed.prompt_stream.prompts_per_batch
        assert [prompt["prompt"] for prompt in plan.prompts[:size]] == [data[i]["prompt"] for i in order[4 : 4 + size]]
        assert plan.counts.sum() == 8 and all((p.counts > 0).sum() * p.counts.max() == 8 for p, _, _ in recorder.steps)


def test_the_success_metric_keeps_prompts_whose_outcomes_differ(tmp_path, tokenizer):
    # The reward always differs (0.1 or 0.2 more), the outcome (above success_threshold 0.5) only for odd answers.
    def graded(completions, answer, **kwargs):
        return [float(int(a) % 2) * (row % 2) + 0.1 * (1 + row % 2) for row, a in enumerate(answer)]

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=graded, budget_allocator="uniform",
                           dynamic_sampling=True, dynamic_sampling_metric="success",
                           dynamic_sampling_max_gen_batches=0, success_threshold=0.5, max_steps=3,
                           dataset=make_dataset(12, seed=1))
    recorder = RowRecorder(trainer)
    trainer.train()
    for plan, _, _ in recorder.steps:
        odd = [int(prompt["answer"]) % 2 == 1 for prompt in plan.prompts]
        assert (plan.counts > 0).tolist() == [o and sum(odd[: i + 1]) <= 2 for i, o in enumerate(odd)]


def test_a_resumed_run_draws_and_trains_as_an_uninterrupted_one(tmp_path, tokenizer):
    options = dict(reward_funcs=constant_for_multiples_of_three, budget_allocator="uniform",
                   dynamic_sampling=True, advantage_baseline="history")
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
    ({"budget_allocator": "uniform", "rounds_generations": 2}, "rounds_generations=2"),
    ({"budget_allocator": "uniform", "probe_generations": 2}, "probe_generations=2"),
    ({"budget_allocator": "uniform", "dynamic_sampling_metric": "acc"}, "'acc' is not a metric"),
    ({"budget_allocator": "uniform", "dynamic_sampling_oversample": 0}, "oversample must be a whole number"),
])
def test_settings_dynamic_sampling_cannot_run_with_are_refused(tmp_path, settings, match):
    from helpers import config_kwargs

    with pytest.raises(ValueError, match=match):
        BudgetGRPOConfig(**config_kwargs(tmp_path, dynamic_sampling=True, **settings))


def test_its_settings_without_it_are_refused(tmp_path):
    from helpers import config_kwargs

    with pytest.raises(ValueError, match="dynamic_sampling_oversample=3 is read only with "
                                         "dynamic_sampling=True"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, budget_allocator="uniform", dynamic_sampling_oversample=3))


def test_data_it_cannot_draw_from_and_other_allocators_are_refused_before_building(tmp_path, tokenizer):
    options = dict(budget_allocator="uniform", dynamic_sampling=True)
    with pytest.raises(ValueError, match="uniform allocator only; the trainer was given KnapsackAllocator"):
        make_trainer(tmp_path, tokenizer, allocator=KnapsackAllocator(min_generations=2, max_generations=8), **options)
    streamed = IterableDataset.from_generator(lambda: iter(make_dataset().to_list()))
    with pytest.raises(ValueError, match="cannot be indexed.*streaming=True"):
        make_trainer(tmp_path, tokenizer, dataset=streamed, max_steps=1, **options)
    with pytest.raises(ValueError, match="generation batches of 6 prompts .* has 4"):
        make_trainer(tmp_path, tokenizer, dataset=Dataset.from_list(make_dataset(4).to_list()),
                     dynamic_sampling_oversample=3, **options)


@pytest.mark.parametrize("agent", ["rollout_func", "environments"])
def test_agent_rollouts_are_credited_to_their_prompts_under_dynamic_sampling(tmp_path, tokenizer, agent):
    from helpers import build_chat_tokenizer
    from test_agent import (CopyingRollouts, EnvironmentCredit, RecordingEnvironment, conversational,
                            last_digit_parity, misplaced, recording_outputs)

    from trl_budget.demo.tiny import build_tiny_model

    options = dict(budget_allocator="uniform", dynamic_sampling=True, dynamic_sampling_oversample=2,
                   dynamic_sampling_max_gen_batches=0, max_steps=4, dataset=make_dataset(12))
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
