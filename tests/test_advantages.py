import math

import pytest
import torch

from trl_budget.trainer import grouped_advantages

NAN = float("nan")


def sample_std(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_variable_groups_against_hand_computation():
    rewards = torch.tensor([[1.0], [0.0], [0.0], [1.0], [1.0], [0.5], [0.0], [1.0], [2.0]])
    counts = torch.tensor([3, 1, 2, 3])
    advantages, zero_std = grouped_advantages(rewards, counts, torch.ones(1), "group", "sum_then_normalize")
    expected = []
    for group in ([1.0, 0.0, 0.0], [1.0], [1.0, 0.5], [0.0, 1.0, 2.0]):
        mean = sum(group) / len(group)
        std = sample_std(group) if len(group) > 1 else 0.0
        expected += [(r - mean) / (std + 1e-4) for r in group]
    torch.testing.assert_close(advantages, torch.tensor(expected), rtol=1e-6, atol=1e-6)
    assert advantages[3] == 0  # a group of one is its own baseline
    assert zero_std.tolist() == [False] * 3 + [True] + [False] * 5


def test_scale_none_and_batch():
    rewards = torch.tensor([[1.0], [0.0], [3.0], [1.0], [1.0]])
    counts = torch.tensor([2, 3])
    none, _ = grouped_advantages(rewards, counts, torch.ones(1), "none", "sum_then_normalize")
    torch.testing.assert_close(none, torch.tensor([0.5, -0.5, 4 / 3, -2 / 3, -2 / 3]))
    batch, zero_std = grouped_advantages(rewards, counts, torch.ones(1), "batch", "sum_then_normalize")
    std = sample_std([1.0, 0.0, 3.0, 1.0, 1.0])
    torch.testing.assert_close(batch, none / (std + 1e-4))
    assert not zero_std.any()


def test_weights_nan_and_unscorable_rows():
    rewards = torch.tensor([[1.0, NAN], [0.0, 1.0], [NAN, NAN], [1.0, 1.0]])
    counts = torch.tensor([4])
    advantages, _ = grouped_advantages(rewards, counts, torch.tensor([1.0, 2.0]), "group", "sum_then_normalize")
    totals = [1.0, 2.0, 3.0]  # nansum with weights; the unscorable row is left out of the baseline
    mean, std = sum(totals) / 3, sample_std(totals)
    expected = [(totals[0] - mean) / (std + 1e-4), (totals[1] - mean) / (std + 1e-4), 0.0, (totals[2] - mean) / (std + 1e-4)]
    torch.testing.assert_close(advantages, torch.tensor(expected), rtol=1e-6, atol=1e-6)


def test_normalize_then_sum():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, 0.0], [1.0, 1.0]])
    counts = torch.tensor([2, 3])
    advantages, _ = grouped_advantages(rewards, counts, torch.tensor([1.0, 0.5]), "group", "normalize_then_sum")
    normalised = []
    for rows in (rewards[:2], rewards[2:]):
        mean, std = rows.mean(0), rows.std(0)
        normalised.append((rows - mean) / (std + 1e-4))
    summed = (torch.cat(normalised) * torch.tensor([1.0, 0.5])).sum(1)
    expected = (summed - summed.mean()) / (summed.std() + 1e-4)
    torch.testing.assert_close(advantages, expected, rtol=1e-5, atol=1e-5)


def test_equal_groups_match_trl_view_exactly():
    torch.manual_seed(0)
    rewards = torch.randint(0, 2, (24, 1)).float()
    advantages, _ = grouped_advantages(rewards, torch.full((6,), 4), torch.ones(1), "group", "sum_then_normalize")
    grouped = rewards.view(-1, 4)
    mean = grouped.mean(1).repeat_interleave(4)
    std = grouped.std(1).repeat_interleave(4)
    assert torch.equal(advantages, (rewards.view(-1) - mean) / (std + 1e-4))


def test_bad_modes():
    with pytest.raises(ValueError, match="scale_rewards"):
        grouped_advantages(torch.ones(2, 1), torch.tensor([2]), torch.ones(1), "bogus", "sum_then_normalize")
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        grouped_advantages(torch.ones(2, 1), torch.tensor([2]), torch.ones(1), "group", "bogus")
