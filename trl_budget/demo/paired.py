"""The demo's paired seeds: every seed trains the compared run and uniform GRPO from the same warm start.

Each run trains on one thread, so a seed's figures are the same however many runs train at once (a run's floats
depend on its thread count); several train at once in processes of their own, started fresh (`spawn`: a process
forked from one that has run torch's thread pool can hang).
"""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from .settings import RLSettings

RUN_THREADS = 1

# The demo's runs go through transformers' checkpointing switches, which its v5 renamed: the renames' FutureWarnings
# (six lines a run) say nothing about the demo and bury its table. Any other warning still shows.
CHECKPOINTING_RENAMES = r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated"


@dataclass(frozen=True)
class DemoRun:
    """One run of the demo: its label (the arm), allocator, seed, RL settings and further BudgetGRPOConfig settings."""

    label: str
    allocator: str
    seed: int
    settings: RLSettings
    options: dict = field(default_factory=dict)


def paired_runs(arms: list[tuple[str, str, RLSettings, dict]], seeds: list[int]) -> list[DemoRun]:
    """Every arm `(label, allocator, settings, options)` on every seed, seed by seed, so that pairs finish together."""
    return [DemoRun(label, allocator, seed, settings, options)
            for seed in seeds for label, allocator, settings, options in arms]


def train_run(model_path: Path, run: DemoRun, output_dir: Path) -> dict:
    """Train one run on `RUN_THREADS` threads (the caller's thread count restored after)."""
    import torch

    from .run import run_rl

    warnings.filterwarnings("ignore", message=CHECKPOINTING_RENAMES, category=FutureWarning)
    threads = torch.get_num_threads()
    torch.set_num_threads(RUN_THREADS)
    try:
        return run_rl(model_path, run.allocator, run.seed, run.settings,
                      Path(output_dir) / f"run-{run.label}-seed{run.seed}", show_progress=False, label=run.label,
                      **run.options)
    finally:
        torch.set_num_threads(threads)


def train_runs(model_path: Path, runs: list[DemoRun], output_dir: Path, processes: int,
               done: Callable[[dict], None] = lambda result: None) -> list[dict]:
    """Each run's result, in the order of `runs`, trained `processes` at a time (1: in this process); `done` is
    called with each result as it finishes. A run that fails stops the others: its error is raised."""
    if processes == 1:
        results = []
        for run in runs:
            results.append(train_run(model_path, run, output_dir))
            done(results[-1])
        return results
    pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(train_run, model_path, run, output_dir): index for index, run in enumerate(runs)}
        results: list[dict | None] = [None] * len(runs)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done(results[futures[future]])
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown()
    return results


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop the runs still training, and drop those not started: the demo stops on the first failure or Ctrl-C."""
    workers = list((pool._processes or {}).values())  # no public way to stop them before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
