"""The fifth study's post-hoc comparisons: not pre-registered, read after the registered ones, descriptive only.

    python benchmarks/fifth_study/post_hoc.py      # reads the stored runs, trains nothing

The defaults' rule (`defaults_rule.py`, committed after the runs it reads were stored and before the study's summary:
post hoc, see there) chose SPO; the trainer's default is SPO without a prior (`spo_offline_sampling` stays off), the
study's `spo-no-prior` arm, a choice made after the results because the registered `spo - spo-no-prior` found no gain
from the prior in any family at its 12 288 generated rollouts. The registered comparisons
do not pit that arm against the history baseline, the rule the defaults replace, nor SPO against uniform with twice
the rollouts; these do, per regime over the study's 20 paired seeds, with 95% t intervals and exact sign-flip p, no
correction for multiplicity (they are not tests of a hypothesis stated before the runs).

Writes benchmarks/fifth_study/results/post_hoc.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fifth_study  # noqa: E402

from trl_budget.demo.run_cache import study_runs  # noqa: E402
from trl_budget.demo.study_stats import compare_runs  # noqa: E402

COMPARISONS = (("spo-no-prior", "uniform-n8-history"), ("spo", "uniform-n16"), ("spo-no-prior", "uniform-n16"))


def stored_runs(labels: set[str]) -> dict:
    """The stored runs of `labels` in every regime and seed, keyed as the study keys them; a missing one is left out."""
    jobs = [(regime, label, seed) for regime in fifth_study.REGIMES for label in sorted(labels)
            for seed in fifth_study.SEEDS]
    stored_only = SimpleNamespace(stored_only=True, quick=False, output_dir=fifth_study.RESULTS)
    return {job: run["result"] for job, run in study_runs(jobs, fifth_study.study_run, stored_only).items()}


def main() -> dict:
    runs = stored_runs({label for pair in COMPARISONS for label in pair})
    seeds = list(fifth_study.SEEDS)
    summary = {
        "note": "post hoc, not pre-registered: descriptive, no correction for multiplicity",
        "comparisons": {regime: {f"{arm} - {reference}": compare_runs(runs, (regime, arm, reference), seeds)
                                 for arm, reference in COMPARISONS} for regime in fifth_study.REGIMES},
        "command": "python benchmarks/fifth_study/post_hoc.py",
    }
    (fifth_study.RESULTS / "post_hoc.json").write_text(json.dumps(summary, indent=2) + "\n")
    for regime, tests in summary["comparisons"].items():
        for name, test in tests.items():
            print(f"{regime}: {name}: {test['diff'] * 100:+.2f} [{test['ci95'][0] * 100:+.2f}, "
                  f"{test['ci95'][1] * 100:+.2f}], exact p {test['p']:.4f}, {test['seeds']} seeds")
    return summary


if __name__ == "__main__":
    main()
