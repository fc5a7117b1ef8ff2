"""Construction-time checks of the dataset columns the budget settings name, at 2 million rows.

`prompt_id_column` (no empty id) and `pass_rate_prior_column` (rates in [0, 1]) are checked when the trainer is built.
Measured side by side in one process: the checks as the trainer runs them (each column read from Arrow in bulk), and
the same checks reading the column row by row (how they read before), on the same shuffled `datasets.Dataset` (an
index mapping, as after `shuffle` or `select`). Writes benchmarks/overhead/results/column_checks.json.

    python benchmarks/overhead/column_checks.py                  # 2 000 000 rows
    python benchmarks/overhead/column_checks.py --rows 200000
Until the move to benchmarks/overhead/ this script was benchmarks/column_checks.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from datasets import Dataset

from trl_budget.checks import is_missing
from trl_budget.prior import check_prior_columns
from trl_budget.trainer import check_prompt_id_column


def row_by_row(data: Dataset) -> None:
    """The checks as they read before: one Python value at a time through the dataset's formatter."""
    assert next((i for i, value in enumerate(data["id"]) if is_missing(value)), None) is None
    assert all(0.0 <= value <= 1.0 for value in data["prior"])


def in_bulk(data: Dataset) -> None:
    check_prompt_id_column("id", data)
    check_prior_columns(SimpleNamespace(pass_rate_prior_column="prior", prompt_group_column=None), data)


def timed(check, data: Dataset) -> float:
    start = time.perf_counter()
    check(data)
    return time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "column_checks.json")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    data = Dataset.from_dict({"prompt": ["1+1="] * args.rows, "id": np.arange(args.rows),
                              "prior": rng.random(args.rows)}).shuffle(seed=0)
    bulk, rows = timed(in_bulk, data), timed(row_by_row, data)
    result = {"rows": args.rows, "bulk_seconds": round(bulk, 3), "row_by_row_seconds": round(rows, 3),
              "speedup": round(rows / bulk, 1)}
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.rows} rows, two columns: in bulk {bulk:.2f} s, row by row {rows:.2f} s ({rows / bulk:.0f}x)")
    return result


if __name__ == "__main__":
    main()
