"""The allocation's settings: the allocator they build, its options and bounds."""

from __future__ import annotations

import difflib
import inspect
import json
from dataclasses import fields
from typing import Any

from ..allocators import allocator_class, release_pass_rate_rule
from .common import name_the_field
from .tracker import TRACKER_FIELDS


def constructor_parameters(cls) -> set[str] | None:
    """Names the constructor accepts; None when it takes any keyword."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters}


def parsed_allocator_kwargs(kwargs) -> dict[str, Any] | None:
    """`budget_allocator_kwargs` as a dict: given as one, or as a JSON object on the command line."""
    example = """'{"fallback": false}'"""
    if isinstance(kwargs, str):
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"budget_allocator_kwargs={kwargs!r} is not valid JSON ({error}). Give a JSON object of constructor "
                f"options, e.g. --budget_allocator_kwargs {example}."
            ) from error
    if kwargs is not None and not (isinstance(kwargs, dict) and all(isinstance(key, str) for key in kwargs)):
        raise ValueError(
            f"budget_allocator_kwargs={kwargs!r} must be a mapping of option names to values (a dict, or a JSON "
            f"object such as {example}), not a {type(kwargs).__name__}."
        )
    return kwargs


def check_allocator_kwargs(allocator: str, cls, kwargs: dict[str, Any] | None) -> None:
    """Every key of `budget_allocator_kwargs` must be an option of the allocator's constructor."""
    accepted = constructor_parameters(cls)
    unknown = sorted(set(kwargs or {}) - (accepted or set())) if accepted is not None else []
    if unknown:
        options = sorted(accepted - {"self"})
        close = difflib.get_close_matches(unknown[0], options, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"budget_allocator_kwargs has {unknown[0]!r}, which the {allocator!r} allocator ({cls.__name__}) does not "
            f"take.{hint} Its options are: {', '.join(options)}."
        )


DEFAULT_MAX_GENERATIONS = 128  # budget_max_generations=None, unless num_generations is more
VIP_MAX_GENERATIONS = 32  # VIP's release: 4 to 32 rollouts a prompt


class AllocationSettings:
    """`BudgetGRPOConfig`'s part for the allocator the settings build, its options, bounds and batch shape."""

    def allocator_options(self) -> dict[str, Any]:
        """Constructor arguments of the chosen allocator: bounds, `<allocator>_<option>` fields, and the kwargs."""
        cls = allocator_class(self.budget_allocator)
        prefix = f"{self.budget_allocator}_"
        accepted = constructor_parameters(cls)
        # SPO's fields name its tracker's settings too: the allocator takes the options its constructor names.
        options = {f.name[len(prefix):]: getattr(self, f.name) for f in fields(self) if f.name.startswith(prefix)
                   and (accepted is None or f.name[len(prefix):] in accepted)}
        fewest, most = self.generation_bounds(rollouts_a_prompt=False)
        common = {"min_generations": fewest, "max_generations": most, "default_generations": self.num_generations}
        options.update({name: value for name, value in common.items() if accepted is None or name in accepted})
        options.update(self.budget_allocator_kwargs or {})
        return options

    def make_allocator(self):
        """The allocator `budget_allocator` names, built with `allocator_options()`."""
        cls = allocator_class(self.budget_allocator)
        check_allocator_kwargs(self.budget_allocator, cls, self.budget_allocator_kwargs)
        try:
            allocator = cls(**self.allocator_options())
        except ValueError as error:
            raise ValueError(name_the_field(str(error), self._field_of_option)) from error
        except TypeError as error:  # a constructor that refuses an option in its own way
            raise ValueError(
                f"budget_allocator={self.budget_allocator!r} could not be built from its options "
                f"({type(error).__name__}: {error}); check budget_allocator_kwargs={self.budget_allocator_kwargs!r}."
            ) from error
        if not callable(allocator):  # e.g. a dotted path to a plain function such as "os:getcwd"
            raise ValueError(
                f"budget_allocator={self.budget_allocator!r} built {allocator!r} (a {type(allocator).__name__}), "
                "which is not an allocator: an allocator is called as allocator(pass_rates, budget, failure_rate) "
                "and returns a count per prompt. Name an allocator class, or a factory that returns one."
            )
        return allocator

    def _field_of_option(self, option: str) -> str:
        """Where an allocator's constructor option came from: the kwargs, an `<allocator>_<option>` field, or a
        common field (budget_min_generations, ...)."""
        if option in (self.budget_allocator_kwargs or {}):
            return f"budget_allocator_kwargs[{option!r}]"
        if option in ("min_generations", "max_generations"):
            return f"budget_{option}"
        prefixed = f"{self.budget_allocator}_{option}"
        return prefixed if hasattr(self, prefixed) else option

    def resolve_release_settings(self) -> None:
        """Give each pass-rate setting left at None the value of the chosen allocator's release."""
        from_release = self.__dict__.setdefault("_from_release", set())  # kept across checks: what the user left
        for argument, value in release_pass_rate_rule(self.budget_allocator).items():
            if getattr(self, TRACKER_FIELDS[argument]) is None:
                setattr(self, TRACKER_FIELDS[argument], value)
                from_release.add(TRACKER_FIELDS[argument])

    def generation_bounds(self, rollouts_a_prompt: bool = True, allocator=None) -> tuple[int, int]:
        """The fewest and most rollouts a prompt of a batch may get (`budget_max_generations=None`: 128, or
        num_generations where that is more; under VIP 32, its release's); with `rollouts_a_prompt`, SPO's rollouts a
        prompt under its allocator, and 0 as VIP's fewest (its rounding drops a prompt whose count falls below 4, as
        the release drops it from the batch) wherever VIP allocates: named by `budget_allocator`, or `allocator`, the
        trainer's allocator object, is VIP's."""
        from ..vip_stage import uses_vip  # here: the stage's module imports the trainer's rooms

        if rollouts_a_prompt and self.budget_allocator == "spo":
            return self.spo_rollouts_per_prompt, self.spo_rollouts_per_prompt
        most = self.budget_max_generations
        if most is None:
            most = max(VIP_MAX_GENERATIONS if self.budget_allocator == "vip" else DEFAULT_MAX_GENERATIONS,
                       self.num_generations)
        fewest = 0 if rollouts_a_prompt and uses_vip(self, allocator) else self.budget_min_generations
        return fewest, most

    def prompts_per_generation_batch(self) -> int:
        """Distinct prompts a generation batch trains (its sampled prompts under prompt sampling)."""
        if self.budget_allocator == "spo":
            return self.generation_batch_size // self.spo_rollouts_per_prompt
        return self.generation_batch_size // self.num_generations
