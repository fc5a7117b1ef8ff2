"""The sixth study: which factor carries SPO's gain (rollouts a prompt, the baseline, the prompt order), whether it
holds where prompts rarely come back, and whether a rule inside GRPO's contract matches it.

    OMP_NUM_THREADS=1 python benchmarks/sixth_study/sixth_study.py      # train every run not yet stored, summarise
    python benchmarks/sixth_study/sixth_study.py --stored-only          # summarise the stored runs, train nothing
    python benchmarks/sixth_study/sixth_study.py --quick --output-dir /tmp/s   # a smoke run

Pre-registered here, committed before any run of the study (the pilots, `pilot.py`, seeds 600-607, ran before; their
answers are in results/pilot.json and pilot_2.json and tied to this script by tests/test_sixth_study.py). Amended
once, still before any run, after an independent audit of the first version (ff4f37f): incomplete comparisons read
as no answer, a margin for "matches SPO", `spo - uniform-n8` tested, the visits rule on one layout, the fresh pool's
twins run once, and the one-rollout arm with the batch baseline added (`n1-batch`).

- Regimes (`STUDY_REGIMES`, settings in `arms.CANDIDATE_REGIMES`), each the fifth study's batch shape
  (`RLSettings.study(960)`: 512 rollouts and 8 optimizer updates a generation batch, 960 updates, a constant learning
  rate of 1e-4 after 16 warm-up steps, float32, one thread, the shipped warm starts):
  - `sorting-revisited`: the fifth study's sorting regime (10 and 12 digits) and pool of 1 500 training problems. A
    prompt comes back about 41 times a run under one rollout a prompt, 20 under two, 5 under eight. Its room gate
    passed in the fifth study (+1.24 [+0.85, +1.63] points, 20 seeds).
  - `sorting-fresh`: the same at a pool of 30 720. A prompt comes back about twice under one rollout a prompt (SPO's
    weights draw with replacement), never under two (120 batches of 256 prompts: one pass), and uniform n = 8 sees a
    quarter of the pool once. Room gate: the pilot's (+1.17 [+0.17, +2.16], four seeds).
  - `brackets-revisited`: the fifth study's brackets regime (16, 20 and 24 brackets) and pool of 1 500; room gate +1.43
    [+0.93, +1.93] points there (20 seeds).
  No fresh regime of the brackets family passed its room gate: at 16 to 24 brackets uniform n = 16 gained +1.31
  [-0.67, +3.29] points over n = 8 (the pilot), at 20 and 24 brackets +1.71 [-0.73, +4.15] (pilot 2), each on four
  seeds. So the issue's two families at two pool sizes are not both met: sorting is run at both pools, brackets at the
  revisited one, and the pool-size interaction is sorting's alone.
- Metric: greedy exact-match accuracy on 1 000 held-out problems, the mean of the evaluations at updates 840, 900 and
  960; beside it the learning curve's area, reported, not tested.
- Arms (`arms.ARMS`, every setting written out), each at 512 rollouts generated a batch and 960 updates; a factor
  changes at a time:
  - rollouts a prompt: 8 (64 prompts a batch), 2 (256), 1 (512, SPO's layout: `n1-batch` and the SPO arms);
  - the baseline: GRPO's group (`group`), the batch's mean reward scaled by the batch's deviation (`batch`), the
    history baseline (`history`: the prompt's tracked rewards with this batch's, window 16, the group on a first
    visit), earlier visits else the batch (`earlier-or-batch`: the prompt's mean reward from earlier visits, window
    16, on a first visit the batch's mean, advantages scaled over the batch; `advantage_baseline="earlier_or_batch"`),
    SPO's Beta estimate;
  - the prompt order: TRL's sampler, or SPO's weights over the whole pool.
  The arms: `uniform-n8` (the reference), `uniform-n8-history`, `uniform-n8-batch`, `uniform-n8-earlier-or-batch`,
  `n2-group`, `n2-history`, `n2-batch`, `n2-earlier-or-batch` (the contract-keeping candidate, `BEST`), `n1-batch`
  (SPO's layout in TRL's sampler order with the batch baseline: one rollout a prompt without SPO's tracker), `spo` (SPO as
  the project runs it without a prior: KL-adaptive rho), `spo-trl-order` (SPO's layout and baseline in TRL's sampler
  order: `prompt_sampling_pool` = the batch's 512 prompts), `spo-constant-rho` (rho = 0.875), `vip` (VIP as released:
  its SLSQP solver, its fit, bounds 2 to 32, GRPO's objective, over 64 prompts a batch).
- `BEST`, the project's best rule inside GRPO's contract, is `n2-earlier-or-batch`: the candidate a pilot outside the
  project pointed to, built as a first-class setting; this project's pilot measured it (results/pilot.json) but did
  not choose among candidates, so it was not designed from a pilot of this project, as issue 56 asks. It keeps the contract: the user's `num_generations` (2) and batch sizes are read as TRL
  reads them, any reward scale trains, TRL's metrics keep their meaning.
- Seeds: `SEEDS`, 610-629, paired within a regime (the same seed in every arm and regime); fresh: no earlier study or
  pilot used them. Their count is the pilot's pre-registered sizing (`sizing.study_seeds` in results/pilot.json): the
  largest paired SD, 1.77 points (`n2-earlier-or-batch - uniform-n8` in the brackets fresh regime), needs more than
  20 seeds for an MDE of 1 point, so the cap of 20 holds, with an MDE of 1.56 points there.
- Primary comparisons, one family of six, Holm-corrected (exact two-sided sign-flip p at 0.05), with 95% t
  intervals and intervals at the Bonferroni level: per regime `BEST - spo` and `BEST - uniform-n8`. A comparison not
  paired on every seed keeps its place at p = 1. The MDE at 80% power at Holm's first level (0.05 / 6), for a paired
  t test, from the pilot's paired SDs (`mde80`), is reported beside each, with the observed SD's. What the pilot saw, four seeds at the
  fresh pools (results/pilot.json; the study tests figures partly seen, on fresh seeds): `spo - uniform-n8` +2.34
  [+0.83, +3.86] points in sorting and +6.28 [+3.78, +8.77] in brackets; `n2-earlier-or-batch - uniform-n8` +1.31
  [-0.91, +3.53] and +3.82 [+1.00, +6.65]. (The pilot sized the seeds at Holm's level for eight primaries, 0.05 / 8,
  before the brackets fresh regime fell out: the six here are tested at 0.05 / 6 and their MDEs are a little smaller.
  The revisited regimes' SDs are the fresh pool's, measured on four seeds: the fifth study's SDs of SPO against the
  history baseline there were 0.70 to 0.83 point on 20 seeds, above the 0.59 used for `BEST - spo`, so those MDEs may
  be optimistic; the MDE is a paired t test's, the test a sign-flip one.)
- Secondary comparisons (`SECONDARY_PAIRS`), one Holm family per regime, each changing one factor: the layout at each
  baseline (n = 2 against n = 8: group, history, batch, earlier-or-batch; n = 1 against n = 2: batch), the baseline at
  each layout (history, batch against group at n = 8 and n = 2; earlier-or-batch against history at both, against
  the batch at n = 2; SPO's tracker against the batch at n = 1, `spo-trl-order - n1-batch`), the prompt order under
  SPO's layout and baseline (`spo - spo-trl-order`), `spo - uniform-n8` (the fifth study's primary again, read by the
  recommendation), rho (`spo-constant-rho - spo`) and VIP (`vip - uniform-n8`).
- At the fresh pool no prompt comes back under 8 or 2 rollouts a prompt (TRL's sampler deals each once a pass), so
  there the history baseline is GRPO's group and earlier-or-batch is the batch baseline, by construction
  (`FRESH_TWINS`): `uniform-n8-history`, `n2-history`, `uniform-n8-earlier-or-batch` and `n2-batch` are run on the
  first seed only, a check that each trains what its twin trains (`fresh_twins_check`, reported), and their twins
  stand for them in that regime's comparisons (a comparison of an arm with itself, or a repeat, is left out of its
  family: ten secondaries there, seventeen in each revisited regime).
- The pool-size interaction (descriptive, 95% t intervals, not tested, though issue 56 lists it among the
  secondaries): per family run at both pools (sorting) and
  seed, a comparison's difference at the revisited pool minus at the fresh one, for `BEST - spo`, `BEST - uniform-n8`, `spo - uniform-n8` and
  `spo - spo-trl-order`.
- Cost, counted in full per arm: generated rollouts per batch (512 in every arm, no prior) and in all, trained rollouts
  and completion tokens per batch after the first 23 batches, optimizer updates, KL-adaptive rho's extra forward rows,
  visits per training prompt (mean, 10th and 90th percentiles, share never drawn), the share of trained rollouts with
  a non-zero advantage, the share of prompts with a gradient, the policy's entropy, seconds a run (two at once; not a
  cost figure). Measured after the study's last run, never beside it, and written to their own results: the trainer's
  time a batch side by side (`benchmarks/overhead/`: every arm's bookkeeping, rho's passes, VIP's solver and fit) and
  the engine time of the three layouts (64 x 8, 256 x 2, 512 x 1; `benchmarks/fifth_study/engine_time.py` measured
  the first and last).
- The rules that read the results (`recommendation`, `default_baseline`), committed here with the arms:
  - Per regime (`family_answer`), from its primaries and `spo - uniform-n8`: SPO is recommended by name (it changes
    the layout, the order and what an epoch means) when `BEST - spo` is significant and negative and `spo -
    uniform-n8` significant and positive; otherwise the candidate (`num_generations=2`,
    `advantage_baseline="earlier_or_batch"`, the batch's prompts four times uniform's) when `BEST - uniform-n8` is
    significant and positive, as matching SPO ("candidate") when the Bonferroni interval of `BEST - spo` lies above
    -1 point (`MARGIN`), else as short of it ("candidate-short-of-spo"); otherwise none over GRPO's. A comparison not
    complete on every seed gives "incomplete", never an answer. A pool kind's answer is the one its regimes share
    (the fresh kind has one regime: sorting's, stated as one family's); where they differ, each is stated and none is
    the kind's.
  - Where a user's run falls: v = the rollouts the run generates / (2 x its training rows), the visits a prompt gets
    under two rollouts a prompt whatever layout the user runs (20.48 at the revisited pool, 1 at the fresh one).
    v >= 10 reads the revisited answer, v <= 1 the fresh one; between them nothing was measured, and the answer says
    so. The reward kind measured is a binary verifiable reward (exact match); other kinds are not measured.
  - The trainer's default baseline (`advantage_baseline` unset, uniform allocation; now the history baseline) becomes
    `earlier_or_batch` only if in every regime neither `uniform-n8-earlier-or-batch - uniform-n8-history` nor
    `n2-earlier-or-batch - n2-history` is significant and negative, and one of them is significant and positive in at
    least two regimes, one of each pool kind; it becomes GRPO's group when `uniform-n8-history - uniform-n8` is
    significant and negative in some regime and `earlier_or_batch` does not qualify; otherwise it stays; "incomplete"
    while any of those comparisons is. At the fresh pool the contrasts read are their twins' (the batch against the
    group at n = 8 and n = 2; the history's against the group is no comparison there). A default never changes
    `num_generations` or the batch sizes: the layout is the user's.

Not in this study, and stated as gaps against issue 56: a second fresh family (brackets failed both fresh gates), the
pool-size interaction as a tested secondary, a candidate designed from this project's pilot, reward kinds other than
binary ones; the trainer's and the engine's time are measured after the last run, as above.

Runs are trained the primaries' arms first (`uniform-n8`, `spo`, `BEST` over every seed and regime), then the other
arms seed by seed (704 runs in all); each finished run is stored under its settings, seed and the package's code (results/run_cache).
The code the runs execute is frozen: `STUDY_CODE` is its digest, training refuses other code, and the summary lists
every stored run trained by another. Writes results/sixth_study.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from trl_budget.demo.run import run_rl
from trl_budget.demo.study_stats import (comparison_name, minimal_detectable_effect,
                                         paired_interval, study_metric)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[0] / "common"))
from arms import ARMS, CANDIDATE_REGIMES, FRESH_POOL, REVISITED_POOL, arm_settings  # noqa: E402
from study_command import StudyScript, stored_or_trained_runs, write_summary  # noqa: E402
from study_figures import arm_rows, arms_table, tested_primaries, tested_secondaries  # noqa: E402
from study_run import stored_study_run  # noqa: E402

RESULTS = HERE / "results"
PILOT, PILOT_2 = RESULTS / "pilot.json", RESULTS / "pilot_2.json"  # pilot 2: no regime passed
FIFTH_RESULTS = HERE.parents[0] / "fifth_study" / "results"
STUDY_REGIMES = ("sorting-revisited", "brackets-revisited", "sorting-fresh")
REGIMES = {name: CANDIDATE_REGIMES[name] for name in STUDY_REGIMES}
SEEDS = range(610, 630)
# The digest of the package code every run of the study executes (`run_cache.code_digest`); training refuses other code.
STUDY_CODE = "4348c103d360f8b7"
SKIP = 23  # generation batches left out of the per-batch costs: the revisited pools' first epoch under uniform n = 8
BASELINE, BEST, SPO = "uniform-n8", "n2-earlier-or-batch", "spo"
STUDY_ARMS = [label for label in ARMS if label != "uniform-n16"]
REVISITED = tuple(regime for regime in STUDY_REGIMES if CANDIDATE_REGIMES[regime][3] == REVISITED_POOL)
FRESH = tuple(regime for regime in STUDY_REGIMES if CANDIDATE_REGIMES[regime][3] == FRESH_POOL)
FAMILIES = {CANDIDATE_REGIMES[revisited][0]: (revisited, fresh) for revisited in REVISITED for fresh in FRESH
            if CANDIDATE_REGIMES[revisited][:3] == CANDIDATE_REGIMES[fresh][:3]}  # one task, levels and rate
PRIMARY = [(regime, BEST, SPO) for regime in REGIMES] + [(regime, BEST, BASELINE) for regime in REGIMES]
HOLM_FIRST_LEVEL = 0.05 / len(PRIMARY)
SECONDARY_PAIRS = [
    # rollouts a prompt at each baseline
    ("n2-group", "uniform-n8"), ("n2-history", "uniform-n8-history"), ("n2-batch", "uniform-n8-batch"),
    ("n2-earlier-or-batch", "uniform-n8-earlier-or-batch"), ("n1-batch", "n2-batch"),
    # the baseline at each layout
    ("uniform-n8-history", "uniform-n8"), ("uniform-n8-batch", "uniform-n8"),
    ("uniform-n8-earlier-or-batch", "uniform-n8-history"), ("n2-history", "n2-group"), ("n2-batch", "n2-group"),
    ("n2-earlier-or-batch", "n2-history"), ("n2-earlier-or-batch", "n2-batch"), ("spo-trl-order", "n1-batch"),
    # the prompt order under SPO's layout and baseline; SPO against uniform (read by the recommendation)
    ("spo", "spo-trl-order"), ("spo", "uniform-n8"),
    # rho; VIP
    ("spo-constant-rho", "spo"), ("vip", "uniform-n8"),
]
# At the fresh pool no prompt comes back under 8 or 2 rollouts a prompt (TRL's sampler deals each once a pass), so
# there the history baseline is the group's and earlier-or-batch is the batch's, by construction. Each such arm runs
# on the first seed only, a check that it trains what its twin trains, and its twin stands for it in the comparisons.
FRESH_TWINS = {"uniform-n8-history": "uniform-n8", "n2-history": "n2-group",
               "uniform-n8-earlier-or-batch": "uniform-n8-batch", "n2-batch": "n2-earlier-or-batch"}


def stands_for(regime: str, arm: str) -> str:
    return FRESH_TWINS.get(arm, arm) if regime in FRESH else arm


def secondary_pairs(regime: str) -> list[tuple[str, str]]:
    """The secondaries in `regime`, twins substituted; a comparison of an arm with itself, or a repeat, left out."""
    pairs = []
    for arm, reference in SECONDARY_PAIRS:
        pair = (stands_for(regime, arm), stands_for(regime, reference))
        if pair[0] != pair[1] and pair not in pairs:
            pairs.append(pair)
    return pairs


SECONDARY = {regime: [(regime, arm, reference) for arm, reference in secondary_pairs(regime)] for regime in REGIMES}
INTERACTION_PAIRS = [(BEST, SPO), (BEST, BASELINE), (SPO, BASELINE), (SPO, "spo-trl-order")]
METRIC = "greedy held-out accuracy, mean of the last three evaluations"
# The layout a recommendation gives, as a user writes it; and the defaults each outcome of `default_baseline` sets.
CANDIDATE_SETTINGS = {"num_generations": 2, "advantage_baseline": "earlier_or_batch"}
# Where a user's run falls: v = the rollouts a run generates / (2 x its training rows), the visits a prompt gets under
# two rollouts a prompt whatever layout the user runs (20.48 at the revisited pool, 1 at the fresh one).
VISITS = {"revisited": 10.0, "fresh": 1.0}  # v at least / at most
MARGIN = 0.01  # the candidate matches SPO where its Bonferroni interval against SPO lies above -1 point


def pilot() -> dict:
    return json.loads(PILOT.read_text())


def mde80(comparison: tuple[str, str, str], paired_sd: float | None = None) -> float:
    """The MDE at 80% power at Holm's first level, from the pilot's paired SD of the comparison in its regime."""
    regime, arm, reference = comparison
    sd = pilot()["sizing"]["paired_sd"][regime][f"{arm} - {reference}"] if paired_sd is None else paired_sd
    return minimal_detectable_effect(sd, len(SEEDS), alpha=HOLM_FIRST_LEVEL)


def study_run(regime: str, label: str, seed: int, quick: bool, run_cache: Path, train: bool = True) -> dict:
    """One run, stored (or read back) under its settings and seed; single-threaded, for a process pool."""
    return stored_study_run("sixth", regime, label, seed, REGIMES[regime][0], arm_settings(regime, label, quick),
                            ARMS[label][1], run_cache, train, run_rl)


def job_order(seeds) -> list[tuple[str, str, int]]:
    """The primaries' arms over every seed and regime first, then the other arms seed by seed."""
    first = (BASELINE, SPO, BEST)
    primaries = [(regime, arm, seed) for seed in seeds for regime in REGIMES for arm in first]
    others = [(regime, arm, seed) for seed in seeds for regime in REGIMES for arm in STUDY_ARMS
              if arm not in first and (stands_for(regime, arm) == arm or seed == seeds[0])]
    return primaries + others


# ------------------------------------------------------------------------------------------------------ the figures


def interaction(runs: dict, seeds: list[int]) -> dict:
    """Per family and seed: a comparison's difference at the revisited pool minus at the fresh one."""
    result = {}
    for family, (revisited, fresh) in FAMILIES.items():
        for arm, reference in INTERACTION_PAIRS:
            jobs = [(regime, label) for regime in (revisited, fresh) for label in (arm, reference)]
            have = [s for s in seeds if all((regime, label, s) in runs for regime, label in jobs)]
            values = np.array([(study_metric(runs[revisited, arm, s]) - study_metric(runs[revisited, reference, s]))
                               - (study_metric(runs[fresh, arm, s]) - study_metric(runs[fresh, reference, s]))
                               for s in have])
            row = {"seeds": len(have)}
            if len(have) > 1:
                mean, interval = paired_interval(values)
                row.update(diff=mean, ci95=interval, differences=values.tolist())
            result[f"{family}: ({arm} - {reference}) revisited - fresh"] = row
    return result


def summarize(runs: dict, seeds: list[int], skip: int = SKIP) -> dict:
    """The study's figures from its stored `runs`, keyed by (regime, arm, seed)."""
    room_gates = {regime: room_gate(regime) for regime in REGIMES}
    summary = {"primary": tested_primaries(runs, PRIMARY, seeds, mde80, room_gates),
               "secondary": tested_secondaries(runs, SECONDARY, seeds), "interaction": interaction(runs, seeds),
               "room_gates": room_gates,
               "arms": arm_rows(runs, seeds, skip, REGIMES, STUDY_ARMS, BASELINE),
               "runs_with_other_code": sorted(f"{regime} {label} {seed}: {run['machine']['code']}"
                                              for (regime, label, seed), run in runs.items()
                                              if run["machine"]["code"] != STUDY_CODE)}
    summary["fresh_twins_check"] = fresh_twins_check(runs, seeds)
    summary["recommendation"] = recommendation(summary)
    summary["default_baseline"] = default_baseline(summary)
    return summary


def room_gate(regime: str) -> dict:
    """The regime's room gate, on uniform alone (`uniform-n16 - uniform-n8`): a fresh pool's from this study's pilot,
    a revisited one's from the fifth study, whose regime it is."""
    if regime in FRESH:
        gate = pilot()["gates"][regime]
        return {"source": "benchmarks/sixth_study/results/pilot.json", "diff": gate["room"]["diff"],
                "ci95": gate["room"]["ci95"], "seeds": gate["room"]["seeds"], "passes": gate["passed"]}
    fifth = json.loads((FIFTH_RESULTS / "fifth_study.json").read_text())
    gate = fifth["room_gates"][regime.split("-")[0]]
    return {"source": "benchmarks/fifth_study/results/fifth_study.json", "diff": gate["diff"], "ci95": gate["ci95"],
            "seeds": fifth["arms"][regime.split("-")[0]]["uniform-n16"]["seeds"], "passes": gate["passes"]}


# ----------------------------------------------------------------------------------- the rules that read the results


def verdict(test: dict) -> int | None:
    """+1: significantly ahead after Holm; -1: significantly behind; 0: neither; None: not complete (not tested)."""
    if "holm" not in test or test.get("unfinished"):
        return None
    if not test["holm"]["significant"]:
        return 0
    return 1 if test["diff"] > 0 else -1


def family_answer(summary: dict, regime: str) -> str:
    """One regime's answer from its primaries and `spo - uniform-n8`: 'spo' (behind SPO, SPO ahead of uniform),
    'candidate' (ahead of uniform, within `MARGIN` of SPO), 'candidate-short-of-spo' (ahead of uniform, not shown
    within it), 'none', or 'incomplete'."""
    over_spo = summary["primary"][comparison_name((regime, BEST, SPO))]
    over_uniform = verdict(summary["primary"][comparison_name((regime, BEST, BASELINE))])
    spo_over_uniform = verdict(summary["secondary"][regime][comparison_name((regime, SPO, BASELINE))])
    if None in (verdict(over_spo), over_uniform, spo_over_uniform):
        return "incomplete"
    if verdict(over_spo) < 0 and spo_over_uniform > 0:
        return "spo"
    if over_uniform > 0:
        return "candidate" if over_spo["holm"]["ci_bonferroni"][0] > -MARGIN else "candidate-short-of-spo"
    return "none"


def recommendation(summary: dict) -> dict:
    """Per pool kind: each regime's answer and the kind's (the answer its regimes share, else None), and where a
    user's run falls."""
    result = {}
    for kind, regimes in (("revisited", REVISITED), ("fresh", FRESH)):
        answers = {regime: family_answer(summary, regime) for regime in regimes}
        shared = set(answers.values())
        result[kind] = {"by_regime": answers, "answer": shared.pop() if len(shared) == 1 else None,
                        "applies_when": (f"v >= {VISITS[kind]:g}" if kind == "revisited" else f"v <= {VISITS[kind]:g}")}
    result["candidate_settings"] = CANDIDATE_SETTINGS
    result["visits"] = "v = the rollouts a run generates / (2 x its training rows)"
    result["between"] = f"for v between {VISITS['fresh']:g} and {VISITS['revisited']:g} nothing was measured"
    result["reward_kind"] = "binary verifiable rewards (exact match); other reward kinds were not measured"
    return result


def default_baseline(summary: dict) -> str:
    """The trainer's default baseline under uniform allocation the results give: 'earlier_or_batch', 'group',
    'history' (unchanged), or 'incomplete'. At the fresh pool the contrasts read are their twins' (batch - group)."""
    def verdicts(pairs) -> dict[str, list]:
        found = {}
        for regime in REGIMES:
            for arm, reference in pairs:
                pair = (stands_for(regime, arm), stands_for(regime, reference))
                if pair[0] != pair[1]:
                    test = summary["secondary"][regime][comparison_name((regime, *pair))]
                    found.setdefault(regime, []).append(verdict(test))
        return found

    candidate = verdicts((("uniform-n8-earlier-or-batch", "uniform-n8-history"), ("n2-earlier-or-batch", "n2-history")))
    history = verdicts((("uniform-n8-history", BASELINE),))
    if any(None in found for found in (*candidate.values(), *history.values())):
        return "incomplete"
    never_behind = all(-1 not in found for found in candidate.values())
    ahead = {regime for regime, found in candidate.items() if 1 in found}
    if never_behind and ahead & set(REVISITED) and ahead & set(FRESH):
        return "earlier_or_batch"
    return "group" if any(-1 in found for found in history.values()) else "history"


def fresh_twins_check(runs: dict, seeds: list[int]) -> dict:
    """Each fresh-pool arm that stands for its twin by construction, against it on the first seed."""
    seed, checks = seeds[0], {}
    for regime in FRESH:
        for arm, twin in FRESH_TWINS.items():
            if (regime, arm, seed) in runs and (regime, twin, seed) in runs:
                mine, theirs = study_metric(runs[regime, arm, seed]), study_metric(runs[regime, twin, seed])
                checks[f"{regime}: {arm} = {twin}"] = {"seed": seed, "metric": mine, "twin_metric": theirs,
                                                       "difference": mine - theirs}
    return checks


def markdown_table(summary: dict) -> str:
    return arms_table(summary, ["seeds", "metric", "minus uniform-n8 (95% CI)", "curve area", "trained tokens",
                                 "visits", "non-zero advantage", "entropy", "seconds"])


def preregistered(seeds: list[int]) -> dict:
    return {"seeds": [seeds[0], seeds[-1]], "regimes": REGIMES,
            "arms": {label: {"rollouts_a_prompt": ARMS[label][0], "settings": ARMS[label][1]} for label in STUDY_ARMS},
            "best": BEST, "primary": [comparison_name(c) for c in PRIMARY],
            "secondary": {regime: [comparison_name(c) for c in cs] for regime, cs in SECONDARY.items()},
            "mde80": {comparison_name(c): mde80(c) for c in PRIMARY}, "holm_first_level": HOLM_FIRST_LEVEL,
            "metric": METRIC, "study_code": STUDY_CODE}


def main(argv=None) -> dict:
    study = StudyScript("sixth", __doc__, RESULTS, STUDY_CODE, SEEDS, job_order, study_run, preregistered,
                        markdown_table)
    args, seeds, runs = stored_or_trained_runs(study, argv)
    summary = summarize(runs, seeds, 1 if args.quick else SKIP)  # a quick run has two batches
    write_summary(study, args, seeds, runs, summary, runs_registered=len(job_order(seeds)))
    print(f"stored runs: {summary['runs']} of the {summary['runs_registered']} registered")
    print(json.dumps({"recommendation": summary["recommendation"], "default_baseline": summary["default_baseline"]},
                     indent=1))
    return summary


if __name__ == "__main__":
    main()
