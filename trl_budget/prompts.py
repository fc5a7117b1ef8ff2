"""How a training row names its prompt: by its content (images included) or by `prompt_id_column`; and whether it
shows images."""

from __future__ import annotations

from typing import Any

from .checks import is_missing
from .prior import column_of_rows
from .tracker import prompt_key

__all__ = ["IMAGE_COLUMNS", "check_repeated_layout", "has_images", "keys_of", "missing_id_error", "prompt_identity"]

IMAGE_COLUMNS = ("images", "image")  # where TRL reads a prompt's images from


def prompt_identity(row: dict[str, Any], id_column: str | None) -> Any:
    """What identifies the row's prompt: its id in `id_column`, or its prompt with its images."""
    if id_column is None and "prompt" not in row:
        raise KeyError(
            f"A training row has no `prompt` (its columns: {sorted(row)}), as rows routed to environments may "
            "not; per-prompt budgets need to key it. Set prompt_id_column to a column that identifies the prompt."
        )
    if id_column is None:
        images = next((row[name] for name in IMAGE_COLUMNS if row.get(name) is not None), None)
        # Images in their own column are part of the prompt: the same text with another image is another prompt.
        return row["prompt"] if images is None else {"prompt": row["prompt"], "images": images}
    (identity,) = column_of_rows([row], "prompt_id_column", id_column)
    if is_missing(identity):
        raise missing_id_error(id_column, identity, f"for the prompt {row.get('prompt')!r}")
    return identity


def keys_of(rows: list[dict[str, Any]], id_column: str | None) -> list[str]:
    """The tracker's key of each row's prompt: a digest of its content, or its id in `id_column` as a string."""
    identities = [prompt_identity(row, id_column) for row in rows]
    return [prompt_key(identity) if id_column is None else str(identity) for identity in identities]


def has_images(row: dict[str, Any]) -> bool:
    """A row whose prompt shows images: in TRL's `image`/`images` column, or as image parts of its messages."""
    if any(row.get(name) is not None for name in IMAGE_COLUMNS):
        return True
    prompt = row.get("prompt")
    return isinstance(prompt, list) and any(
        isinstance(message, dict) and isinstance(message.get("content"), list)
        and any(isinstance(part, dict) and part.get("type") == "image" for part in message["content"])
        for message in prompt)


def missing_id_error(column: str, value: Any, where: str) -> ValueError:
    return ValueError(
        f"prompt_id_column={column!r} is {value!r} {where}: every prompt needs an id of its own, or all such prompts "
        "would share one pass rate. Fill in the ids, or set prompt_id_column=None to key prompts by their content."
    )


def check_repeated_layout(rows: list[dict[str, Any]], group: int, field: str) -> None:
    """Each prompt arrives `group` times in a row, as TRL's RepeatSampler lays them out. Compares `field` (the prompt,
    or its id) of every row with its group's first row: the sampler repeats whole dataset rows, so the rest follows."""
    if any(row.get(field) != rows[i - i % group].get(field) for i, row in enumerate(rows)):
        raise RuntimeError(
            "BudgetGRPOTrainer expects each prompt to arrive num_generations times in a row, as TRL's "
            "RepeatSampler lays them out; a custom sampler or data collator broke that layout."
        )
