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
    """2, 2.5 and numpy numbers are finite numbers; NaN, infinity, True, "2" and an integer beyond the range of a float
    (10**400, which every computation with floats would refuse with an OverflowError) are not."""
    if isinstance(value, bool) or not isinstance(value, _REAL):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_whole_number(value: Any) -> bool:
    """2, 2.0 and 10**400 are whole numbers; 2.5, NaN, infinity, True and "2" are not."""
    return _is_integer(value) or (is_finite_number(value) and int(value) == value)


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def shown(value: Any) -> str:
    """`value` as an error message shows it: its repr, or an integer too long to read by its size."""
    if _is_integer(value) and abs(value) > 10**60:
        return f"an integer of {len(str(abs(value)))} digits ({'-' if value < 0 else ''}{str(abs(value))[:6]}...)"
    return repr(value)


def is_missing(value: Any) -> bool:
    """An empty dataset cell: None, or a float NaN (what pandas and Arrow give for a missing number)."""
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def check_whole_number(name: str, value: Any, minimum: int, maximum: int = MAX_COUNT) -> None:
    """A count option: a whole number from `minimum` to `maximum`, or a `ValueError` that starts with `name`."""
    if not (is_whole_number(value) and value >= minimum):
        raise ValueError(f"{name} must be a whole number of at least {minimum}, got {shown(value)}.")
    if value > maximum:
        raise ValueError(f"{name} must be a whole number of at most {maximum}, got {shown(value)}.")


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
        raise ValueError(f"{name} must be a finite number {rule}, got {shown(value)}.")
