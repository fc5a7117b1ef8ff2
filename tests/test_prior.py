"""A prior for unseen prompts: a dataset column of pass rates, or the pooled rate of the prompt's group."""

import json

import numpy as np
import pytest
from datasets import concatenate_datasets
from helpers import make_dataset, make_trainer
from test_probe import RowRecorder

from trl_budget import CapabilityTracker
from trl_budget.checkpoint import TRACKER_STATE_NAME


def knapsack_tracker():
    return CapabilityTracker(window=16, min_rollouts=8, rollout_pool=16)  # Knapsack RL's release rule


def test_an_unseen_prompt_blends_its_prior_with_its_own_rollouts_by_hand():
    tracker = knapsack_tracker()
    tracker.update(["a"] * 4 + ["b"] * 4, [1, 0, 1, 1, 0, 0, 0, 1], groups=["easy"] * 8)
    assert np.isnan(tracker.pass_rates(["a", "b", "c"])).all()  # fewer than 8 rollouts: unseen by the release rule
    np.testing.assert_allclose(tracker.group_pass_rates(["easy", "hard"]), [4 / 8, np.nan])
    rates, from_prior = tracker.prior_pass_rates(["a", "b", "c", "d"], prior_rates=[np.nan, 0.9, np.nan, np.nan],
                                                 groups=["easy", "easy", "easy", "hard"], strength=8)
    # a: group prior 0.5 as 8 pseudo-rollouts beside its own 3/4; b: its column prior 0.9 beside 1/4; c: the group's
    # rate alone; d: a group without evidence, no prior.
    np.testing.assert_allclose(rates, [(3 + 8 * 0.5) / 12, (1 + 8 * 0.9) / 12, 0.5, np.nan])
    assert from_prior.tolist() == [True, True, True, False]


def test_a_seen_prompt_keeps_its_release_rate_exactly():
    tracker = knapsack_tracker()
    tracker.update(["a"] * 8, [1, 1, 0, 0, 0, 0, 0, 0], groups=["g"] * 8)
    rates, from_prior = tracker.prior_pass_rates(["a"], prior_rates=[0.9], groups=["g"])
    assert rates.tolist() == [0.25] and from_prior.tolist() == [False]


def test_a_group_needs_the_minimum_evidence_before_it_lends_its_rate():
    tracker = knapsack_tracker()
    tracker.update(["a"] * 6, [1] * 6, groups=["g"] * 6)
    assert np.isnan(tracker.group_pass_rates(["g"])[0])  # 6 < min_rollouts = 8
    tracker.update(["b"] * 2, [0, 0], groups=["g"] * 2)
    assert tracker.group_pass_rates(["g"])[0] == pytest.approx(6 / 8)
    tracker.update(["a"] * 4, [0] * 4, groups=["g"] * 4)  # a's evidence is now its latest 10: 6 wins... then 4 fails
    assert tracker.group_pass_rates(["g"])[0] == pytest.approx((6 + 0) / (10 + 2))


def test_group_pools_round_trip_and_an_older_state_loads_without_groups():
    tracker = knapsack_tracker()
    tracker.update(["a"] * 4 + ["b"] * 4, [1, 0, 1, 1, 0, 0, 0, 1], groups=["x"] * 4 + ["y"] * 4)
    state = json.loads(json.dumps(tracker.state_dict()))
    restored = knapsack_tracker()
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    np.testing.assert_allclose(restored.group_pass_rates(["x", "y"]), tracker.group_pass_rates(["x", "y"]))
    older = {**state, "version": 2}
    del older["groups"], older["group"]
    restored = knapsack_tracker()
    restored.load_state_dict(older)
    assert restored.state_dict()["scored"] == state["scored"] and restored.state_dict()["groups"] == []
    broken = {**state, "group": [3, 0]}
    with pytest.raises(ValueError, match=r"entry 0 of 'group' \(prompt '.*'\) is 3, outside \[0, 2\]"):
        knapsack_tracker().load_state_dict(broken)


def prior_dataset(size=6):
    levels = ["easy", "hard"]
    return make_dataset(size).map(lambda row, i: {"prior": [0.9, 0.1, None][i % 3], "level": levels[i % 2]},
                                  with_indices=True)


def test_the_first_batch_is_allocated_from_the_column_prior(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, dataset=prior_dataset(), pass_rate_prior_column="prior",
                           max_steps=3, knapsack_fallback=False)
    recorder = RowRecorder(trainer)
    trainer.train()
    first = recorder.steps[0][0]
    data = {row["prompt"]: row["prior"] for row in prior_dataset()}
    expected = [np.nan if data[row["prompt"]] is None else data[row["prompt"]] for row in first.prompts]
    np.testing.assert_allclose(first.pass_rates, expected)  # no rollout yet: the prior alone
    logs = [entry for entry in trainer.state.log_history if "budget/prior_share" in entry]
    assert len(logs) == 3 and logs[0]["budget/prior_share"] == pytest.approx(np.isfinite(expected).mean())
    assert all(entry["budget/completion_tokens"] > 0 for entry in trainer.state.log_history if "loss" in entry)


def test_group_pools_survive_a_resume(tmp_path, tokenizer):
    # Three prompts, each four times in one epoch: they come back within the epoch, whose order a resume keeps.
    data = concatenate_datasets([prior_dataset(3).map(lambda row: {"level": "one"})] * 4)
    options = dict(dataset=data, prompt_group_column="level", max_steps=6, save_strategy="steps", save_steps=3)
    full = make_trainer(tmp_path / "full", tokenizer, **options)
    full.train()
    make_trainer(tmp_path / "part", tokenizer, **{**options, "max_steps": 3}).train()
    checkpoint = tmp_path / "part" / "checkpoint-3"
    assert json.loads((checkpoint / TRACKER_STATE_NAME).read_text())["groups"]
    resumed = make_trainer(tmp_path / "part", tokenizer, **options)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.tracker.state_dict() == full.tracker.state_dict()
    logs = [entry for entry in full.state.log_history if "budget/prior_share" in entry]
    assert logs and max(entry["budget/prior_share"] for entry in logs) > 0  # groups lent their rate to new prompts


@pytest.mark.parametrize(
    "options, message",
    [
        ({"pass_rate_prior_column": "missing"}, "pass_rate_prior_column='missing' is not a column"),
        ({"prompt_group_column": "missing"}, "prompt_group_column='missing' is not a column"),
        ({"pass_rate_prior_column": "answer"}, r"pass_rate_prior_column='answer' is '\d+' in row 0 .* a pass rate"),
        ({"pass_rate_prior_strength": 0.0}, "pass_rate_prior_strength must be a finite number above 0"),
    ],
)
def test_prior_settings_that_cannot_work_are_refused_before_the_model_loads(tmp_path, tokenizer, options, message):
    with pytest.raises(ValueError, match=message):
        make_trainer(tmp_path, tokenizer, dataset=prior_dataset(), model="no-such-org/no-such-model", **options)


def length_parity(completions, **kwargs):  # needs no column: TRL keeps none but the prompt's
    return [float(len(completion) % 2) for completion in completions]


@pytest.mark.parametrize("keep_through", ["remove_unused_columns", "iterable"])
def test_the_prior_columns_reach_the_rows_the_trainer_sees(tmp_path, tokenizer, keep_through):
    # TRL drops every column but the prompt's under remove_unused_columns=True; a streamed dataset is not checked at
    # construction. Either way the column prior must still be read from the rows.
    data = prior_dataset()
    options = dict(pass_rate_prior_column="prior", prompt_group_column="level", max_steps=1,
                   per_device_train_batch_size=24)  # every prompt in the batch: 4 of the 6 have a prior
    if keep_through == "remove_unused_columns":
        options["remove_unused_columns"] = True
    else:
        data = data.to_iterable_dataset()
    trainer = make_trainer(tmp_path, tokenizer, dataset=data, reward_funcs=length_parity, **options)
    recorder = RowRecorder(trainer)
    trainer.train()
    first = recorder.steps[0][0]
    assert {"prior", "level"} <= set(first.prompts[0])
    assert np.isfinite(first.pass_rates).sum() == sum(row["prior"] is not None for row in first.prompts) > 0


@pytest.mark.parametrize("setting", ["pass_rate_prior_column", "prompt_group_column", "prompt_id_column"])
def test_a_streamed_dataset_without_a_named_column_stops_at_the_first_batch(tmp_path, tokenizer, setting):
    streamed = make_dataset().to_iterable_dataset().map(lambda row: row)  # a map hides a stream's columns
    trainer = make_trainer(tmp_path, tokenizer, dataset=streamed, max_steps=1, **{setting: "levle"})
    with pytest.raises(KeyError, match=f"{setting}='levle' is not a column of the rows .* or set {setting}=None"):
        trainer.train()


def test_an_empty_group_cell_means_no_group():
    tracker = knapsack_tracker()
    tracker.update(["solved"] * 8 + ["named"] * 8, [1] * 8 + [0] * 8, groups=[None] * 8 + ["None"] * 8)
    tracker.update(["nan"] * 8, [1] * 8, groups=[float("nan")] * 8)
    assert tracker.state_dict()["groups"] == ["None"]  # the text "None" is a group; an empty cell is not
    rates, from_prior = tracker.prior_pass_rates(["new", "other", "third"], groups=[None, float("nan"), "None"])
    # A solved prompt without a group lends nothing to an unrelated unseen one; the group named "None" does lend.
    assert np.isnan(rates[:2]).all() and rates[2] == 0.0 and from_prior.tolist() == [False, False, True]
    assert np.isnan(tracker.group_pass_rates([None, float("nan")])).all()


def test_named_columns_are_checked_in_bulk(tmp_path):
    # Row by row, 400 000 rows took 11 s on the test machine (18 us a row); read as Arrow columns, a fraction of one.
    # The bound is loose on purpose: it fails only for a check that goes back to reading rows one at a time.
    import time
    from types import SimpleNamespace

    from datasets import Dataset

    from trl_budget.prior import check_prior_columns
    from trl_budget.trainer import check_prompt_id_column

    size = 400_000
    data = Dataset.from_dict({"prompt": ["1+1="] * size, "id": np.arange(size), "prior": np.full(size, 0.5)})
    start = time.perf_counter()
    check_prompt_id_column("id", data)
    check_prior_columns(SimpleNamespace(pass_rate_prior_column="prior", prompt_group_column=None), data)
    assert time.perf_counter() - start < 4.0
    last_bad = Dataset.from_dict({"prompt": ["1+1="] * 3, "prior": [0.5, 0.5, 2.0]})
    with pytest.raises(ValueError, match="is 2.0 in row 2"):
        check_prior_columns(SimpleNamespace(pass_rate_prior_column="prior", prompt_group_column=None), last_bad)
    with pytest.raises(ValueError, match="is 2.0 in row 0"):  # rows counted in the dataset's order, not Arrow's
        check_prior_columns(SimpleNamespace(pass_rate_prior_column="prior", prompt_group_column=None),
                            last_bad.select([2, 1, 0]))
