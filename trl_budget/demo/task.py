"""The built-in verifiable tasks, each with difficulty levels and an exact-match reward: arithmetic (this module, the
demo's and every study's so far), sorting (`sorting.py`), equations (`equations.py`) and brackets (`brackets.py`),
chosen by name with `task_named`. What a task is (`Task`) lives in `task_spec.py`, which the task modules import
instead of this one."""

from __future__ import annotations

import numpy as np

from .brackets import BRACKETS
from .equations import EQUATIONS
from .sorting import SORTING
from .task_spec import Task, problems_over_levels

ALPHABET = "0123456789+*="

# Each level: (operator, digits of the first operand, digits of the second). Harder levels need carries over more
# digits or multiplication, which a tiny model learns later or never.
LEVELS = (
    ("+", 1, 1),
    ("+", 2, 1),
    ("*", 1, 1),
    ("+", 2, 2),
    ("*", 2, 1),
    ("+", 3, 3),
)


def _operand(rng: np.random.Generator, digits: int) -> int:
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return int(rng.integers(low, 10**digits))


def make_problems(count: int, seed: int, levels: tuple[int, ...] | None = None) -> list[dict]:
    """`count` problems spread evenly over `levels` (default: all), each `{"prompt", "answer", "level"}`."""
    return problems_over_levels(count, seed, levels, len(LEVELS), _problem)


def _problem(rng: np.random.Generator, level: int) -> tuple[str, str]:
    operator, left_digits, right_digits = LEVELS[level]
    left, right = _operand(rng, left_digits), _operand(rng, right_digits)
    return f"{left}{operator}{right}=", str(left + right if operator == "+" else left * right)


ARITHMETIC = Task("arithmetic", ALPHABET, LEVELS, make_problems, max_answer_tokens=5)  # 3 + 3 digits: 4, and the end


def split_problems(train_size: int, eval_size: int, seed: int, levels: tuple[int, ...] | None = None,
                   task: Task = ARITHMETIC) -> tuple[list[dict], list[dict]]:
    """Disjoint training and held-out sets of `task` with the same share of every level (no prompt in both)."""
    pool = task.make_problems(8 * (train_size + eval_size), seed, levels)
    by_level: dict[int, list[dict]] = {}
    for problem in {problem["prompt"]: problem for problem in pool}.values():
        by_level.setdefault(problem["level"], []).append(problem)
    train, held_out = [], []
    levels = sorted(by_level)
    for index, level in enumerate(levels):
        want_eval = eval_size // len(levels) + (index < eval_size % len(levels))
        want_train = train_size // len(levels) + (index < train_size % len(levels))
        problems = by_level[level]
        if len(problems) < want_eval + want_train:
            raise ValueError(
                f"level {level} has only {len(problems)} distinct problems, fewer than the {want_eval + want_train} "
                "asked for; ask for fewer training or held-out problems."
            )
        held_out += problems[:want_eval]
        train += problems[want_eval : want_eval + want_train]
    return train, held_out


def exact_match_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion is exactly the answer (surrounding spaces ignored), else 0.0."""
    return [float(completion.strip() == expected) for completion, expected in zip(completions, answer)]


def task_named(name: str) -> Task:
    """The built-in task called `name`."""
    tasks = {task.name: task for task in (ARITHMETIC, SORTING, EQUATIONS, BRACKETS)}
    if name not in tasks:
        raise ValueError(f"task={name!r} is not a built-in task; choose one of {sorted(tasks)}.")
    return tasks[name]
