"""The tracker's settings: the tracker they build and the settings the config states for it."""

from __future__ import annotations

from typing import Any

from ..tracker import CapabilityTracker
from .common import name_the_field, same_value

# Tracker constructor argument -> the config field that sets it.
TRACKER_FIELDS = {
    "window": "pass_rate_window",
    "rollout_pool": "pass_rate_rollout_pool",
    "min_rollouts": "pass_rate_min_rollouts",
    "failure_rate_window": "failure_rate_window",
    "success_threshold": "success_threshold",
    "reward_history_window": "advantage_history_window",
}


class TrackerSettings:
    """`BudgetGRPOConfig`'s part for the tracker the settings build, and the tracker settings the config states."""

    def make_tracker(self) -> CapabilityTracker:
        """The capability tracker with the config's pass-rate rule (by default, the chosen allocator's release rule)."""
        try:
            return CapabilityTracker(**{argument: getattr(self, name) for argument, name in TRACKER_FIELDS.items()
                                        if argument != "reward_history_window"},
                                     reward_history_window=(self.advantage_history_window
                                                            if self.resolved_advantage_baseline() == "history" else None))
        except ValueError as error:
            raise ValueError(name_the_field(str(error), lambda name: TRACKER_FIELDS.get(name, name))) from error

    def stated_tracker_settings(self) -> dict[str, Any]:
        """The tracker's settings this config states itself (not left to the allocator's release, nor at the
        default): tracker argument -> value, as a tracker built from it would hold them."""
        from_release = self.__dict__.get("_from_release", set())
        stated = {}
        for argument, name in TRACKER_FIELDS.items():
            value = getattr(self, name)
            default = type(self).__dataclass_fields__[name].default
            if name in from_release or argument == "reward_history_window" or same_value(value, default):
                continue
            stated[argument] = (value or None) if argument == "rollout_pool" else value  # 0: no pool
        return stated
