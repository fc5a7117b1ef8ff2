"""The tracker's file in a checkpoint: written atomically, read back with errors that name the file and the remedy."""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from .tracker import CapabilityTracker, SettingsMismatch

__all__ = ["TRACKER_STATE_NAME", "latest_complete_checkpoint", "load_tracker_state", "restore_budget_state",
           "restore_part", "restore_tracker", "resume_point", "save_budget_state", "save_tracker",
           "write_json_atomically"]

logger = logging.getLogger(__name__)

TRACKER_STATE_NAME = "budget_tracker_state.json"
TRAINER_STATE_NAME = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME, without importing transformers
CHECKPOINT_FOLDER = re.compile(r"checkpoint-(\d+)")  # the Trainer's folder names (PREFIX_CHECKPOINT_DIR-step)

_REMEDY = (
    "Resume from an earlier checkpoint, restore the file from a copy, or delete it to resume with every prompt unseen "
    "(the first visits are then allocated as at the start of a run)."
)


def write_json_atomically(path: str | os.PathLike, data: Any) -> None:
    """Write `data` as JSON so that `path` holds either its previous content or the complete new one, never a part.

    The JSON goes to a temporary file beside `path`, is flushed to disk, and is renamed over `path`.
    """
    path = os.fspath(path)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        text = json.dumps(data, separators=(",", ":"))  # one call of the C encoder; json.dump streams in Python
        with open(temporary, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError as error:  # a full disk says "No space left on device" and nothing of which file
        raise OSError(error.errno, f"{error.strerror} while writing {path} (its previous content, if any, is "
                      "intact)", path) from error
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    _sync_folder(os.path.dirname(path) or ".")


def _sync_folder(folder: str) -> None:
    """Make the rename durable where the platform allows it (POSIX); elsewhere the rename alone is what we have."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def latest_complete_checkpoint(output_dir: str | os.PathLike) -> tuple[str | None, list[str]]:
    """The newest `checkpoint-N` folder of `output_dir` whose save finished, and the newer ones whose save did not.

    A save finished when the folder holds a readable `trainer_state.json`: the Trainer writes it last, after the
    model, optimizer and RNG states (and after the tracker's file, which this package writes first). A save killed
    half-way leaves a folder without it: empty, or holding only the tracker's file or its temporary file.
    """
    folders = sorted((int(match.group(1)), name) for name in _listed(output_dir)
                     if (match := CHECKPOINT_FOLDER.fullmatch(name)) and os.path.isdir(os.path.join(output_dir, name)))
    incomplete = []
    for _, name in reversed(folders):
        folder = os.path.join(output_dir, name)
        if _readable_json(os.path.join(folder, TRAINER_STATE_NAME)):
            return folder, incomplete
        incomplete.append(folder)
    return None, incomplete


def _listed(folder) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _readable_json(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
    except (OSError, ValueError):
        return False
    return True


def load_tracker_state(tracker: CapabilityTracker, path: str | os.PathLike) -> None:
    """Restore `tracker` from the JSON file at `path`.

    Raises:
        ValueError: the file is not valid JSON, or its state breaks a rule; the message names the file, what is wrong
            and what to do.
    """
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, IsADirectoryError) as error:
        # RecursionError: nesting deeper than Python's stack, which no file this package writes has.
        raise ValueError(
            f"{os.fspath(path)} is not valid JSON ({type(error).__name__}: {error}): it was cut short or edited. "
            f"{_REMEDY}"
        ) from error
    try:
        tracker.load_state_dict(state)
    except SettingsMismatch as error:  # the same kind of error, so that a trainer can name its own settings
        raise SettingsMismatch(error.saved, error.current, f"{os.fspath(path)} cannot be restored: {error}") from error
    except ValueError as error:
        raise ValueError(f"{os.fspath(path)} cannot be restored: {error} {_REMEDY}") from error


# ------------------------------------------------------------------------------------ the trainer's save and resume


def resume_point(output_dir: str | os.PathLike) -> str | bool:
    """What `resume_from_checkpoint=True` resumes from: the newest complete checkpoint of `output_dir`, skipping (with a
    warning) newer ones whose save was killed half-way, where the Trainer would take the highest-numbered folder and
    fail ("Can't find a valid checkpoint"); True when there is none at all, for the Trainer's own error."""
    checkpoint, incomplete = latest_complete_checkpoint(output_dir)
    if incomplete and checkpoint is None:
        raise ValueError(
            f"resume_from_checkpoint=True found only checkpoints whose save did not finish (no readable "
            f"trainer_state.json): {', '.join(incomplete)}. Nothing can be resumed from them; remove them to "
            "start afresh, or pass the path of a complete checkpoint kept elsewhere."
        )
    if incomplete:
        logger.warning(
            f"Skipping {', '.join(incomplete)}: its save did not finish (no readable trainer_state.json), so the "
            f"run resumes from {checkpoint}, the newest complete checkpoint. The incomplete folder is left as it "
            "is; a later save of the same step overwrites it."
        )
    return True if checkpoint is None else checkpoint


def save_tracker(checkpoint: str, tracker: CapabilityTracker) -> None:
    """Write the tracker's file into the checkpoint folder, atomically, before the Trainer saves the rest: TRL never
    pushes the checkpoint or rotates older ones away while it lacks the file. A failed write leaves no empty folder
    that looks like a checkpoint."""
    created = not os.path.isdir(checkpoint)
    os.makedirs(checkpoint, exist_ok=True)
    try:
        write_json_atomically(os.path.join(checkpoint, TRACKER_STATE_NAME), tracker.state_dict())
    except OSError:
        if created and not os.listdir(checkpoint):
            os.rmdir(checkpoint)
        raise


def save_budget_state(checkpoint: str, tracker: CapabilityTracker, parts: dict[str, Any] | None = None) -> None:
    """The budget's files of a checkpoint: the tracker's and, by file name, each stage's that keeps a state (the
    prompt stream of dynamic sampling, the prompt sampler, SPO's tracker); None parts are not in use."""
    save_tracker(checkpoint, tracker)
    for name, part in (parts or {}).items():
        if part is not None and hasattr(part, "save_files"):  # arrays, in a file of their own (VIP's embeddings)
            part.save_files(checkpoint)
        elif part is not None:
            write_json_atomically(os.path.join(checkpoint, name), part.state_dict())


def restore_budget_state(checkpoint: str, tracker: CapabilityTracker, parts: dict[str, Any],
                         budget_allocator: str) -> None:
    """Restore what `save_budget_state` saved (`parts` as given to it)."""
    from .settings.tracker import TRACKER_FIELDS  # here: the settings import the allocators, this module loads first

    restore_tracker(checkpoint, tracker, TRACKER_FIELDS, budget_allocator)
    for name, part in parts.items():
        if part is not None and hasattr(part, "load_files"):
            if not part.load_files(checkpoint):
                logger.warning(f"{os.path.join(checkpoint, name)} is missing: {_WITHOUT_FILE[name]}")
        elif part is not None:
            restore_part(checkpoint, name, part)


# What a run that resumes without a stage's file does, by the file's name.
_WITHOUT_FILE = {
    "budget_prompt_stream.json": "Dynamic sampling draws from the start of the training data again.",
    "budget_prompt_sampler.json": "Prompt sampling draws its pools from the start of the training data again.",
    "budget_spo_state.json": "SPO's tracker starts again from every prompt's prior.",
    "budget_vip_embeddings.npz": "VIP's embeddings are made again from the resumed policy before the next batch.",
}


def restore_part(checkpoint: str, name: str, part) -> None:
    """Put a stage (`part.load_state_dict(state, path)`) where the checkpoint's stood, so the resumed run goes on as an
    uninterrupted one would; a missing file is warned about (the stage starts afresh)."""
    path = os.path.join(checkpoint, name)
    if not os.path.exists(path):
        logger.warning(f"{path} is missing: the checkpoint was written without this stage, or its save was "
                       f"interrupted. {_WITHOUT_FILE.get(name, '')}")
        return
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"{path} cannot be read ({type(error).__name__}: {error}). Resume from an earlier "
                         "checkpoint, or delete the file: "
                         f"{_WITHOUT_FILE.get(name, 'the stage starts afresh.')}") from error
    part.load_state_dict(state, path)


def restore_tracker(checkpoint: str, tracker: CapabilityTracker, tracker_fields: dict[str, str],
                    budget_allocator: str) -> None:
    """Restore the tracker from the checkpoint's file; a missing file is warned about (the run resumes with every
    prompt unseen), a file made with other pass-rate settings names the config fields to set (`tracker_fields`: the
    tracker's argument -> the field that sets it)."""
    path = os.path.join(checkpoint, TRACKER_STATE_NAME)
    if not os.path.exists(path):
        logger.warning(
            f"{path} is missing: the checkpoint was written by GRPOTrainer or by an older trl_budget, or its save "
            "was interrupted. The run resumes with every prompt unseen, so allocation starts over from the "
            "default counts and learns the pass rates again as prompts come back."
        )
        return
    try:
        load_tracker_state(tracker, path)
    except SettingsMismatch as error:
        # A saved rollout_pool of None is "no pool", which the config says as 0 (its None follows the allocator).
        fields_to_set = ", ".join(
            f"{tracker_fields.get(name, name)}={0 if name == 'rollout_pool' and saved is None else saved!r} "
            f"(this run: {current!r})" for name, (saved, current) in error.differences.items())
        raise ValueError(
            f"{path} was written with other pass-rate settings than this run's, so its pass rates cannot be carried "
            f"over. To resume it, set {fields_to_set}; fields left at None follow budget_allocator (now "
            f"{budget_allocator!r}), so a changed allocator changes them too. To keep this run's settings, "
            "start from this checkpoint's model without resume_from_checkpoint, or delete the file to resume with "
            "every prompt unseen."
        ) from error
