"""Probe, then allocate: a few rollouts of every prompt first, fresh pass rates from them, then the rest of the budget.

Both releases allocate from pass rates measured on a prompt's previous visit, an epoch or more old, and allocate the
first epoch blind. With `budget_probe_generations = k`, each generation batch is generated in two stages inside the
same rollout budget: every prompt first gets k rollouts (the probe), which are scored; the allocator then decides each
prompt's total count from pass rates that include the probe, and the second stage generates the rest.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["fresh_pass_rates", "merge_outputs"]


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


# How each tensor of TRL's generation output is padded when two stages are put together.
_LEFT_PADDED = {"prompt_ids", "prompt_mask"}
_PER_TOKEN = {"completion_ids", "completion_mask", "old_per_token_logps", "sampling_per_token_logps",
              "ref_per_token_logps", "importance_sampling_ratio", "tool_mask"}
_PER_ROW = {"advantages"}


def merge_outputs(first: dict, second: dict, pad_token_id: int) -> dict:
    """TRL's generation outputs of two stages as one batch: rows of `first`, then rows of `second`.

    Prompts are left-padded and completions right-padded to the longer of the two, as TRL pads them; masks pad with
    0. `num_items_in_batch` (loss tokens over all processes) adds up.
    """
    if set(first) != set(second):
        raise RuntimeError(f"the two stages returned different fields: {sorted(first)} and {sorted(second)}.")
    merged = {}
    for name, a in first.items():
        b = second[name]
        if name == "num_items_in_batch":
            merged[name] = a + b
        elif name in _PER_ROW or (name == "importance_sampling_ratio" and a.shape[1] == b.shape[1] == 1):
            merged[name] = torch.cat([a, b])
        elif name in _LEFT_PADDED or name in _PER_TOKEN:
            value = pad_token_id if name in ("prompt_ids", "completion_ids") else 0
            side = "left" if name in _LEFT_PADDED else "right"
            width = max(a.shape[1], b.shape[1])
            merged[name] = torch.cat([_pad_to(a, width, value, side), _pad_to(b, width, value, side)])
        else:
            raise RuntimeError(
                f"budget_probe_generations cannot merge the generation output {name!r} (multimodal inputs are not "
                "supported with a probe stage yet); set budget_probe_generations=0 for this run."
            )
    return merged


def _pad_to(tensor: torch.Tensor, width: int, value, side: str) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    padding = tensor.new_full((tensor.shape[0], missing, *tensor.shape[2:]), value)
    return torch.cat([padding, tensor] if side == "left" else [tensor, padding], dim=1)
