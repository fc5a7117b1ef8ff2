import numpy as np
import pytest

from trl_budget.demo.study_stats import (
    first_reach,
    holm,
    minimal_detectable_effect,
    paired_interval,
    rollouts_to_match,
    sign_flip_p_value,
    t_quantile,
    trailing_mean,
)


@pytest.mark.parametrize("probability, df, tabulated", [
    (0.975, 5, 2.571), (0.975, 19, 2.093), (0.975, 30, 2.042), (0.8, 19, 0.861), (0.8, 4, 0.941),
    (0.995, 5, 4.032), (0.995, 19, 2.861), (0.99, 9, 2.821), (0.9, 10, 1.372),
])
def test_t_quantile_matches_the_table(probability, df, tabulated):
    assert t_quantile(probability, df) == pytest.approx(tabulated, abs=0.004)


def test_paired_interval_by_hand():
    differences = [0.01, 0.03, -0.01, 0.05]  # mean 0.02, sd 0.025820, t(0.975, 3) = 3.182
    mean, (low, high) = paired_interval(differences)
    half = 3.182 * np.std(differences, ddof=1) / 2
    assert mean == pytest.approx(0.02)
    assert low == pytest.approx(0.02 - half, abs=2e-4) and high == pytest.approx(0.02 + half, abs=2e-4)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        paired_interval([0.1])


def test_minimal_detectable_effect_by_hand():
    # (t(0.975, 19) + t(0.8, 19)) * sd / sqrt(20) = (2.093 + 0.861) / 4.472
    assert minimal_detectable_effect(0.01, 20) == pytest.approx(0.01 * 2.954 / np.sqrt(20), rel=1e-3)
    assert minimal_detectable_effect(0.01, 40) < minimal_detectable_effect(0.01, 20)


def test_sign_flip_p_value():
    # Five positive differences: 2 of the 32 sign patterns are as extreme (all +, all -), p = 1/16.
    assert sign_flip_p_value([0.1, 0.2, 0.3, 0.2, 0.1]) == pytest.approx(1 / 16, abs=0.01)
    assert sign_flip_p_value([0.1, -0.1, 0.2, -0.2]) == pytest.approx(1.0)
    assert sign_flip_p_value(np.linspace(0.01, 0.02, 20)) < 1e-3


def test_holm_steps_down_and_stops_at_the_first_failure():
    result = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert [result[n]["significant"] for n in "acb"] == [True, False, False]  # 0.01 <= 0.05/3; 0.03 > 0.05/2
    assert [result[n]["p_holm"] for n in "acb"] == pytest.approx([0.03, 0.06, 0.06])  # monotone: b's 0.04 -> 0.06
    assert [result[n]["level"] for n in "acb"] == pytest.approx([1 - 0.05 / 3, 1 - 0.05 / 2, 1 - 0.05])
    # A later p-value under its own threshold is still not significant once an earlier one failed.
    assert holm({"x": 0.04, "y": 0.045})["y"]["significant"] is False


def test_trailing_mean_and_first_reach():
    assert trailing_mean([1.0, 2.0, 3.0, 4.0]).tolist() == pytest.approx([1.0, 1.5, 2.0, 3.0])
    assert first_reach([0, 10, 20], [0.0, 0.4, 0.8], 0.6) == pytest.approx(15.0)
    assert first_reach([0, 10, 20], [0.9, 0.4, 0.5], 0.6) is None  # the start does not count


def test_rollouts_to_match_on_straight_curves():
    rollouts = np.arange(0, 201, 10.0)  # the baseline's longer run: twice the variant's budget of 100
    curves = np.array([0.1 + 0.001 * rollouts + shift for shift in (-0.01, 0.0, 0.01)])  # trailing mean lags 10
    matched = rollouts_to_match(rollouts, curves, targets=[0.24, 0.25, 0.26], budget=100.0, resamples=500)
    assert matched["ratio"] == pytest.approx(1.6)  # 0.25 = 0.1 + 0.001 * (r - 10) at r = 160
    low, high = matched["ci95"]
    assert low <= 1.6 <= high and high - low < 0.5
    beyond = rollouts_to_match(rollouts, curves, targets=[0.9, 0.9, 0.9], budget=100.0, resamples=50)
    # A start above the target does not count as reaching it: the dip after it must be climbed out of.
    dipping = np.array([[0.9, 0.3, 0.3, 0.3, 0.4, 0.5, 0.6]])
    matched = rollouts_to_match(np.arange(7) * 10.0, dipping, targets=[0.45], budget=30.0, resamples=20)
    assert matched["ratio"] == pytest.approx(55 / 30)  # trailing means 0.3, 0.3, 0.3, 1/3, 0.4, 0.5: 0.45 at 55
    assert beyond["ratio"] is None and beyond["share_beyond_longest"] == 1.0 and beyond["longest_ratio"] == 2.0
