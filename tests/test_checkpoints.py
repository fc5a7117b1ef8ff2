"""The tracker's file in checkpoints: written before the checkpoint is published or rotated, atomically, and checked
when read back."""

import json
import logging
import warnings

import pytest
import transformers.trainer
from helpers import config_kwargs, make_trainer

from trl_budget import BudgetGRPOConfig, CapabilityTracker
from trl_budget.checkpoint import TRACKER_STATE_NAME, load_tracker_state, write_json_atomically


def trainer_for(tmp_path, tokenizer, **overrides):
    return make_trainer(tmp_path / "run", tokenizer, **overrides)


def test_tracker_file_is_in_place_before_rotation_and_push(tmp_path, tokenizer, monkeypatch):
    trainer = trainer_for(tmp_path, tokenizer, max_steps=4, save_strategy="steps", save_steps=2, save_total_limit=1)
    seen = []
    rotate = transformers.trainer.rotate_checkpoints

    def checking_rotation(output_dir, **kwargs):
        newest = max((tmp_path / "run").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        seen.append((newest.name, (newest / TRACKER_STATE_NAME).exists()))
        return rotate(output_dir=output_dir, **kwargs)

    monkeypatch.setattr(transformers.trainer, "rotate_checkpoints", checking_rotation)
    monkeypatch.setattr(type(trainer), "_push_from_checkpoint",
                        lambda self, folder: seen.append(("push", (tmp_path / folder / TRACKER_STATE_NAME).exists())))
    trainer.args.push_to_hub = True
    trainer.train()
    assert ("checkpoint-2", True) in seen and ("checkpoint-4", True) in seen
    assert all(present for _, present in seen)
    assert [p.name for p in (tmp_path / "run").glob("checkpoint-*")] == ["checkpoint-4"]


def test_an_interrupted_write_leaves_the_previous_file_whole(tmp_path):
    path = tmp_path / TRACKER_STATE_NAME
    write_json_atomically(path, {"complete": [1, 2, 3]})
    with pytest.raises(TypeError):
        write_json_atomically(path, {"complete": [1, 2], "breaks": object()})  # json fails half-way through
    assert json.loads(path.read_text()) == {"complete": [1, 2, 3]}
    assert [p.name for p in tmp_path.iterdir()] == [TRACKER_STATE_NAME]  # no temporary file left behind


def saved_state():
    tracker = CapabilityTracker(window=2)
    tracker.update(["a", "a", "b", "b"], [1, 0, 1, 1])
    tracker.update(["a", "a"], [1, 1])
    return tracker.state_dict()


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda s: s["wins"].__setitem__(1, 5), r"prompt 'a' has more successes than rollouts"),
        (lambda s: (s["wins"].__setitem__(3, 0), s["trials"].__setitem__(3, 0)),
         r"prompt 'b' has no scored rollout in its latest visit"),
        (lambda s: s["trials"].__setitem__(0, -2), r"entry 0 of 'trials' \(prompt 'a'\) is -2, outside"),
        (lambda s: s["scored"].__setitem__(0, 1), r"prompt 'a' has fewer rollouts in total"),
        (lambda s: s["batch_failure_rates"].__setitem__(0, 2.25), r"failure rates \[2.25\] must be a list of "),
        (lambda s: s["batch_failure_rates"].__setitem__(0, "0.5"), r"failure rates \['0.5'\] must be a list of "),
        (lambda s: s["keys"].append("c"), "do not line up"),
        (lambda s: s.pop("scored"), r"incomplete: it lacks \['scored'\]"),
        # Integers beyond what stores them: before, they wrapped in an int32 cast and loaded.
        (lambda s: (s["wins"].__setitem__(1, 2**32 + 5), s["trials"].__setitem__(1, 2**33 + 4)),
         r"entry 1 of 'wins' \(prompt 'a'\) is 4294967301, outside \[0, 2147483647\]"),
        (lambda s: s["trials"].__setitem__(1, 2**31), r"entry 1 of 'trials' \(prompt 'a'\) is 2147483648, outside"),
        (lambda s: s["scored"].__setitem__(1, 2**63),
         r"entry 1 of 'scored' \(prompt 'b'\) is 9223372036854775808, outside"),
        (lambda s: s["recent"].__setitem__(0, 2**70), r"entry 0 of 'recent' .* outside \[0, 0\]"),
        # Not integers: before, 1.7 was read as 1 and "3" as 3.
        (lambda s: s["wins"].__setitem__(1, 1.7), r"entry 1 of 'wins' \(prompt 'a'\) is 1.7; it must be a whole"),
        (lambda s: s["wins"].__setitem__(1, "1"), r"entry 1 of 'wins' \(prompt 'a'\) is '1'; it must be a whole"),
        (lambda s: s["wins"].__setitem__(1, True), r"entry 1 of 'wins' \(prompt 'a'\) is True; it must be a whole"),
        (lambda s: s["trials"].__setitem__(1, float("inf")), r"entry 1 of 'trials' .* is inf; it must be a whole"),
        (lambda s: s["keys"].__setitem__(0, 7), r"'keys' must be a list of strings"),
        # The group column, checked like the others: before, a raw KeyError, a raw IndexError, or a silent load whose
        # next new prompt inherited the stale extra entry's group.
        (lambda s: s.pop("group"), r"incomplete: it lacks \['group'\]"),
        (lambda s: s.__setitem__("group", [0]), r"do not line up: 2 keys and 1 entries of 'group'"),
        (lambda s: (s["groups"].append("g"), s.__setitem__("group", [0, 0, 1])),
         r"do not line up: 2 keys and 3 entries of 'group'"),
        (lambda s: s.update(version=2, keys=5), r"'keys' must be a list of strings"),
        # Lengths whose products overflow: before, the token cap then reported fits=True with a NaN ratio.
        (lambda s: s.__setitem__("lengths", [1.7e308, None]), r"entry 0 of 'lengths' \(prompt 'a'\) is 1.7e\+308"),
    ],
)
def test_a_poisoned_state_is_refused_naming_the_file_and_the_entry(tmp_path, corrupt, message):
    state = saved_state()
    corrupt(state)
    path = tmp_path / TRACKER_STATE_NAME
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=message) as error:
        load_tracker_state(CapabilityTracker(window=2), path)
    assert str(path) in str(error.value) and "delete it to resume with every prompt unseen" in str(error.value)


@pytest.mark.parametrize(
    "content",
    [
        json.dumps(saved_state())[:40].encode(),  # cut short
        b"\xff\xfe" + json.dumps(saved_state()).encode("utf-16-le"),  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # nested deeper than the parser's stack
    ],
    ids=["truncated", "not-utf8", "deeply-nested"],
)
def test_a_file_that_is_not_json_is_refused_naming_it(tmp_path, content):
    path = tmp_path / TRACKER_STATE_NAME
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{path} is not valid JSON .* cut short or edited"):
        load_tracker_state(CapabilityTracker(window=2), path)


def test_resume_refuses_a_poisoned_checkpoint_before_training(tmp_path, tokenizer):
    trainer_for(tmp_path, tokenizer, max_steps=2, save_strategy="steps", save_steps=2).train()
    path = tmp_path / "run" / "checkpoint-2" / TRACKER_STATE_NAME
    state = json.loads(path.read_text())
    state["wins"][0] = state["trials"][0] + 3
    path.write_text(json.dumps(state))
    resumed = trainer_for(tmp_path, tokenizer, max_steps=4, save_strategy="steps", save_steps=2)
    with pytest.raises(ValueError, match="more successes than rollouts"):
        resumed.train(resume_from_checkpoint=str(path.parent))
    assert resumed.state.global_step == 2  # nothing was trained past the checkpoint


def test_a_missing_file_says_what_the_resumed_run_will_do(tmp_path, tokenizer, caplog):
    trainer_for(tmp_path, tokenizer, max_steps=2, save_strategy="steps", save_steps=2).train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    (checkpoint / TRACKER_STATE_NAME).unlink()
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer_for(tmp_path, tokenizer, max_steps=3).train(resume_from_checkpoint=str(checkpoint))
    assert "resumes with every prompt unseen" in caplog.text


def test_checkpoints_inside_a_generation_batch_are_flagged_at_configuration(tmp_path):
    with pytest.warns(UserWarning, match="save_steps=3 puts checkpoints inside generation batches.*multiple of 2"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, steps_per_generation=2, save_strategy="steps", save_steps=3))
    with pytest.warns(UserWarning, match="multiple of 2"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, num_iterations=2, save_strategy="steps", save_steps=5))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*inside generation batches")
        BudgetGRPOConfig(**config_kwargs(tmp_path, steps_per_generation=2, save_strategy="steps", save_steps=4))


@pytest.mark.parametrize("left_behind", ["empty", "tracker-only", "temporary-only"])
def test_resume_true_skips_a_checkpoint_whose_save_was_killed(tmp_path, tokenizer, caplog, left_behind):
    # A save killed half-way (kill -9 before TRL writes the model, or before the tracker's rename) leaves the newest
    # folder empty or holding the tracker's file alone. Before: resume_from_checkpoint=True picked it and failed
    # with "Can't find a valid checkpoint"; the complete checkpoint-2 beside it was never used.
    trainer_for(tmp_path, tokenizer, max_steps=2, save_strategy="steps", save_steps=2).train()
    complete = tmp_path / "run" / "checkpoint-2"
    broken = tmp_path / "run" / "checkpoint-4"
    broken.mkdir()
    tracker_file = (complete / TRACKER_STATE_NAME).read_text()
    if left_behind == "tracker-only":
        (broken / TRACKER_STATE_NAME).write_text(tracker_file)
    elif left_behind == "temporary-only":
        (broken / f"{TRACKER_STATE_NAME}.tmp-4242").write_text(tracker_file[:50])
    resumed = trainer_for(tmp_path, tokenizer, max_steps=3)
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 3
    assert f"Skipping {broken}" in caplog.text and f"resumes from {complete}" in caplog.text


def test_resume_true_with_only_incomplete_checkpoints_names_them(tmp_path, tokenizer):
    (tmp_path / "run" / "checkpoint-4").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"found only checkpoints whose save did not finish .*checkpoint-4"):
        trainer_for(tmp_path, tokenizer, max_steps=3).train(resume_from_checkpoint=True)


def test_a_full_disk_names_the_tracker_file_and_leaves_no_empty_checkpoint(tmp_path, tokenizer, monkeypatch):
    import errno
    import os

    trainer = trainer_for(tmp_path, tokenizer, max_steps=2, save_strategy="steps", save_steps=2)

    def full_disk(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)  # where a full disk shows itself once the file is flushed
    with pytest.raises(OSError, match=f"No space left on device while writing .*checkpoint-2/{TRACKER_STATE_NAME}"):
        trainer.train()
    assert not (tmp_path / "run" / "checkpoint-2").exists()


def test_the_trainer_state_name_is_the_trainers():
    from transformers.trainer import TRAINER_STATE_NAME

    from trl_budget.checkpoint import TRAINER_STATE_NAME as ours

    assert ours == TRAINER_STATE_NAME
