"""What the settings' checks share."""

from __future__ import annotations

import re


def same_value(value, default) -> bool:
    """A setting left at its default: the same value (a NaN never is)."""
    try:
        return value is default or bool(value == default)
    except (TypeError, ValueError):  # an object that cannot be compared with the default: not the default
        return False


def allocator_in_words(config) -> str:
    """`budget_allocator='spo'`, marked as the default when it is: a refusal of a setting switched on over the
    defaults then says which rule the user did not choose."""
    default = type(config).__dataclass_fields__["budget_allocator"].default
    return f"budget_allocator={config.budget_allocator!r}" + (" (the default)" if config.budget_allocator == default
                                                              else "")


def name_the_field(message: str, field_of) -> str:
    """A constructor's message, starting with its argument's name (`kappa must ...` or `kappa=3 is ...`), restated
    with the config field that sets it."""
    match = re.match(r"(\w+)(?=[ =])", message)
    return f"{field_of(match.group(1))}{message[match.end():]}" if match else message
