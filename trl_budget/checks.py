"""Checks of numeric options shared by the allocators, the tracker and the config: refuse now what fails later."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_REAL = (int, float, np.integer, np.floating)


def is_finite_number(value: Any) -> bool:
    """2, 2.5 and numpy numbers are finite numbers; NaN, infinity, True and "2" are not."""
    return not isinstance(value, bool) and isinstance(value, _REAL) and math.isfinite(value)


def is_whole_number(value: Any) -> bool:
    """2 and 2.0 are whole numbers; 2.5, NaN, infinity, True and "2" are not."""
    return is_finite_number(value) and int(value) == value


def is_missing(value: Any) -> bool:
    """An empty dataset cell: None, or a float NaN (what pandas and Arrow give for a missing number)."""
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def check_whole_number(name: str, value: Any, minimum: int) -> None:
    """A count option: a whole number of at least `minimum`, or a `ValueError` that starts with `name`."""
    if not (is_whole_number(value) and value >= minimum):
        raise ValueError(f"{name} must be a whole number of at least {minimum}, got {value!r}.")


def check_finite(name: str, value: Any, above: float, rule: str) -> None:
    """A real option: a finite number above `above` (NaN and infinity would fail every allocation later)."""
    if not (is_finite_number(value) and value > above):
        raise ValueError(f"{name} must be a finite number {rule}, got {value!r}.")
