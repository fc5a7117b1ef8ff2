"""Probe, then allocate: a few rollouts of every prompt first, fresh pass rates from them, then the rest of the budget.

Both releases allocate from pass rates measured on a prompt's previous visit, an epoch or more old, and allocate the
first epoch blind. With `probe_generations = k`, each generation batch is generated in two stages inside the
same rollout budget: every prompt first gets k rollouts (the probe), which are scored; the allocator then decides each
prompt's total count from pass rates that include the probe, and the second stage generates the rest
(`round_rules.ProbeThenAllocate`). The same fresh pass rates feed the allocation of the budget left after rounds until
mixed (`round_rules.UntilMixed`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fresh_pass_rates"]


def fresh_pass_rates(history_wins, history_trials, probe_wins, probe_trials, history_weight: float,
                     prior_strength: float = 0.0) -> np.ndarray:
    """Each prompt's pass rate from its probe and its history: the mean of a Beta posterior.

    The history (successes and rollouts behind the tracker's pass rate) is the prior, each old rollout counting
    `history_weight` of a fresh one, since it comes from an older policy; the probe's rollouts update it. With
    `prior_strength` 0 no pseudo-counts are added, so a prompt whose history and probe all failed (or all succeeded)
    keeps a pass rate of exactly 0 (or 1), and the allocators' rules for never and always solved prompts apply. With
    `prior_strength` m > 0, m pseudo-rollouts at the batch's probe pass rate are added (empirical Bayes): a few probe
    rollouts then cannot alone declare a prompt hopeless or solved. NaN: no evidence.
    """
    probe_wins, probe_trials = np.asarray(probe_wins, dtype=np.float64), np.asarray(probe_trials, dtype=np.float64)
    wins = probe_wins + history_weight * np.asarray(history_wins, dtype=np.float64)
    trials = probe_trials + history_weight * np.asarray(history_trials, dtype=np.float64)
    if prior_strength > 0 and probe_trials.sum() > 0:
        wins = wins + prior_strength * probe_wins.sum() / probe_trials.sum()
        trials = trials + prior_strength
    return np.divide(wins, trials, out=np.full(trials.shape, np.nan), where=trials > 0)
