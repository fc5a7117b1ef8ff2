"""Each run's result stored under a key of everything that decides it, so that a study stopped half-way resumes.

The key covers the run's settings (warm start, RL settings, variant options, seed) and the source code of this
package that a run executes: a changed setting or a changed line of it makes a new run, while a finished run with the
same key is read back instead of trained again. A study's summary reads its runs back by their settings alone
(`stored_run`), whatever changed in the code since they trained. Results are written atomically (a stopped run leaves
no partial file).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checkpoint import write_json_atomically

PACKAGE = Path(__file__).resolve().parents[1]


# Modules a study's run never executes: what prints and draws results, the statistics over runs, the command line and
# the demo's runner of paired seeds, the warm start's builder (a run loads the shipped warm start, whose weights'
# digest is checked), and this module.
NOT_RUN = ("cli.py", "__main__.py", "demo/report.py", "demo/study_stats.py", "demo/build_warm_start.py",
           "demo/paired.py", "demo/run_cache.py")


def code_digest() -> str:
    """A digest of the Python source files of `trl_budget` that a run executes (paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in NOT_RUN:
            continue
        digest.update(relative.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def run_key(settings: dict[str, Any]) -> str:
    """The key of a run: its settings and the code that runs them."""
    text = json.dumps({"settings": settings, "code": code_digest()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_run(folder: Path, name: str, settings: dict[str, Any], compute: Callable[[], dict]) -> tuple[dict, bool]:
    """The stored result of the run with these settings, or `compute()`'s, stored; and whether it was stored before."""
    path = Path(folder) / f"{name}-{run_key(settings)}.json"
    if path.exists():
        return json.loads(path.read_text()), True
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, {"settings": settings, "result": result})
    return {"settings": settings, "result": result}, False


class NotStored(Exception):
    """A study's run asked for with training off, and not in the run cache."""


def stored_run(folder: Path, name: str, settings: dict[str, Any]) -> dict | None:
    """The stored run of `name` with these settings, trained by the current code or by an earlier one (a study's
    figures are recomputed from the runs it trained, whatever changed in the package since); None if there is none.

    Raises:
        ValueError: several stored runs match (trained by different code), so the study's run is ambiguous.
    """
    current = Path(folder) / f"{name}-{run_key(settings)}.json"
    if current.exists():
        return json.loads(current.read_text())
    matches = [stored for path in sorted(Path(folder).glob(f"{name}-*.json"))
               if (stored := json.loads(path.read_text()))["settings"] == json.loads(json.dumps(settings, default=str))]
    if len(matches) > 1:
        raise ValueError(f"{len(matches)} stored runs of {name} in {folder} have these settings (trained by different "
                         "code); keep the one the study used and remove the others.")
    return matches[0] if matches else None


def study_arguments(description: str, results: Path, argv=None):
    """The command line every study script takes: --stored-only, --quick, --processes, --output-dir."""
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stored-only", action="store_true", help="summarise the stored runs; train nothing")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 seeds, 16 updates, a small pool")
    parser.add_argument("--processes", type=int, default=2, help="runs trained at once (default: 2)")
    parser.add_argument("--output-dir", type=Path, default=results, help=f"default: {results}")
    return parser.parse_args(argv)


def study_runs(jobs: list[tuple], study_run: Callable, options) -> dict:
    """Each job's stored result: `study_run(*job, quick, run_cache, train=...)` for every job, trained where not stored
    (`options.processes` at a time), or only read back with `--stored-only` (a job not stored is left out)."""
    run_cache = options.output_dir / "run_cache"
    if options.stored_only:
        stored = {}
        for job in jobs:
            try:
                stored[job] = study_run(*job, options.quick, run_cache, train=False)
            except NotStored:
                pass
        return stored
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(options.processes) as pool:
        return dict(zip(jobs, pool.map(study_run, *zip(*jobs), [options.quick] * len(jobs),
                                       [run_cache] * len(jobs))))


def stored_or_trained(run_cache: Path, name: str, key: dict[str, Any], train: bool,
                      train_it: Callable[[], dict]) -> dict:
    """A study's run: read back when stored (by the current code, or by an earlier one whose runs this code re-trains
    bit for bit), else trained by `train_it` and stored; with `train` off, `NotStored` when there is none."""
    stored = stored_run(run_cache, name, key)
    if stored is not None:
        return stored
    if not train:
        raise NotStored(name)
    return cached_run(run_cache, name, key, train_it)[0]


def refuse_other_code(study: str, study_code: str, script: str, retrain_example: str) -> None:
    """Stop before any run when the package's code is not the code of `study`'s runs: a study's arms run one code."""
    if code_digest() != study_code:
        raise SystemExit(
            f"The package's code (digest {code_digest()}) is not the code of the {study}'s runs (STUDY_CODE = "
            f"{study_code}). Train the remaining runs from the study's commit (git worktree add <folder> <commit>; "
            f"PYTHONPATH=<folder> python <folder>/{script}); or show that two stored runs of each arm re-train bit for "
            f"bit (benchmarks/common/retrain_stored.py {retrain_example}) and set STUDY_CODE to this digest; or "
            "summarise with --stored-only.")
