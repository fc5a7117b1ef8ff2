"""The registry: allocators chosen by name (`budget_allocator="knapsack"`) or by dotted path, and the protocol they
meet."""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import numpy as np


class Allocator(Protocol):
    """What the trainer needs from an allocator: one call that returns a count per prompt.

    An allocator may also have `metrics(pass_rates, failure_rate) -> dict[str, float]`: the trainer logs each entry
    as `budget/<name>` at every generation batch (CoBA-RL logs its Beta parameter alpha this way).
    """

    def __call__(self, pass_rates: np.ndarray, budget: int, failure_rate: float | None = None) -> np.ndarray: ...


# Pass rates as the tracker estimates them when a release says nothing: the last visit, the last batch's failure rate.
PLAIN_PASS_RATE_RULE = {"window": 1, "rollout_pool": 0, "min_rollouts": 1, "failure_rate_window": 1}

_REGISTRY: dict[str, tuple[type, dict[str, int]]] = {}


def register_allocator(name: str, pass_rate_rule: dict[str, int] | None = None):
    """Class decorator: make an allocator choosable by `name` (`BudgetGRPOConfig(budget_allocator=name)`).

    Args:
        name: the name; `BudgetGRPOConfig` fields named `<name>_<option>` become the constructor's `<option>`.
        pass_rate_rule: the `CapabilityTracker` settings (`window`, `rollout_pool`, `min_rollouts`,
            `failure_rate_window`) that this allocator's release estimates pass rates with; the plain rule (the last
            visit) when None.
    """

    if not (isinstance(name, str) and name.strip()):
        raise ValueError(f"register_allocator needs a non-empty string as the allocator's name, got {name!r}: it is "
                         "what budget_allocator= names.")
    rule = _checked_pass_rate_rule(name, pass_rate_rule)

    def register(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name][0] is not cls:
            raise ValueError(f"an allocator named {name!r} is registered already ({_REGISTRY[name][0].__name__}).")
        _REGISTRY[name] = (cls, rule)
        return cls

    return register


def _checked_pass_rate_rule(name: str, pass_rate_rule: dict[str, int] | None) -> dict[str, int]:
    """The full rule (the plain rule's settings where it is silent), or a `ValueError` naming what the tracker would
    refuse: a misspelt setting would otherwise surface as a raw `KeyError` when a config chooses the allocator."""
    from ..tracker import CapabilityTracker  # plain numpy, like this module

    if pass_rate_rule is not None and not isinstance(pass_rate_rule, dict):
        raise ValueError(f"register_allocator({name!r}, pass_rate_rule=...) needs a dict or None, got "
                         f"{type(pass_rate_rule).__name__}.")
    unknown = sorted(set(pass_rate_rule or {}) - set(PLAIN_PASS_RATE_RULE), key=str)
    if unknown:
        raise ValueError(f"register_allocator({name!r}, pass_rate_rule=...) has {unknown[0]!r}, which is not a "
                         f"pass-rate setting; the settings are {', '.join(PLAIN_PASS_RATE_RULE)}.")
    rule = {**PLAIN_PASS_RATE_RULE, **(pass_rate_rule or {})}
    try:
        CapabilityTracker(**rule)
    except ValueError as error:
        raise ValueError(f"register_allocator({name!r}, pass_rate_rule=...): {error}") from error
    return rule


def allocator_names() -> list[str]:
    """The registered names."""
    return list(_REGISTRY)


def allocator_class(name: str) -> type:
    """The allocator class registered as `name`, or imported from a dotted path (`package.module:Class`)."""
    if name in _REGISTRY:
        return _REGISTRY[name][0]
    module_name, separator, attribute = name.partition(":") if ":" in name else name.rpartition(".")
    if not separator or not module_name or not attribute:
        grpo = (" GRPO's equal split is 'uniform' (the default); for GRPOTrainer exactly, set budget_allocator="
                "'uniform', advantage_baseline='group'." if name.lower() == "grpo" else "")
        raise ValueError(
            f"budget_allocator={name!r} is unknown: choose one of {', '.join(_REGISTRY)}, or give a dotted path to "
            f"your allocator class (`my_package.my_module:MyAllocator`).{grpo}"
        )
    if module_name.startswith("."):
        raise ValueError(f"budget_allocator={name!r} is a relative module path; give the absolute one "
                         "(`my_package.my_module:MyAllocator`).")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"budget_allocator={name!r} cannot be imported ({type(error).__name__}: {error}); check the dotted path "
            "and that its package is installed."
        ) from error
    except Exception as error:  # noqa: BLE001 - the module's own code failed while importing: say whose
        raise ValueError(
            f"budget_allocator={name!r}: importing {module_name!r} raised {type(error).__name__}: {error}. The "
            "module itself is broken; fix it, or choose another allocator."
        ) from error
    try:
        found = getattr(module, attribute)
    except AttributeError as error:
        raise ValueError(
            f"budget_allocator={name!r} cannot be imported: module {module_name!r} has no attribute {attribute!r}; "
            "check the dotted path."
        ) from error
    if not callable(found):
        raise ValueError(f"budget_allocator={name!r} is {found!r}, not an allocator class or factory.")
    return found


def release_pass_rate_rule(name: str) -> dict[str, Any]:
    """The tracker settings of the allocator registered as `name` (the plain rule for other allocators)."""
    return dict(_REGISTRY[name][1]) if name in _REGISTRY else dict(PLAIN_PASS_RATE_RULE)
