"""What a study script does when it is run, shared by the studies whose runs are trained two at a time and stored (the
fifth and sixth): train every run not yet stored (or only read them back), then write the summary and print it.
A study gives its own summary; this keeps the command line, the refusal of other code and the record alike."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trl_budget.demo.run_cache import refuse_other_code, study_arguments, study_runs
from trl_budget.demo.study_stats import answer_sentences


@dataclass(frozen=True)
class StudyScript:
    """A study's script: `name` names its runs, its summary file (`<name>_study.json`) and its command."""

    name: str
    doc: str  # the script's docstring: its command line's help
    results: Path
    study_code: str  # the digest of the package code its runs execute
    seeds: range
    job_order: Callable[[list[int]], list[tuple]]
    study_run: Callable[..., dict]
    preregistered: Callable[[list[int]], dict]
    markdown_table: Callable[[dict], str]

    @property
    def command(self) -> str:
        return f"OMP_NUM_THREADS=1 python benchmarks/{self.name}_study/{self.name}_study.py"


def stored_or_trained_runs(script: StudyScript, argv=None) -> tuple:
    """The command line's options, the seeds it runs and each job's result: trained where not stored, unless
    `--stored-only`; refused before any training when the package's code is not the study's."""
    args = study_arguments(script.doc, script.results, argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.quick and args.output_dir == script.results:
        raise SystemExit("--quick trains smoke runs, which do not belong in the study's results: give --output-dir.")
    if not (args.stored_only or args.quick):
        refuse_other_code(f"{script.name} study", script.study_code, f"benchmarks/{script.name}_study/"
                          f"{script.name}_study.py", f"{script.name}:regime/arm:seed")
    seeds = list(script.seeds)[:2] if args.quick else list(script.seeds)
    runs = {job: run["result"] for job, run in study_runs(script.job_order(seeds), script.study_run, args).items()}
    return args, seeds, runs


def write_summary(script: StudyScript, args, seeds: list[int], runs: dict, summary: dict, **more) -> None:
    """Record the pre-registration, the answer, the runs' count, `more`, the machines and the command with the
    study's figures; write them to `<name>_study.json` and print the table and the answer."""
    summary["preregistered"] = script.preregistered(seeds)
    summary["answer"] = answer_sentences(summary["primary"])
    summary["runs"] = len(runs)
    summary.update(more)
    summary["machines"] = [json.loads(entry) for entry in sorted({json.dumps(run["machine"], sort_keys=True)
                                                                  for run in runs.values()})]
    summary["command"] = script.command + (" --quick" if args.quick else "")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / f"{script.name}_study.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(script.markdown_table(summary))
    print("\n".join(summary["answer"]))
