"""Reinforce-Ada (Xiong et al., 2025, arXiv 2510.04996): sample in rounds until each prompt has enough signal, then
train K rollouts of each.

As the verl release does it (`RLHFlow/Reinforce-Ada`, `algorithm.multiround_adaptive_downsampling`):

- Rounds. Every prompt still active gets `samples_per_round` rollouts per round, for at most `max_rounds` rounds.
- Exit rules (`reinforce_ada_choice`). `"balanced"`: a prompt leaves once its rollouts so far hold K/2 successes and
  K - K/2 failures. `"positive_focused"`: once they hold one success.
- Down-sampling to K = `num_generations` per prompt, from the prompt's rollouts in the order generated: a prompt that
  left takes up to K/2 successes and fills the rest with failures, then with more successes if failures run short;
  a prompt that never left (the fallback) takes, under `"balanced"`, the same split of what it has and, under
  `"positive_focused"`, ceil(share of successes x K) successes (at least 1, at most K - 1) and the rest failures,
  each side filled from the other when short. Successes come first in the group, then failures.
- The advantage baseline (`reinforce_ada_global_statistics`, the release's `global_stat_est`): the mean, and for
  the division the unbiased standard deviation, of the rewards of *all* the prompt's rollouts of the batch (mean 0
  and deviation 1 for a prompt with at most one), not of the K trained ones. The release takes them over its scores,
  0/1 in its recipes; here over the weighted rewards, which is its arithmetic for 0/1 rewards
  (`advantages.advantages_against_all_rollouts`).

Where the release is silent, TRL's conventions: a success is a reward at or above `success_threshold` (the release:
strictly above its `positive_threshold`; the same for 0/1 rewards), the division follows `scale_rewards` ("group":
divide, as the release's `norm_adv_by_std_in_grpo=True`; "none": do not), unscored (NaN) rollouts count as neither
and are trained only if a group would otherwise fall short of K. Two choices of this adaptation: `samples_per_round`
must be at least K, so that every prompt has K rollouts after the first round (TRL's batch shape needs exactly K of
each), and `max_generated` caps the rollouts generated per batch (the cost), so that arms can be compared at equal
generation cost; a round that would pass it is cut to what is left, spread evenly over the active prompts. The
Tinker release (`RLHFlow/Reinforce-Ada-Tinker`) down-samples `"positive_focused"` prompts positives first; this module
follows the verl release, where both choices down-sample alike.
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_whole_number
from .registry import register_allocator
from ..rollout_plan import rounded_to_processes
from .solver import spread_evenly
from .uniform import UniformAllocator

__all__ = ["CHOICES", "ReinforceAda", "ReinforceAdaRounds", "down_sample", "has_enough_signal"]

CHOICES = ("balanced", "positive_focused")


def has_enough_signal(choice: str, successes: np.ndarray, failures: np.ndarray, keep: int) -> np.ndarray:
    """The release's exit rule, per prompt: `balanced` needs K/2 successes and K - K/2 failures, `positive_focused`
    one success."""
    if choice == "balanced":
        return (successes >= keep // 2) & (failures >= keep - keep // 2)
    return successes >= 1


def down_sample(choice: str, outcomes: np.ndarray, keep: int, finished: bool) -> np.ndarray:
    """Which of a prompt's rollouts (positions in `outcomes`, its 1/0/NaN outcomes in the order generated) are trained:
    `keep` of them, as the release chooses (see the module's docstring)."""
    successes, failures = np.flatnonzero(outcomes == 1.0), np.flatnonzero(outcomes == 0.0)
    wins, losses = successes.size, failures.size
    if finished or choice == "balanced":
        take = keep if finished else min(keep, wins + losses)
        want_wins, want_losses = keep // 2, keep - keep // 2
    else:  # positive_focused, a prompt that never found a success (or ran out of rounds)
        take = min(keep, wins + losses)
        share = wins / (wins + losses) if wins + losses else 0.0
        want_wins = max(min(math.ceil(share * keep), take - 1), 1)
        want_losses = take - want_wins
    took_wins, took_losses = min(wins, want_wins), min(losses, want_losses)
    short = take - took_wins - took_losses
    if short > 0 and wins > took_wins:  # one side short: the other fills, successes first
        took_wins += min(wins - took_wins, short)
    elif short > 0 and losses > took_losses:
        took_losses += min(losses - took_losses, short)
    chosen = np.concatenate([successes[:took_wins], failures[:took_losses]])
    unscored = np.flatnonzero(np.isnan(outcomes))
    return np.concatenate([chosen, unscored[: keep - chosen.size]])


@register_allocator("reinforce_ada")
class ReinforceAda:
    """Reinforce-Ada's settings; `round_rule()` runs them for one generation batch.

    Called as an allocator it returns what it trains: `num_generations` rollouts of every prompt.

    Args:
        choice: the exit rule, `"balanced"` or `"positive_focused"`.
        samples_per_round: rollouts of every active prompt per round (at least `default_generations`).
        max_rounds: the most rounds per batch.
        global_statistics: the advantage baseline from all the prompt's rollouts of the batch (else from the K trained).
        max_generated: the most rollouts generated per batch; None: `max_rounds x samples_per_round` per prompt.
        default_generations: K, the rollouts trained per prompt (`num_generations`).
    """

    def __init__(self, choice: str = "balanced", samples_per_round: int = 8, max_rounds: int = 4,
                 global_statistics: bool = True, max_generated: int | None = None,
                 default_generations: int | None = None):
        if not (isinstance(choice, str) and choice in CHOICES):
            raise ValueError(f"choice must be a Reinforce-Ada exit rule, got {choice!r}: choose 'balanced' (K/2 "
                             "successes and K/2 failures) or 'positive_focused' (one success).")
        check_whole_number("max_rounds", max_rounds, 1)
        if default_generations is not None:
            check_whole_number("default_generations", default_generations, 1)
        keep = default_generations or 1
        check_whole_number("samples_per_round", samples_per_round, 1)
        if samples_per_round < keep:
            raise ValueError(
                f"samples_per_round must be at least num_generations={keep} (K, the rollouts trained of each prompt: "
                f"every prompt needs K after the first round), got {samples_per_round!r}. Raise it to {keep}, or "
                "lower num_generations."
            )
        if max_generated is not None:
            check_whole_number("max_generated", max_generated, 1)
        if not isinstance(global_statistics, bool):
            raise ValueError(f"global_statistics must be True or False, got {global_statistics!r}.")
        self.choice, self.samples_per_round, self.max_rounds = choice, int(samples_per_round), int(max_rounds)
        self.global_statistics, self.max_generated, self.keep = global_statistics, max_generated, keep

    def __call__(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
        return UniformAllocator(1, max(int(budget), 1)).allocate(pass_rates, budget)

    def generation_cap(self, prompts: int) -> int:
        """The most rollouts generated for a batch of `prompts` prompts."""
        every_round = prompts * self.samples_per_round * self.max_rounds
        return every_round if self.max_generated is None else min(self.max_generated, every_round)

    def check_batch(self, prompts: int, processes: int) -> None:
        """A `ValueError` unless a batch of `prompts` prompts on `processes` processes can run: the first round (every
        prompt's `samples_per_round`, rounded up to a multiple of the processes) fits under `max_generated`."""
        first = -(-prompts * self.samples_per_round // processes) * processes
        if self.max_generated is not None and self.max_generated < first:
            raise ValueError(
                f"reinforce_ada_max_generated={self.max_generated} cannot hold the first round: {prompts} prompts x "
                f"reinforce_ada_samples_per_round={self.samples_per_round} = {first} rollouts (a multiple of the "
                f"{processes} processes), which every prompt needs to have K={self.keep} to train. Raise "
                "reinforce_ada_max_generated, or lower reinforce_ada_samples_per_round."
            )

    def round_rule(self, processes: int) -> "ReinforceAdaRounds":
        return ReinforceAdaRounds(self, processes)

    def __repr__(self) -> str:
        return (f"ReinforceAda(choice={self.choice!r}, samples_per_round={self.samples_per_round}, max_rounds="
                f"{self.max_rounds}, K={self.keep})")


class ReinforceAdaRounds:
    """One batch of Reinforce-Ada: its rounds (`next_round`), then the rows it trains (`trained_slots`)."""

    single_round = False

    def __init__(self, settings: ReinforceAda, processes: int):
        self.settings, self.processes = settings, processes
        self.pass_rates, self.history_counts = None, None
        self.active_after_round: list[float] = []

    def finished(self, rounds) -> np.ndarray:
        return has_enough_signal(self.settings.choice, rounds.wins, rounds.trials - rounds.wins, self.settings.keep)

    def next_round(self, rounds) -> np.ndarray | None:
        settings = self.settings
        if len(rounds):
            self.active_after_round.append(float((~self.finished(rounds)).mean()))
        left = settings.generation_cap(rounds.num_prompts) - int(rounds.counts.sum())
        wanted = self.own_asks(rounds.counts, rounds.wins, rounds.trials, len(rounds))
        if wanted.any() and left > 0:
            if wanted.sum() > left:  # the cap cuts this round: what is left, spread evenly over the active prompts
                wanted = spread_evenly(left, np.zeros_like(wanted), wanted)
            wanted = rounded_to_processes(wanted, np.full(wanted.size, left), left, self.processes)
            if wanted.any():
                return wanted
        self.pass_rates = np.divide(rounds.wins, rounds.trials, out=np.full(rounds.num_prompts, np.nan),
                                    where=rounds.trials > 0)  # the batch's own evidence
        return None

    def own_asks(self, counts: np.ndarray, wins: np.ndarray, trials: np.ndarray, round_index: int) -> np.ndarray:
        """What each prompt's own rollouts ask of round `round_index`, before the generation cap's cut:
        `samples_per_round` while it lacks the signal its exit rule needs and rounds are left, else 0 (for good: its
        successes and failures only grow). In the first round every prompt asks."""
        settings = self.settings
        lacking = ~has_enough_signal(settings.choice, wins, trials - wins, settings.keep) | (round_index == 0)
        return np.where(lacking & (round_index < settings.max_rounds), settings.samples_per_round, 0).astype(np.int64)

    def bounds_of_asks(self, prompts: int) -> tuple[int, int, int] | None:
        """The batch's generation cap, the most one round asks of a prompt and the most a prompt gets (no cap of
        its own: the rounds bound it); None where a round's rounding to the processes may move rollouts between
        prompts (then no prompt decides alone)."""
        settings = self.settings
        if settings.samples_per_round % self.processes:
            return None
        return (settings.generation_cap(prompts), settings.samples_per_round,
                settings.samples_per_round * settings.max_rounds)

    def trained_slots(self, rounds) -> tuple[np.ndarray, np.ndarray]:
        """The plan slots of the rows trained (K of each prompt, prompt by prompt) and K per prompt."""
        outcomes = rounds.outcomes_in_plan_order()
        starts = np.cumsum(rounds.counts) - rounds.counts
        finished = self.finished(rounds)
        chosen = [start + down_sample(self.settings.choice, outcomes[start : start + count], self.settings.keep, done)
                  for start, count, done in zip(starts, rounds.counts, finished)]
        return np.concatenate(chosen).astype(np.int64), np.full(rounds.num_prompts, self.settings.keep)

