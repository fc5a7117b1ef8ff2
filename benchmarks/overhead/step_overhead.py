"""Step-time overhead of BudgetGRPOTrainer against TRL's GRPOTrainer at equal rollout budget (tiny model, CPU).

Runs alternate between trainers so that machine noise hits all of them alike; the figure is the ratio of median step
times measured in one run.

    python benchmarks/overhead/step_overhead.py            # 5 rounds of 30 steps each
    python benchmarks/overhead/step_overhead.py --quick    # 2 rounds of 8 steps
Until the move to benchmarks/overhead/ this script was benchmarks/step_overhead.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from datasets import Dataset
from transformers import PrinterCallback
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model

ALPHABET = "0123456789+-*= "


def reward(completions, answer, **kwargs):
    return [float(c.strip() == a) if len(c) % 3 else float(c[:1] == a[:1]) for c, a in zip(completions, answer)]


def dataset(size=16, seed=0):
    rng = np.random.default_rng(seed)
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in rng.integers(0, 50, (size, 2))])


def median_step_seconds(kind: str, steps: int, tokenizer, output_dir: str) -> float:
    common = dict(
        output_dir=output_dir, per_device_train_batch_size=32, num_generations=8, max_completion_length=8,
        max_steps=steps, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", seed=0,
        disable_tqdm=True,
    )
    if kind == "GRPOTrainer":
        trainer_class, args = GRPOTrainer, GRPOConfig(**common)
    else:
        trainer_class, args = BudgetGRPOTrainer, BudgetGRPOConfig(**common, budget_allocator=kind,
                                                                  budget_min_generations=2, budget_max_generations=32)
    trainer = trainer_class(model=build_tiny_model(tokenizer), reward_funcs=reward, args=args,
                            train_dataset=dataset(), processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    times = [entry["step_time"] for entry in trainer.state.log_history if "step_time" in entry]
    return statistics.median(times[4:])  # the first epoch has no pass rates yet


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 8 steps")
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "results" / "step_overhead.json",
                        help="where the figures go as JSON (default: benchmarks/overhead/results/step_overhead.json)")
    args = parser.parse_args(argv)
    rounds, steps = (2, 8) if args.quick else (5, 30)
    hf_logging.set_verbosity_error()
    tokenizer = build_char_tokenizer(ALPHABET)
    kinds = ["GRPOTrainer", "uniform", "knapsack", "coba"]
    samples = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for kind in kinds:
                samples[kind].append(median_step_seconds(kind, steps, tokenizer, os.path.join(tmp, kind)))
    base = statistics.median(samples["GRPOTrainer"])
    result = {
        "rounds": rounds,
        "steps_per_round": steps,
        "median_step_ms": {kind: statistics.median(values) * 1e3 for kind, values in samples.items()},
        "overhead_vs_GRPOTrainer": {kind: statistics.median(samples[kind]) / base - 1 for kind in kinds[1:]},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    print("| trainer | median step | vs GRPOTrainer |\n|---|---:|---:|")
    for kind in kinds:
        name = kind if kind == "GRPOTrainer" else f"BudgetGRPOTrainer, {kind}"
        overhead = "—" if kind == "GRPOTrainer" else f"{result['overhead_vs_GRPOTrainer'][kind]:+.1%}"
        print(f"| {name} | {result['median_step_ms'][kind]:.1f} ms | {overhead} |")
    return result


if __name__ == "__main__":
    sys.exit(main() and 0)
