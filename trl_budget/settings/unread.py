"""Settings of the wrong type, and settings the chosen rule would never read: refused."""

from __future__ import annotations

from dataclasses import fields

from trl import GRPOConfig

from ..checks import (
    check_flag,
    check_optional_name,
)
from .common import allocator_in_words, same_value
from .renamed import RENAMED_SETTINGS

# The built-in allocators whose options are fields of their own.
ALLOCATORS_WITH_FIELDS = ("knapsack", "coba", "reinforce_ada", "vip")
# The history baseline's own settings.
HISTORY_SETTINGS = ("advantage_history_window", "advantage_history_first_visit", "advantage_history_includes_batch")


def budget_fields(config) -> list:
    """The fields the config adds to TRL's (the former names of renamed settings left out)."""
    return [f for f in fields(config) if f.name not in GRPOConfig.__dataclass_fields__ and f.name not in RENAMED_SETTINGS]


class UnreadSettings:
    """`BudgetGRPOConfig`'s part for settings of the wrong type or that the chosen rule never reads, refused."""

    def check_setting_types(self) -> None:
        """The budget settings that are names or switches hold a name or a switch (numbers are checked with their
        ranges, type first)."""
        if not isinstance(self.budget_allocator, str):
            raise ValueError(
                f"budget_allocator must be the name of an allocator (a string such as 'knapsack', or a dotted path), "
                f"got {self.budget_allocator!r}; pass an allocator object to the trainer as `allocator=` instead."
            )
        if isinstance(self.success_reward_func, bool) or not isinstance(self.success_reward_func, (int, str,
                                                                                                   type(None))):
            raise ValueError(
                f"success_reward_func={self.success_reward_func!r} is not a reward function's index or name; give the "
                "index (from 0) or the name of one of the trainer's reward_funcs, or None for their weighted sum."
            )
        for name in ("prompt_id_column", "pass_rate_prior_column", "prompt_group_column"):
            check_optional_name(name, getattr(self, name), "a column of the training dataset")
        for budget_field in budget_fields(self):
            if isinstance(budget_field.default, bool):
                check_flag(budget_field.name, getattr(self, budget_field.name))

    def refuse_unread_settings(self) -> None:
        """A setting that the chosen rule never reads is refused, naming the rule that would read it: a setting
        accepted and then ignored would make a run that is not the one asked for."""
        changed = {f.name: getattr(self, f.name) for f in budget_fields(self)
                   if not same_value(getattr(self, f.name), f.default)}
        if changed.get("budget_max_generations") == self.generation_bounds(rollouts_a_prompt=False)[1]:
            del changed["budget_max_generations"]  # the bound its default gives: nothing changed
        for allocator in ALLOCATORS_WITH_FIELDS:
            own = [name for name in changed if name.startswith(f"{allocator}_")]
            if own and self.budget_allocator != allocator:
                raise ValueError(
                    f"{own[0]}={changed[own[0]]!r} is read only by budget_allocator={allocator!r}, but this run's "
                    f"is {allocator_in_words(self)}, which would ignore it. Remove {own[0]}, or set "
                    f"budget_allocator={allocator!r}."
                )
        dynamic = [name for name in changed if name.startswith("dynamic_sampling_")]
        if dynamic and not self.dynamic_sampling:
            raise ValueError(
                f"{dynamic[0]}={changed[dynamic[0]]!r} is read only with dynamic_sampling=True, which this run "
                "does not set, so it would be ignored. Remove it, or set dynamic_sampling=True."
            )
        self.refuse_unread_spo_settings(changed)
        history = [name for name in HISTORY_SETTINGS if name in changed]
        if history and self.resolved_advantage_baseline() != "history":
            raise ValueError(
                f"{history[0]}={changed[history[0]]!r} is read only with advantage_baseline='history' (this run's: "
                f"{self.resolved_advantage_baseline()!r}), which would ignore it. Remove it, or set "
                "advantage_baseline='history'."
            )
        rule, unread = self._rule_and_unread_settings()
        ignored = [name for name in unread if name in changed]
        if ignored:
            name = ignored[0]
            raise ValueError(f"{name}={changed[name]!r} is never read {rule}. Remove it{unread[name]}.")

    def _rule_and_unread_settings(self) -> tuple[str, dict[str, str]]:
        """The batch's rule in words, and the settings it never reads, each with the rest of its fix."""
        if self.budget_allocator == "spo":
            return (f"under {allocator_in_words(self)}: every prompt gets spo_rollouts_per_prompt rollouts in one "
                    "round, its prompts drawn by prompt sampling"), dict.fromkeys(
                ("budget_min_generations", "budget_max_generations", "probe_generations", "rounds_generations",
                 "rounds_first_generations", "rounds_max", "budget_token_cap", "pass_rate_prior_column",
                 "prompt_group_column", "pass_rate_prior_strength", "probe_history_weight",
                 "probe_prior_strength", "rounds_prompt_by_prompt"),
                ", or choose another allocator for it")
        if self.budget_allocator == "vip":
            return self._vip_rule_and_unread_settings()
        if self.budget_allocator == "reinforce_ada":
            fix = ", or choose a one-shot allocator ('knapsack', 'coba' or 'uniform') for it"
            return ("under budget_allocator='reinforce_ada': it generates each batch in rounds of its own "
                    "(reinforce_ada_samples_per_round, reinforce_ada_max_rounds, reinforce_ada_max_generated) and "
                    "decides from the batch's own rollouts alone"), dict.fromkeys(
                ("probe_generations", "rounds_generations", "rounds_first_generations",
                 "rounds_max", "budget_token_cap", "pass_rate_prior_column", "prompt_group_column",
                 "pass_rate_prior_strength", "probe_history_weight", "probe_prior_strength"), fix)
        if self.rounds_generations:
            return ("with rounds until mixed (rounds_generations): every prompt's first round is the same, and "
                    "the top-up spreads the budget left, not token-capped, from rates that include the batch's "
                    "rollouts (the tracker's history, probe_history_weight and probe_prior_strength; "
                    "no prior)"), dict.fromkeys(
                ("budget_token_cap", "pass_rate_prior_column", "prompt_group_column", "pass_rate_prior_strength"),
                ", or set rounds_generations=0 for a one-shot allocation that reads it")
        unread = dict.fromkeys(("rounds_first_generations", "rounds_max"),
                               ", or turn rounds until mixed on with rounds_generations")
        if not self.probe_generations:
            unread.update(dict.fromkeys(("probe_history_weight", "probe_prior_strength"),
                                        ", or turn a probe stage on (probe_generations) or rounds until mixed "
                                        "(rounds_generations), which read it"))
        if self.budget_allocator == "uniform":  # uniform never reads a pass rate
            unread.update(dict.fromkeys(("pass_rate_prior_column", "prompt_group_column", "pass_rate_prior_strength"),
                                        ", or choose an allocator that reads pass rates ('knapsack' or 'coba')"))
        elif self.pass_rate_prior_column is None and self.prompt_group_column is None:
            unread["pass_rate_prior_strength"] = ", or name a prior with pass_rate_prior_column or prompt_group_column"
        stage = "with a probe stage" if self.probe_generations else "in one shot (no probe, no rounds)"
        return f"by budget_allocator={self.budget_allocator!r} {stage}", unread

    def _vip_rule_and_unread_settings(self) -> tuple[str, dict[str, str]]:
        """VIP's rule in words and the settings it never reads: a probe stage, a token cap and a prior (not built
        with it), and without rounds until mixed the rounds' own settings."""
        unread = {
            "probe_generations": ", or set rounds_generations for rounds until mixed, whose top-up VIP splits from "
                                 "rates that include the batch's rollouts (a probe stage is not built with VIP), or "
                                 "choose another allocator for it",
            "budget_token_cap": " (VIP's objective has no price per token), or choose 'knapsack' or 'coba' for it",
        }
        unread.update(dict.fromkeys(("pass_rate_prior_column", "prompt_group_column", "pass_rate_prior_strength"),
                                    ": VIP predicts an unseen prompt's rate from its embedding (a prior's knowledge "
                                    "can go into vip_embeddings), or choose 'knapsack' or 'coba' for it"))
        if self.rounds_generations:
            return ("under budget_allocator='vip' with rounds until mixed: every prompt's first round is the same, "
                    "and VIP's objective splits the budget left from rates that include the batch's rollouts"), unread
        unread.update(dict.fromkeys(("rounds_first_generations", "rounds_max", "probe_history_weight",
                                     "probe_prior_strength"),
                                    ", or turn rounds until mixed on with rounds_generations, which reads it"))
        return ("under budget_allocator='vip' in one shot: it allocates from its predictor's success rates (the "
                "tracker's last visits, unseen prompts predicted from their embeddings)"), unread
