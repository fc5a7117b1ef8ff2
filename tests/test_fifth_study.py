"""The fifth study's script: its pre-registration against the pilots it names, its arms as the trainer reads them, its
costs counted in full (SPO's prior included) on a quick run of the real trainer, its equal-cost figures, and its
resumption from stored runs."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "fifth_study"))

import defaults_rule  # noqa: E402
import fifth_study  # noqa: E402


def test_the_registered_choices_are_the_pilots_answers():
    arms_pilot = json.loads(fifth_study.ARMS_PILOT.read_text())
    assert arms_pilot["complete"] and arms_pilot["best"] == fifth_study.BEST
    pilot_3 = json.loads((fifth_study.RESULTS / "pilot_3.json").read_text())
    assert tuple(pilot_3["regime"]["levels"]) == fifth_study.BRACKETS_LEVELS
    assert pilot_3["regime"]["learning_rate"] == fifth_study.BRACKETS_RATE
    # Fresh seeds: none of the pilots' (the arms pilot 410-413, the third family's 400-407 and 420-423).
    used = {seed for row in arms_pilot["sizing"].values() for test in row.values() for seed in test["seeds"]}
    assert not used & set(fifth_study.SEEDS) and len(fifth_study.SEEDS) >= 20
    assert fifth_study.HOLM_FIRST_LEVEL == pytest.approx(0.05 / 6)
    for comparison in fifth_study.PRIMARY:  # sized on the arms pilot's paired SDs
        assert 0 < fifth_study.mde80(comparison) < 0.01


def test_every_arm_states_its_rule_and_the_trainer_reads_every_setting_it_gives():
    from trl_budget import BudgetGRPOConfig

    for label, (generations, settings) in fifth_study.ARMS.items():
        assert "advantage_baseline" in settings, f"{label} leaves its baseline to a default"
        config = BudgetGRPOConfig(output_dir="unused", per_device_train_batch_size=64, num_generations=generations,
                                  steps_per_generation=8, use_cpu=True, report_to=[], **settings)
        assert config.resolved_advantage_baseline() == settings["advantage_baseline"]
        assert config.resolved_prompt_sampling() == settings.get("prompt_sampling")


def test_an_arm_with_a_prior_is_scored_within_uniforms_rollouts():
    # uniform n = 8's whole run: 120 batches of 512; SPO's prior 12 000 rollouts before its first batch.
    curve = [{"step": step, "generated": step * 64, "accuracy": step / 1000} for step in range(0, 961, 60)]
    spo = {"curve": curve, "spo_prior_rollouts": 12_000.0}
    within = fifth_study.within_cost(spo, "spo", 960 * 64)
    assert [point["step"] for point in within][-3:] == [600, 660, 720]  # 12 000 + 720 x 64 = 58 080 <= 61 440
    # At matched engine time, a batch of SPO's layout costs the measured ratio; the prior's batches cost their rollouts.
    assert [point["step"] for point in fifth_study.within_cost(spo, "spo", 960 * 64, 0.93)][-1] == 780
    assert [point["step"] for point in fifth_study.within_cost(spo, "spo-baseline-n8", 960 * 64, 0.93)][-1] == 720
    assert fifth_study.within_cost({"curve": curve}, "uniform-n8", 960 * 64)[-1]["step"] == 960


def test_each_equal_cost_pair_is_scored_within_the_cheaper_runs_whole_cost():
    curve = [{"step": step, "generated": step * 64, "accuracy": step / 1000} for step in range(0, 961, 60)]
    runs = {}
    for seed in (1, 2):
        for label in fifth_study.ARMS:
            prior = 12_288.0 if label in ("spo", "spo-baseline-n8") else 0.0
            runs["brackets", label, seed] = {"curve": curve, "spo_prior_rollouts": prior}
    equal = fifth_study.at_equal_cost(runs, "brackets", [1, 2])
    # SPO within uniform's 61 440 rollouts: 12 288 + 720 x 64 fit, 780 x 64 do not; uniform's last three are 840-960.
    assert equal["spo - uniform-n8"]["generated_rollouts"]["diff"] == pytest.approx(0.66 - 0.90)
    assert equal["uniform-n8-history - spo"]["generated_rollouts"]["diff"] == pytest.approx(0.90 - 0.66)
    assert equal["spo - uniform-n8"]["generated_rollouts"]["updates_evaluated"] == [600, 660, 720, 840, 900, 960]
    slowest = equal["spo - uniform-n8"]["engine_time_prompt_24_tokens_slowest"]
    assert slowest["modelled"] and slowest["batch_ratio"] > 1 and slowest["diff"] < -0.24  # fewer of SPO's batches fit


def test_a_quick_study_counts_every_cost_and_resumes_from_its_stored_runs(tmp_path, monkeypatch):
    # One regime of the quick study (2 seeds, 16 updates, a pool of 64 prompts): every arm trains the real trainer.
    every_job = fifth_study.job_order
    monkeypatch.setattr(fifth_study, "job_order", lambda seeds: [job for job in every_job(seeds)
                                                                  if job[0] == "brackets"])
    result = fifth_study.main(["--quick", "--processes", "1", "--output-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "fifth_study.json").read_text())
    assert list(saved["primary"]) == [fifth_study.comparison_name(c) for c in fifth_study.PRIMARY]
    for comparison in fifth_study.PRIMARY:
        test = saved["primary"][fifth_study.comparison_name(comparison)]
        if comparison[0] != "brackets":
            assert "diff" not in test  # not run here
            continue
        assert test["seeds"] == 2 and test["complete"] and "curve_area" in test
        assert test["mde80"] == pytest.approx(fifth_study.mde80(comparison))
    arms = saved["arms"]["brackets"]
    assert set(arms) == set(fifth_study.ARMS)
    # SPO's prior: 8 rollouts of each of the 64 training prompts, before the first of 2 batches of 512.
    assert arms["spo"]["prior_rollouts"] == arms["spo-baseline-n8"]["prior_rollouts"] == 8 * 64
    assert arms["spo"]["generated_in_all"] == 2 * 512 + 8 * 64 and arms["spo-no-prior"]["generated_in_all"] == 1024
    assert arms["uniform-n16"]["generated_rollouts"] == 1024 and arms["spo"]["generated_rollouts"] == 512
    # One rollout a prompt: 512 draws a batch from 64 prompts, against 64 prompts a batch under uniform.
    assert arms["spo"]["visits_mean"] == 16 and arms["uniform-n8"]["visits_mean"] == 2
    assert arms["spo"]["rho_forward_rows"] > 0 and arms["uniform-n8"]["rho_forward_rows"] == 0
    equal = saved["at_equal_cost"]["brackets"]["spo - uniform-n8"]
    median = "engine_time_prompt_24_tokens_median"
    assert not equal["generated_rollouts"]["modelled"] and equal[median]["modelled"]
    assert equal[median]["batch_ratio"] == fifth_study.engine_ratios()[median] < 1
    assert set(saved["at_equal_cost"]["brackets"]) == {f"{a} - {b}" for a, b in fifth_study.EQUAL_COST}
    # Holm at the registered size while two regimes are missing: the other comparisons hold their places.
    brackets = saved["primary"][fifth_study.comparison_name(("brackets", "spo", "uniform-n8"))]
    assert brackets["holm"]["level_bonferroni"] == pytest.approx(1 - 0.05 / 6)
    assert saved["machines"] and saved["preregistered"]["study_code"] == fifth_study.STUDY_CODE

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(fifth_study, "run_rl", no_training)
    again = fifth_study.main(["--quick", "--stored-only", "--output-dir", str(tmp_path)])
    assert again["primary"] == result["primary"] and again["arms"] == result["arms"]


def test_the_defaults_rule_picks_spo_only_where_it_beats_the_history_baseline_clearly():
    from trl_budget import BudgetGRPOConfig

    def test(diff, significant):
        return {"diff": diff, "holm": {"significant": significant}}

    def study(against_spo, history_vs_uniform=(0.5, False), equal_rollouts=-0.5):
        return {"primary": {f"{f}: uniform-n8-history - spo": test(*against_spo[i])
                            for i, f in enumerate(defaults_rule.FAMILIES)},
                "at_equal_cost": {f: {"uniform-n8-history - spo": {"generated_rollouts": {"diff": equal_rollouts}}}
                                  for f in defaults_rule.FAMILIES},
                "secondary": {f: {f"{f}: uniform-n8-history - uniform-n8": test(*history_vs_uniform)}
                              for f in defaults_rule.FAMILIES}}

    spo_ahead, tie, history_ahead = (-1.0, True), (-1.0, False), (1.0, True)
    assert defaults_rule.chosen_rule(study([spo_ahead, spo_ahead, tie])) == "spo"
    assert defaults_rule.chosen_rule(study([spo_ahead, tie, tie])) == "history"  # one family is not enough
    assert defaults_rule.chosen_rule(study([spo_ahead, spo_ahead, history_ahead])) == "history"  # a loss vetoes
    assert defaults_rule.chosen_rule(study([spo_ahead, spo_ahead, tie], equal_rollouts=0.2)) == "history"
    assert defaults_rule.chosen_rule(study([tie, tie, tie], history_vs_uniform=(-0.5, True))) == "group"
    assert defaults_rule.chosen_rule(study([tie, tie, tie], history_vs_uniform=(-0.5, False))) == "history"
    for rule, settings in defaults_rule.DEFAULTS.items():  # each outcome's settings are the trainer's own
        config = BudgetGRPOConfig(output_dir="unused", use_cpu=True, report_to=[], **settings)
        assert config.resolved_advantage_baseline() == settings["advantage_baseline"], rule


def test_budget_allocator_spo_is_the_rule_the_study_gives_as_its_spo_no_prior_arm_ran_it():
    from trl_budget import BudgetGRPOConfig

    assert defaults_rule.chosen_rule(json.loads(defaults_rule.RESULTS.read_text())) == "spo"
    config = BudgetGRPOConfig(output_dir="unused", use_cpu=True, report_to=[], budget_allocator="spo")
    resolved = {"advantage_baseline": config.resolved_advantage_baseline(),
                "prompt_sampling": config.resolved_prompt_sampling()}
    for name, value in fifth_study.ARMS["spo-no-prior"][1].items():
        assert resolved.get(name, getattr(config, name)) == value, name
    assert config.spo_offline_sampling is False  # the prior the study found no gain from stays off


def test_the_trainers_defaults_are_the_rule_inside_the_contract_as_the_studys_history_arm_ran_it():
    from trl_budget import BudgetGRPOConfig

    study = json.loads(defaults_rule.RESULTS.read_text())
    assert defaults_rule.contract_rule(study) == "history"
    config = BudgetGRPOConfig(output_dir="unused", use_cpu=True, report_to=[])
    assert {"budget_allocator": config.budget_allocator, "advantage_baseline": config.resolved_advantage_baseline()} \
        == defaults_rule.DEFAULTS["history"]
    for name, value in fifth_study.ARMS["uniform-n8-history"][1].items():  # the window the study ran too
        assert config.resolved_advantage_baseline() == value if name == "advantage_baseline" else \
            getattr(config, name) == value, name


def test_the_retraining_on_another_cpu_kind_is_stated_as_recorded():
    from pathlib import Path

    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "studies" / "fifth.md").read_text().split())
    study_code = json.loads((fifth_study.RESULTS / "retrain_intel_study_code.json").read_text())
    head = json.loads((fifth_study.RESULTS / "retrain_intel_head.json").read_text())
    assert study_code["machine"]["code"] == fifth_study.STUDY_CODE and study_code["reference"].startswith("the study")
    assert [run["figures_differing"] for run in study_code["runs"]] == [1355, 1435]
    assert "# 1355 and 1435 figures differ" in page and "from batch 14" in page and "from batch 27" in page
    assert [run["run"] for run in head["runs"]] == [run["run"] for run in study_code["runs"]]
    assert all(run["bit_for_bit"] for run in head["runs"]) and head["machine"]["cpu_model"] == "207"
    assert f"(package digest `{head['machine']['code']}`) against them: both **bit for bit**" in page
