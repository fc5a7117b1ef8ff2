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


def visit(tracker, rewards, key="a"):
    tracker.update([key] * len(rewards), rewards)
    return tracker.pass_rates([key])[0]


NAN = float("nan")


def test_knapsack_release_rule_on_a_sequence_of_visits():
    tracker = CapabilityTracker(window=16, min_rollouts=8, rollout_pool=16)
    assert np.isnan(visit(tracker, [1, 0]))  # 2 scored rollouts: not yet trusted
    assert np.isnan(visit(tracker, [1, NAN, 1]))  # 4 scored (the NaN does not count)
    assert visit(tracker, [0, 0, 1, 0]) == 4 / 8  # 8 scored: all of them, pooled
    assert visit(tracker, [1] * 4 + [0] * 12) == 4 / 16  # a visit of 16 stands alone
    assert visit(tracker, [0] * 5 + [1] * 15) == 15 / 20  # a visit of 20 too, whole
    # A visit of 2 pools the latest 16 rollouts: its 2 (one NaN skipped) and the last 14 of the previous visit.
    assert visit(tracker, [0, NAN, 0]) == 14 / 16
    assert visit(tracker, [1, 1, 1, 1]) == (4 + 2 * 0 + 10) / 16  # 4 new, the 2 before, the last 10 of the 20


def test_knapsack_pool_keeps_the_last_rollouts_of_the_visit_it_cuts():
    early_successes, late_successes = CapabilityTracker(rollout_pool=16, window=16), CapabilityTracker(
        rollout_pool=16, window=16)
    assert visit(early_successes, [1] * 15 + [0] * 5) == visit(late_successes, [0] * 5 + [1] * 15) == 0.75
    assert visit(early_successes, [0, 0]) == 9 / 16  # the last 14 of the first visit hold 9 successes
    assert visit(late_successes, [0, 0]) == 14 / 16


def test_coba_release_rule_on_a_sequence_of_visits():
    run_script = CapabilityTracker(window=1, failure_rate_window=1)  # sliding_window_size=1
    class_default = CapabilityTracker(window=3, failure_rate_window=3)  # sliding_window_size=3
    sequence = [[1, 0], [1, NAN, 1], [0, 0, 1, 0], [1] * 4 + [0] * 12, [0] * 5 + [1] * 15]
    last_visit = [1 / 2, 2 / 2, 1 / 4, 4 / 16, 15 / 20]
    three_visits = [1 / 2, 3 / 4, 4 / 8, 7 / 22, 20 / 40]
    for rewards, last, pooled in zip(sequence, last_visit, three_visits):
        assert visit(run_script, rewards) == pytest.approx(last)
        assert visit(class_default, rewards) == pytest.approx(pooled)
    assert run_script.failure_rate == pytest.approx(1 - 15 / 20)  # the last batch alone
    assert class_default.failure_rate == pytest.approx(1 - (1 / 4 + 4 / 16 + 15 / 20) / 3)


def test_a_window_shorter_than_the_pool_still_binds():
    tracker = CapabilityTracker(window=1, rollout_pool=16)  # the last visit only, at most its latest 16 rollouts
    visit(tracker, [1, 1, 1, 1])
    assert visit(tracker, [0, 0, 0, 0]) == 0.0
    two_visits = CapabilityTracker(window=2, rollout_pool=16)
    for rewards in ([1] * 4, [0] * 4):
        visit(two_visits, rewards)
    assert visit(two_visits, [1, 0]) == (0 + 1) / 6  # the last two visits, 6 rollouts, within the pool


def test_min_rollouts_counts_every_visit_not_only_the_window():
    tracker = CapabilityTracker(window=1, min_rollouts=5)
    assert np.isnan(visit(tracker, [1, 1, 1]))
    assert visit(tracker, [0, 1]) == 0.5  # 5 scored in total; the rate is still the last visit's


def test_state_round_trips_through_json_exactly():
    rng = np.random.default_rng(0)
    settings = dict(window=3, failure_rate_window=4, min_rollouts=3, rollout_pool=5)
    tracker = CapabilityTracker(**settings)
    for _ in range(6):
        keys = [f"p{i}" for i in rng.integers(0, 20, 40)]
        tracker.update(keys, rng.random(40) < 0.4)
    restored = CapabilityTracker(**settings)
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
    with pytest.raises(ValueError, match="rollout_pool"):
        CapabilityTracker(window=2, rollout_pool=16).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        CapabilityTracker().load_state_dict({"version": 99})


@pytest.mark.parametrize("window", [0.5, float("nan"), "16", True])
def test_a_saved_history_window_that_is_no_number_of_visits_is_refused(window):
    state = {**CapabilityTracker(reward_history_window=4).state_dict(), "reward_history_window": window}
    with pytest.raises(ValueError, match=r"'reward_history_window' is .*; it must be None \(no reward history\) or a "
                                         "finite number of visits, at least 1"):
        CapabilityTracker(reward_history_window=4).load_state_dict(state)


def test_a_state_from_a_newer_release_says_to_upgrade():
    state = {**CapabilityTracker().state_dict(), "version": 5}
    with pytest.raises(ValueError, match="version 5, which a newer trl_budget wrote; this one reads versions 2, 3 and 4. "
                                         "Upgrade trl_budget"):
        CapabilityTracker().load_state_dict(state)


def test_state_of_the_first_version_is_refused_with_a_remedy():
    old = {"version": 1, "window": 1, "success_threshold": 1.0, "failure_rate_window": 10,
           "visits": {"a": [[1, 2]]}, "batch_failure_rates": [0.5]}
    with pytest.raises(ValueError, match="version 1 lacks.*remove the file"):
        CapabilityTracker().load_state_dict(old)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"window": 0}, "window"), ({"failure_rate_window": 0}, "failure_rate_window"),
     ({"min_rollouts": 0}, "min_rollouts"), ({"rollout_pool": -1}, "rollout_pool"),
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


def test_memory_per_prompt_stays_small():
    import gc
    import tracemalloc

    prompts = 20_000
    keys = [f"{i:032x}" for i in range(prompts)]  # the shape of prompt_key's digests
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    tracker = CapabilityTracker(window=16, min_rollouts=8, rollout_pool=16)  # Knapsack RL's rule, the heaviest
    for _ in range(2):
        tracker.update(np.repeat(keys, 8), np.arange(prompts * 8) % 3 == 0)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert held / prompts <= 300  # bytes; benchmarks/overhead/tracker_scale.py measures 10^6 prompts
