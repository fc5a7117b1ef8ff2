"""A benchmark's stored result: the command that made it, the CPU it ran on, numpy's version, and its fields."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from trl_budget.demo.machine import cpu_record  # noqa: E402


def write_record(output: Path, script: str, argv, **fields) -> dict:
    """Write `fields` with the command (`python script argv...`) and the machine to `output` as JSON."""
    record = {"command": " ".join(["python", script, *(argv if argv is not None else sys.argv[1:])]),
              "machine": cpu_record(), "numpy": np.__version__, **fields}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(record, indent=2) + "\n")
    return record
