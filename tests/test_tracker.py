import json

import numpy as np
import pytest

from trl_budget import CapabilityTracker, prompt_key


def test_pass_rates_from_the_last_visit():
    tracker = CapabilityTracker()
    tracker.update(["a", "a", "b", "b", "b", "b"], [1, 0, 1, 1, 1, 0])
    np.testing.assert_allclose(tracker.pass_rates(["a", "b", "c"]), [0.5, 0.75, np.nan])
    tracker.update(["a", "a"], [0, 0])
    np.testing.assert_allclose(tracker.pass_rates(["a", "b"]), [0.0, 0.75])


def test_window_pools_recent_visits():
    tracker = CapabilityTracker(window=2)
    tracker.update(["a"] * 4, [1, 1, 1, 1])
    tracker.update(["a"] * 2, [0, 0])
    assert tracker.pass_rates(["a"])[0] == pytest.approx(4 / 6)
    tracker.update(["a"] * 2, [1, 0])
    assert tracker.pass_rates(["a"])[0] == pytest.approx(1 / 4)


def test_nan_rewards_are_ignored_not_failures():
    tracker = CapabilityTracker()
    tracker.update(["a", "a", "a", "b"], [1.0, np.nan, 0.0, np.nan])
    assert tracker.pass_rates(["a"])[0] == 0.5
    assert np.isnan(tracker.pass_rates(["b"])[0])  # never scored: still unseen
    assert tracker.failure_rate == pytest.approx(0.5)  # b does not count as a failure


def test_all_nan_batch_changes_nothing():
    tracker = CapabilityTracker()
    tracker.update(["a"], [np.nan])
    assert len(tracker) == 0 and tracker.failure_rate is None


def test_success_threshold_binarises_continuous_rewards():
    tracker = CapabilityTracker(success_threshold=0.5)
    tracker.update(["a"] * 4, [0.2, 0.5, 0.9, 0.49])
    assert tracker.pass_rates(["a"])[0] == 0.5


def test_failure_rate_is_a_moving_average_over_batches():
    tracker = CapabilityTracker(failure_rate_window=2)
    tracker.update(["a", "a", "b", "b"], [1, 1, 0, 0])  # prompt pass rates 1 and 0 -> failure 0.5
    tracker.update(["a", "a"], [1, 1])  # failure 0
    assert tracker.failure_rate == pytest.approx(0.25)
    tracker.update(["b", "b"], [0, 0])  # failure 1; the first batch leaves the window
    assert tracker.failure_rate == pytest.approx(0.5)


def test_state_round_trips_through_json_exactly():
    rng = np.random.default_rng(0)
    tracker = CapabilityTracker(window=3, failure_rate_window=4)
    for _ in range(6):
        keys = [f"p{i}" for i in rng.integers(0, 20, 40)]
        tracker.update(keys, rng.random(40) < 0.4)
    restored = CapabilityTracker(window=3, failure_rate_window=4)
    restored.load_state_dict(json.loads(json.dumps(tracker.state_dict())))
    keys = [f"p{i}" for i in range(25)]
    np.testing.assert_array_equal(restored.pass_rates(keys), tracker.pass_rates(keys))
    assert restored.failure_rate == tracker.failure_rate
    tracker.update(["p1"] * 4, [1, 1, 1, 1])
    restored.update(["p1"] * 4, [1, 1, 1, 1])
    assert restored.state_dict() == tracker.state_dict()


def test_state_from_other_settings_is_refused():
    state = CapabilityTracker(window=2).state_dict()
    with pytest.raises(ValueError, match="window"):
        CapabilityTracker(window=1).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        CapabilityTracker().load_state_dict({"version": 99})


@pytest.mark.parametrize(
    "kwargs, message",
    [({"window": 0}, "window"), ({"failure_rate_window": 0}, "failure_rate_window"),
     ({"success_threshold": float("nan")}, "success_threshold")],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CapabilityTracker(**kwargs)


def test_update_needs_one_reward_per_key():
    with pytest.raises(ValueError, match="one reward per key"):
        CapabilityTracker().update(["a", "b"], [1.0])


def test_prompt_key_is_stable_and_content_based():
    chat = [{"role": "user", "content": "1+1="}]
    assert prompt_key(chat) == prompt_key([{"content": "1+1=", "role": "user"}])
    assert prompt_key("1+1=") != prompt_key("1+2=")
    assert prompt_key("1+1=") == "9a9b127fd4f1fa738ccf27d78af47ff7"  # keys saved in checkpoints must not drift
