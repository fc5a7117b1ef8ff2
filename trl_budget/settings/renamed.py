"""Settings' names: the former names of renamed settings, accepted with a FutureWarning for a release, and a
name the config does not know, refused with the one that was probably meant."""

from __future__ import annotations

import difflib
import functools
import re
import warnings
from dataclasses import fields

from .common import same_value

# Former name -> name. Settings are named after what they set: `budget_*` the allocation (its rule, options and token
# cap), `<rule>_*` a rule's options, `pass_rate_*`, `success_*` and `failure_rate_window` the tracker's estimates,
# `probe_*`, `rounds_*` and `dynamic_sampling*` how a batch is generated, `advantage_*` the baseline, `prompt_*` the
# prompts, `loss_weighting` the loss. The former names are accepted, with a FutureWarning, until trl_budget 0.3.
RENAMED_SETTINGS = {
    "budget_probe_generations": "probe_generations",
    "budget_probe_history_weight": "probe_history_weight",
    "budget_probe_prior_strength": "probe_prior_strength",
    "budget_round_generations": "rounds_generations",
    "budget_first_round_generations": "rounds_first_generations",
    "budget_max_rounds": "rounds_max",
    "budget_per_prompt_rounds": "rounds_prompt_by_prompt",
    "budget_dynamic_sampling_metric": "dynamic_sampling_metric",
    "budget_dynamic_sampling_oversample": "dynamic_sampling_oversample",
    "budget_dynamic_sampling_max_gen_batches": "dynamic_sampling_max_gen_batches",
    "budget_dynamic_sampling": "dynamic_sampling",
    "budget_loss_weighting": "loss_weighting",
    "min_generations": "budget_min_generations",
    "max_generations": "budget_max_generations",
}


class RenamedSettings:
    """`BudgetGRPOConfig`'s part for settings given under their former names, applied with a FutureWarning."""

    def apply_renamed_settings(self) -> None:
        """A setting given under its former name (`RENAMED_SETTINGS`) sets the renamed one, with a FutureWarning; the
        former name is then cleared, so that the config holds each setting once."""
        for old, new in RENAMED_SETTINGS.items():
            value = getattr(self, old)
            if value is None:
                continue
            current = getattr(self, new)
            if not same_value(current, self.__dataclass_fields__[new].default) and not same_value(current, value):
                raise ValueError(f"{old}={value!r} and {new}={current!r} both set {new} ({old} is its former name). "
                                 f"Keep {new} only.")
            warnings.warn(f"{old} is deprecated and will be removed in trl_budget 0.3: use {new}={value!r} instead "
                          "(the same setting, renamed).", FutureWarning, stacklevel=5)
            setattr(self, new, value)
            setattr(self, old, None)
            self.__dict__.setdefault("_former_names", {})[new] = old

    def in_the_names_given(self, message: str) -> str:
        """A refusal of a setting given under its former name, restated with the name the user typed."""
        former = self.__dict__.get("_former_names", {})
        named = [new for new in former if re.search(rf"\b{new}\b", message)]
        for new in named:
            message = re.sub(rf"\b{new}\b", former[new], message)
        notes = "; ".join(f"{former[new]} is the former name of {new}" for new in named)
        return f"{message} ({notes}.)" if notes else message


def refusing_unknown_names(init):
    """A dataclass `__init__` that refuses a keyword it does not take as Python does (a TypeError), naming the setting
    that was probably meant, as `trl-budget grpo` names the flag."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        known = [f.name for f in fields(type(self)) if f.init]
        unknown = [name for name in kwargs if name not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{type(self).__name__} got an unexpected keyword argument {unknown[0]!r}.{hint}")
        init(self, *args, **kwargs)

    return __init__
