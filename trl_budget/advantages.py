"""GRPO advantages over groups of different sizes, computed as TRL computes them for equal groups."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch
from trl.trainer.utils import nanstd

__all__ = ["advantages_against_all_rollouts", "advantages_against_batch", "advantages_against_earlier_visits",
           "advantages_against_moments", "batch_moments", "grouped_advantages", "groups_without_spread",
           "prompt_loss_weights", "weighted_rewards"]


def weighted_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each rollout's weighted sum of rewards, as TRL sums them; NaN where no reward function could score it."""
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


def grouped_advantages(
    rewards_per_func: torch.Tensor,
    counts: torch.Tensor,
    reward_weights: torch.Tensor,
    scale_rewards: str,
    aggregation: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages over consecutive groups of `counts` rows, as TRL computes them for equal groups.

    Groups are padded with NaN to the largest size, so TRL's NaN-aware reductions give exactly TRL's numbers when all
    groups have the same size. A group of one row gets advantage 0 (its reward is its own baseline).

    Returns:
        `(advantages, is_std_zero)`, one value per row.
    """
    rows, num_funcs = rewards_per_func.shape
    groups, size = counts.numel(), int(counts.max())
    equal = rows == groups * size  # every group has `size` rows: views and integer repeats, no scatter
    repeats = size if equal else counts
    singleton = (counts == 1).repeat_interleave(repeats)

    def expand(per_group: torch.Tensor) -> torch.Tensor:  # one value per group -> one per row
        return per_group.repeat_interleave(repeats, dim=0)

    def pad(values: torch.Tensor) -> torch.Tensor:
        if equal:
            return values.view(groups, size, *values.shape[1:])
        group_of_row = torch.repeat_interleave(torch.arange(groups, device=counts.device), counts)
        position = torch.arange(rows, device=counts.device) - (torch.cumsum(counts, 0) - counts)[group_of_row]
        padded = values.new_full((groups, size, *values.shape[1:]), float("nan"))
        padded[group_of_row, position] = values
        return padded

    def group_std(padded: torch.Tensor) -> torch.Tensor:
        std = expand(nanstd(padded, dim=1, keepdim=True)[:, 0])
        return torch.where(singleton.view(-1, *[1] * (std.ndim - 1)), torch.zeros_like(std), std)

    if aggregation == "sum_then_normalize":
        rewards = weighted_rewards(rewards_per_func, reward_weights)
        padded = pad(rewards)
        mean = expand(torch.nanmean(padded, dim=1))
        if scale_rewards in ("group", "none"):
            std = group_std(padded)
        elif scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rows > 1 else torch.zeros_like(rewards)
        else:
            raise ValueError(f"Invalid value for scale_rewards: {scale_rewards}. Must be 'batch', 'group' or 'none'.")
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
    elif aggregation == "normalize_then_sum":
        padded = pad(rewards_per_func)
        mean_k = expand(torch.nanmean(padded, dim=1, keepdim=True)[:, 0])
        reward_k = (rewards_per_func - mean_k) / (group_std(padded) + 1e-4)
        rewards = (reward_k * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if rows > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    else:
        raise ValueError(
            f"Invalid multi_objective_aggregation: {aggregation}. Must be 'sum_then_normalize' or 'normalize_then_sum'."
        )
    is_std_zero = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0), is_std_zero


def advantages_against_all_rollouts(trained: torch.Tensor, trained_counts: np.ndarray, generated: torch.Tensor,
                                    generated_counts: np.ndarray, scale: bool, epsilon: float = 1e-6
                                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages of the trained rows against a baseline from *all* the prompt's rollouts of the batch: Reinforce-Ada's
    global statistics (the release's `global_stat_est`).

    `trained` holds the weighted rewards of the trained rows (`trained_counts[i]` of prompt i, consecutive) and
    `generated` those of every rollout generated (`generated_counts[i]` of prompt i, consecutive); NaN marks an
    unscored rollout. A prompt's baseline is the mean of its scored generated rewards and, with `scale`, the advantage
    is divided by their unbiased standard deviation, clamped at `epsilon`, plus `epsilon`, as the release does over its
    scores (0/1 there, where this is exactly the release's arithmetic). A prompt whose scored rewards all agree gets
    advantage 0, as GRPO gives a group without spread, and so does a prompt with a single scored rollout, which agrees
    with itself: its reward is its own baseline, as under `"group"`. (verl's rule, which the release inherits, gives a
    lone rollout mean 0 and deviation 1, i.e. its raw reward as advantage; the release never generates fewer than a
    round of several rollouts per prompt, so it never meets the case.) Unscored trained rows get 0.

    Returns:
        `(advantages, is_std_zero)`, one value per trained row; `is_std_zero` where all the prompt's rewards agree.
    """
    values = generated.detach().to(torch.float64).cpu().numpy()
    prompts = len(generated_counts)
    mean, std, agree = np.zeros(prompts), np.ones(prompts), np.zeros(prompts, dtype=bool)
    for prompt, start in enumerate(np.cumsum(generated_counts) - generated_counts):
        scored = values[start : start + generated_counts[prompt]]
        scored = scored[~np.isnan(scored)]
        if scored.size < 2:  # one reward (or none) agrees with itself: no spread, no baseline beyond itself
            agree[prompt] = True
            continue
        mean[prompt] = scored.sum() / scored.size
        # Summed over the distinct rewards (two for 0/1 rewards), so that 0/1 rewards give the release's numbers bit
        # for bit: successes x (1 - mean)^2 + failures x mean^2.
        distinct, times = np.unique(scored, return_counts=True)
        variance = (times * (distinct - mean[prompt]) ** 2).sum() / (scored.size - 1)
        std[prompt], agree[prompt] = max(math.sqrt(variance), epsilon), distinct.size == 1
    return _against_baseline(trained, trained_counts, mean, std if scale else None, agree, epsilon)


def advantages_against_moments(trained: torch.Tensor, trained_counts: np.ndarray, weight: np.ndarray,
                               mean: np.ndarray, m2: np.ndarray, scale: bool, epsilon: float = 1e-4
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages of the trained rows (`trained_counts[i]` of prompt i, consecutive) against each prompt's reward
    moments: `weight` rewards (a decayed count) of mean `mean` whose squared deviations sum to `m2`, as the history
    baseline pools them. The deviation is `sqrt(m2 / (weight - 1))` (unbiased for equal weights) and, with `scale`, the
    advantage is divided by it plus `epsilon`, as GRPO divides. A prompt with at most one reward's weight, or whose
    rewards all agree, gets advantage 0, as GRPO gives a group of one or without spread; unscored rows get 0.

    Returns:
        `(advantages, is_std_zero)`, one value per trained row; `is_std_zero` where the prompt's rewards agree.
    """
    several = weight > 1
    deviation = np.sqrt(np.divide(m2, weight - 1, out=np.zeros_like(m2), where=several))
    # Agreeing rewards as GRPO tells them (torch.isclose(std, 0)): a float residue of equal rewards is no spread.
    agree = ~several | np.isclose(deviation, 0.0, rtol=0.0, atol=1e-8)
    return _against_baseline(trained, trained_counts, mean, deviation if scale else None, agree, epsilon)


def _against_baseline(trained: torch.Tensor, trained_counts: np.ndarray, mean: np.ndarray, deviation: np.ndarray | None,
                      agree: np.ndarray, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each trained row's reward minus its prompt's `mean`, divided by its `deviation` plus `epsilon` (None: not
    divided), in float64; 0 where the prompt's rewards `agree` and for unscored rows. Returns them in the rewards'
    dtype, with `is_std_zero` per row (where the prompt's rewards agree)."""
    per_row = torch.as_tensor(np.repeat(np.arange(len(trained_counts)), trained_counts), device=trained.device)
    as_tensor = partial(torch.as_tensor, device=trained.device)
    advantages = trained.to(torch.float64) - as_tensor(mean)[per_row]
    if deviation is not None:
        advantages = advantages / (as_tensor(deviation)[per_row] + epsilon)
    is_std_zero = as_tensor(agree)[per_row]
    advantages = torch.where(is_std_zero, torch.zeros_like(advantages), advantages)
    return torch.nan_to_num(advantages, nan=0.0).to(trained.dtype), is_std_zero


def batch_moments(rewards: torch.Tensor) -> tuple[float, float, float]:
    """The generation batch's reward moments as the history pools them: its scored rewards' count, mean and sum of
    squared deviations (0, 0, 0 for a batch with none scored)."""
    values = rewards.detach().to(torch.float64).cpu().numpy()
    scored = values[~np.isnan(values)]
    if not scored.size:
        return 0.0, 0.0, 0.0
    return float(scored.size), float(scored.mean()), float(((scored - scored.mean()) ** 2).sum())


def batch_deviation(rewards: torch.Tensor) -> tuple[float, bool]:
    """The batch's deviation as TRL's `scale_rewards="batch"` takes it (the unbiased standard deviation of its scored
    rewards; 0 for fewer than two), and whether its rewards all agree (GRPO's `isclose(std, 0)`)."""
    count, _, m2 = batch_moments(rewards)
    deviation = math.sqrt(m2 / (count - 1)) if count > 1 else 0.0
    return deviation, math.isclose(deviation, 0.0, rel_tol=0.0, abs_tol=1e-8)


def advantages_against_batch(trained: torch.Tensor, trained_counts: np.ndarray, scale: bool
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages of the trained rows against one baseline for the whole generation batch: the mean of its scored
    rewards (what SPO's normalization gives a prompt on its first visit), scaled as `against_batch_deviation` scales."""
    return against_batch_deviation(trained, trained_counts, np.full(len(trained_counts), batch_moments(trained)[1]),
                                   scale)


def advantages_against_earlier_visits(trained: torch.Tensor, trained_counts: np.ndarray, weight: np.ndarray,
                                      mean: np.ndarray, first_visit_mean: np.ndarray, scale: bool
                                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages of the trained rows (`trained_counts[i]` of prompt i, consecutive) against each prompt's mean reward
    from its earlier visits alone (`mean`, over a decayed `weight` of rewards; this batch's are not among them, so a
    row's baseline never holds its own reward), or on a first visit (`weight` 0) `first_visit_mean`; scaled as
    `against_batch_deviation` scales: one deviation for the batch, since a prompt's earlier rewards alone have none
    after a single reward, or none where they agreed."""
    return against_batch_deviation(trained, trained_counts, np.where(np.asarray(weight) > 0, mean, first_visit_mean),
                                   scale)


def against_batch_deviation(trained: torch.Tensor, trained_counts: np.ndarray, baseline: np.ndarray, scale: bool
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each trained row's reward minus its prompt's `baseline`; with `scale`, divided by the batch's deviation plus
    1e-4, as TRL's `scale_rewards="batch"` divides. A batch whose rewards all agree has no deviation to scale by: its
    advantages are then 0, as GRPO's group without spread (unscaled, they stand). Unscored rows get 0."""
    deviation, agree = batch_deviation(trained) if scale else (None, False)
    prompts = len(trained_counts)
    return _against_baseline(trained, trained_counts, baseline,
                             None if deviation is None else np.full(prompts, deviation), np.full(prompts, agree),
                             epsilon=1e-4)


def group_means(groups: list[np.ndarray]) -> np.ndarray:
    """Each group's mean scored reward (0 where none is scored: its rows are unscored and get 0 anyway)."""
    return np.array([group[~np.isnan(group)].mean() if (~np.isnan(group)).any() else 0.0 for group in groups])


def history_moments(tracker, keys: list[str], groups: list[np.ndarray], trained: torch.Tensor, first_visit: str
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each group's baseline moments under the history baseline: its prompt's history merged with the group's own
    rewards (`groups[i]`); on a prompt's first visit with `first_visit="batch"`, the batch's (its trained `rewards`)
    instead of the group's alone."""
    weight, mean, m2 = tracker.reward_moments_of_groups(keys, groups)
    if first_visit == "batch":
        first = tracker.reward_moments(keys)[0] == 0
        weight[first], mean[first], m2[first] = batch_moments(trained)
    return weight, mean, m2


def advantages_against_baseline(baseline: str, trained_per_func: torch.Tensor, trained_counts: np.ndarray,
                                trained: torch.Tensor, generated: torch.Tensor, generated_counts: np.ndarray,
                                keys: list[str], tracker, reward_weights: torch.Tensor, scale_rewards: str,
                                aggregation: str, first_visit: str = "group", includes_batch: bool = True
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The trained rows' advantages against `baseline` (`advantage_baseline`): `"group"`, GRPO's over each prompt's
    trained rows (`trained_per_func`, rewards per function); `"all_rollouts"`, the weighted rewards of all its rollouts
    of the batch (`generated`, `generated_counts[i]` of prompt i, in plan order); `"batch"`, the batch's mean reward;
    `"history"`, its reward history in `tracker`, pooled with them (`includes_batch`) or its earlier visits alone, a
    first visit falling back to the prompt's group or to the batch (`first_visit`). `trained` are the trained rows'
    weighted rewards, `keys` the prompts' tracker keys."""
    scale = scale_rewards != "none"
    if baseline == "all_rollouts":
        return advantages_against_all_rollouts(trained, trained_counts, generated, generated_counts, scale=scale)
    if baseline == "batch":
        return advantages_against_batch(trained, trained_counts, scale=scale)
    if baseline == "history":
        groups = np.split(generated.detach().to(torch.float64).cpu().numpy(), np.cumsum(generated_counts)[:-1])
        if not includes_batch:
            weight, mean, _ = tracker.reward_moments(keys)
            first_visit_mean = (np.full(len(keys), batch_moments(trained)[1]) if first_visit == "batch" else
                                group_means(groups))
            return advantages_against_earlier_visits(trained, trained_counts, weight, mean, first_visit_mean, scale)
        return advantages_against_moments(trained, trained_counts,
                                          *history_moments(tracker, keys, groups, trained, first_visit), scale=scale)
    counts = torch.as_tensor(trained_counts, device=trained_per_func.device)
    return grouped_advantages(trained_per_func, counts, reward_weights, scale_rewards, aggregation)


def prompt_loss_weights(counts: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Per row, the factor `num_generations / N_i` that gives each prompt's rollouts together the loss weight of
    `num_generations` rollouts (`loss_weighting="prompt"`).

    Every TRL loss is positively homogeneous in the advantage (the clipped surrogate `-min(r A, clip(r) A)`, CISPO's,
    SAPO's and VESPO's weights depend on the advantage's sign only), so scaling a prompt's advantages by a positive
    factor scales that prompt's policy-loss terms by exactly that factor.
    """
    factors = num_generations / counts.to(torch.float32)
    return factors.repeat_interleave(counts)


def groups_without_spread(rewards: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per group of `counts[i]` consecutive rewards: whether its scored rewards all agree (a group of one does)."""
    starts = np.cumsum(counts) - counts
    agree = []
    for start, count in zip(starts, counts):
        scored = rewards[start : start + count]
        scored = scored[~np.isnan(scored)]
        agree.append(scored.size < 2 or bool(scored.min() == scored.max()))
    return np.array(agree, dtype=bool)
