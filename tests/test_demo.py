"""The demo and the allocator benchmark, end to end at a reduced size (real warm start, real RL)."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from trl_budget.cli import main
from trl_budget.demo.task import LEVELS, exact_match_reward, make_problems, split_problems

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def check_png(path: Path, min_width: int = 800):
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[1] >= min_width
    assert image[..., :3].std() > 0.05  # not a blank canvas


def test_task_has_a_spread_of_levels_and_disjoint_splits():
    problems = make_problems(60, seed=0)
    assert {p["level"] for p in problems} == set(range(len(LEVELS)))
    for problem in problems:
        left, right = problem["prompt"][:-1].replace("*", "+").split("+")
        expected = int(left) * int(right) if "*" in problem["prompt"] else int(left) + int(right)
        assert problem["answer"] == str(expected)
    train, held_out = split_problems(60, 30, seed=0)
    assert len(train) == 60 and len(held_out) == 30
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held_out}
    assert exact_match_reward([" 12", "13"], ["12", "12"]) == [1.0, 0.0]


def test_the_sorting_task_asks_for_the_digits_in_order_level_by_level():
    from trl_budget.demo.sorting import LEVELS as SORT_LEVELS
    from trl_budget.demo.task import task_named

    sorting = task_named("sorting")
    problems = sorting.make_problems(60, seed=0)
    assert {p["level"] for p in problems} == set(range(len(SORT_LEVELS)))
    for problem in problems:
        digits = problem["prompt"].removesuffix(":")
        assert len(digits) == SORT_LEVELS[problem["level"]] and problem["answer"] == "".join(sorted(digits))
    train, held_out = split_problems(60, 30, seed=0, levels=(2, 3, 4), task=sorting)
    assert len(train) == 60 and len(held_out) == 30 and not {p["prompt"] for p in train} & {p["prompt"] for p in
                                                                                              held_out}
    assert max(len(p["answer"]) for p in problems) + 1 == sorting.max_answer_tokens  # the answer and its end
    with pytest.raises(ValueError, match="task='reversal' is not a built-in task; choose one of"):
        task_named("reversal")


def test_the_demo_end_to_end_on_the_sorting_task(tmp_path):
    # A warm start of the task's own alphabet and RL on its problems: the curves measure sorting.
    from trl_budget.demo.run import run_rl, warm_start
    from trl_budget.demo.settings import RLSettings, WarmStartSettings
    from trl_budget.demo.task import task_named

    sorting = task_named("sorting")
    model = warm_start(WarmStartSettings(steps=30), tmp_path / "cache", task=sorting)
    assert model.name.startswith("warm-start-sorting-")
    settings = RLSettings(steps=4, prompts_per_step=4, train_prompts=16, eval_prompts=8, eval_every=2, eval_samples=0,
                          levels=(1, 2), histogram_steps=(4,))
    result = run_rl(model, "uniform", 0, settings, tmp_path / "run", show_progress=False, task=sorting)
    assert [point["step"] for point in result["curve"]] == [0, 2, 4]
    assert set(result["curve"][0]) >= {"accuracy", "level_1", "level_2", "train_accuracy"}
    visits = result["visits_per_prompt"]  # each training prompt's batches, the demo's third panel under SPO
    assert len(visits) == 16 and visits == sorted(visits, reverse=True)
    assert sum(visits) == len(result["histograms"]["4"])  # one visit per prompt of every batch up to step 4


def test_demo_end_to_end(tmp_path, capsys):
    output = tmp_path / "demo"
    arguments = ["demo", "--steps", "16", "--warm-start-steps", "40", "--output-dir", str(output),
                 "--cache-dir", str(tmp_path / "cache")]
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(arguments + ["--seeds", "2", "--processes", "1"]) == 0
    # transformers' renames of its checkpointing switches warned six times a run, burying the table
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)]
    printed = capsys.readouterr().out
    assert "held-out accuracy (last 3)" in printed and str(output / "demo_report.png") in printed
    assert "What you see:" in printed
    from trl_budget.cli import SPO_ANSWER, study_answer

    assert "the fifth study" in printed and study_answer(SPO_ANSWER) in printed

    # The default pair, SPO against uniform GRPO, on seeds 0 and 1, paired; it names the trainer's default rule.
    assert "The trainer's default rule is uniform GRPO with the history baseline" in printed
    assert "SPO is switched on with budget_allocator='spo'" in printed
    results = json.loads((output / "demo_results.json").read_text())
    assert set(results["summary"]) == {"spo", "uniform"} and results["seeds"] == [0, 1]
    assert [(run["allocator"], run["seed"]) for run in results["runs"]] == [
        ("spo", 0), ("uniform", 0), ("spo", 1), ("uniform", 1)]
    assert results["machine"]["simd_flags"] and results["machine"]["code"]
    assert all(run["machine"]["torch_threads"] == 1 for run in results["runs"])
    from trl_budget.demo.study_stats import study_metric

    paired = results["summary"]["spo"]["paired"]
    by_seed = {(run["allocator"], run["seed"]): run for run in results["runs"]}
    expected = [study_metric(by_seed["spo", seed]) - study_metric(by_seed["uniform", seed]) for seed in (0, 1)]
    assert paired["held_out"]["differences"] == pytest.approx(expected)
    assert paired["held_out"]["diff"] == pytest.approx(np.mean(expected)) and len(paired["held_out"]["ci95"]) == 2
    assert "spo minus uniform, paired over 2 seeds:" in printed
    assert f"each seed: {expected[0] * 100:+.2f}, {expected[1] * 100:+.2f}" in printed
    for row in results["summary"].values():
        assert row["seeds"] == 2
        assert row["rollouts_spent"] == 16 * 64  # 2 generation batches of 64 prompts x 8, 8 updates each
        assert 0 <= row["final_accuracy_mean"] <= 1 and 0 <= row["effective_ratio_mean"] <= 1
    for run in results["runs"]:
        assert len(run["effective_ratio"]) == 2  # one per generation batch
        assert [point["step"] for point in run["curve"]] == [0, 8, 16]
        assert sorted(map(int, run["histograms"])) == [8, 16]  # after each generation batch
        for counts in run["histograms"].values():  # SPO: 512 prompts x 1 rollout; uniform: 64 x 8
            assert sum(counts) == 512 and set(counts) == ({1} if run["allocator"] == "spo" else {8})
    check_png(output / "demo_report.png")

    # Two at a time, each in a process of its own on one thread: the same figures, seed by seed.
    assert main(arguments + ["--seeds", "2", "--processes", "2", "--no-baseline"]) == 0
    in_parallel = json.loads((output / "demo_results.json").read_text())["runs"]
    assert [run["curve"] for run in in_parallel] == [run["curve"] for run in results["runs"][::2]]
    assert [run["effective_ratio"] for run in in_parallel] == [run["effective_ratio"] for run in results["runs"][::2]]
    assert "paired over" not in capsys.readouterr().out  # nothing to pair with

    cached = list((tmp_path / "cache").glob("warm-start-*/model.safetensors"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    # reuses the cached warm start
    assert main(arguments + ["--no-baseline", "--allocator", "coba", "--probe", "2", "--seeds", "1"]) == 0
    assert cached[0].stat().st_mtime_ns == stamp
    coba = json.loads((output / "demo_results.json").read_text())
    assert set(coba["summary"]) == {"coba-probe2"}
    assert all(min(counts) >= 2 for counts in coba["runs"][0]["histograms"].values())  # the probe's rollouts
    assert "the demo carries no study's answer for coba-probe2" in capsys.readouterr().out
    # Reinforce-Ada trains 4 of each prompt, and generates what uniform does.
    assert main(["demo", "--steps", "16", "--warm-start-steps", "40", "--output-dir", str(output), "--cache-dir",
                 str(tmp_path / "cache"), "--no-baseline", "--allocator", "reinforce_ada", "--seeds", "1"]) == 0
    row = json.loads((output / "demo_results.json").read_text())["summary"]["reinforce_ada"]
    assert row["rollouts_spent"] <= 16 * 64


@pytest.mark.parametrize("bad, says", [
    (["--allocator", "greedy"], "invalid choice"), (["--steps", "0"], "positive integer"),
    (["--steps", "many"], "positive integer"), (["--advantage-baseline", "all_rollouts"], "invalid choice"),
    (["--probe", "2"], "without a probe stage; leave --probe at 0 or choose another --allocator"),
    (["--advantage-baseline", "group"], "choose --advantage-baseline history, or leave it to SPO's own"),
    (["--allocator", "uniform", "--probe", "2"], "leave --probe at 0 or choose another --allocator"),
    (["--allocator", "uniform", "--advantage-baseline", "group"],
     "choose --advantage-baseline history, or another --allocator"),
    (["--allocator", "reinforce_ada", "--probe", "2"], "Reinforce-Ada generates in rounds of its own"),
])
def test_demo_rejects_bad_options(bad, says, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", *bad, "--output-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "error" in error and says in error
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_module_entry_point_help():
    result = subprocess.run([sys.executable, "-m", "trl_budget", "demo", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--allocator" in result.stdout and "--cache-dir" in result.stdout


def test_allocator_benchmark_quick(tmp_path, monkeypatch):
    import compare_allocators

    arguments = ["--quick", "--steps", "4", "--output-dir", str(tmp_path), "--cache-dir", str(tmp_path / "cache"),
                 "--run-cache", str(tmp_path / "run_cache")]
    result = compare_allocators.main(arguments)
    saved = json.loads((tmp_path / "compare_allocators-pool.json").read_text())
    assert set(saved["summary"]) == set(compare_allocators.VARIANTS)
    assert saved["summary"]["uniform"]["effective_ratio_vs_uniform"] == pytest.approx(1.0)
    for row in saved["summary"].values():
        assert row["rollouts_spent"] == 4 * 64 and "rollouts_to_uniform_final_accuracy" in row
    assert saved["summary"] == result["summary"] and set(saved["mean_curves"]) == set(saved["summary"])
    runs = json.loads((tmp_path / "runs" / "compare_allocators-pool_runs.json").read_text())
    assert len(runs) == len(compare_allocators.VARIANTS)
    check_png(tmp_path / "compare_allocators-pool.png")

    # A second invocation resumes from the stored runs: nothing is trained again, and the summary is the same.
    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(compare_allocators, "run_rl", no_training)
    assert compare_allocators.main(arguments)["summary"] == result["summary"]
    assert len(list((tmp_path / "run_cache").glob("*.json"))) == len(compare_allocators.VARIANTS)


def test_the_study_metric_and_first_epoch_count_trained_points_and_whole_batches():
    import allocation_study

    from trl_budget.demo.settings import RLSettings

    # A short run's last three points include its untrained start: only trained points count.
    curve = [{"step": 0, "accuracy": 0.9}, {"step": 8, "accuracy": 0.2}, {"step": 16, "accuracy": 0.4}]
    assert allocation_study.metric({"curve": curve}) == pytest.approx(0.3)
    # 1 500 prompts, 64 per batch: TRL's sampler fills 23 batches and drops the remaining 28 prompts.
    assert allocation_study.first_epoch_batches(RLSettings.study()) == 23


def test_allocation_study_quick_resumes_and_reports_its_preregistered_figures(tmp_path, monkeypatch):
    import allocation_study

    result = allocation_study.main(["--quick", "--output-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "compare_allocators.json").read_text())
    assert saved["primary"] == result["primary"] and saved["primary"]["seeds"] == 2
    primary = saved["primary"]
    assert primary["comparison"] == "knapsack - uniform" and len(primary["ci95"]) == 2
    assert primary["mde80"] == pytest.approx(allocation_study.mde80())
    gate = primary["room_gate"]
    assert gate["diff"] == pytest.approx(gate["uniform_2x"] - gate["uniform"])
    assert set(saved["variants"]) == set(allocation_study.VARIANTS)
    assert saved["holm_family"] == sorted(allocation_study.SECONDARY)  # all complete at 2 seeds
    for label in allocation_study.SECONDARY:
        test = saved["variants"][label]["vs_uniform"]["holm"]
        low, high = test["ci_holm"]
        assert low <= saved["variants"][label]["vs_uniform"]["diff"] <= high and test["p_holm"] >= test["p"]
        wide_low, wide_high = test["ci_bonferroni"]  # simultaneous: at least as wide as any Holm step's
        assert wide_low <= low and high <= wide_high
    # The doubled run spends twice the rollouts; its first half is the uniform run itself (constant rate, same seed).
    doubled, uniform = saved["mean_curves"]["uniform-2x"], saved["mean_curves"]["uniform"]
    assert doubled["rollouts"][-1] == 2 * uniform["rollouts"][-1]
    assert doubled["accuracy"][: len(uniform["accuracy"])] == pytest.approx(uniform["accuracy"])
    assert saved["answer"].startswith("Knapsack RL") and saved["variants"]["knapsack"]["effective_ratio"] > 0
    check_png(tmp_path / "compare_allocators.png")

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(allocation_study, "run_rl", no_training)
    again = allocation_study.main(["--quick", "--stored-only", "--output-dir", str(tmp_path)])
    assert again["primary"] == result["primary"] and again["variants"] == result["variants"]


def test_rounds_study_quick_resumes_and_reports_its_preregistered_figures(tmp_path, monkeypatch):
    import rounds_study

    result = rounds_study.main(["--quick", "--output-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "rounds_study.json").read_text())
    primary = saved["primary"]
    assert primary["comparison"] == "rounds-uniform - uniform-n8" and primary["seeds"] == 2
    assert primary["mde80"] == pytest.approx(rounds_study.mde80()) and primary["p"] > 0
    assert saved["holm_family"] == sorted(rounds_study.SECONDARY) and set(saved["arms"]) == set(rounds_study.ARMS)
    arms = saved["arms"]
    # The dose-response spends n rollouts of each prompt per batch; the n = 8 arms generate 512 per batch.
    assert arms["uniform-n16"]["gradient_rollouts"] > arms["uniform-n4"]["gradient_rollouts"]
    assert arms["reinforce-ada-balanced"]["generated_per_trained"] == pytest.approx(2.0)
    assert arms["rounds-uniform"]["rounds"] > 1 and arms["rounds-uniform"]["generated_per_trained"] == 1.0
    for predictor in ("gradient_rollouts", "coverage"):
        assert set(saved["dose_response"][predictor]["arms"]) == set(rounds_study.EQUAL_COST)
    assert saved["dose_response"]["predicts_better"] in ("gradient_rollouts", "coverage")
    errors = saved["dose_response"]["prediction_error"]
    for arms in ("all_arms", "without_coba"):
        for predictor in ("gradient_rollouts", "coverage"):
            low, high = errors[arms][predictor]["ci95"]
            assert 0 <= low <= high and errors[arms][predictor]["rms_miss"] >= 0
        assert 0 <= errors[arms]["coverage_misses_less_share"] <= 1
    check_png(tmp_path / "rounds_study.png", min_width=1200)

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(rounds_study, "run_rl", no_training)
    again = rounds_study.main(["--quick", "--stored-only", "--output-dir", str(tmp_path)])
    assert again["primary"] == result["primary"] and again["arms"] == result["arms"]


def test_fourth_study_quick_resumes_and_reports_its_preregistered_figures(tmp_path, monkeypatch):
    import fourth_study

    result = fourth_study.main(["--quick", "--output-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "fourth_study.json").read_text())
    assert list(saved["primary"]) == [fourth_study.comparison_name(c) for c in fourth_study.PRIMARY]
    for name, test in saved["primary"].items():
        assert test["seeds"] == 2 and test["complete"] and 0 < test["p"] <= 1
        assert test["holm"]["level_bonferroni"] == pytest.approx(1 - 0.05 / 4)
        assert test["mde80"] == pytest.approx(fourth_study.mde80(name.split(":")[0]))
    for regime, comparisons in fourth_study.SECONDARY.items():
        assert set(saved["secondary"][regime]) == {fourth_study.comparison_name(c) for c in comparisons}
        assert all("holm" in test for test in saved["secondary"][regime].values())
    arithmetic, sorting = saved["arms"]["arithmetic"], saved["arms"]["sorting"]
    assert "coba" in sorting and "coba" not in arithmetic
    # Cost in full: Reinforce-Ada trains half of what it generates, in rounds; dynamic sampling generates more than
    # it trains; uniform's engine time grows with its rollouts, and uniform n = 8 is the unit.
    ada = arithmetic["reinforce-ada-positive"]
    assert ada["generated_rollouts"] == pytest.approx(2 * ada["trained_rollouts"]) and ada["rounds"] > 1
    assert ada["trained_tokens"] < arithmetic["uniform-n8"]["trained_tokens"]
    assert sorting["dynamic-sampling"]["generated_rollouts"] > sorting["dynamic-sampling"]["trained_rollouts"] == 512
    assert arithmetic["uniform-n8"]["engine_ratio"] == pytest.approx(1.0)
    assert 1 < arithmetic["uniform-n12"]["engine_ratio"] < arithmetic["uniform-n16"]["engine_ratio"]
    # The history baseline leaves more trained rollouts with a gradient than the group baseline on the same rollouts.
    assert sorting["uniform-n8-history"]["nonzero_advantage_share"] > sorting["uniform-n8"]["nonzero_advantage_share"]
    assert all(0 < row["entropy"] for rows in saved["arms"].values() for row in rows.values())
    costs = saved["against_cost_curve"]["sorting"]
    assert set(costs) == {"generated_rollouts", "engine_ratio"} and "uniform-n16" not in costs["engine_ratio"]

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(fourth_study, "run_rl", no_training)
    again = fourth_study.main(["--quick", "--stored-only", "--output-dir", str(tmp_path)])
    assert again["primary"] == result["primary"] and again["arms"] == result["arms"]


def test_a_fourth_study_run_that_dynamic_sampling_stops_at_its_cap_is_stored_as_stopped(tmp_path, monkeypatch):
    import fourth_study

    # In sorting, a warm-started batch leaves most prompts' rollouts agreeing: one generation batch cannot fill it.
    label, (generations, most, settings, regimes) = "dynamic-sampling", fourth_study.ARMS["dynamic-sampling"]
    monkeypatch.setitem(fourth_study.ARMS, label, (generations, most,
                                                   {**settings, "dynamic_sampling_max_gen_batches": 1}, regimes))
    run_cache = tmp_path / "run_cache"
    stopped = fourth_study.study_run("sorting", label, 300, True, run_cache)["result"]
    assert stopped["stopped"].startswith(fourth_study.DYNAMIC_SAMPLING_CAP) and stopped["stopped_at_update"] == 0
    assert [point["step"] for point in stopped["curve"]] == [0]
    assert fourth_study.study_run("sorting", label, 300, True, run_cache, train=False)["result"] == stopped

    # Its comparisons keep their place in the family, never rejected; the arm reports where it stopped.
    finished = {("sorting", "uniform-n8", 300): {"curve": [{"step": 1, "accuracy": 0.5}]}}
    tests = fourth_study.family(finished, fourth_study.SECONDARY["sorting"], [300],
                                {("sorting", label, 300): stopped})
    name = fourth_study.comparison_name(("sorting", label, fourth_study.BASELINE))
    assert tests[name]["unfinished"] and tests[name]["holm"]["significant"] is False


def test_where_a_stopped_arm_stood_is_described_against_uniform_on_the_same_seeds():
    import fourth_study

    def run(*points):
        return {"curve": [{"step": step, "generated": generated, "accuracy": accuracy}
                          for step, generated, accuracy in points]}

    runs = {("sorting", "uniform-n8", 300): run((0, 0, 0.2), (60, 4000, 0.5), (120, 8000, 0.6)),
            ("sorting", "uniform-n8", 301): run((0, 0, 0.2), (60, 4000, 0.4), (120, 8000, 0.7))}
    stopped = {("sorting", "dynamic-sampling", 300): run((0, 0, 0.2), (60, 9000, 0.7)),
               ("sorting", "dynamic-sampling", 301): run((0, 0, 0.2), (60, 6000, 0.5), (120, 12000, 0.8))}
    described = fourth_study.until_stopped(runs, stopped, "sorting", "dynamic-sampling", [300, 301])
    # seed 300 stopped at update 60 (0.7 against 0.5, 9 000 generated against 4 000), seed 301 at 120 (0.8 against
    # 0.7, 12 000 against 8 000); past uniform's 8 000 generated they stood at 0.7 and 0.8 against its last 0.6, 0.7
    assert described["at_the_update_it_stopped"]["differences"] == pytest.approx([0.2, 0.1])
    assert described["generated_per_uniform_n8_generated_there"] == pytest.approx((9000 / 4000 + 12000 / 8000) / 2)
    assert described["at_uniform_n8_generated_rollouts"]["differences"] == pytest.approx([0.1, 0.1])
    assert described["at_uniform_n8_generated_rollouts"]["updates"] == [60, 120]
    assert fourth_study.until_stopped(runs, {}, "sorting", "dynamic-sampling", [300, 301]) == {}


def test_fourth_study_trains_only_with_the_code_its_runs_executed(tmp_path, monkeypatch):
    import fourth_study

    monkeypatch.setattr(fourth_study, "STUDY_CODE", "0123456789abcdef")
    monkeypatch.setattr(fourth_study, "run_rl", lambda *args, **kwargs: pytest.fail("trained with other code"))
    with pytest.raises(SystemExit, match="not the code of the fourth study's runs.*git worktree add"):
        fourth_study.main(["--output-dir", str(tmp_path)])


def test_the_demo_prints_the_answer_the_study_recorded():
    from trl_budget.cli import STUDY_ANSWER, study_answer

    study = json.loads((ROOT / "benchmarks" / "second_study" / "results" / "compare_allocators.json").read_text())
    recorded = json.loads(STUDY_ANSWER.read_text())
    assert recorded["primary"] == study["primary"] and study_answer() == study["answer"] == recorded["answer"]
    primary, readme = study["primary"], (ROOT / "README.md").read_text()  # and the README states the same figures
    low, high = primary["ci95"]
    assert not primary["significant"]  # so the README does not set it in bold
    assert f"{primary['diff'] * 100:+.2f} point [{low * 100:+.2f}, {high * 100:+.2f}]".replace("-", "−") in readme


def test_the_demo_prints_the_answer_the_fourth_study_recorded_for_uniform_with_the_history_baseline():
    from trl_budget.cli import BASELINE_ANSWER, UNIFORM_BASELINE, study_answer, what_you_see

    study = json.loads((ROOT / "benchmarks" / "fourth_study" / "results" / "fourth_study.json").read_text())
    recorded = json.loads(BASELINE_ANSWER.read_text())
    primary = study["primary"][recorded["comparison"]]
    assert recorded["comparison"] == "arithmetic: uniform-n8-history - uniform-n8" and UNIFORM_BASELINE == "history"
    assert recorded["primary"] == {name: primary[name] for name in recorded["primary"]}
    low, high = primary["ci95"]
    assert f"{primary['diff'] * 100:+.2f} points" in study_answer(BASELINE_ANSWER)
    assert f"[{low * 100:+.2f}, {high * 100:+.2f}]" in recorded["answer"]
    assert study_answer(BASELINE_ANSWER) in what_you_see("uniform-history", "uniform", UNIFORM_BASELINE)


def test_the_demo_prints_the_answer_the_fifth_study_recorded_for_its_default_pair():
    import defaults_rule

    from trl_budget import BudgetGRPOConfig
    from trl_budget.cli import DEMO_ALLOCATOR, SPO_ANSWER, what_you_see

    # The default pair is SPO against uniform GRPO, and its answer is what the study's stored results give
    # (defaults_rule.py writes it); the trainer's default rule is another, kept inside GRPOTrainer's contract.
    assert DEMO_ALLOCATOR == "spo" != BudgetGRPOConfig(output_dir="unused", use_cpu=True, report_to=[]).budget_allocator
    study = json.loads(defaults_rule.RESULTS.read_text())
    assert json.loads(SPO_ANSWER.read_text()) == json.loads(json.dumps(defaults_rule.demo_answer(study)))
    test = study["secondary"]["arithmetic"][defaults_rule.DEMO_COMPARISON]
    low, high = test["ci95"]
    said = what_you_see("spo", "spo", None)
    assert "the fifth study" in said and f"{test['diff'] * 100:+.2f} points" in said
    assert f"[{low * 100:+.2f}, {high * 100:+.2f}]" in said and test["holm"]["significant"]
    # A pair no shipped answer covers says so, and is not given another pair's answer (before: the allocation study's,
    # about Knapsack RL, for SPO with the history baseline, CoBA-RL, Reinforce-Ada and any probe).
    for variant, allocator, baseline, probe in [("spo-history", "spo", "history", 0), ("coba", "coba", None, 0),
                                                ("reinforce_ada", "reinforce_ada", None, 0),
                                                ("knapsack-probe2", "knapsack", None, 2),
                                                ("knapsack-history", "knapsack", "history", 0)]:
        other = what_you_see(variant, allocator, baseline, probe)
        assert f"the demo carries no study's answer for {variant}" in other and "Knapsack" not in other
        assert f"{test['diff'] * 100:+.2f} points" in other  # and points to the default pair's
    assert "Knapsack RL" in what_you_see("knapsack", "knapsack", None)  # the allocation study's own pair


def test_the_readme_states_the_third_studys_primary_answer_as_recorded():
    study = json.loads((ROOT / "benchmarks" / "third_study" / "results" / "rounds_study.json").read_text())
    primary, readme = study["primary"], (ROOT / "README.md").read_text()
    low, high = primary["ci95"]
    assert primary["complete"] and primary["seeds"] == 20 and not primary["significant"]
    stated = f"{primary['diff'] * 100:+.2f} point [{low * 100:+.2f}, {high * 100:+.2f}]".replace("-", "−")
    assert f"{stated}, exact p = {primary['p']:.3f}" in readme and f"**{stated}" not in readme
    gate = primary["room_gate"]  # a gate, not a test after Holm's correction: not in bold
    assert gate["passes"] and f"| {gate['diff'] * 100:+.2f} [{gate['ci95'][0] * 100:+.2f}," in readme


def test_the_readme_states_the_fourth_studys_primaries_as_recorded():
    study = json.loads((ROOT / "benchmarks" / "fourth_study" / "results" / "fourth_study.json").read_text())
    readme = " ".join((ROOT / "README.md").read_text().split())
    for name, primary in study["primary"].items():
        low, high = primary["ci95"]
        assert primary["complete"] and primary["seeds"] == 20 and "holm" in primary, name
        stated = f"{primary['diff'] * 100:+.2f} [{low * 100:+.2f}, {high * 100:+.2f}]".replace("-", "−")
        p = f"= {primary['p']:.3f}" if primary["p"] >= 0.001 else "< 0.001"
        if primary["holm"]["significant"]:  # in bold; a primary that is not says so beside its p
            assert f"**{stated}**, exact p {p}" in readme, name
        else:
            assert f"| {stated}, exact p {p}; Holm p {primary['holm']['p_holm']:.3f}: not significant" in readme, name
    for regime, gate in study["room_gates"].items():
        low, high = gate["ci95"]
        assert f"{gate['diff'] * 100:+.2f} [{low * 100:+.2f}, {high * 100:+.2f}]".replace("-", "−") in readme, regime


def test_the_fourth_study_page_states_every_figure_as_recorded():
    from trl_budget.demo.report import comparison_cells

    study = json.loads((ROOT / "benchmarks" / "fourth_study" / "results" / "fourth_study.json").read_text())
    page = " ".join((ROOT / "docs" / "studies" / "fourth.md").read_text().split())

    def stated(test: dict, cell: str = "diff") -> str:
        return comparison_cells(test)[cell].replace("-", "−")

    tests = {**study["primary"], **{name: test for family in study["secondary"].values()
                                    for name, test in family.items()}}
    for name, test in tests.items():
        if test.get("unfinished"):
            assert test["holm"]["p_holm"] == 1 and not test["holm"]["significant"], name
            continue
        assert test["complete"] and stated(test) in page, name
        if name.endswith("uniform-n8"):  # the arms' table gives each arm's Bonferroni interval
            assert stated(test, "bonferroni") in page, name
    for regime, rows in study["against_cost_curve"].items():
        for measure in rows.values():
            for arm, row in measure.items():
                if row["uniform_gain_at_that_cost"]:  # the arms of uniform n = 8's cost are their paired difference
                    assert stated({"diff": row["difference"], "ci95": row["ci95"]}) in page, (regime, arm)


def recorded_interval(figure: dict, name: str) -> str:
    """A paired figure of a demo record as the demo prints it: its difference and 95% interval."""
    from trl_budget.demo.report import format_difference

    diff, low, high = (format_difference(name, value) for value in (figure["diff"], *figure["ci95"]))
    return f"{diff} [{low}, {high}]"


def test_the_readme_states_the_demos_recorded_figures():
    # benchmarks/demo/results/demo-*.json: what `trl-budget demo` printed on each instruction-set class of kernels, and
    # the digest of the code that printed it. The README states every record's paired figures.
    from trl_budget.cli import DEMO_SEEDS, SPO_ANSWER, study_answer

    records = [json.loads(path.read_text()) for path in (ROOT / "benchmarks" / "demo" / "results").glob("demo-*.json")]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert {record["machine"]["torch_cpu_capability"] for record in records} >= {"AVX512", "AVX2"}
    for record in records:
        kernels = record["machine"]["torch_cpu_capability"]
        assert record["command"] == "trl-budget demo" and len(record["code"]) == 16
        assert len(record["seeds"]) == DEMO_SEEDS and record["processes"] == 2
        spo = record["paired"]["spo"]
        assert min(spo["held_out"]["differences"]) > 0 and spo["held_out"]["ci95"][0] > 0  # "on every seed", "above 0"
        assert record["summary"]["spo"]["effective_ratio_mean"] == 1.0  # "every rollout of SPO's carries a gradient"
        stated = f"{recorded_interval(spo['held_out'], 'held_out')} points with AVX" if kernels == "AVX512" else (
            f"{recorded_interval(spo['held_out'], 'held_out')} with AVX2")
        assert stated in readme, kernels
        assert f"greedy accuracy {record['summary']['uniform']['start_accuracy']:.3f}" in readme
    avx512 = next(record for record in records if record["machine"]["torch_cpu_capability"] == "AVX512")
    assert f"against {avx512['summary']['uniform']['effective_ratio_mean']:.3f} of uniform's" in readme
    assert "+2.40 points of greedy held-out accuracy (95% interval [+1.90, +2.91]" in study_answer(SPO_ANSWER)
    assert "20 paired seeds, +2.40 points [+1.90, +2.91]" in readme
    # Its seconds come from the record made on the AVX-512 machine with nothing beside it (load average under 1).
    idle = [record for record in records if record["load_before"][0] < 1.0]
    assert idle and f": {idle[0]['seconds']} seconds on 2 idle cores once installed" in readme


def test_a_stored_run_is_keyed_by_its_settings(tmp_path):
    from trl_budget.demo.run_cache import cached_run

    calls = []

    def compute():
        calls.append(1)
        return {"accuracy": 0.5}

    first, reused = cached_run(tmp_path, "uniform-0", {"seed": 0}, compute)
    again, reused_again = cached_run(tmp_path, "uniform-0", {"seed": 0}, compute)
    other, reused_other = cached_run(tmp_path, "uniform-0", {"seed": 1}, compute)
    assert (reused, reused_again, reused_other) == (False, True, False) and len(calls) == 2
    assert first == again and first["result"] == {"accuracy": 0.5}


def test_allocator_speed_benchmark_quick(tmp_path):
    import allocator_speed

    rows = allocator_speed.main(["--quick", "--output", str(tmp_path / "speed.json")])
    assert len(rows) == 8
    assert all(row["same_value_as_heap"] for row in rows)
    assert all(row["same_value_as_dp"] for row in rows if "same_value_as_dp" in row)
    assert json.loads((tmp_path / "speed.json").read_text()) == rows
    assert np.all([row["trl_budget_ms"] > 0 for row in rows])


def test_the_shipped_warm_start_scores_what_its_record_and_the_readme_say():
    # Every machine starts from this model: its greedy held-out accuracy is a property of the shipped weights.
    from trl_budget.demo.build_warm_start import greedy_held_out_accuracy
    from trl_budget.demo.run import SHIPPED_RECORD, SHIPPED_WARM_START, shipped_warm_start, warm_start
    from trl_budget.demo.settings import WarmStartSettings

    assert warm_start(WarmStartSettings()) == shipped_warm_start() == SHIPPED_WARM_START
    recorded = json.loads((SHIPPED_WARM_START / SHIPPED_RECORD).read_text())["greedy_held_out_accuracy"]
    measured = greedy_held_out_accuracy(SHIPPED_WARM_START)
    assert {name: round(value, 3) for name, value in measured.items()} == {
        name: round(value, 3) for name, value in recorded.items()}
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"greedy held-out accuracy {measured['accuracy']:.3f}" in readme


def test_the_shipped_sorting_warm_start_scores_what_its_record_says():
    from trl_budget.demo.build_warm_start import greedy_held_out_accuracy
    from trl_budget.demo.run import SHIPPED_RECORD, shipped_folder, shipped_warm_start, warm_start
    from trl_budget.demo.settings import WarmStartSettings
    from trl_budget.demo.task import task_named

    sorting = task_named("sorting")
    assert warm_start(WarmStartSettings(), task=sorting) == shipped_warm_start(sorting) == shipped_folder(sorting)
    record = json.loads((shipped_folder(sorting) / SHIPPED_RECORD).read_text())
    assert record["task"] == "sorting"
    measured = greedy_held_out_accuracy(shipped_folder(sorting), sorting)
    assert {name: round(value, 3) for name, value in measured.items()} == {
        name: round(value, 3) for name, value in record["greedy_held_out_accuracy"].items()}


def test_the_demo_and_the_study_start_where_the_readme_and_the_study_say():
    # The demo and the study evaluate on RLSettings.study()'s 1 000 held-out problems, greedily, from the shipped start.
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from trl_budget.demo.run import SHIPPED_WARM_START, exact_match_accuracy
    from trl_budget.demo.settings import RLSettings

    settings = RLSettings.study()
    _, held_out = split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed, settings.levels)
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_WARM_START)
    accuracy = exact_match_accuracy(model, PreTrainedTokenizerFast.from_pretrained(SHIPPED_WARM_START), held_out)
    assert f"greedy accuracy {accuracy['accuracy']:.3f} on the study's 1 000 held-out problems" in (
        ROOT / "README.md").read_text()
    study = json.loads((ROOT / "benchmarks" / "second_study" / "results" / "compare_allocators.json").read_text())
    assert study["start_accuracy"] == pytest.approx(accuracy["accuracy"])


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--seed", "-5"], "argument --seed: must be an integer from 0 to 4294967295, got -5"),
        (["--seed", "99999999999999999999"], "argument --seed: must be an integer from 0 to 4294967295"),
        (["--seed", "4294967295", "--seeds", "2"], "argument --seeds: the seeds 4294967295 to 4294967296 go past "
                                                    "4294967295, the largest seed; lower --seed or --seeds"),
        (["--seeds", "0"], "argument --seeds: must be a positive integer, got 0"),
        (["--processes", "0"], "argument --processes: must be a positive integer, got 0"),
        (["--probe", "-1"], r"argument --probe: must be an integer from 0 \(no probe\) to 2"),
        (["--probe", "100"], r"argument --probe: must be an integer from 0 \(no probe\) to 2 .*got 100"),
        (["--output-dir", "{file}"], "argument --output-dir: .*a-file is a file, not a folder"),
        (["--output-dir", "{file}/below"], "argument --output-dir: cannot write into .*a-file/below"),
        (["--cache-dir", "{file}/below"], "argument --cache-dir: cannot write into .*a-file/below"),
    ],
)
def test_demo_arguments_that_cannot_work_stop_before_any_work(tmp_path, capsys, arguments, message):
    # Before: numpy's message or a traceback after loading, a raw OSError, or (for the cache) a failure only after the
    # warm start had trained, losing it.
    import re

    (tmp_path / "a-file").write_text("")
    arguments = [argument.format(file=tmp_path / "a-file") for argument in arguments]
    if "--output-dir" not in arguments:
        arguments += ["--output-dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as stopped:
        main(["demo", "--warm-start-steps", "40", *arguments])
    error = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and error[-1].startswith("trl-budget demo: error: ")
    assert re.search(message, error[-1]), error[-1]
    assert not (tmp_path / "out" / "run-uniform").exists()


def test_the_report_names_the_decoding_its_accuracy_was_measured_with(tmp_path, monkeypatch):
    import matplotlib.figure

    from trl_budget.demo.report import plot_report

    labels = []
    save = matplotlib.figure.Figure.savefig

    def recording(figure, *args, **kwargs):
        labels.append(figure.axes[0].get_ylabel())
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", recording)
    run = {"allocator": "uniform", "effective_ratio": [0.5, 0.6], "histograms": {"8": [8, 8]},
           "curve": [{"rollouts": 0, "accuracy": 0.4, "train_accuracy": 0.4},
                     {"rollouts": 64, "accuracy": 0.5, "train_accuracy": 0.5}]}
    plot_report([run], tmp_path / "greedy.png", eval_samples=0)
    plot_report([run], tmp_path / "sampled.png", eval_samples=4, temperature=1.0)
    assert labels == ["greedy exact-match accuracy", "exact-match accuracy (4 samples, T=1)"]


def drawn_panels(monkeypatch, runs: list[dict], path: Path) -> list:
    """The axes of the demo's PNG as `plot_report` draws them for `runs`."""
    import matplotlib.figure

    from trl_budget.demo.report import plot_report

    drawn = []
    save = matplotlib.figure.Figure.savefig

    def recording(figure, *args, **kwargs):
        drawn.extend(figure.axes)
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", recording)
    plot_report(runs, path)
    return drawn


def demo_run(allocator: str, histograms: dict, visits: list[int], seed: int = 0) -> dict:
    return {"allocator": allocator, "seed": seed, "effective_ratio": [0.5, 0.6], "histograms": histograms,
            "visits_per_prompt": visits, "curve": [{"rollouts": 0, "accuracy": 0.4, "train_accuracy": 0.4},
                                                   {"rollouts": 64, "accuracy": 0.5, "train_accuracy": 0.5}]}


def test_the_third_panel_shows_what_spo_spends_the_visits_per_prompt(tmp_path, monkeypatch):
    # SPO: one rollout for each prompt of each batch, so its rollouts per prompt are one bar; its budget is in how
    # often each prompt was drawn, against uniform's even passes.
    spo = demo_run("spo", {"8": [1] * 8, "16": [1] * 8}, [4, 3, 3, 2, 2, 1, 1, 0])
    uniform = demo_run("uniform", {"8": [8, 8], "16": [8, 8]}, [2] * 8)
    panel = drawn_panels(monkeypatch, [spo, uniform, {**spo, "seed": 1}], tmp_path / "spo.png")[2]
    assert panel.get_title() == "Visits per prompt over the run"
    assert [text.get_text() for text in panel.get_legend().get_texts()] == ["spo (seed 0)", "uniform (seed 0)"]
    for run, outline in zip((spo, uniform), panel.patches):  # each arm's step histogram over visits 0 to 4
        left_edges_and_heights = outline.get_xy()[1:-1:2]  # the outline's corner at each bin's top left
        assert left_edges_and_heights.tolist() == [[visits - 0.5, count] for visits, count in
                                                   enumerate(np.bincount(run["visits_per_prompt"], minlength=5))]
    # A rule whose batches vary keeps the rollouts per prompt of its batches.
    knapsack = demo_run("knapsack", {"8": [2, 6, 8], "16": [4, 4, 8]}, [2, 2, 2])
    panel = drawn_panels(monkeypatch, [knapsack, uniform], tmp_path / "knapsack.png")[2]
    assert panel.get_title() == "Rollouts per prompt (knapsack)"
    assert sorted(patch.get_height() for patch in panel.patches if patch.get_height()) == [1, 1, 1, 1, 2]


def test_a_run_records_each_training_prompts_visits():
    from collections import Counter

    from trl_budget.demo.run import visit_counts

    assert visit_counts(Counter({"a": 1, "b": 3}), prompts=4) == [3, 1, 0, 0]


def test_the_length_models_completions_have_the_lengths_of_their_class():
    # The engine benchmark's model at real lengths: after the class letter, its filler, ended with probability
    # 1 / mean at every step; lengths geometric with the class's mean (checked on 512 sampled completions each).
    import torch
    from length_model import CLASSES, FILLERS, build_length_model, class_means, class_of_pass_rate
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    means = class_means(5, 40)
    folder = build_length_model(Path(tempfile.mkdtemp()) / "model", means)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), PreTrainedTokenizerFast.from_pretrained(folder)
    torch.manual_seed(0)
    for k in (0, len(CLASSES) - 1):
        prompt = tokenizer([CLASSES[k]] * 512, return_tensors="pt")
        output = model.generate(**prompt, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=400,
                                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        texts = tokenizer.batch_decode(output[:, 1:], skip_special_tokens=True)
        assert all(set(text) == {FILLERS[k]} for text in texts)
        lengths = np.array([len(text) for text in texts]) + 1  # the end of the completion is a token too
        assert abs(lengths.mean() - (means[k] + 1)) < 4 * means[k] / np.sqrt(512)  # geometric: SD about the mean
    assert [class_of_pass_rate(rate) for rate in (1.0, 0.5, 0.0)] == [0, 4, 7]


def test_a_runs_visits_per_prompt_and_spos_costs_are_summed_from_what_it_logged():
    from collections import Counter

    from trl_budget.demo.run import spo_costs, visits_summary

    summary = visits_summary(Counter({"a": 3, "b": 1}), prompts=4)  # c and d never drawn: 3, 1, 0, 0
    assert summary == {"mean": 1.0, "min": 0.0, "p10": 0.0, "p50": 0.5, "p90": pytest.approx(2.4), "max": 3.0,
                       "never": 0.5}
    logged = [{"spo/prior_rollouts": 96.0, "spo/prior_seconds": 2.5}, {"loss": 1.0},
              {"spo/forward_passes_rows": 8.0}, {"spo/forward_passes_rows": 12.0}]
    assert spo_costs(logged) == {"spo_prior_rollouts": 96.0, "spo_prior_seconds": 2.5, "spo_forward_passes_rows": 20.0}


def test_the_machine_record_names_the_cpu_its_simd_flags_and_the_code():
    from trl_budget.demo.machine import machine_record
    from trl_budget.demo.run_cache import code_digest

    record = machine_record()
    assert record["cpu"] and isinstance(record["simd_flags"], list) and record["code"] == code_digest()
    assert record["torch_cpu_capability"] and record["torch"] and record["trl"]
