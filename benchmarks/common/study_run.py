"""One run of a study's arm, read back from the study's run cache or trained and stored there: the fourth and fifth
studies run their arms alike, and one function keeps the key and the name their stored runs are found by the same."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from trl_budget.demo.run import run_rl, warm_start
from trl_budget.demo.run_cache import stored_or_trained
from trl_budget.demo.settings import RLSettings, WarmStartSettings
from trl_budget.demo.task import task_named


def stored_study_run(study: str, regime: str, label: str, seed: int, task_name: str, settings: RLSettings, arm: dict,
                     run_cache: Path, train: bool, run: Callable[..., dict] = run_rl) -> dict:
    """The `study`'s run of arm `label` (BudgetGRPOConfig settings `arm`, its budget allocator among them) in `regime`
    at `seed`: stored (or read back) under its task, warm start, settings, arm and seed; single-threaded, for a process
    pool. `run` trains it, with `run_rl`'s arguments: a study passes the function it names, so that replacing the
    study's `run_rl` (as its tests do) replaces what trains."""
    import torch

    torch.set_num_threads(1)
    warm, options = WarmStartSettings(), dict(arm)
    allocator = options.pop("budget_allocator")
    key = {"task": task_name, "warm_start": asdict(warm), "rl": asdict(settings), "arm": arm, "seed": seed}
    task = task_named(task_name)

    def train_it() -> dict:
        result = run(warm_start(warm, task=task), allocator, seed, settings, Path("study_runs") / regime / label,
                     show_progress=False, label=label, task=task, **options)
        return {k: v for k, v in result.items() if k != "histograms"}

    return stored_or_trained(run_cache, f"{study}-study-{regime}-{label}-{seed}", key, train, train_it)
