"""A prior for prompts the tracker has not seen: a dataset column of pass rates, or the pooled rate of a prompt's group.

Both releases allocate a prompt they have not seen (enough) as uniform does: Knapsack RL trusts a prompt after 8 scored
rollouts, CoBA-RL treats an unseen prompt as p = 0.5. On a large dataset that is most of training. With
`pass_rate_prior_column` an unseen prompt takes that column's value as its pass rate; with `prompt_group_column` it
takes its group's pooled rate (`CapabilityTracker.prior_pass_rates` says how either is weighed against the prompt's own
rollouts). The allocators then treat the estimate as any pass rate: a prior in (0, 1) makes the prompt mixed, a prior
of exactly 0 or 1 (with no contrary rollout) makes it never or always solved, under each release's rule for those.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .checks import is_finite_number

__all__ = ["check_prior_columns", "prior_inputs"]


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
        for row, value in enumerate(dataset[column]):
            if not _is_empty(value) and not _is_rate(value):
                raise ValueError(
                    f"pass_rate_prior_column={column!r} is {value!r} in row {row} of the training dataset: a prior "
                    "must be a pass rate in [0, 1] (or None / NaN for no prior). Map difficulty levels or scores to "
                    "rates first."
                )


def prior_inputs(prompts: list[dict[str, Any]], args) -> tuple[np.ndarray | None, list[str] | None]:
    """The column prior of each prompt (NaN where empty) and its group (None without the settings)."""
    priors = groups = None
    if args.pass_rate_prior_column is not None:
        values = [row.get(args.pass_rate_prior_column) for row in prompts]
        bad = next((value for value in values if not _is_empty(value) and not _is_rate(value)), None)
        if bad is not None:
            raise ValueError(f"pass_rate_prior_column={args.pass_rate_prior_column!r} holds {bad!r}, not a pass "
                             "rate in [0, 1].")
        priors = np.array([np.nan if _is_empty(value) else float(value) for value in values])
    if args.prompt_group_column is not None:
        groups = [str(row.get(args.prompt_group_column)) for row in prompts]
    return priors, groups


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_rate(value: Any) -> bool:
    return is_finite_number(value) and 0.0 <= value <= 1.0
