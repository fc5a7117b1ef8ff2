#!/usr/bin/env bash
# Every benchmark whose figures the README cites, exactly as run. Each writes to benchmarks/results/ and prints the
# README's table. About 30 minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."

python benchmarks/allocator_speed.py        # allocation time against a heap greedy and a dynamic program
python benchmarks/step_overhead.py          # step time against GRPOTrainer
python benchmarks/tracker_scale.py          # tracker memory and checkpoint cost at 10^6 prompts
python benchmarks/compare_allocators.py     # allocators on the built-in task, equal rollout budgets
