"""What `trl-budget demo` prints with its defaults, recorded for the README, one record per instruction-set class.

    python benchmarks/demo/demo_record.py            # results/demo-<kernels>-<cpu>.json
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
        python benchmarks/demo/demo_record.py        # the same on AVX2 kernels, on a CPU that has more
    python benchmarks/demo/demo_record.py --stored-only   # each record's paired figures again from its seeds' values

A run's floats are bit for bit the same only within one instruction-set class: torch's CPU kernels (and MKL's and
oneDNN's) are chosen by the CPU's SIMD flags, so another class gives other sums and another trajectory from the same
seed (and another vendor's CPU of the same class can too: docs/studies/fifth.md, re-training the runs). The three variables above make torch, MKL and oneDNN run their AVX2 kernels on an AVX-512 CPU; the record
names the kernels torch ran and the variables that were set. Each record holds the demo's printed figures (per arm,
and each seed's paired differences with their interval), its seconds with the load average before it started (the
README quotes seconds only from a record made with nothing beside it) and the digest of the code that printed them.

results/demo.json is the record of the demo as it was before paired seeds: seed 0 alone, one process on two threads,
on an AMD EPYC family 25 model 1 (AVX2 kernels). results/avx2_kernels.json shows that the three variables make this
AVX-512 machine compute as that AVX2 one: that demo, and a stored fourth-study run trained there, re-trained here bit
for bit under them. results/history_pair/ holds the records of the default pair before the fifth study (uniform GRPO
with and without the history baseline, `trl-budget demo --allocator uniform` now).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from trl_budget.cli import main as trl_budget
from trl_budget.demo.report import paired_figure
from trl_budget.demo.run_cache import code_digest

RESULTS = Path(__file__).resolve().parent / "results"
SHOWN = ("start_accuracy", "metric_mean", "metric_std", "final_accuracy_mean", "effective_ratio_mean",
         "rollouts_spent")
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def record(arguments: list[str]) -> dict:
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        trl_budget(["demo", *arguments, "--output-dir", folder])
        seconds = time.perf_counter() - start
        results = json.loads((Path(folder) / "demo_results.json").read_text())
    machine = results["machine"]
    return {"command": " ".join(["trl-budget demo", *arguments]), "seconds": round(seconds), "load_before": load,
            "code": code_digest(), "machine": machine,
            "kernel_variables": {name: os.environ[name] for name in KERNEL_VARIABLES if name in os.environ},
            "seeds": results["seeds"], "processes": results["processes"],
            "run_seconds": [[run["allocator"], run["seed"], round(run["seconds"])] for run in results["runs"]],
            "summary": {label: {name: row[name] for name in SHOWN} for label, row in results["summary"].items()},
            "paired": {label: row["paired"] for label, row in results["summary"].items() if "paired" in row}}


def record_name(machine: dict) -> str:
    """demo-<kernels torch ran>-<CPU family>-<model>.json"""
    return f"demo-{machine['torch_cpu_capability'].lower()}-{machine['cpu_family']}-{machine['cpu_model']}.json"


def rederive_paired(recorded: dict) -> dict:
    """The record with each paired figure's mean and interval computed again, by the current code, from the seed-by-seed
    differences it stores (trains nothing); `paired_rederived` names that code when anything changed."""
    paired = {label: {name: paired_figure(figure["differences"]) for name, figure in figures.items()}
              for label, figures in recorded.get("paired", {}).items()}
    if paired == recorded.get("paired", {}):
        return recorded
    return {**recorded, "paired": paired,
            "paired_rederived": {"command": "python benchmarks/demo/demo_record.py --stored-only",
                                 "code": code_digest()}}


def rederive_stored() -> None:
    for path in sorted(RESULTS.rglob("demo-*.json")):
        recorded = json.loads(path.read_text())
        again = rederive_paired(recorded)
        if again != recorded:
            path.write_text(json.dumps(again, indent=1) + "\n")
            print(f"{path}: paired figures derived again")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stored-only", action="store_true",
                        help="derive each stored record's paired figures again from its seeds' differences; train nothing")
    if parser.parse_args().stored_only:
        rederive_stored()
        raise SystemExit
    recorded = record([])
    path = RESULTS / record_name(recorded["machine"])
    path.write_text(json.dumps(recorded, indent=1) + "\n")
    print(path)
    print(json.dumps(recorded, indent=1))
