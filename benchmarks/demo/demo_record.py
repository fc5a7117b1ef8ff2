"""What `trl-budget demo` prints with its defaults, recorded for the README: each run's figures, the seconds the demo
took (both runs, the shipped warm start) and the digest of the code that printed them.

    python benchmarks/demo/demo_record.py        # on an otherwise idle machine: the seconds are the README's

Writes results/demo.json; tests/test_demo.py checks the README states these figures.
Until the move to benchmarks/demo/ this script was benchmarks/demo_record.py.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch

from trl_budget.cli import main as trl_budget
from trl_budget.demo.machine import cpu_record, machine_record
from trl_budget.demo.run_cache import code_digest

RESULTS = Path(__file__).resolve().parent / "results"
SHOWN = ("start_accuracy", "final_accuracy_mean", "effective_ratio_mean", "rollouts_spent")


def cpu_line() -> str:
    """The CPU's model line (a warm start, and every figure after it, differ from one CPU model to another)."""
    cpu = cpu_record()
    return f"{cpu['cpu']} (family {cpu['cpu_family']}, model {cpu['cpu_model']})"


def record() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        trl_budget(["demo", "--output-dir", folder])
        seconds = time.perf_counter() - start
        results = json.loads((Path(folder) / "demo_results.json").read_text())
    run_seconds = {run["allocator"]: round(run["seconds"]) for run in results["runs"]}
    return {"command": "trl-budget demo", "seconds_on_2_cores": round(seconds), "code": code_digest(),
            "cpu": cpu_line(), "machine": machine_record(), "torch_threads": torch.get_num_threads(), "run_seconds": run_seconds,
            "summary": {label: {name: row[name] for name in SHOWN} for label, row in results["summary"].items()}}


if __name__ == "__main__":
    recorded = record()
    (RESULTS / "demo.json").write_text(json.dumps(recorded, indent=1) + "\n")
    print(json.dumps(recorded, indent=2))
