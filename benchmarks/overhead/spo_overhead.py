"""Trainer wall time per batch of SPO (KL-adaptive rho, and a constant rho) against uniform GRPO at equal rollouts
(tiny model, CPU), with where SPO's extra time goes.

Every arm trains the tests' tiny model on the same 64 arithmetic prompts for `--steps` batches of 32 rollouts (uniform:
4 prompts x 8 rollouts; SPO: 32 prompts x 1). The arms alternate within each repeat, so that machine noise hits them
alike; a repeat's figure is an arm's median time per batch (the wall time between the ends of two optimizer steps,
the first `WARM_UP` batches left out) over uniform's in the same repeat, and the ratio is the mean of the repeats' with
its 95% t interval (exact t quantiles, repeats - 1 degrees of freedom). The machine's load average before and
after is stored beside the figures: other work on the machine slows the arms alike only on average. The breakdown is the median time per batch
inside SPO's own stages: the settle (the tracker's update, with its forward pass under KL-adaptive rho), the forward
pass alone (`PolicyPasses.log_probs`) and the gathering of the kept responses (`PolicyPasses.last_responses`).

    python benchmarks/overhead/spo_overhead.py            # 7 repeats of 14 batches an arm
    python benchmarks/overhead/spo_overhead.py --quick    # 3 repeats of 8 batches
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common

from benchmark_record import write_record  # noqa: E402
from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer  # noqa: E402
from trl_budget.demo.study_stats import paired_interval  # noqa: E402
from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model  # noqa: E402

ALPHABET = "0123456789+-*= "
WARM_UP = 3  # the first batches: SPO's settle has no kept response before a prompt's second visit
ARMS = {"uniform": {"budget_allocator": "uniform"},
        "spo-kl": {"budget_allocator": "spo", "spo_rho": "kl"},
        "spo-constant": {"budget_allocator": "spo", "spo_rho": 0.875}}
STAGES = {"settle": ("spo", "settle"), "log_probs": ("policy_passes", "log_probs"),
          "last_responses": ("policy_passes", "last_responses")}


def parity_reward(completions, answer, **kwargs):
    return [float(len(c) % 2 == int(a) % 2) for c, a in zip(completions, answer)]


def dataset(size: int = 64, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in rng.integers(0, 50, (size, 2))])


class StepEnds(TrainerCallback):
    """The wall clock at the end of every optimizer step (the batch's generation, update and logs between two)."""

    def __init__(self):
        self.ends = [time.perf_counter()]

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def timed_stages(trainer) -> dict[str, list[float]]:
    """Seconds spent in each of SPO's stages, a call at a time (the stage's method wrapped on its instance)."""
    seconds: dict[str, list[float]] = {name: [] for name in STAGES}
    for name, (owner_name, method_name) in STAGES.items():
        owner = getattr(trainer, owner_name)
        if owner is None:
            continue
        method = getattr(owner, method_name)

        def timed(*args, _method=method, _name=name, **kwargs):
            start = time.perf_counter()
            result = _method(*args, **kwargs)
            seconds[_name].append(time.perf_counter() - start)
            return result

        setattr(owner, method_name, timed)
    return seconds


def run_arm(arm: str, steps: int, tokenizer, output_dir: str) -> dict:
    args = BudgetGRPOConfig(
        output_dir=output_dir, per_device_train_batch_size=32, num_generations=8, max_completion_length=8,
        max_steps=steps, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", seed=0, disable_tqdm=True,
        temperature=1.0, **ARMS[arm])
    trainer = BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=parity_reward, args=args,
                                train_dataset=dataset(), processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    clock = StepEnds()
    trainer.add_callback(clock)
    stages = timed_stages(trainer)
    trainer.train()
    per_batch = np.diff(clock.ends)[WARM_UP:]
    return {"batch_seconds": float(np.median(per_batch)),
            "stage_seconds": {name: float(np.median(values[WARM_UP - 1:])) if values else 0.0
                              for name, values in stages.items()}}


def summary(samples: dict[str, list[dict]]) -> dict:
    base = [sample["batch_seconds"] for sample in samples["uniform"]]
    result = {}
    for arm, runs in samples.items():
        times = [run["batch_seconds"] for run in runs]
        mean, interval = paired_interval(np.array(times) / np.array(base))
        result[arm] = {"median_batch_ms": statistics.median(times) * 1e3,
                       "ratio_to_uniform": mean, "ratio_ci95": interval,
                       "stage_ms": {name: statistics.median(run["stage_seconds"][name] for run in runs) * 1e3
                                    for name in STAGES}}
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 repeats of 8 batches")
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "results" / "spo_overhead.json")
    args = parser.parse_args(argv)
    repeats, steps = (3, 8) if args.quick else (7, 14)
    hf_logging.set_verbosity_error()
    logging.getLogger("trl_budget").setLevel(logging.ERROR)  # the rule's announcement, once a run
    load_before = os.getloadavg()
    tokenizer = build_char_tokenizer(ALPHABET)
    samples: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for arm in ARMS:
                samples[arm].append(run_arm(arm, steps, tokenizer, f"{tmp}/{arm}-{repeat}"))
                print(arm, samples[arm][-1], flush=True)
    result = summary(samples)
    record = write_record(args.output, "benchmarks/overhead/spo_overhead.py", argv, repeats=repeats,
                          batches_per_run=steps, warm_up_batches=WARM_UP, rollouts_per_batch=32,
                          torch_threads=torch.get_num_threads(),
                          load_average={"before": list(load_before), "after": list(os.getloadavg())},
                          arms=result, runs=samples)
    print(markdown_table(record))
    return record


def markdown_table(record: dict) -> str:
    lines = ["| arm | median time a batch | over uniform (95% CI) | settle | its forward pass | kept responses |",
             "|---|---:|---:|---:|---:|---:|"]
    for arm, row in record["arms"].items():
        low, high = row["ratio_ci95"]
        stages = row["stage_ms"]
        lines.append(f"| {arm} | {row['median_batch_ms']:.0f} ms | {row['ratio_to_uniform']:.2f} [{low:.2f}, "
                     f"{high:.2f}] | {stages['settle']:.1f} ms | {stages['log_probs']:.1f} ms | "
                     f"{stages['last_responses']:.1f} ms |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
