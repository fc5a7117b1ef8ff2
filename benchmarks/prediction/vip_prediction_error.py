"""How well VIP's Gaussian process predicts a batch's success rates before the batch, on the demo's arithmetic task,
beside the tracker's plain last-visit rate and the dataset's mean rate.

    python benchmarks/prediction/vip_prediction_error.py           # 3 seeds x 480 batches (a few minutes on CPU)
    python benchmarks/prediction/vip_prediction_error.py --quick   # 1 seed x 40 batches, written to /tmp

Design, fixed before the first run:

- Runs: the demo's RL run (`RLSettings()`: the shipped warm start, 240 training prompts over the six arithmetic
  levels, 8 prompts x 8 rollouts a batch, one update a batch, 480 batches, learning rate 2e-4 decaying linearly),
  seeds 0, 1 and 2, under uniform GRPO: every batch prompt gets 8 rollouts, so every observed rate has the same
  noise, and no predictor decides which prompts are observed. The tracker keeps VIP's plain rule (a prompt's rate is
  its last visit's).
- The seeds run side by side, in processes of one thread each.
- Recorded per batch: its prompts, each one's successes and rollouts, and the tracker after it. Embeddings: the
  policy's, as VIP's stage makes them by default (`VIPStage.prepare` before the first batch: the warm start's last
  hidden layer, mean-pooled over the prompt's tokens, L2-normalised). A prompt's text holds its level (the operator
  and the number of digits), so the embeddings may see the task's structure; how much, is measured: the share of
  prompts whose nearest neighbour in the embedding has their level, beside chance, and the distances beside the
  kernel's length scale (0.4).
- Predictions of batch t, each from the tracker after batch t - 1 (before the batch is seen):
  `gp_tracked`: VIP's stage with `vip_fit="tracked"` (every tracked rate, prior -1), as the trainer runs it;
  `gp_release`: the stage with `vip_fit="release"` (the last batch's rates, each fit's posterior mean carried as
  the next fit's prior, prior -5), as the release's trainer fits;
  `last_visit`: the tracker's rate (seen prompts only);
  `dataset_mean`: the mean tracked rate over every seen prompt; `prior`: sigmoid(-1) = 0.27, the tracked fit's prior.
- Scores against batch t's observed rate (successes / 8): absolute error, and squared error (Brier-like: the observed
  rate in place of a single outcome), separately for seen prompts (a tracked rate exists) and unseen ones (the
  first epoch); batch 0, with nothing observed, is left out.
- Paired differences of errors (A - B, negative: A errs less): over a batch's prompts of the kind, their mean, so
  that the unit is a batch (prompts of one batch share the policy); then over the batches of every seed, the mean
  and its 95% t interval (exact t quantile, batches - 1 degrees of freedom). A predictor wins a comparison where
  the interval excludes 0.
- By construction the tracked fit predicts a seen prompt as its observation (its posterior mean at an observed point,
  within the 1e-6 clip): on seen prompts `gp_tracked` is `last_visit`, and only `gp_release` differs there.

Writes results/vip_prediction_error.json (the command, the CPU, the versions, the design's settings, the scores,
the paired comparisons with their per-batch differences, the embeddings' structure); docs/vip.md states its table
(`markdown_table`, tied by tests/test_docs_figures.py).
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import sys
import tempfile
from pathlib import Path

import numpy as np
from transformers import TrainerCallback

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common

from benchmark_record import write_record  # noqa: E402
from trl_budget import BudgetGRPOConfig  # noqa: E402
from trl_budget.allocators.registry import release_pass_rate_rule  # noqa: E402
from trl_budget.demo.machine import machine_record  # noqa: E402
from trl_budget.demo.run import run_rl, warm_start  # noqa: E402
from trl_budget.demo.settings import RLSettings  # noqa: E402
from trl_budget.demo.study_stats import paired_interval  # noqa: E402
from trl_budget.settings.tracker import TRACKER_FIELDS  # noqa: E402
from trl_budget.vip_stage import VIPStage  # noqa: E402

PREDICTORS = ("gp_tracked", "gp_release", "last_visit", "dataset_mean", "prior")
# (kind of prompt, A, B): the paired comparisons, A - B.
COMPARISONS = (("unseen", "gp_tracked", "dataset_mean"), ("unseen", "gp_tracked", "prior"),
               ("unseen", "gp_release", "dataset_mean"), ("unseen", "gp_release", "gp_tracked"),
               ("seen", "gp_release", "last_visit"), ("seen", "last_visit", "dataset_mean"),
               ("seen", "gp_release", "dataset_mean"))
METRICS = {"abs": np.abs, "squared": np.square}


class BatchRecord(TrainerCallback):
    """Per batch of the run: its prompts, their successes and rollouts, the tracker after it; and the embeddings
    that VIP's stage makes before the first batch."""

    def __init__(self, stage: VIPStage):
        self.stage, self.trainer, self.batches, self._last_plan = stage, None, [], None

    def on_train_begin(self, args, state, control, **kwargs):
        self.stage.prepare(self.trainer)

    def on_step_end(self, args, state, control, **kwargs):
        plan = self.trainer.last_rollout_plan
        if plan is None or plan is self._last_plan:  # one update a batch: every step has a new plan
            return
        self._last_plan = plan
        wins, trials = self.trainer.tracker.evidence(plan.keys)  # the plain rule: this batch's successes
        if not np.array_equal(trials, plan.counts):
            raise RuntimeError("the tracker's last visit is not this batch's rollouts: the plain rule is needed")
        self.batches.append({"keys": list(plan.keys), "wins": wins, "trials": trials,
                             "tracker": copy.deepcopy(self.trainer.tracker)})


def vip_stage(vip_fit: str, output_dir: str) -> VIPStage:
    """VIP's stage as a run with `vip_fit` builds it (its settings, checked, through the config)."""
    return VIPStage.for_run(BudgetGRPOConfig(output_dir=output_dir, budget_allocator="vip", vip_fit=vip_fit,
                                             use_cpu=True, bf16=False, report_to=[]))


def train_and_record(seed: int, settings: RLSettings, folder: str) -> tuple[BatchRecord, dict]:
    recorder = BatchRecord(vip_stage("tracked", folder))
    plain_rule = {TRACKER_FIELDS[name]: value for name, value in release_pass_rate_rule("vip").items()}
    run = run_rl(warm_start(), "uniform", seed, settings, Path(folder), show_progress=False, observers=(recorder,),
                 **plain_rule)
    return recorder, run


def predictions(recorder: BatchRecord, folder: str) -> list[dict]:
    """Every predictor's rates for each batch after the first, from the tracker before it, with the observed rates."""
    tracked, release = recorder.stage, vip_stage("release", folder)
    release.keys, release.embeddings, release.last_visit = tracked.keys, tracked.embeddings, tracked.last_visit.copy()
    prior = 1.0 / (1.0 + np.exp(-tracked.predictor_options["prior_mean"]))
    before, rows = recorder.trainer.args.make_tracker(), []  # an empty tracker before the first batch
    for batch, record in enumerate(recorder.batches):
        keys = record["keys"]
        known = before.pass_rates(tracked.keys)
        last_visit = before.pass_rates(keys)
        predicted = {"gp_tracked": tracked.predicted_rates(keys, before),
                     "gp_release": release.predicted_rates(keys, before), "last_visit": last_visit,
                     "dataset_mean": np.full(len(keys), np.nanmean(known) if batch else np.nan),
                     "prior": np.full(len(keys), prior)}
        for stage in (tracked, release):
            stage.visited(keys, record["trials"])
        if batch:
            rows.append({"batch": batch, "seen": ~np.isnan(last_visit), "observed": record["wins"] / record["trials"],
                         **predicted})
        before = record["tracker"]
    return rows


def seed_run(seed: int, settings: RLSettings) -> tuple[list[dict], dict, dict]:
    """One seed's run: its predictions and scores' rows, the embeddings' structure, the run's summary."""
    import torch

    torch.set_num_threads(1)  # the seeds run side by side
    with tempfile.TemporaryDirectory() as folder:
        recorder, run = train_and_record(seed, settings, folder)
        rows = predictions(recorder, folder)
        structure = embedding_structure(recorder.stage, levels_of(recorder.stage, recorder.trainer))
    print(f"seed {seed}: {run['seconds']:.0f} s", flush=True)
    return rows, structure, {"seed": seed, "seconds": run["seconds"], "start_accuracy": run["curve"][0]["accuracy"],
                             "final_accuracy": run["curve"][-1]["accuracy"]}


def batch_errors(rows: list[dict], kind: str, predictor: str, metric: str) -> np.ndarray:
    """Per batch with prompts of `kind`, the mean error of `predictor` over them."""
    errors = []
    for row in rows:
        chosen = row["seen"] if kind == "seen" else ~row["seen"]
        if chosen.any():
            errors.append(float(METRICS[metric](row[predictor][chosen] - row["observed"][chosen]).mean()))
    return np.array(errors)


def scores(rows: list[dict]) -> dict:
    """Per kind of prompt and predictor (defined on every prompt of the kind): the mean errors over predictions."""
    table = {}
    for kind in ("seen", "unseen"):
        chosen = np.concatenate([row["seen"] if kind == "seen" else ~row["seen"] for row in rows])
        observed = np.concatenate([row["observed"] for row in rows])[chosen]
        table[kind] = {"predictions": int(chosen.sum())}
        for predictor in PREDICTORS:
            predicted = np.concatenate([row[predictor] for row in rows])[chosen]
            if not np.isnan(predicted).any():
                table[kind][predictor] = {metric: float(measure(predicted - observed).mean())
                                          for metric, measure in METRICS.items()}
    return table


def compared(rows_by_seed: list[list[dict]]) -> list[dict]:
    """Each comparison's paired differences of per-batch errors, pooled over seeds, with its 95% t interval."""
    out = []
    for kind, first, second in COMPARISONS:
        entry = {"kind": kind, "a": first, "b": second}
        for metric in METRICS:
            differences = np.concatenate([batch_errors(rows, kind, first, metric)
                                          - batch_errors(rows, kind, second, metric) for rows in rows_by_seed])
            mean, interval = paired_interval(differences)
            winner = first if interval[1] < 0 else second if interval[0] > 0 else None
            entry[metric] = {"batches": int(differences.size), "diff": mean, "ci95": interval, "lower_error": winner,
                             "differences": [round(float(d), 8) for d in differences]}
        out.append(entry)
    return out


def embedding_structure(stage: VIPStage, levels: list[int]) -> dict:
    """Whether the embeddings see the task's levels: nearest neighbours of the same level, beside chance, and the
    distances beside the kernel's length scale."""
    embeddings, levels = stage.embeddings, np.asarray(levels)
    distance = np.sqrt(np.maximum(2.0 - 2.0 * embeddings @ embeddings.T, 0.0))  # unit vectors
    np.fill_diagonal(distance, np.inf)
    nearest = distance.argmin(axis=1)
    shares = np.bincount(levels) / levels.size
    pairwise = distance[np.triu_indices_from(distance, k=1)]
    return {"prompts": int(levels.size), "dimensions": int(embeddings.shape[1]),
            "nearest_same_level": float((levels[nearest] == levels).mean()), "chance_same_level": float(
                (shares**2).sum()), "median_nearest_distance": float(np.median(distance.min(axis=1))),
            "median_pairwise_distance": float(np.median(pairwise)),
            "length_scale": stage.predictor_options["length_scale"]}


def levels_of(stage: VIPStage, trainer) -> list[int]:
    """Each embedded prompt's level, in the stage's order of keys."""
    from trl_budget.dynamic_sampling import training_rows
    from trl_budget.prompts import keys_of

    rows = list(training_rows(trainer))
    level_of = dict(zip(keys_of(rows, trainer.args.prompt_id_column), (row["level"] for row in rows)))
    return [level_of[key] for key in stage.keys]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    seeds, steps = ((0,), 40) if args.quick else ((0, 1, 2), 480)
    output = args.output or (Path(tempfile.gettempdir()) / "vip_prediction_error.json" if args.quick
                             else RESULTS / "vip_prediction_error.json")
    settings = RLSettings.for_steps(steps, evaluations=4) if args.quick else RLSettings()
    with multiprocessing.get_context("spawn").Pool(len(seeds)) as pool:  # the seeds side by side, one thread each
        by_seed = pool.starmap(seed_run, [(seed, settings) for seed in seeds])
    rows_by_seed, runs = [rows for rows, _, _ in by_seed], [run for _, _, run in by_seed]
    structure = by_seed[0][1]
    record = write_record(output, "benchmarks/prediction/vip_prediction_error.py", argv, machine=machine_record(),
                          settings={"rl": {name: getattr(settings, name) for name in (
                              "steps", "prompts_per_step", "num_generations", "train_prompts", "learning_rate",
                              "lr_scheduler_type", "temperature", "data_seed")}, "seeds": list(seeds),
                              "allocator": "uniform", "pass_rate_rule": release_pass_rate_rule("vip")},
                          runs=runs, embeddings=structure,
                          scores=scores([row for rows in rows_by_seed for row in rows]),
                          comparisons=compared(rows_by_seed))
    print(markdown_table(record))
    return record


def markdown_table(record) -> str:
    """The figures docs/vip.md states (tests/test_docs_figures.py checks them against the stored result)."""
    structure, scored = record["embeddings"], record["scores"]
    lines = [f"Embeddings ({structure['dimensions']} numbers a prompt): the nearest neighbour of "
             f"{structure['nearest_same_level']:.0%} of the {structure['prompts']} prompts has their level (chance: "
             f"{structure['chance_same_level']:.0%}); median distance to it {structure['median_nearest_distance']:.3f}"
             f", between any two {structure['median_pairwise_distance']:.3f} (length scale "
             f"{structure['length_scale']}).", "",
             "| prompts | predictions | " + " | ".join(PREDICTORS) + " |", "|---|---:|" + "---:|" * len(PREDICTORS)]
    for kind in ("seen", "unseen"):
        cells = [f"{scored[kind][name]['abs']:.3f} / {scored[kind][name]['squared']:.3f}" if name in scored[kind]
                 else "n/a" for name in PREDICTORS]
        lines.append(f"| {kind} | {scored[kind]['predictions']:,} | " + " | ".join(cells) + " |")
    lines += ["", "| prompts | A - B | absolute error: diff [95% CI] | squared error: diff [95% CI] | batches | "
              "lower error |", "|---|---|---:|---:|---:|---|"]
    for entry in record["comparisons"]:
        cells = [f"{entry[m]['diff']:+.4f} [{entry[m]['ci95'][0]:+.4f}, {entry[m]['ci95'][1]:+.4f}]" for m in METRICS]
        winners = {entry[m]["lower_error"] for m in METRICS}
        verdict = (winners.pop() or "neither") if len(winners) == 1 else " / ".join(
            f"{m}: {entry[m]['lower_error'] or 'neither'}" for m in METRICS)
        lines.append(f"| {entry['kind']} | {entry['a']} - {entry['b']} | {cells[0]} | {cells[1]} | "
                     f"{entry['abs']['batches']} | {verdict} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
