"""SPO's settings and prompt selection: its tracker, its offline scores, which prompts are drawn."""

from __future__ import annotations

from typing import Any

from ..checks import (
    check_optional_name,
    check_whole_number,
    is_finite_number,
)
from .common import allocator_in_words, name_the_field


def parsed_rho(rho) -> str | float:
    """`spo_rho` as SPO's tracker takes it: "kl", or a number (given as one, or as text on the command line)."""
    if isinstance(rho, str) and rho != "kl":
        try:
            return float(rho)
        except ValueError:
            raise ValueError(f"spo_rho must be 'kl' (KL-adaptive) or a constant forgetting factor in (0, 1], got "
                             f"{rho!r}.") from None
    return rho


def checked_reward_range(reward_range) -> list[float] | None:
    """`spo_reward_range` as two floats, low below high (None: [0, 1])."""
    if reward_range is None:
        return None
    if (isinstance(reward_range, (str, bytes)) or not hasattr(reward_range, "__len__") or len(reward_range) != 2
            or not all(is_finite_number(bound) for bound in reward_range) or not reward_range[0] < reward_range[1]):
        raise ValueError(f"spo_reward_range must be two finite numbers [low, high] with low below high, the range of "
                         f"a rollout's weighted reward, got {reward_range!r}; e.g. [0, 2] for an accuracy and a format "
                         "reward summed.")
    return [float(reward_range[0]), float(reward_range[1])]


class SPOSettings:
    """`BudgetGRPOConfig`'s part for SPO's settings and prompt selection, checked, and SPO's tracker they build."""

    def refuse_unread_spo_settings(self, changed: dict[str, Any]) -> None:
        """SPO's settings are read by its allocator (`spo_rollouts_per_prompt`), by its tracker (under its baseline
        or its prompt sampling) and by prompt sampling (`prompt_sampling_pool`)."""
        def refuse(name: str, reader: str) -> None:
            raise ValueError(f"{name}={changed[name]!r} is read only {reader}, which this run does not use, so it "
                             f"would be ignored. Remove {name}, or turn that on.")

        if "spo_rollouts_per_prompt" in changed and self.budget_allocator != "spo":
            refuse("spo_rollouts_per_prompt", "under budget_allocator='spo'")
        tracker_settings = ("spo_rho", "spo_rho_clip_lower", "spo_update_rows", "spo_offline_values",
                            "spo_offline_column", "spo_offline_sampling", "spo_offline_n", "spo_reward_range")
        for name in tracker_settings:
            if name in changed and not self.uses_spo_tracker():
                refuse(name, "by SPO's tracker (advantage_baseline='spo', prompt_sampling='spo' or "
                             "budget_allocator='spo')")
        if "spo_offline_n" in changed and not self.has_spo_offline_scores():
            refuse("spo_offline_n", "with offline scores (spo_offline_values, spo_offline_column or "
                                    "spo_offline_sampling)")
        if "spo_rho_clip_lower" in changed and parsed_rho(self.spo_rho) != "kl" and not self.has_spo_offline_scores():
            refuse("spo_rho_clip_lower", "by KL-adaptive rho (spo_rho='kl') and by the prior from offline scores "
                                         "(spo_offline_values, spo_offline_column or spo_offline_sampling)")
        if "prompt_sampling_pool" in changed and self.resolved_prompt_sampling() is None:
            refuse("prompt_sampling_pool", "with prompt sampling (prompt_sampling='spo' or 'value')")

    def resolved_prompt_sampling(self) -> str | None:
        """How the run chooses each generation batch's prompts: `prompt_sampling`, or SPO's under its allocator."""
        if self.prompt_sampling is None and self.budget_allocator == "spo":
            return "spo"
        return self.prompt_sampling

    def uses_spo_tracker(self, allocator=None) -> bool:
        """Whether the run keeps SPO's tracker: its baseline or its prompt sampling."""
        return self.resolved_advantage_baseline(allocator) == "spo" or self.resolved_prompt_sampling() == "spo"

    def check_spo_settings(self) -> None:
        """SPO's settings: whole counts, a forgetting factor, one source of offline scores, and (under its allocator)
        a generation batch that divides into its prompts."""
        check_whole_number("spo_rollouts_per_prompt", self.spo_rollouts_per_prompt, 1)
        check_whole_number("spo_offline_n", self.spo_offline_n, 0)
        # Whole numbers given as 2.0 or numpy integers count, slice and go into JSON checkpoints as ints.
        self.spo_rollouts_per_prompt, self.spo_offline_n = int(self.spo_rollouts_per_prompt), int(self.spo_offline_n)
        self.spo_rho = parsed_rho(self.spo_rho)
        self.spo_reward_range = checked_reward_range(self.spo_reward_range)
        for name in ("spo_offline_values", "spo_offline_column"):
            check_optional_name(name, getattr(self, name), "a path" if name.endswith("values") else "a column")
        sources = [f"{name}={getattr(self, name)!r}" for name in ("spo_offline_values", "spo_offline_column",
                                                                  "spo_offline_sampling")
                   if getattr(self, name) not in (None, False)]
        if len(sources) > 1:
            raise ValueError(f"{' and '.join(sources)} all give SPO's offline scores; set one of them.")
        if self.spo_offline_sampling and self.spo_offline_n == 0:
            raise ValueError("spo_offline_sampling=True samples spo_offline_n rollouts of every prompt, but "
                             "spo_offline_n=0 asks for none (and a prior of Beta(0.5, 0.5)). Raise spo_offline_n, or "
                             "set spo_offline_sampling=False.")
        self.make_spo_tracker()
        baseline = self.resolved_advantage_baseline()
        if self.budget_allocator == "spo" and self.spo_rollouts_per_prompt == 1 and baseline in ("group",
                                                                                               "all_rollouts"):
            raise ValueError(
                f"{allocator_in_words(self)} with spo_rollouts_per_prompt=1 trains one rollout a prompt, and "
                f"advantage_baseline={baseline!r} compares each rollout with its prompt's other rollouts of the batch: "
                "there are none, so every advantage would be 0. Use advantage_baseline='spo' (SPO's) or 'history' "
                "(the prompt's earlier visits), raise spo_rollouts_per_prompt, or set budget_allocator='uniform' for "
                "GRPO's groups."
            )
        if self.budget_allocator == "spo" and self.generation_batch_size % self.spo_rollouts_per_prompt:
            raise ValueError(
                f"budget_allocator='spo' gives every prompt spo_rollouts_per_prompt={self.spo_rollouts_per_prompt} "
                f"rollouts, which does not divide generation_batch_size={self.generation_batch_size}. Choose a "
                "divisor of it."
            )

    def has_spo_offline_scores(self) -> bool:
        """Whether SPO's prior comes from offline scores: a file, a column, or the run's own pre-pass."""
        return (self.spo_offline_values is not None or self.spo_offline_column is not None
                or bool(self.spo_offline_sampling))

    def make_spo_tracker(self):
        """SPO's tracker with this config's forgetting (its priors are set by the trainer, from the data)."""
        from ..spo import SPOTracker

        try:
            return SPOTracker(rho=self.spo_rho, clip_lower=self.spo_rho_clip_lower, rows=self.spo_update_rows)
        except ValueError as error:
            settings = {"rho": "spo_rho", "clip_lower": "spo_rho_clip_lower", "rows": "spo_update_rows"}
            raise ValueError(name_the_field(str(error), lambda name: settings.get(name, name))) from error

    def check_prompt_sampling(self) -> None:
        """Prompt sampling: a rule by name, a pool of whole prompts, and not with dynamic sampling (which draws its
        prompts itself)."""
        if self.prompt_sampling is not None and self.prompt_sampling not in ("spo", "value"):
            raise ValueError(f"prompt_sampling={self.prompt_sampling!r} is not a rule: choose 'spo' (SPO's weights), "
                             "'value' (the allocator's value of each prompt), or None for TRL's sampler's order.")
        if self.prompt_sampling_pool is not None:
            check_whole_number("prompt_sampling_pool", self.prompt_sampling_pool, 1)
            self.prompt_sampling_pool = int(self.prompt_sampling_pool)
        if self.resolved_prompt_sampling() is not None and self.dynamic_sampling:
            raise ValueError(
                "dynamic_sampling=True draws its prompts itself, generation batch after generation batch, so "
                f"prompt_sampling={self.resolved_prompt_sampling()!r} cannot choose them too. Set one of them."
            )
