"""What a built-in verifiable task is (`Task`), in a module of its own: every task module imports it from here, and
`task.py`'s registry imports every task module, so no two modules import each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """A verifiable task: its characters, its problems by level (`make_problems(count, seed, levels)`, each
    `{"prompt", "answer", "level"}`), the most tokens an answer takes, its end included, and the levels its supervised
    warm start learns from (None: every level)."""

    name: str
    alphabet: str
    levels: tuple
    make_problems: Callable[..., list[dict]]
    max_answer_tokens: int
    warm_start_levels: tuple[int, ...] | None = None


def problems_over_levels(count: int, seed: int, levels: tuple[int, ...] | None, level_count: int,
                         make_one: Callable[..., tuple[str, str]]) -> list[dict]:
    """`count` problems spread evenly over `levels` (None: all `level_count`), each `{"prompt", "answer", "level"}`,
    from `make_one(rng, level) -> (prompt, answer)` with one generator seeded by `seed`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    levels = tuple(range(level_count)) if levels is None else levels
    problems = []
    for index in range(count):
        level = levels[index % len(levels)]
        prompt, answer = make_one(rng, level)
        problems.append({"prompt": prompt, "answer": answer, "level": level})
    return problems
