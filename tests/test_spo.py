"""SPO's rules against numbers worked by hand from the release's formulas (verl-recipe `spo/spo_ray_trainer.py`):
the prior from offline scores, the leave-out baseline normalized over the batch, rho from a scripted drift and a
constant rho, the update where a prompt has several rows, the sampling weights and draws; the tracker's state."""

import json
import math

import numpy as np
import pytest

from trl_budget.spo import (SPOTracker, draw_prompts, forgetting_factor, response_drift, sampling_weights,
                            spo_advantages, spo_prior)


def rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize(
    "scores, offline_n, expected",
    [
        # Binarized > 0: [1, 0, 1, 0, 1, 0, 0, 1], s = 4; N_init = 1 / (1 - 0.875) = 8: 8 x 4.5 / 9 = 4 each.
        ([1, 0, 0.5, -1, 1, 0, 0, 1], 8, (4.0, 4.0)),
        # Three scores under offline_n = 8: the five missing count as failures (the release divides by offline_n).
        ([1, 1, 1], 8, (8 * 3.5 / 9, 8 * 5.5 / 9)),
        # Ten successes, eight kept: s = 8.
        ([1] * 10, 8, (8 * 8.5 / 9, 8 * 0.5 / 9)),
        # offline_n = 0: Beta(0.5, 0.5) whatever the scores.
        ([1, 1, 0], 0, (0.5, 0.5)),
        # No scores, offline_n = 2: two failures, 8 x 0.5 / 3 and 8 x 2.5 / 3.
        ([], 2, (8 * 0.5 / 3, 8 * 2.5 / 3)),
    ],
)
def test_the_prior_from_offline_scores_by_hand(scores, offline_n, expected):
    np.testing.assert_allclose(spo_prior(scores, offline_n, 0.875, rng()), expected, rtol=1e-12)


def test_more_scores_than_offline_n_are_drawn_without_replacement_by_the_given_generator():
    scores = [1, 0] * 5  # 5 successes among 10: 8 drawn keep 3 to 5 of them
    alpha, beta = spo_prior(scores, 8, 0.5, rng())
    drawn = rng().choice(np.array([1, 0] * 5), size=8, replace=False).sum()
    np.testing.assert_allclose((alpha, beta), (2 * (drawn + 0.5) / 9, 2 * (8 - drawn + 0.5) / 9), rtol=1e-12)
    assert alpha + beta == pytest.approx(2.0)  # N_init = 1 / (1 - 0.5) whatever was drawn


def test_the_leave_out_baseline_normalized_over_the_batch_by_hand():
    # A = r - p = [0.5, -0.25, 0.1, -0.1]; mean 0.0625; deviations [0.4375, -0.3125, 0.0375, -0.1625], their squares
    # sum to 0.316875, / 3 = 0.105625: std 0.325.
    rewards, p_hats = np.array([1.0, 0.0, 1.0, 0.0]), np.array([0.5, 0.25, 0.9, 0.1])
    np.testing.assert_allclose(spo_advantages(rewards, p_hats),
                               np.array([0.4375, -0.3125, 0.0375, -0.1625]) / (0.325 + 1e-8), rtol=1e-12)
    np.testing.assert_allclose(spo_advantages(rewards, p_hats, normalize=False), [0.5, -0.25, 0.1, -0.1])


def test_unscored_rows_count_for_nothing_and_a_lone_row_has_no_deviation():
    rewards, p_hats = np.array([1.0, np.nan, 0.0]), np.array([0.5, 0.5, 0.25])
    a = np.array([0.5, -0.25])
    np.testing.assert_allclose(spo_advantages(rewards, p_hats),
                               [(a[0] - a.mean()) / (a.std(ddof=1) + 1e-8), 0.0, (a[1] - a.mean()) / (a.std(ddof=1) + 1e-8)])
    assert spo_advantages(np.array([1.0]), np.array([0.25])).tolist() == [0.0]


def test_rho_from_a_scripted_drift_by_hand():
    # 2^(-D / 0.06): D = 0 gives 1, clipped to 0.96; D = 0.006 gives 2^-0.1 = 0.9330..., inside; D = 0.06 gives 0.5
    # and D = 0.12 0.25, both clipped to clip_lower = 0.875.
    clipped, raw = forgetting_factor(np.array([0.0, 0.006, 0.06, 0.12]), 0.875)
    np.testing.assert_allclose(raw, [1.0, 2 ** -0.1, 0.5, 0.25], rtol=1e-12)
    np.testing.assert_allclose(clipped, [0.96, 2 ** -0.1, 0.875, 0.875], rtol=1e-12)


def test_the_drift_of_a_response_is_its_masked_mean_absolute_log_prob_difference():
    old, new = np.array([[-1.0, -2.0, -0.5]]), np.array([[-1.5, -2.0, -0.1]])
    np.testing.assert_allclose(response_drift(old, new, np.array([[1, 1, 0]])), [0.5 / (2 + 1e-8)], rtol=1e-12)


def test_a_constant_rho_and_the_update_by_hand():
    tracker = SPOTracker(rho=0.875)
    tracker.set_priors(["a", "b"], [(4.0, 4.0), (1.0, 3.0)])
    np.testing.assert_allclose(tracker.p_hats(["a", "b"]), [0.5, 0.25])
    tracker.update(["a", "b"], np.array([1.0, 0.5]), tracker.rho)
    assert (tracker.alpha["a"], tracker.beta["a"]) == (0.875 * 4 + 1, 0.875 * 4)
    assert (tracker.alpha["b"], tracker.beta["b"]) == (0.875 * 1 + 0.5, 0.875 * 3 + 0.5)  # partial credit: a share
    assert tracker.visits == {"a": 1, "b": 1}


def test_several_rows_of_a_prompt_start_from_the_same_values_and_the_last_is_kept():
    # The release's rule: every row's update starts from the old alpha and beta; the last row written wins.
    tracker = SPOTracker(rho=0.5)
    tracker.set_priors(["a"], [(4.0, 4.0)])
    tracker.update(["a", "a", "a"], np.array([1.0, 1.0, 0.0]), tracker.rho)
    assert (tracker.alpha["a"], tracker.beta["a"]) == (2.0, 3.0)
    assert tracker.visits["a"] == 3
    tracker.update(["a", "a"], np.array([0.0, np.nan]), tracker.rho)  # an unscored last row changes nothing
    assert (tracker.alpha["a"], tracker.beta["a"]) == (1.0, 2.5)


def test_every_row_of_a_prompt_counts_under_rows_all():
    # A prompt forgets once, by its rho, and gains every scored row's reward and failure: a group of 8 counts 8.
    tracker = SPOTracker(rho=0.5, rows="all")
    tracker.set_priors(["a", "b"], [(4.0, 4.0), (1.0, 1.0)])
    tracker.update(["a", "b", "a", "a"], np.array([1.0, 0.25, 1.0, 0.0]), np.array([0.5, 0.8, 0.5, 0.5]))
    assert (tracker.alpha["a"], tracker.beta["a"]) == (0.5 * 4 + 2, 0.5 * 4 + 1)
    assert (tracker.alpha["b"], tracker.beta["b"]) == (0.8 * 1 + 0.25, 0.8 * 1 + 0.75)
    assert tracker.visits == {"a": 3, "b": 1}
    tracker.update(["a", "a"], np.array([np.nan, 1.0]), tracker.rho)  # an unscored row counts for nothing
    assert (tracker.alpha["a"], tracker.beta["a"], tracker.visits["a"]) == (0.5 * 4 + 1, 0.5 * 3, 4)
    tracker.update(["b"], np.array([np.nan]), tracker.rho)  # a prompt with no scored row keeps its estimate
    assert (tracker.alpha["b"], tracker.beta["b"]) == (0.8 * 1 + 0.25, 0.8 * 1 + 0.75)


def test_the_sampling_weights_by_hand():
    np.testing.assert_allclose(sampling_weights(np.array([0.5, 0.0, 1.0, 0.9])), [0.55, 0.05, 0.05, 0.35])


def test_draws_without_replacement_when_the_candidates_suffice():
    for seed in range(20):
        drawn = draw_prompts(np.array([0.0, 0.0, 1.0, 1.0]), 2, np.random.default_rng(seed))
        assert sorted(drawn.tolist()) == [2, 3]
    drawn = draw_prompts(sampling_weights(np.linspace(0, 1, 9)), 9, np.random.default_rng(0))
    assert sorted(drawn.tolist()) == list(range(9))  # all of them, each once


def test_draws_with_replacement_when_more_are_needed_than_there_are_candidates():
    drawn = draw_prompts(np.array([0.0, 0.0, 0.0, 1.0]), 5, np.random.default_rng(0))
    assert drawn.tolist() == [3] * 5
    weights = np.array([0.55, 0.05])
    draws = draw_prompts(weights, 20_000, np.random.default_rng(1))
    assert np.mean(draws == 0) == pytest.approx(0.55 / 0.6, abs=0.01)


def test_every_weight_zero_draws_uniformly():
    draws = draw_prompts(np.zeros(4), 8_000, np.random.default_rng(2))
    np.testing.assert_allclose(np.bincount(draws) / 8_000, 0.25, atol=0.02)


def test_the_tracker_round_trips_through_json_and_refuses_other_settings():
    tracker = SPOTracker(rho="kl", clip_lower=0.875)
    tracker.set_priors(["a", "b"], [(4.0, 4.0), (1.0, 7.0)])
    tracker.update(["a"], np.array([1.0]), np.array([0.9]))
    tracker.responses["a"] = {"prompt_ids": [1, 2], "completion_ids": [3, 4], "log_probs": [-0.5, -1.5]}
    state = json.loads(json.dumps(tracker.state_dict()))
    restored = SPOTracker(rho="kl", clip_lower=0.875)
    restored.load_state_dict(state)
    assert restored.state_dict() == tracker.state_dict()
    with pytest.raises(ValueError, match="saved with rho='kl' and this run's is 0.875; set spo_rho='kl' to resume"):
        SPOTracker(rho=0.875).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with rows='last' and this run's is 'all'; set spo_update_rows='last'"):
        SPOTracker(rho="kl", rows="all").load_state_dict(state)
    before_the_setting = {name: value for name, value in state.items() if name != "rows"}
    restored.load_state_dict(before_the_setting)  # a state saved before `rows` existed was updated by the last row
    assert restored.rows == "last"
    for broken in ({**state, "alpha": [math.inf, 1.0]}, {**state, "keys": ["a"]},
                   {**state, "responses": {"a": {"prompt_ids": [1], "completion_ids": [2], "log_probs": []}}}):
        with pytest.raises(ValueError, match="the SPO state's"):
            SPOTracker(rho="kl").load_state_dict(broken)


def test_a_prompt_without_a_prior_is_refused_once_priors_are_set():
    tracker = SPOTracker()
    assert tracker.p_hats(["new"]).tolist() == [0.5]  # no offline values: Beta(0.5, 0.5)
    tracker.set_priors(["a"], [(1.0, 1.0)])
    with pytest.raises(ValueError, match="prompt 'new' has no SPO prior"):
        tracker.p_hats(["new"])


@pytest.mark.parametrize("settings, message", [({"rho": 1.5}, "^rho must be 'kl'"), ({"rho": "KL"}, "^rho must"),
                                               ({"clip_lower": 0.96}, "^clip_lower must be a number in"),
                                               ({"rows": "mean"}, "^rows must be 'last'")])
def test_bad_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        SPOTracker(**settings)


@pytest.mark.parametrize("entry, value", [("alpha", [0.0, 0.0]), ("responses", {"a": {
    "prompt_ids": [1], "completion_ids": [2], "log_probs": [float("nan")]}}), ("responses", {"a": {
        "prompt_ids": [-1], "completion_ids": [2], "log_probs": [-1.0]}})])
def test_a_state_that_would_poison_the_tracker_is_refused(entry, value):
    # Before: alpha = beta = 0 (p is NaN) and NaN log-probabilities loaded silently, and the sampling and rho went NaN.
    tracker = SPOTracker()
    tracker.set_priors(["a", "b"], [(0.0, 1.0), (1.0, 1.0)])
    state = {**tracker.state_dict(), entry: value}
    if entry == "alpha":
        state["beta"] = [0.0, 1.0]
    with pytest.raises(ValueError, match="the SPO state"):
        SPOTracker().load_state_dict(state)
