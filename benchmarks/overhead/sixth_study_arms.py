"""The trainer's wall time a generation batch under every arm of the sixth study, side by side, with where it goes.

Each arm trains its study settings (`benchmarks/sixth_study/arms.py`: the study's warm start, task and pool, 512
rollouts a batch, 8 optimizer updates a batch, one torch thread as every study run) for `--batches` generation batches
in each regime. Within a repeat the arms run one after another in each regime, in an order rotated from repeat to
repeat, so that the machine's drift hits them alike; a repeat's figure is an arm's mean time a batch (the wall time
between the ends of two generation batches' last updates, the first `WARM_UP` batches and the last one, which holds
the final evaluation, left out) over uniform-n8's in the same repeat and regime. The ratio is the mean of the repeats'
with its 95% t interval (exact t quantiles, repeats - 1 degrees of freedom).

Where a batch's time goes (means over the same batches and then the repeats, in ms; the first five parts add up
to the batch):
- generation: the policy's sampling of the batch's rollouts (`_generate_single_turn`, every round);
- rewards: the reward function (`_calculate_rewards`);
- forward passes: the policy's passes inside the generation stage (`_get_per_token_logps_and_entropies`): TRL's pass
  of the old policy over the batch (its 8 updates need it), and KL-adaptive rho's passes over the kept responses;
- bookkeeping: the rest of the generation stage (`_generate_and_score_completions` less the three above): the prompt
  order, the allocation, the baselines and advantages, the trackers, the rows' layout;
- alone, each already counted above: the allocation (`allocation`: VIP's solver, every allocator's decision), SPO's
  settle (`spo_settle`: the tracker's update, rho's passes included) and VIP's predictions (`vip_predictions`: the
  GP's fit and predictions);
- updates: the 8 optimizer updates (the batch less the generation stage).

What a short run does not show: under SPO at the fresh pool a prompt comes back about twice in 120 batches, and
later rather than sooner, so KL-adaptive rho's passes there are fewer in the batches timed here than in a study run;
the study stores every run's count of those rows (`spo_forward_passes_rows`), which with the settle's time here gives
their cost over a run. Figures measured beside other work are not comparable; the load average is stored beside them.

    OMP_NUM_THREADS=1 python benchmarks/overhead/sixth_study_arms.py            # 3 repeats of 12 batches an arm
    OMP_NUM_THREADS=1 python benchmarks/overhead/sixth_study_arms.py --quick    # a smoke run: 1 repeat, 2 arms
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(HERE.parent / "common"))
sys.path.insert(0, str(HERE.parent / "sixth_study"))

from arms import ARMS, arm_settings  # noqa: E402
from benchmark_record import write_record  # noqa: E402
from sixth_study import BASELINE, REGIMES, STUDY_ARMS  # noqa: E402

from trl_budget.demo.run import run_rl, warm_start  # noqa: E402
from trl_budget.demo.settings import WarmStartSettings  # noqa: E402
from trl_budget.demo.study_stats import paired_interval  # noqa: E402
from trl_budget.demo.task import task_named  # noqa: E402

WARM_UP = 4  # batches: under SPO at the revisited pool, prompts come back (and rho's passes run) from about the third
# (owner on the trainer, or None for the trainer itself; method): each call's seconds, summed over a batch
STAGES = {"generation_stage": (None, "_generate_and_score_completions"), "generation": (None, "_generate_single_turn"),
          "rewards": (None, "_calculate_rewards"), "forward_passes": (None, "_get_per_token_logps_and_entropies"),
          "allocation": (None, "_allocate"), "spo_settle": ("spo", "settle"),
          "vip_predictions": (None, "_vip_predictions")}
INSIDE_GENERATION_STAGE = {"forward_passes"}  # the updates' own passes are theirs


class BatchClock(TrainerCallback):
    """The wall clock at the end of every generation batch, and the seconds each stage took in each batch. `run_rl`
    sets `trainer` before training; the stages are wrapped on that instance when training begins."""

    def __init__(self, updates_per_batch: int):
        self.updates_per_batch, self.trainer = updates_per_batch, None
        self.ends: list[float] = []
        self.stages: dict[str, list[float]] = {}  # stage -> seconds per batch (every call of the batch summed)
        self._in_stage = False

    def on_train_begin(self, args, state, control, **kwargs):
        for name, (owner_name, method_name) in STAGES.items():
            owner = self.trainer if owner_name is None else getattr(self.trainer, owner_name)
            if owner is not None:
                self.stages[name] = []
                setattr(owner, method_name, self._timed(name, getattr(owner, method_name)))
        self.ends.append(time.perf_counter())  # after the recorder's first evaluation

    def _timed(self, name: str, method):
        def timed(*args, **kwargs):
            if name in INSIDE_GENERATION_STAGE and not self._in_stage:
                return method(*args, **kwargs)
            self._in_stage |= name == "generation_stage"
            start = time.perf_counter()
            try:
                result = method(*args, **kwargs)
            finally:
                self._in_stage &= name != "generation_stage"
            batch = len(self.ends) - 1  # the batch under way
            seconds = self.stages[name]
            seconds.extend([0.0] * (batch + 1 - len(seconds)))
            seconds[batch] += time.perf_counter() - start
            return result
        return timed

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.updates_per_batch == 0:
            self.ends.append(time.perf_counter())

    def figures(self) -> dict:
        """Means over the timed batches (after `WARM_UP`, the last one left out), in seconds."""
        timed = slice(WARM_UP, len(self.ends) - 2)
        batch = np.diff(self.ends)[timed]
        every = len(self.ends) - 1
        stages = {name: np.array(seconds + [0.0] * (every - len(seconds)))[:every][timed]
                  for name, seconds in self.stages.items()}
        parts = {"generation": stages["generation"], "rewards": stages["rewards"],
                 "forward_passes": stages["forward_passes"],
                 "bookkeeping": (stages["generation_stage"] - stages["generation"] - stages["rewards"]
                                 - stages["forward_passes"]),
                 "updates": batch - stages["generation_stage"],
                 **{name: stages[name] for name in ("allocation", "spo_settle", "vip_predictions") if name in stages}}
        return {"batch_seconds": float(np.mean(batch)), "batches_timed": len(batch),
                "part_seconds": {name: float(np.mean(values)) for name, values in parts.items()}}


def run_arm(regime: str, label: str, batches: int, output_dir: Path, quick: bool = False) -> dict:
    """`label`'s figures in `regime` over `batches` generation batches (`quick`: the study's smoke pool)."""
    torch.set_num_threads(1)
    task_name = REGIMES[regime][0]
    settings = arm_settings(regime, label, quick)
    steps = batches * settings.updates_per_batch
    settings = replace(settings, steps=steps, eval_every=steps + 1, eval_prompts=8, train_eval_prompts=8,
                       histogram_steps=())  # one small evaluation at each end, outside the timed batches
    options = dict(ARMS[label][1])
    allocator = options.pop("budget_allocator")
    clock = BatchClock(settings.updates_per_batch)
    task = task_named(task_name)
    run_rl(warm_start(WarmStartSettings(), task=task), allocator, 0, settings, output_dir, show_progress=False,
           label=label, task=task, observers=(clock,), **options)
    return clock.figures()


def summary(samples: dict[str, dict[str, list[dict]]]) -> dict:
    """Per regime and arm: the mean time a batch over the repeats, the ratio to uniform-n8 (mean of the repeats'
    ratios, 95% t interval), and each part's mean."""
    result = {}
    for regime, arms in samples.items():
        base = np.array([run["batch_seconds"] for run in arms[BASELINE]])
        result[regime] = {}
        for label, runs in arms.items():
            ratios = np.array([run["batch_seconds"] for run in runs]) / base
            row = {"batch_ms": statistics.mean(run["batch_seconds"] for run in runs) * 1e3,
                   "ratio_to_uniform_n8": float(ratios.mean()),
                   "part_ms": {part: statistics.mean(run["part_seconds"][part] for run in runs) * 1e3
                               for part in runs[0]["part_seconds"]}}
            if len(runs) > 1:
                row["ratio_ci95"] = paired_interval(ratios)[1]
            result[regime][label] = row
    return result


def rotated(labels: list[str], repeat: int) -> list[str]:
    shift = repeat * 5 % len(labels)
    return labels[shift:] + labels[:shift]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 repeat of 7 batches, uniform-n8 and spo, "
                        "the study's smoke pool")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=12, help="generation batches a run (the first 4 and the "
                        "last one untimed)")
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    parser.add_argument("--output", type=Path, default=HERE / "results" / "sixth_study_arms.json")
    args = parser.parse_args(argv)
    if args.batches < WARM_UP + 2:
        parser.error(f"--batches must be at least {WARM_UP + 2}: the first {WARM_UP} and the last are not timed")
    labels = [BASELINE, "spo"] if args.quick else STUDY_ARMS
    repeats, batches = (1, WARM_UP + 3) if args.quick else (args.repeats, args.batches)
    load_before = os.getloadavg()
    samples = {regime: {label: [] for label in labels} for regime in args.regimes}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for regime in args.regimes:
                for label in rotated(labels, repeat):
                    run = run_arm(regime, label, batches, Path(tmp) / f"{regime}-{label}-{repeat}", args.quick)
                    samples[regime][label].append(run)
                    print(repeat, regime, label, f"{run['batch_seconds'] * 1e3:.0f} ms a batch", flush=True)
    record = write_record(args.output, "benchmarks/overhead/sixth_study_arms.py", argv, repeats=repeats,
                          batches_per_run=batches, warm_up_batches=WARM_UP, rollouts_per_batch=512,
                          updates_per_batch=8, torch_threads=1, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS"),
                          load_average={"before": list(load_before), "after": list(os.getloadavg())},
                          arms=summary(samples), runs=samples)
    print(markdown_table(record))
    return record


def markdown_table(record: dict) -> str:
    lines = ["| regime | arm | time a batch | over uniform-n8 (95% CI) | generation | rewards | forward passes |"
             " bookkeeping | updates | allocation | SPO's settle | VIP's predictions |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for regime, arms in record["arms"].items():
        for label, row in arms.items():
            interval = "" if "ratio_ci95" not in row else " [{:.2f}, {:.2f}]".format(*row["ratio_ci95"])
            parts = row["part_ms"]
            lines.append(f"| {regime} | {label} | {row['batch_ms']:.0f} ms | "
                         f"{row['ratio_to_uniform_n8']:.2f}{interval} | {parts['generation']:.0f} | "
                         f"{parts['rewards']:.0f} | {parts['forward_passes']:.0f} | {parts['bookkeeping']:.0f} | "
                         f"{parts['updates']:.0f} | {parts['allocation']:.1f} | {parts.get('spo_settle', 0.0):.0f} | "
                         f"{parts.get('vip_predictions', 0.0):.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
