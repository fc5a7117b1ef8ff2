"""A prior for prompts the tracker has not seen: a dataset column of pass rates, or the pooled rate of a prompt's group.

Both releases allocate a prompt they have not seen (enough) as uniform does: Knapsack RL trusts a prompt after 8 scored
rollouts, CoBA-RL treats an unseen prompt as p = 0.5. On a large dataset that is most of training. With
`pass_rate_prior_column` an unseen prompt takes that column's value as its pass rate; with `prompt_group_column` it
takes its group's pooled rate (`CapabilityTracker.prior_pass_rates` says how either is weighed against the prompt's own
rollouts). The allocators then treat the estimate as any pass rate: a prior in (0, 1) makes the prompt mixed, a prior
of exactly 0 or 1 (with no contrary rollout) makes it never or always solved, under each release's rule for those.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .checks import is_finite_number, is_missing
from .tracker import group_name

__all__ = ["BUDGET_COLUMN_SETTINGS", "check_prior_columns", "column_of_rows", "history_pass_rates", "prior_inputs"]

# The settings that name a dataset column the trainer reads from every row it receives.
BUDGET_COLUMN_SETTINGS = ("prompt_id_column", "pass_rate_prior_column", "prompt_group_column")


def check_prior_columns(args, dataset) -> None:
    """Fail at construction when a prior column is missing, or holds a value that is not a rate in [0, 1]."""
    names = getattr(dataset, "column_names", None)
    for setting in ("pass_rate_prior_column", "prompt_group_column"):
        column = getattr(args, setting)
        if column is not None and names is not None and column not in names:
            raise ValueError(
                f"{setting}={column!r} is not a column of the training dataset (columns: {sorted(names)}). Name one "
                f"of them, or set {setting}=None."
            )
    column = args.pass_rate_prior_column
    if column is not None and names is not None and hasattr(dataset, "__len__"):
        row = first_row_where(dataset, column, _is_not_a_rate, _arrow_not_a_rate)
        if row is not None:
            raise ValueError(
                f"pass_rate_prior_column={column!r} is {dataset[row][column]!r} in row {row} of the training dataset: "
                "a prior must be a pass rate in [0, 1] (or None / NaN for no prior). Map difficulty levels or scores "
                "to rates first."
            )


def first_row_where(dataset, column: str, is_bad, arrow_is_bad=None) -> int | None:
    """The first row (in the dataset's order) of a map-style dataset whose `column` cell `is_bad`, or None.

    An Arrow-backed `datasets.Dataset` is checked column-wise (`arrow_is_bad(chunked array) -> numpy mask`), through
    its index mapping after a shuffle or select: 2 million rows take a fraction of a second, where reading them one by
    one takes over a minute. Any other dataset is read cell by cell.
    """
    table, indices = getattr(dataset, "data", None), getattr(dataset, "_indices", None)
    if arrow_is_bad is not None and hasattr(table, "column") and hasattr(dataset, "_indices"):
        bad = arrow_is_bad(table.column(column))
        if indices is not None:  # the dataset's rows are these rows of the table
            bad = bad[indices.column(0).to_numpy()]
        rows = np.flatnonzero(bad)
        return int(rows[0]) if rows.size else None
    return next((row for row, value in enumerate(dataset[column]) if is_bad(value)), None)


def arrow_missing(values) -> np.ndarray:
    """Empty cells of an Arrow column: null, or NaN in a floating column."""
    import pyarrow.compute as pc

    missing = pc.is_null(values, nan_is_null=True)
    return missing.to_numpy(zero_copy_only=False).astype(bool)


def _arrow_not_a_rate(values) -> np.ndarray:
    import pyarrow as pa

    empty = arrow_missing(values)
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        return ~empty  # text, booleans, lists: no cell but an empty one is a rate
    numbers = values.to_numpy(zero_copy_only=False).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return ~empty & ~((numbers >= 0.0) & (numbers <= 1.0))


def _is_not_a_rate(value: Any) -> bool:
    return not is_missing(value) and not _is_rate(value)


def column_of_rows(rows: list[dict[str, Any]], setting: str, column: str) -> list[Any]:
    """Each row's cell of `column`, or a `KeyError` naming the setting when the rows arrive without it.

    The trainer keeps these columns when TRL removes unused ones; a streamed dataset, a collator or a dataset without
    the column can still deliver rows that lack it, and every prompt would then silently go without.
    """
    if rows and column not in rows[0]:
        raise KeyError(
            f"{setting}={column!r} is not a column of the rows the trainer receives (their columns: "
            f"{sorted(rows[0])}). Add the column to the training dataset (and keep it through any map or collator), "
            f"or set {setting}=None."
        )
    return [row[column] for row in rows]


def prior_inputs(prompts: list[dict[str, Any]], args) -> tuple[np.ndarray | None, list[str | None] | None]:
    """The column prior of each prompt (NaN where empty) and its group (None where the cell is empty), or None for a
    setting that is off."""
    priors = groups = None
    if args.pass_rate_prior_column is not None:
        values = column_of_rows(prompts, "pass_rate_prior_column", args.pass_rate_prior_column)
        bad = next((value for value in values if _is_not_a_rate(value)), None)
        if bad is not None:
            raise ValueError(f"pass_rate_prior_column={args.pass_rate_prior_column!r} holds {bad!r}, not a pass "
                             "rate in [0, 1].")
        priors = np.array([np.nan if is_missing(value) else float(value) for value in values])
    if args.prompt_group_column is not None:
        groups = [group_name(value)
                  for value in column_of_rows(prompts, "prompt_group_column", args.prompt_group_column)]
    return priors, groups


def _is_rate(value: Any) -> bool:
    return is_finite_number(value) and 0.0 <= value <= 1.0


def history_pass_rates(tracker, prompts: list[dict[str, Any]], keys: list[str], args):
    """The batch's pass rates from the tracker, with the prior for unseen prompts when one is set; which prompts took
    it (None without a prior); and each prompt's group (None without groups)."""
    priors, groups = prior_inputs(prompts, args)
    if priors is None and groups is None:
        return tracker.pass_rates(keys), None, None
    rates, from_prior = tracker.prior_pass_rates(keys, priors, groups, args.pass_rate_prior_strength)
    return rates, from_prior, groups
