"""The third built-in task: balance an equation by filling in its signs. The prompt `6?8?7=55:` gives single digits in
order and a target; the answer is the one string of signs (`+`, `-`, `*`, the usual precedence: `*` first, then left to
right) that makes the equation hold, here `*+` (6*8+7 = 55). Only problems whose answer is the one string that holds
are made, so the exact-match reward is the equation's own check: a completion earns 1 exactly when it balances the
equation (`holds`, a test checks both agree on every possible completion).

Why this task among the candidates (a countdown-style target, balancing an equation, the output of a tiny program):
- It is multi-step in another way than the other two: no answer is read off the prompt digit by digit (arithmetic
  carries along the digits, sorting counts them); each sign changes the value every later sign acts on, so the signs
  must be chosen together, a search over 3^(n-1) strings that the model has to do without writing its steps down.
- Its reward is exact and needs no other machinery: the answer is unique by construction, so the runs' exact-match
  reward and evaluation apply as they are, and the check (`holds`) is a small evaluator of digits and three signs,
  never Python's eval. An open countdown (any order, any brackets) has many right answers, so it would need a
  task-specific reward in the run machinery; the output of a tiny program (a register's value after each instruction)
  was tried first and dropped: the tiny model's supervised warm start either learned its trace of at most 4 steps
  perfectly and 5 not at all, or learned each step half the time, with nothing between for RL to grade.
- Its difficulty grades in levels by the number of digits (2 to 7), with no cliff: the warm start learns every level
  from the same data, and its accuracy falls level by level, as arithmetic's does; a guess is right with chance
  3^-(n-1), so the hard levels fail every rollout, as the studies need.
- It fits the tiny model: 16 characters (digits, the three signs, `?`, `=`, `:`), prompts of at most 23 characters,
  answers of at most 6 signs and the end.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from .task_spec import Task, problems_over_levels

SIGNS = "+-*"
ALPHABET = "0123456789" + SIGNS + "?=:"

# Each level: the digits of the equation (3^(digits - 1) sign strings to choose from).
LEVELS = (2, 3, 4, 5, 6, 7)


@functools.cache
def _every_sign_string(length: int) -> np.ndarray:
    """Every string of `length` signs, as indices into SIGNS, one per row."""
    return np.array(list(itertools.product(range(len(SIGNS)), repeat=length)), dtype=np.int64).reshape(-1, length)


def _values(digits: np.ndarray, sign_strings: np.ndarray) -> np.ndarray:
    """The value of `digits` with each row of `sign_strings` between them: products first, then sums left to right."""
    total = np.zeros(len(sign_strings), dtype=np.int64)
    term = np.full(len(sign_strings), digits[0], dtype=np.int64)  # the product being built, with its sign
    for position, digit in enumerate(digits[1:]):
        sign = sign_strings[:, position]
        times = sign == SIGNS.index("*")
        total = np.where(times, total, total + term)
        term = np.where(times, term * digit, np.where(sign == SIGNS.index("+"), digit, -digit))
    return total + term


def evaluate(digits: list[int], signs: str) -> int:
    """The value of `digits` with `signs` between them (`*` before `+` and `-`).

    Raises:
        ValueError: `signs` is not one of `+`, `-`, `*` between each pair of digits.
    """
    if len(signs) != len(digits) - 1 or any(sign not in SIGNS for sign in signs):
        raise ValueError(f"signs={signs!r} must be {len(digits) - 1} of {SIGNS!r}, one between each pair of digits.")
    return int(_values(np.array(digits), np.array([[SIGNS.index(sign) for sign in signs]]))[0])


def parse_prompt(prompt: str) -> tuple[list[int], int]:
    """The digits and the target of a prompt `d?d?...=target:`."""
    left, target = prompt.removesuffix(":").split("=")
    return [int(digit) for digit in left.split("?")], int(target)


def holds(prompt: str, completion: str) -> bool:
    """Whether `completion` (surrounding spaces ignored) is a string of signs that balances the prompt's equation;
    anything else (other characters, too few or too many signs) does not."""
    digits, target = parse_prompt(prompt)
    try:
        return evaluate(digits, completion.strip()) == target
    except ValueError:
        return False


def make_problems(count: int, seed: int, levels: tuple[int, ...] | None = None) -> list[dict]:
    """`count` problems spread evenly over `levels` (default: all), each `{"prompt", "answer", "level"}`: digits from
    1 to 9 and a sign string drawn at random, kept only when no other sign string gives the same value."""
    return problems_over_levels(count, seed, levels, len(LEVELS), _problem)


def _problem(rng: np.random.Generator, level: int) -> tuple[str, str]:
    sign_strings = _every_sign_string(LEVELS[level] - 1)
    while True:
        digits = rng.integers(1, 10, LEVELS[level])
        values = _values(digits, sign_strings)
        chosen = int(rng.integers(len(sign_strings)))
        if np.count_nonzero(values == values[chosen]) == 1:
            return "?".join(map(str, digits)) + f"={values[chosen]}:", "".join(SIGNS[s] for s in sign_strings[chosen])


# The warm start learns from every level, as arithmetic's does: how far it gets at each is what RL starts from.
EQUATIONS = Task("equations", ALPHABET, LEVELS, make_problems, max_answer_tokens=max(LEVELS))  # 6 signs, and the end
