"""The fourth built-in task: close the brackets. The prompt `([]{<>(:` is the start of a well-nested string of four
kinds of brackets; the answer is the one string that closes every bracket still open, innermost first, here `)})`.

Why this task for a third family of the fifth study:
- It asks for another skill than the other families: nesting. Arithmetic carries along the digits and sorting counts
  them; here the model must keep a stack, skip every pair already closed however deep, and recall the kinds still
  open in reverse order. No answer character is read off one place of the prompt.
- Its answer is unique, so the runs' exact-match reward is the task's own check.
- Its difficulty grades in levels by the prompt's length (more closed pairs to skip, more brackets open), and the warm
  start learns only the short levels: the long ones are for RL to learn, as sorting's are.
- It fits the tiny model: 9 characters, prompts of at most 25, answers of at most 6 brackets and the end.
"""

from __future__ import annotations

import numpy as np

from .task_spec import Task, problems_over_levels

OPENING, CLOSING = "([{<", ")]}>"
ALPHABET = OPENING + CLOSING + ":"
MOST_OPEN = 6

# Each level: the brackets in the prompt.
LEVELS = (4, 8, 12, 16, 20, 24)


def closing(prompt: str) -> str:
    """The string that closes every bracket the prompt leaves open, innermost first.

    Raises:
        ValueError: the prompt closes a bracket that is not the innermost open one, or holds another character.
    """
    stack = []
    for char in prompt.removesuffix(":"):
        if char in OPENING:
            stack.append(char)
        elif char in CLOSING and stack and stack[-1] == OPENING[CLOSING.index(char)]:
            stack.pop()
        else:
            raise ValueError(f"{prompt!r} is not the start of a well-nested string of {OPENING + CLOSING!r}.")
    return "".join(CLOSING[OPENING.index(char)] for char in reversed(stack))


def _prompt(rng: np.random.Generator, length: int) -> str:
    """A random start of a well-nested string: `length` brackets, between 1 and MOST_OPEN of them left open."""
    open_at_end = int(rng.choice([k for k in range(1, min(length, MOST_OPEN) + 1) if (length - k) % 2 == 0]))
    stack: list[int] = []
    chars = []
    for remaining in range(length, 0, -1):
        # Opening keeps the end reachable while the stack can still come down to `open_at_end`; closing needs a
        # bracket to close and a stack that can still climb back to it.
        can_open = len(stack) + 1 - open_at_end <= remaining - 1
        can_close = bool(stack) and open_at_end - (len(stack) - 1) <= remaining - 1
        if can_open and (not can_close or rng.random() < 0.5):
            stack.append(int(rng.integers(len(OPENING))))
            chars.append(OPENING[stack[-1]])
        else:
            chars.append(CLOSING[stack.pop()])
    return "".join(chars) + ":"


def _problem(rng: np.random.Generator, level: int) -> tuple[str, str]:
    prompt = _prompt(rng, LEVELS[level])
    return prompt, closing(prompt)


def make_problems(count: int, seed: int, levels: tuple[int, ...] | None = None) -> list[dict]:
    """`count` problems spread evenly over `levels` (default: all), each `{"prompt", "answer", "level"}`."""
    return problems_over_levels(count, seed, levels, len(LEVELS), _problem)


# The warm start learns prompts of 4 to 12 brackets; longer ones are for RL to learn.
BRACKETS = Task("brackets", ALPHABET, LEVELS, make_problems, max_answer_tokens=MOST_OPEN + 1,
                warm_start_levels=(0, 1, 2))
