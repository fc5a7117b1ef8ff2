"""The advantage baseline and the loss's weighting of rows."""

from __future__ import annotations

from ..checks import (
    is_finite_number,
    shown,
)

# TRL 1.16's losses, each positively homogeneous in the advantage (checked against TRL's own loss in the tests).
PROMPT_WEIGHTED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")


ADVANTAGE_BASELINES = ("group", "all_rollouts", "batch", "history", "spo")
HISTORY_FIRST_VISITS = ("group", "batch")
# A named rule of several settings -> the settings it stands for (the config holds them once resolved).
BASELINE_SHORTHANDS = {
    "earlier_or_batch": {"advantage_baseline": "history", "advantage_history_includes_batch": False,
                         "advantage_history_first_visit": "batch", "scale_rewards": "batch"},
}


class BaselineSettings:
    """`BudgetGRPOConfig`'s part for the advantage baseline (checked and resolved) and the loss's weighting."""

    def check_advantage_baseline(self) -> None:
        """The baseline is one of the five (a shorthand resolved to its settings), its window a number of visits,
        its first visit's fallback a name, and the rewards' scaling has a meaning for it;
        `reinforce_ada_global_statistics` is its older name under Reinforce-Ada, not a second setting."""
        self.resolve_baseline_shorthand()
        baseline = self.advantage_baseline
        if baseline is not None and baseline not in ADVANTAGE_BASELINES:
            raise ValueError(
                f"advantage_baseline={baseline!r} is not a baseline: choose 'group' (GRPO's), 'all_rollouts' (all the "
                "prompt's rollouts of the batch), 'batch' (the batch's mean reward), 'history' (its recent visits), "
                "'spo' (SPO's estimate) or 'earlier_or_batch' (its earlier visits, else the batch), or None for the "
                "rule's own."
            )
        if not (is_finite_number(self.advantage_history_window) and self.advantage_history_window >= 1):
            raise ValueError(f"advantage_history_window must be a finite number of visits, at least 1, got "
                             f"{shown(self.advantage_history_window)}.")
        if self.advantage_history_first_visit not in HISTORY_FIRST_VISITS:
            raise ValueError(
                f"advantage_history_first_visit={self.advantage_history_first_visit!r} is not a fallback: choose "
                "'group' (a prompt's first visit against its own group, GRPO's) or 'batch' (against the batch's mean "
                "reward)."
            )
        if baseline is not None and not self.reinforce_ada_global_statistics:
            raise ValueError(
                f"reinforce_ada_global_statistics=False and advantage_baseline={baseline!r} both choose the baseline; "
                "reinforce_ada_global_statistics=False is advantage_baseline='group'. Set advantage_baseline alone."
            )
        self.check_baseline_scaling(self.resolved_advantage_baseline())

    def resolve_baseline_shorthand(self) -> None:
        """A shorthand baseline (`BASELINE_SHORTHANDS`) sets the settings it stands for; TRL's `scale_rewards` at its
        default ('group') becomes the shorthand's, any other value of its settings is refused, so that the run is the
        one the shorthand names."""
        settings = BASELINE_SHORTHANDS.get(self.advantage_baseline)
        if settings is None:
            return
        shorthand = self.advantage_baseline
        defaults = {name: ("group" if name == "scale_rewards" else self.__dataclass_fields__[name].default)
                    for name in settings if name != "advantage_baseline"}
        for name, default in defaults.items():
            value = settings[name]
            if getattr(self, name) not in (value, default):
                written_out = ", ".join(f"{setting}={setting_value!r}" for setting, setting_value in settings.items()
                                        if setting != name)
                raise ValueError(
                    f"advantage_baseline={shorthand!r} stands for {name}={value!r}, but {name}="
                    f"{getattr(self, name)!r}. Remove {name}, or write the rule out with {written_out} and "
                    f"{name}={getattr(self, name)!r}."
                )
        for name, value in settings.items():
            setattr(self, name, value)
        self.__dict__["_baseline_shorthand"] = shorthand

    def baseline_shorthand(self) -> str | None:
        """The shorthand the baseline was given by (`advantage_baseline='earlier_or_batch'`), or None."""
        return self.__dict__.get("_baseline_shorthand")

    def check_baseline_scaling(self, baseline: str) -> None:
        """Each baseline's rewards scaling: SPO's, the batch's and the history's compare summed rewards; a baseline
        over more than the trained rows defines a group's scale or none; one that is not a prompt's own rewards
        (the batch, a prompt's earlier visits) the batch's scale or none."""
        if baseline in ("spo", "batch", "all_rollouts", "history") and (self.multi_objective_aggregation
                                                                         != "sum_then_normalize"):
            raise ValueError(
                f"the advantage baseline {baseline!r} compares each rollout's summed reward with its baseline; "
                f"multi_objective_aggregation={self.multi_objective_aggregation!r} normalizes each reward function "
                "apart first, which has no such meaning. Use multi_objective_aggregation='sum_then_normalize', or "
                "advantage_baseline='group'."
            )
        if baseline == "batch" and self.scale_rewards == "group":
            raise ValueError(
                "the advantage baseline 'batch' compares every reward with the batch's mean reward; "
                "scale_rewards='group' divides by each prompt's own deviation, which GRPO pairs with each prompt's "
                "own mean. Use scale_rewards='batch' (the batch's deviation, as SPO's normalization gives a prompt on "
                "its first visit) or 'none'."
            )
        earlier_only = baseline == "history" and not self.advantage_history_includes_batch
        if earlier_only and self.scale_rewards == "group":
            raise ValueError(
                "advantage_history_includes_batch=False compares each reward with its prompt's earlier visits alone; "
                "scale_rewards='group' would divide by their deviation, which a single earlier reward does not have "
                "and earlier rewards that agree make 0. Use scale_rewards='batch' (the batch's deviation) or 'none'."
            )
        if baseline in ("all_rollouts", "history") and not earlier_only and self.scale_rewards == "batch":
            raise ValueError(
                f"the advantage baseline {baseline!r} (advantage_baseline; under Reinforce-Ada "
                f"reinforce_ada_global_statistics) takes each prompt's mean and deviation of the summed rewards over "
                f"more than its trained rows, which defines the scale of a group (scale_rewards='group') or none "
                f"(scale_rewards='none'); scale_rewards='batch' (one deviation for the whole batch) has no such "
                "meaning. Use scale_rewards='group' or 'none', advantage_history_includes_batch=False (its earlier "
                "visits alone) with the history baseline, or advantage_baseline='group'."
            )

    def resolved_advantage_baseline(self, allocator=None) -> str:
        """The baseline a run uses: `advantage_baseline`, or the rule's own (Reinforce-Ada's global statistics, on
        its settings or on the allocator object given to the trainer; SPO's; under the default `uniform`, the history
        baseline wherever TRL's reward scaling gives it a meaning, else GRPO's group)."""
        if self.advantage_baseline is not None:
            return self.advantage_baseline
        if allocator is None and self.budget_allocator == "reinforce_ada":
            return "all_rollouts" if self.reinforce_ada_global_statistics else "group"
        if self.budget_allocator == "spo":  # an allocator object given with it replaces its allocation alone
            return "spo"
        if allocator is None and self.budget_allocator == "uniform" and self.history_keeps_trl_scaling():
            return "history"
        return "all_rollouts" if getattr(allocator, "global_statistics", False) is True else "group"

    def history_keeps_trl_scaling(self) -> bool:
        """Whether TRL's reward scaling has a meaning for the history baseline: each prompt's own deviation
        (`scale_rewards` 'group') or none, of the summed rewards. Under 'batch' scaling, or with every reward function
        normalized apart, the default baseline stays GRPO's group, so that those settings keep TRL's meaning."""
        return self.scale_rewards in ("group", "none") and self.multi_objective_aggregation == "sum_then_normalize"

    def check_loss_weighting(self) -> None:
        if self.loss_weighting not in ("token", "prompt"):
            raise ValueError(
                f"loss_weighting={self.loss_weighting!r} is not a weighting: choose 'token' (every "
                "rollout alike, as TRL) or 'prompt' (each prompt's rollouts together weigh as num_generations)."
            )
        if self.loss_weighting == "prompt" and self.budget_allocator == "spo":
            raise ValueError(
                "loss_weighting='prompt' scales each prompt's rollouts to weigh as num_generations rollouts; "
                "budget_allocator='spo' gives every prompt the same spo_rollouts_per_prompt, so it would only scale "
                "every advantage by a constant. Remove it, or choose another allocator."
            )
        if self.loss_weighting == "prompt" and self.loss_type not in PROMPT_WEIGHTED_LOSSES:
            raise ValueError(
                f"loss_weighting='prompt' scales each prompt's advantages, which scales its loss terms exactly "
                f"only for losses positively homogeneous in the advantage; loss_type={self.loss_type!r} is not known "
                f"to be one. Use one of {', '.join(PROMPT_WEIGHTED_LOSSES)}, or loss_weighting='token'."
            )
