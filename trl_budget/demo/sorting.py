"""The second built-in task: sort a string of digits, the answer exact. Its difficulty grows with the string's length,
and it asks for another skill than arithmetic (comparing and ordering every digit, not carrying)."""

from __future__ import annotations

import numpy as np

from .task_spec import Task, problems_over_levels

ALPHABET = "0123456789:"

# Each level: the digits to sort.
LEVELS = (4, 6, 8, 10, 12, 14)


def make_problems(count: int, seed: int, levels: tuple[int, ...] | None = None) -> list[dict]:
    """`count` problems spread evenly over `levels` (default: all), each `{"prompt", "answer", "level"}`: the prompt
    `40713:` asks for `01347`."""
    return problems_over_levels(count, seed, levels, len(LEVELS), _problem)


def _problem(rng: np.random.Generator, level: int) -> tuple[str, str]:
    digits = rng.integers(0, 10, LEVELS[level])
    return "".join(map(str, digits)) + ":", "".join(map(str, np.sort(digits)))


# The warm start learns to sort 4 to 8 digits; longer strings are for RL to learn (few succeed at first).
SORTING = Task("sorting", ALPHABET, LEVELS, make_problems, max_answer_tokens=max(LEVELS) + 1,
               warm_start_levels=(0, 1, 2))
