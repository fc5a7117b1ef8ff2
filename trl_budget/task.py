"""The built-in verifiable task: arithmetic whose difficulty grows with digits and operations, exact-match reward."""

from __future__ import annotations

import numpy as np

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
    rng = np.random.default_rng(seed)
    levels = tuple(range(len(LEVELS))) if levels is None else levels
    problems = []
    for index in range(count):
        level = levels[index % len(levels)]
        operator, left_digits, right_digits = LEVELS[level]
        left, right = _operand(rng, left_digits), _operand(rng, right_digits)
        answer = left + right if operator == "+" else left * right
        problems.append({"prompt": f"{left}{operator}{right}=", "answer": str(answer), "level": level})
    return problems


def split_problems(train_size: int, eval_size: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Disjoint training and held-out problem sets (no prompt in both)."""
    pool = make_problems(4 * (train_size + eval_size), seed)
    unique = list({problem["prompt"]: problem for problem in pool}.values())
    held_out = unique[:eval_size]
    train = unique[eval_size : eval_size + train_size]
    if len(train) < train_size:
        raise ValueError(f"could not draw {train_size} distinct training problems; ask for fewer.")
    return train, held_out


def exact_match_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion is exactly the answer (surrounding spaces ignored), else 0.0."""
    return [float(completion.strip() == expected) for completion, expected in zip(completions, answer)]
