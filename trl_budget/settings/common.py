"""What the settings' checks share."""

from __future__ import annotations

import re


def same_value(value, default) -> bool:
    """A setting left at its default: the same value (a NaN never is)."""
    try:
        return value is default or bool(value == default)
    except (TypeError, ValueError):  # an object that cannot be compared with the default: not the default
        return False


def name_the_field(message: str, field_of) -> str:
    """A constructor's message, starting with its argument's name (`kappa must ...` or `kappa=3 is ...`), restated
    with the config field that sets it."""
    match = re.match(r"(\w+)(?=[ =])", message)
    return f"{field_of(match.group(1))}{message[match.end():]}" if match else message
