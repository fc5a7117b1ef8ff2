import numpy as np
import pytest

from trl_budget.demo.study_stats import (
    corrected_family,
    first_reach,
    holm,
    minimal_detectable_effect,
    paired_comparison,
    paired_interval,
    rollouts_to_match,
    sign_flip_p_value,
    t_quantile,
    trailing_mean,
)


# Four-decimal tables, with the few degrees of freedom of the demo's four seeds (3) and of pilots among them.
@pytest.mark.parametrize("probability, df, tabulated", [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824), (0.8, 3, 0.9785), (0.975, 4, 2.7764),
    (0.975, 5, 2.5706), (0.975, 19, 2.0930), (0.975, 30, 2.0423), (0.8, 19, 0.8610), (0.8, 4, 0.9410),
    (0.995, 5, 4.0321), (0.995, 19, 2.8609), (0.99, 9, 2.8214), (0.9, 10, 1.3722), (0.025, 3, -3.1824),
])
def test_t_quantile_matches_the_table(probability, df, tabulated):
    assert t_quantile(probability, df) == pytest.approx(tabulated, abs=6e-5)


def test_t_quantile_matches_scipy_to_float_precision():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 7, 19, 39, 200):
        for probability in (0.6, 0.8, 0.9, 0.975, 0.99, 0.995, 1 - 0.05 / 12, 0.9999):
            assert t_quantile(probability, df) == pytest.approx(stats.t.ppf(probability, df), rel=1e-11)


def test_t_quantile_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="df must be a whole number"):
        t_quantile(0.975, 2.5)
    with pytest.raises(ValueError, match="probability must be strictly between 0 and 1"):
        t_quantile(1.0, 3)


def test_paired_interval_by_hand():
    differences = [0.01, 0.03, -0.01, 0.05]  # mean 0.02, sd 0.025820, t(0.975, 3) = 3.18245
    mean, (low, high) = paired_interval(differences)
    half = 3.18245 * np.std(differences, ddof=1) / 2
    assert mean == pytest.approx(0.02)
    assert low == pytest.approx(0.02 - half, abs=1e-6) and high == pytest.approx(0.02 + half, abs=1e-6)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        paired_interval([0.1])


def test_minimal_detectable_effect_by_hand():
    # (t(0.975, 19) + t(0.8, 19)) * sd / sqrt(20) = (2.093 + 0.861) / 4.472
    assert minimal_detectable_effect(0.01, 20) == pytest.approx(0.01 * 2.954 / np.sqrt(20), rel=1e-3)
    assert minimal_detectable_effect(0.01, 40) < minimal_detectable_effect(0.01, 20)


def test_sign_flip_p_value():
    # Five positive differences: 2 of the 32 sign patterns are as extreme (all +, all -), p = 1/16 exactly.
    assert sign_flip_p_value([0.1, 0.2, 0.3, 0.2, 0.1]) == 1 / 16
    assert sign_flip_p_value([0.1, -0.1, 0.2, -0.2]) == pytest.approx(1.0)
    assert sign_flip_p_value(np.linspace(0.01, 0.02, 20)) == 2 / 2**20  # only all + and all - reach it


@pytest.mark.parametrize("size", [3, 12, 17, 20])
def test_sign_flip_p_value_is_exact_against_brute_force(size):
    # Before, 20 000 random patterns estimated it, and their noise decided "0.09" against "0.08".
    import itertools

    differences = np.random.default_rng(size).normal(0.003, 0.009, size)
    if size > 12:  # brute force on a coarse grid of values, where ties are many and must count
        differences = np.round(differences, 3)
    observed = abs(differences.sum())
    patterns = itertools.product([-1.0, 1.0], repeat=size) if size <= 17 else None
    if patterns is None:
        signs = 1.0 - 2.0 * ((np.arange(2**size)[:, None] >> np.arange(size)) & 1)
        reached = np.count_nonzero(np.abs(signs @ differences) >= observed - 1e-12)
    else:
        reached = sum(abs(np.dot(pattern, differences)) >= observed - 1e-12 for pattern in patterns)
    assert sign_flip_p_value(differences) == reached / 2**size
    assert sign_flip_p_value(differences, seed=1) == sign_flip_p_value(differences, seed=2)  # no randomness left


def test_holm_steps_down_and_stops_at_the_first_failure():
    result = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert [result[n]["significant"] for n in "acb"] == [True, False, False]  # 0.01 <= 0.05/3; 0.03 > 0.05/2
    assert [result[n]["p_holm"] for n in "acb"] == pytest.approx([0.03, 0.06, 0.06])  # monotone: b's 0.04 -> 0.06
    assert [result[n]["level"] for n in "acb"] == pytest.approx([1 - 0.05 / 3, 1 - 0.05 / 2, 1 - 0.05])
    # Intervals at the Holm steps are not simultaneous; the Bonferroni level, the same for all, is.
    assert [result[n]["level_bonferroni"] for n in "acb"] == pytest.approx([1 - 0.05 / 3] * 3)
    # A later p-value under its own threshold is still not significant once an earlier one failed.
    assert holm({"x": 0.04, "y": 0.045})["y"]["significant"] is False


def test_an_unfinished_comparison_keeps_its_place_in_the_family_and_is_never_rejected():
    differences = {"a": [0.02, 0.03, 0.025, 0.028, 0.031, 0.022], "b": [0.01, -0.005, 0.02, 0.015, 0.012, 0.018]}
    comparisons = {name: paired_comparison(d, 6) for name, d in differences.items()}
    alone = corrected_family(comparisons)
    with_unfinished = corrected_family(comparisons, unfinished=["c"])
    assert set(with_unfinished) == {"a", "b", "c"}
    assert with_unfinished["c"]["significant"] is False and "ci_holm" not in with_unfinished["c"]
    # The family's size is the registered three: Bonferroni and the first Holm step are stricter than with two.
    assert with_unfinished["a"]["level_bonferroni"] == pytest.approx(1 - 0.05 / 3)
    assert alone["a"]["level_bonferroni"] == pytest.approx(1 - 0.05 / 2)
    assert with_unfinished["a"]["p_holm"] == pytest.approx(3 * comparisons["a"]["p"])
    low, high = with_unfinished["a"]["ci_bonferroni"]
    assert low < alone["a"]["ci_bonferroni"][0] and high > alone["a"]["ci_bonferroni"][1]


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


def test_the_run_cache_digest_leaves_out_what_a_run_never_executes(tmp_path, monkeypatch):
    from trl_budget.demo import run_cache

    package = tmp_path / "trl_budget"
    (package / "demo").mkdir(parents=True)
    for name in ("trainer.py", "cli.py", "demo/report.py", "demo/study_stats.py", "demo/build_warm_start.py"):
        (package / name).write_text("x = 1\n")
    monkeypatch.setattr(run_cache, "PACKAGE", package)
    before = run_cache.code_digest()
    for name in ("cli.py", "demo/report.py", "demo/study_stats.py", "demo/build_warm_start.py"):
        (package / name).write_text("x = 2\n")
        assert run_cache.code_digest() == before, name
    (package / "trainer.py").write_text("x = 2\n")
    assert run_cache.code_digest() != before


def test_a_stored_run_is_read_back_by_its_settings_whatever_code_trained_it(tmp_path, monkeypatch):
    from trl_budget.demo import run_cache

    settings = {"variant": "uniform", "seed": 3}
    run_cache.cached_run(tmp_path, "study-uniform-3", settings, lambda: {"metric": 0.5})
    monkeypatch.setattr(run_cache, "code_digest", lambda: "other code")
    assert not (tmp_path / f"study-uniform-3-{run_cache.run_key(settings)}.json").exists()
    assert run_cache.stored_run(tmp_path, "study-uniform-3", settings)["result"] == {"metric": 0.5}
    assert run_cache.stored_run(tmp_path, "study-uniform-3", {**settings, "seed": 4}) is None
    run_cache.cached_run(tmp_path, "study-uniform-3", settings, lambda: {"metric": 0.6})  # trained again, new code
    monkeypatch.setattr(run_cache, "code_digest", lambda: "third code")
    with pytest.raises(ValueError, match="2 stored runs of study-uniform-3 .* have these settings"):
        run_cache.stored_run(tmp_path, "study-uniform-3", settings)


def test_a_retrained_run_is_compared_on_every_figure_the_stored_run_recorded():
    from retrain_stored import differences

    stored = {"curve": [{"step": 0, "accuracy": 0.5}], "rounds": [None, 2.0], "seconds": 80.0}
    # A figure added to runs since the stored one trained is not compared, nor is wall time or an unrecorded None.
    assert differences(stored, {**stored, "entropy": [0.6], "seconds": 95.0, "rounds": [1.0, 2.0]}) == []
    changed = {**stored, "curve": [{"step": 0, "accuracy": 0.5000001}]}
    assert differences(stored, changed) == [".curve[0].accuracy: stored 0.5, re-trained 0.5000001"]
    lost = {key: value for key, value in stored.items() if key != "rounds"}
    assert differences(stored, lost) == [".rounds (only the stored run has it)"]
    # Where and by which code a run trained is no figure of it: a later code's re-training differs in its digest.
    machine = {"cpu": "AMD EPYC", "code": "9a5da54f907c91cb"}
    assert differences({**stored, "machine": machine}, {**stored, "machine": {**machine, "code": "12f13424533f55c8"}}) == []
    # The time SPO's prior took is wall time too.
    assert differences({**stored, "spo_prior_seconds": 12.0}, {**stored, "spo_prior_seconds": 15.7}) == []


def test_a_retraining_check_is_recorded_with_its_command_machine_and_outcomes(tmp_path):
    import argparse
    import json

    from retrain_stored import write_record

    from trl_budget.demo.run_cache import code_digest

    outcomes = [{"run": "fifth:brackets/spo:500", "stored_code": "9a5da54f907c91cb", "bit_for_bit": True,
                 "figures_differing": 0, "outcome": "bit for bit"}]
    args = argparse.Namespace(keep=None, against=tmp_path / "ref", runs=["fifth:brackets/spo:500"],
                              record=tmp_path / "check.json")
    write_record(args, outcomes)
    record = json.loads((tmp_path / "check.json").read_text())
    assert record["command"] == (f"OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py --against "
                                 f"{tmp_path / 'ref'} fifth:brackets/spo:500")
    assert record["reference"] == str(tmp_path / "ref") and record["runs"] == outcomes
    assert record["machine"]["code"] == code_digest() and record["machine"]["simd_flags"]
