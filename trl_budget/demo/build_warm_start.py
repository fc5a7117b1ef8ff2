"""Build the warm start that ships with the package, and record what it is.

    python -m trl_budget.demo.build_warm_start                  # arithmetic: trl_budget/demo/warm_start/
    python -m trl_budget.demo.build_warm_start --task sorting   # trl_budget/demo/warm_start_sorting/
    python -m trl_budget.demo.build_warm_start --task equations # trl_budget/demo/warm_start_equations/
    python -m trl_budget.demo.build_warm_start --task brackets  # trl_budget/demo/warm_start_brackets/

Trains the tiny model with the default `WarmStartSettings` (as `warm_start(rebuild=True)` does), copies it into the
task's shipped folder, and writes `warm_start.json` there: the settings' fingerprint, the weights' SHA-256 (a shipped
model that does not match it is refused), and its greedy held-out accuracy on held-out problems of every level (for
arithmetic the allocation study's), overall and per level (a test checks the shipped model still scores exactly that).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from .run import SHIPPED_RECORD, answer_outcomes, exact_match_accuracy, shipped_folder, warm_start
from .settings import RLSettings, WarmStartSettings
from .task import ARITHMETIC, Task, split_problems, task_named

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json")


def held_out_problems(task: Task) -> list[dict]:
    """The problems a shipped warm start is scored on: the allocation study's held-out set for arithmetic, 600 of
    every level but the first (whose few distinct problems the training pool holds) for the others."""
    if task == ARITHMETIC:
        settings = RLSettings.pool()
        return split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed, settings.levels)[1]
    levels = tuple(range(1, len(task.levels)))
    return split_problems(0, 100 * len(levels), 0, levels, task)[1]


def greedy_held_out_accuracy(model_path: Path, task: Task = ARITHMETIC) -> dict[str, float]:
    """Greedy exact-match accuracy on `held_out_problems(task)`, overall and per level."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(model_path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    return exact_match_accuracy(model, tokenizer, held_out_problems(task), task=task)


def describe_by_level(task: Task, levels: tuple[int, ...], samples: int = 8) -> dict[int, dict]:
    """The shipped warm start on 200 held-out problems of each of `levels`: greedy accuracy, the sampled pass rate at
    temperature 1, and the shares of prompts whose `samples` sampled answers all agree, all fail or all pass (the
    waste uniform GRPO with `samples` rollouts meets on a first visit). `size` is the level's digits or brackets."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    path = warm_start(WarmStartSettings(), task=task)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), PreTrainedTokenizerFast.from_pretrained(path)
    rows = {}
    for level in levels:
        problems = split_problems(0, 200, 1, (level,), task)[1]
        greedy = answer_outcomes(model, tokenizer, problems, task=task)[:, 0]
        sampled = answer_outcomes(model, tokenizer, problems, samples, 1.0, seed=1, task=task)
        rows[level] = {"size": task.levels[level], "greedy_accuracy": float(greedy.mean()),
                       "sampled_pass_rate": float(sampled.mean()),
                       "all_agree": float((sampled.min(axis=1) == sampled.max(axis=1)).mean()),
                       "all_fail": float((sampled.max(axis=1) == 0).mean()),
                       "all_pass": float((sampled.min(axis=1) == 1).mean())}
        print(f"level {level} (size {task.levels[level]}): {rows[level]}", flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default=ARITHMETIC.name, help="the built-in task (arithmetic, sorting, equations, brackets)")
    task = task_named(parser.parse_args(argv).task)
    settings, folder = WarmStartSettings(), shipped_folder(task)
    with tempfile.TemporaryDirectory() as cache:
        built = warm_start(settings, Path(cache), rebuild=True, task=task)
        folder.mkdir(exist_ok=True)
        for name in SHIPPED_FILES:
            shutil.copyfile(built / name, folder / name)
    record = {
        "settings": {name: getattr(settings, name) for name in settings.__dataclass_fields__},
        "settings_fingerprint": settings.fingerprint(),
        "weights_sha256": hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest(),
        "greedy_held_out_accuracy": greedy_held_out_accuracy(folder, task),
        "rebuild": "python -m trl_budget.demo.build_warm_start" + ("" if task == ARITHMETIC else f" --task {task.name}"),
    }
    if task != ARITHMETIC:
        record["task"] = task.name
    (folder / SHIPPED_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
