"""The tracker's file in a checkpoint: written atomically, read back with errors that name the file and the remedy."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from .tracker import CapabilityTracker, SettingsMismatch

__all__ = ["TRACKER_STATE_NAME", "latest_complete_checkpoint", "load_tracker_state", "write_json_atomically"]

TRACKER_STATE_NAME = "budget_tracker_state.json"
TRAINER_STATE_NAME = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME, without importing transformers
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")  # the Trainer's folder names (PREFIX_CHECKPOINT_DIR-step)

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
                     if (match := _CHECKPOINT.fullmatch(name)) and os.path.isdir(os.path.join(output_dir, name)))
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
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
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
