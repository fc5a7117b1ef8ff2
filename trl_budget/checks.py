"""Checks of numeric options shared by the allocators, the tracker and the config: refuse now what fails later."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_REAL = (int, float, np.integer, np.floating)

# The most any count setting can be: far beyond any batch, and safely inside the 64-bit integers the counts are kept in
# (10**40 rollouts would fail at the first batch with an OverflowError).
MAX_COUNT = 2**31 - 1


def is_finite_number(value: Any) -> bool:
    """2, 2.5 and numpy numbers are finite numbers; NaN, infinity, True and "2" are not."""
    return not isinstance(value, bool) and isinstance(value, _REAL) and math.isfinite(value)


def is_whole_number(value: Any) -> bool:
    """2 and 2.0 are whole numbers; 2.5, NaN, infinity, True and "2" are not."""
    return is_finite_number(value) and int(value) == value


def is_missing(value: Any) -> bool:
    """An empty dataset cell: None, or a float NaN (what pandas and Arrow give for a missing number)."""
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def check_whole_number(name: str, value: Any, minimum: int, maximum: int = MAX_COUNT) -> None:
    """A count option: a whole number from `minimum` to `maximum`, or a `ValueError` that starts with `name`."""
    if not (is_whole_number(value) and value >= minimum):
        raise ValueError(f"{name} must be a whole number of at least {minimum}, got {value!r}.")
    if value > maximum:
        raise ValueError(f"{name} must be a whole number of at most {maximum}, got {value!r}.")


def check_flag(name: str, value: Any) -> None:
    """A switch option: True or False ("no" or 1 would silently read as one of them)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}.")


def check_optional_name(name: str, value: Any, what: str) -> None:
    """An option naming a column or a function: a non-empty string, or None."""
    if value is not None and not (isinstance(value, str) and value):
        raise ValueError(f"{name} must be {what} (a non-empty string) or None, got {value!r}.")


def check_finite(name: str, value: Any, above: float, rule: str) -> None:
    """A real option: a finite number above `above` (NaN and infinity would fail every allocation later)."""
    if not (is_finite_number(value) and value > above):
        raise ValueError(f"{name} must be a finite number {rule}, got {value!r}.")
