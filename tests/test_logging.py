"""Budget histograms read back from a real offline W&B run and a real TensorBoard event file."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import make_trainer

STEPS = 6


def wandb_records(path):
    """Records of a .wandb file (a LevelDB-style log of protobuf records, 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0 and length == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_histograms(run_file, name):
    """Per logged step, the histogram dict of `name`."""
    histograms = []
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") != "history":
            continue
        parts = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            if key.startswith(name + "/"):
                parts[key[len(name) + 1 :]] = json.loads(item.value_json)
        if parts:
            histograms.append(parts)
    return histograms


@pytest.fixture
def logged_run(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    import wandb

    # pass_rate_min_rollouts=1: prompts are trusted after one visit, so that budgets vary within these few steps.
    trainer = make_trainer(tmp_path / "out", tokenizer, max_steps=STEPS, report_to=["wandb", "tensorboard"],
                           pass_rate_min_rollouts=1)
    trainer.train()
    # wandb reads WANDB_DIR once a process: after another test's run its files are not under tmp_path.
    run_folder = Path(wandb.run.dir).parent
    wandb.finish()
    return tmp_path, trainer, run_folder


def test_histograms_in_wandb_and_tensorboard(logged_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tmp_path, trainer, run_folder = logged_run
    logs = [entry for entry in trainer.state.log_history if "budget/rollouts_std" in entry]
    prompts_per_step = 2

    (run_file,) = run_folder.glob("run-*.wandb")
    rollouts = wandb_histograms(run_file, "train/budget/rollouts_per_prompt")
    assert len(rollouts) == STEPS
    for histogram in rollouts:
        assert histogram["_type"] == "histogram"
        assert sum(histogram["values"]) == prompts_per_step
        assert histogram["bins"][0] >= 2 - 1e-9 and histogram["bins"][-1] <= 8 + 1e-9
    pass_rates = wandb_histograms(run_file, "train/budget/pass_rates")
    assert pass_rates  # every bin holding a rate overlaps [0, 1] (W&B centres one value's bins on it)
    assert all(h["bins"][i + 1] >= 0 and h["bins"][i] <= 1 for h in pass_rates for i, n in enumerate(h["values"]) if n)
    assert any(entry["budget/rollouts_std"] > 0 for entry in logs)

    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    events.Reload()
    assert {"train/budget/rollouts_per_prompt", "train/budget/pass_rates", "train/budget/pass_rates_before"} <= set(
        events.Tags()["histograms"])
    steps = events.Histograms("train/budget/rollouts_per_prompt")
    assert [event.step for event in steps] == list(range(1, STEPS + 1))
    for event, entry in zip(steps, logs):
        histogram = event.histogram_value
        assert histogram.num == prompts_per_step
        assert histogram.sum == pytest.approx(entry["budget/rollouts_mean"] * prompts_per_step)
        assert histogram.min == entry["budget/rollouts_min"] and histogram.max == entry["budget/rollouts_max"]


def test_a_uniform_run_logs_its_prompts_pass_rates_though_each_prompt_is_new(tmp_path, tokenizer, monkeypatch):
    # One pass over 12 prompts, 2 a step: no prompt has a pass rate before its batch, under any rule. The histogram
    # is of the tracker's pass rates once it has scored the batch: one visit of 4 rollouts, each prompt's share of
    # successes (a reward of 1), so the 2 prompts' rates sum to twice the batch's mean reward.
    from datasets import Dataset
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for name, value in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(tmp_path)), ("WANDB_SILENT", "true"),
                        ("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))):
        monkeypatch.setenv(name, value)
    import wandb

    trainer = make_trainer(tmp_path / "out", tokenizer, max_steps=STEPS, report_to=["wandb", "tensorboard"],
                           budget_allocator="uniform", dataset=Dataset.from_list(
                               [{"prompt": f"{a}+{a + 1}=", "answer": str(2 * a + 1)} for a in range(12)]))
    trainer.train()
    run_folder = Path(wandb.run.dir).parent
    wandb.finish()
    logs = [entry for entry in trainer.state.log_history if "budget/unseen_prompts" in entry]
    assert [entry["budget/unseen_prompts"] for entry in logs] == [1.0] * STEPS  # every prompt new to its batch

    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    events.Reload()
    assert "train/budget/pass_rates_before" not in events.Tags()["histograms"]  # nothing known before a batch
    steps = events.Histograms("train/budget/pass_rates")
    assert [event.step for event in steps] == list(range(1, STEPS + 1))
    for event, entry in zip(steps, logs):
        assert event.histogram_value.num == 2
        assert event.histogram_value.sum == pytest.approx(2 * entry["reward"])
    (run_file,) = run_folder.glob("run-*.wandb")
    in_wandb = wandb_histograms(run_file, "train/budget/pass_rates")
    assert len(in_wandb) == STEPS and all(sum(histogram["values"]) == 2 for histogram in in_wandb)


def test_spos_estimates_and_figures_are_logged_with_the_rest(tmp_path, tokenizer, monkeypatch):
    # SPO's p of each trained prompt before its batch: a histogram per logging step, in W&B and TensorBoard; the
    # release's figures (spo/*) and the sampling's shares beside TRL's.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    trainer = make_trainer(tmp_path / "out", tokenizer, max_steps=STEPS, report_to=["tensorboard"],
                           budget_allocator="spo", budget_max_generations=128)
    trainer.train()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    events.Reload()
    steps = events.Histograms("train/budget/spo_p_hats")
    assert [event.step for event in steps] == list(range(1, STEPS + 1))
    logs = [entry for entry in trainer.state.log_history if "spo/p_hats" in entry]
    for event, entry in zip(steps, logs):
        assert event.histogram_value.num == 8 and event.histogram_value.sum == pytest.approx(8 * entry["spo/p_hats"])
    assert all(any(name.startswith("prompt_sampling/selected_share/") for name in entry) for entry in logs)
    assert sum("spo/rho_clipped" in entry for entry in logs) == STEPS - 1  # every settle of an earlier batch


@pytest.mark.parametrize("rule", [{"budget_allocator": "knapsack"}, {"budget_allocator": "uniform"},
                                  {"rounds_generations": 2},
                                  {"budget_allocator": "reinforce_ada", "reinforce_ada_samples_per_round": 4}])
def test_the_completions_table_shows_each_rows_prompt_rollouts_and_every_mode_logs_the_same_figures(tmp_path,
                                                                                                   tokenizer, rule):
    from helpers import make_dataset

    trainer = make_trainer(tmp_path, tokenizer, max_steps=3, log_completions=True, **rule)
    trainer.train()
    logs = trainer._logs
    assert len(logs["extra"]["prompt_rollouts"]) == len(logs["prompt"])
    plan = trainer.last_rollout_plan
    generated = np.sum(plan.round_counts, axis=0)
    rows = plan.round_rows
    last_batch = list(logs["extra"]["prompt_rollouts"])[-sum(rows):]
    prompts = list(logs["prompt"])[-sum(rows):]
    for prompt, shown in zip(prompts, last_batch):  # each row shows how many rollouts its prompt got
        assert shown == generated[[row["prompt"] for row in plan.prompts].index(prompt)]
    entries = [entry for entry in trainer.state.log_history if "budget/rounds" in entry]
    assert len(entries) == 3
    for entry in entries:
        assert entry["budget/rounds"] >= 1 and entry["budget/generated_rollouts"] >= entry["budget/trained_rollouts"]
    assert entries[0]["budget/unseen_prompts"] == 1.0  # nothing seen before the first batch, in every mode


def test_an_evaluation_keeps_the_completions_table_aligned(tmp_path, tokenizer):
    from helpers import make_dataset

    trainer = make_trainer(tmp_path, tokenizer, max_steps=3, log_completions=True, eval_strategy="steps",
                           eval_steps=2, eval_dataset=make_dataset(4, seed=1), per_device_eval_batch_size=8)
    trainer.train()
    assert len(trainer._logs["extra"]["prompt_rollouts"]) == len(trainer._logs["prompt"])


@pytest.mark.parametrize("rule, said", [
    ({}, "allocation by KnapsackAllocator(.*) \\(budget_allocator='knapsack'\\), in one shot; prompts in TRL's "
         "sampler's order; advantage baseline 'group'"),
    ({"budget_allocator": "spo", "budget_max_generations": 128}, "SPOAllocator.*prompts drawn by SPO's weights; advantage "
                                                           "baseline 'spo'"),
    ({"probe_generations": 2, "advantage_baseline": "history"}, "with a probe stage; .* baseline 'history'")])
def test_training_starts_with_a_line_naming_the_rule_in_effect(tmp_path, tokenizer, caplog, rule, said):
    import logging

    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, **rule)
    with caplog.at_level(logging.INFO, logger="trl_budget.trainer"):
        trainer.train()
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert len(lines) == 1 and __import__("re").search(said, lines[0]), lines
