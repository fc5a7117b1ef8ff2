"""How long `trl-budget --help`, `trl-budget demo --help` and importing the allocation core take, each in a fresh
Python process (median of 5). The script imports nothing of trl_budget itself, so the package timed is whichever the
child processes find: this checkout, or another one put first on PYTHONPATH.

    python benchmarks/overhead/startup_time.py
    PYTHONPATH=/path/to/other/checkout python benchmarks/overhead/startup_time.py --output /tmp/startup_other.json
Until the move to benchmarks/overhead/ this script was benchmarks/startup_time.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = {
    "trl-budget --help": [sys.executable, "-m", "trl_budget", "--help"],
    "trl-budget demo --help": [sys.executable, "-m", "trl_budget", "demo", "--help"],
    "trl-budget grpo --help": [sys.executable, "-m", "trl_budget", "grpo", "--help"],
    "import trl_budget.allocators": [sys.executable, "-c", "import trl_budget.allocators"],
    "import trl_budget.tracker": [sys.executable, "-c", "import trl_budget.tracker"],
}


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "results" / "startup_time.json")
    args = parser.parse_args(argv)
    where = subprocess.run([sys.executable, "-c", "import trl_budget, os; print(os.path.dirname(trl_budget.__file__))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    result = {"package": where, "repeats": args.repeats,
              "median_seconds": {name: statistics.median(seconds(command) for _ in range(args.repeats))
                                 for name, command in COMMANDS.items()}}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    print(f"package: {where}\n| command | median |\n|---|---:|")
    for name, value in result["median_seconds"].items():
        print(f"| `{name}` | {value:.2f} s |")
    return result


if __name__ == "__main__":
    main()
