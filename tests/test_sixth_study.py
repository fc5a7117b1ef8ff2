"""The sixth study's script: its pre-registration against its pilot, its arms as the trainer reads them (one factor
changed at a time), the rules that will read its results, and a quick run of the real trainer that counts its costs
and resumes from its stored runs."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "sixth_study"))

import arms  # noqa: E402
import pilot  # noqa: E402
import sixth_study  # noqa: E402

from trl_budget import BudgetGRPOConfig  # noqa: E402


def config_of(label: str) -> BudgetGRPOConfig:
    generations, settings = arms.ARMS[label]
    return BudgetGRPOConfig(output_dir="unused", per_device_train_batch_size=64, num_generations=generations,
                            steps_per_generation=8, use_cpu=True, report_to=[], **settings)


def factors(label: str) -> dict:
    """What an arm sets, factor by factor, as the trainer reads its settings."""
    config = config_of(label)
    spo_layout = config.budget_allocator == "spo"
    baseline = config.resolved_advantage_baseline()
    return {"rollouts_a_prompt": 1 if spo_layout else arms.ARMS[label][0],
            # SPO's rho is part of its baseline: it sets how the tracker the baseline reads forgets
            "baseline": (baseline, config.scale_rewards, config.advantage_history_first_visit,
                         config.advantage_history_includes_batch, config.spo_rho if baseline == "spo" else None),
            # SPO's weights over a pool of one batch draw every candidate once: TRL's sampler's order
            "order": "spo" if config.resolved_prompt_sampling() == "spo" and config.prompt_sampling_pool is None
            else "trl",
            "allocation": config.budget_allocator if config.budget_allocator == "vip" else "even"}


def test_the_registered_seeds_and_regimes_are_the_pilots_answers():
    answers = json.loads(sixth_study.PILOT.read_text())
    assert len(sixth_study.SEEDS) == answers["sizing"]["study_seeds"] >= 12
    # Fresh seeds: none of the pilot's (600-603), the fifth study's (500-519) or its pilots' (400-423).
    earlier = set(pilot.SEEDS) | set(range(500, 520)) | set(range(400, 424))
    assert not earlier & set(sixth_study.SEEDS)
    # Every regime's room gate passed on uniform alone (four pilot seeds, or the fifth study's 20); the brackets
    # family's two fresh candidates failed theirs, so brackets is run at its revisited pool only.
    for regime in sixth_study.REGIMES:
        gate = sixth_study.room_gate(regime)
        assert gate["passes"] and gate["diff"] >= 0.01 and gate["ci95"][0] > 0 and gate["seeds"] in (4, 20)
    pilot_2 = json.loads(sixth_study.PILOT_2.read_text())
    assert not answers["gates"]["brackets-fresh"]["passed"] and not pilot_2["gates"]["brackets-20-24-fresh"]["passed"]
    assert sixth_study.FRESH == ("sorting-fresh",) and sixth_study.REVISITED == ("sorting-revisited",
                                                                                  "brackets-revisited")
    assert sixth_study.FAMILIES == {"sorting": ("sorting-revisited", "sorting-fresh")}
    # The pilot sized the seeds at Holm's first level for eight primaries; the study has six, a wider level.
    assert sixth_study.HOLM_FIRST_LEVEL == pytest.approx(0.05 / 6) and pilot.HOLM_FIRST_LEVEL == pytest.approx(0.05 / 8)
    for comparison in sixth_study.PRIMARY:
        assert 0 < sixth_study.mde80(comparison) <= answers["sizing"]["mde80_at_study_seeds"]


def test_the_pools_give_the_visits_the_regimes_are_named_for():
    batches = arms.BUDGET // 8
    assert batches * 256 == arms.FRESH_POOL  # two rollouts a prompt: one pass of the fresh pool, no prompt twice
    assert batches * 512 / arms.FRESH_POOL == 2  # SPO's draws
    assert batches * 256 / arms.REVISITED_POOL == pytest.approx(20.48)
    for regime in sixth_study.REGIMES:
        for label in sixth_study.STUDY_ARMS:
            settings = arms.arm_settings(regime, label)
            assert settings.prompts_per_step * settings.num_generations == arms.ROLLOUTS
            assert settings.steps == arms.BUDGET and settings.updates_per_batch == 8
            assert settings.train_prompts == sixth_study.REGIMES[regime][3]


def test_every_arm_states_its_rule_and_the_trainer_reads_every_setting_it_gives():
    for label in arms.ARMS:
        settings = arms.ARMS[label][1]
        assert "advantage_baseline" in settings, f"{label} leaves its baseline to a default"
        config = config_of(label)
        for name, value in settings.items():
            if name != "advantage_baseline":  # the shorthand resolves to the settings it stands for
                assert getattr(config, name) == value, (label, name)


def test_each_secondary_changes_one_factor():
    for arm, reference in sixth_study.SECONDARY_PAIRS:
        mine, theirs = factors(arm), factors(reference)
        changed = {name for name in mine if mine[name] != theirs[name]}
        assert len(changed) == 1 or (arm, reference) == ("spo", "uniform-n8"), (arm, reference, changed)
    assert factors("n1-batch")["rollouts_a_prompt"] == 1 and factors("n1-batch")["baseline"][0] == "batch"
    assert factors("n2-earlier-or-batch")["baseline"] == ("history", "batch", "batch", False, None)
    assert factors("spo")["order"] == "spo" and factors("spo-trl-order")["order"] == "trl"
    assert config_of("spo-trl-order").prompt_sampling_pool == arms.ROLLOUTS


def decided(sign: int, low: float = 0.0) -> dict:
    """A complete comparison: its sign after Holm (0: not significant) and its Bonferroni interval's low end."""
    return {"diff": 0.01 * sign, "holm": {"significant": sign != 0, "ci_bonferroni": [low, 1.0]}}


def rule_summary(over_spo: dict, over_uniform: dict, spo_over_uniform: int = 1, low: float = 0.0,
                 secondary_signs: dict | None = None) -> dict:
    """Every primary and secondary complete: not significant unless a sign is given."""
    primary = {}
    for regime in sixth_study.REGIMES:
        for reference, signs in ((sixth_study.SPO, over_spo), (sixth_study.BASELINE, over_uniform)):
            primary[sixth_study.comparison_name((regime, sixth_study.BEST, reference))] = decided(
                signs.get(regime, 0), low)
    secondary = {regime: {sixth_study.comparison_name(c): decided(0) for c in sixth_study.SECONDARY[regime]}
                 for regime in sixth_study.REGIMES}
    for regime in sixth_study.REGIMES:
        secondary[regime][sixth_study.comparison_name((regime, "spo", "uniform-n8"))] = decided(spo_over_uniform)
        for (arm, reference), sign in (secondary_signs or {}).get(regime, {}).items():
            secondary[regime][sixth_study.comparison_name((regime, arm, reference))] = decided(sign)
    return {"primary": primary, "secondary": secondary}


def test_the_recommendation_reads_both_primaries_and_spo_against_uniform():
    ahead_everywhere = {regime: 1 for regime in sixth_study.REGIMES}
    answer = sixth_study.recommendation(rule_summary({}, ahead_everywhere))
    assert answer["revisited"]["answer"] == answer["fresh"]["answer"] == "candidate"
    # Not shown within a point of SPO: the candidate, short of SPO.
    answer = sixth_study.recommendation(rule_summary({}, ahead_everywhere, low=-0.011))
    assert answer["revisited"]["answer"] == "candidate-short-of-spo"
    # SPO ahead of the candidate on the revisited pools only: SPO there, the candidate where prompts are fresh.
    answer = sixth_study.recommendation(rule_summary({r: -1 for r in sixth_study.REVISITED}, ahead_everywhere))
    assert answer["revisited"]["answer"] == "spo" and answer["fresh"]["answer"] == "candidate"
    # SPO is named only where it is also ahead of uniform GRPO.
    answer = sixth_study.recommendation(rule_summary({r: -1 for r in sixth_study.REVISITED}, {}, spo_over_uniform=0))
    assert answer["revisited"]["answer"] == "none"
    # The families disagree: no answer for the kind, each family's stated.
    answer = sixth_study.recommendation(rule_summary({}, {"sorting-revisited": 1, "sorting-fresh": 1}))
    assert answer["revisited"]["answer"] is None
    assert answer["revisited"]["by_regime"] == {"sorting-revisited": "candidate", "brackets-revisited": "none"}
    assert answer["fresh"]["answer"] == "candidate" and answer["fresh"]["by_regime"] == {"sorting-fresh": "candidate"}
    # A comparison not complete on every seed gives no answer.
    partial = rule_summary({}, ahead_everywhere)
    del partial["primary"][sixth_study.comparison_name(("sorting-fresh", sixth_study.BEST, "spo"))]["holm"]
    assert sixth_study.recommendation(partial)["fresh"]["answer"] == "incomplete"


def test_the_default_baseline_changes_only_where_the_registered_rule_says_so():
    n2, n8 = ("n2-earlier-or-batch", "n2-history"), ("uniform-n8-earlier-or-batch", "uniform-n8-history")
    fresh_n8 = ("uniform-n8-batch", "uniform-n8")  # at the fresh pool the twins' contrast stands for n8's
    rule = sixth_study.default_baseline
    assert rule(rule_summary({}, {})) == "history"
    assert rule(rule_summary({}, {}, secondary_signs={"sorting-revisited": {n2: 1}, "sorting-fresh": {fresh_n8: 1}})) \
        == "earlier_or_batch"
    # Ahead on one pool kind only: unchanged.
    assert rule(rule_summary({}, {}, secondary_signs={"sorting-revisited": {n2: 1}, "brackets-revisited": {n8: 1}})) \
        == "history"
    # Behind anywhere: never earlier_or_batch.
    behind = {"sorting-revisited": {n2: 1}, "sorting-fresh": {fresh_n8: 1}, "brackets-revisited": {n2: -1}}
    assert rule(rule_summary({}, {}, secondary_signs=behind)) == "history"
    history_behind = {"brackets-revisited": {("uniform-n8-history", "uniform-n8"): -1}}
    assert rule(rule_summary({}, {}, secondary_signs=history_behind)) == "group"
    partial = rule_summary({}, {})
    partial["secondary"]["sorting-fresh"][sixth_study.comparison_name(("sorting-fresh", *fresh_n8))] = {"diff": 0.0}
    assert rule(partial) == "incomplete"


def test_the_fresh_pools_twins_run_once_and_stand_for_their_arms():
    seeds = list(sixth_study.SEEDS)
    jobs = sixth_study.job_order(seeds)
    assert len(jobs) == len(set(jobs)) == 704
    for arm, twin in sixth_study.FRESH_TWINS.items():
        assert [seed for regime, label, seed in jobs if regime == "sorting-fresh" and label == arm] == [seeds[0]]
        assert len([job for job in jobs if job[0] == "sorting-revisited" and job[1] == arm]) == len(seeds)
        # Twins by construction at a first visit: what differs between the two arms is only what earlier visits set.
        mine, theirs = factors(arm), factors(twin)
        assert mine["rollouts_a_prompt"] == theirs["rollouts_a_prompt"] and mine["order"] == theirs["order"] == "trl"
    assert len(sixth_study.SECONDARY["sorting-fresh"]) == 10 and len(sixth_study.SECONDARY["sorting-revisited"]) == 17


def test_a_quick_study_counts_every_cost_and_resumes_from_its_stored_runs(tmp_path, monkeypatch):
    # The fresh regime of the quick study (2 seeds, 16 updates: two batches), a layout of each kind: the real trainer.
    quick_arms = ("uniform-n8", "spo", "n2-earlier-or-batch", "spo-trl-order", "vip")
    monkeypatch.setattr(sixth_study, "job_order", lambda seeds: [
        ("sorting-fresh", arm, seed) for seed in seeds for arm in quick_arms])
    result = sixth_study.main(["--quick", "--processes", "1", "--output-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "sixth_study.json").read_text())
    assert list(saved["primary"]) == [sixth_study.comparison_name(c) for c in sixth_study.PRIMARY]
    for comparison in sixth_study.PRIMARY:
        test = saved["primary"][sixth_study.comparison_name(comparison)]
        assert ("diff" in test) == (comparison[0] == "sorting-fresh")
        assert test["mde80"] == pytest.approx(sixth_study.mde80(comparison))
    rows = saved["arms"]["sorting-fresh"]
    assert set(rows) == set(quick_arms)
    for label in quick_arms:  # 512 rollouts a batch in every arm, two batches, no prior
        assert rows[label]["generated_rollouts"] == 512 and rows[label]["generated_in_all"] == 1024
    # Visits: SPO draws 512 a batch by its weights from 1 024 prompts; TRL's sampler deals each prompt once a pass.
    assert rows["n2-earlier-or-batch"]["visits_mean"] == pytest.approx(512 / 1024)
    assert rows["uniform-n8"]["visits_mean"] == pytest.approx(128 / 1024)
    assert rows["spo-trl-order"]["visits_mean"] == pytest.approx(1024 / 1024)
    assert rows["spo"]["rho_forward_rows"] > 0 and rows["n2-earlier-or-batch"]["rho_forward_rows"] == 0
    assert saved["preregistered"]["study_code"] == sixth_study.STUDY_CODE and saved["machines"]
    assert set(saved["recommendation"]) >= {"revisited", "fresh", "between", "reward_kind"}

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(sixth_study, "run_rl", no_training)
    again = sixth_study.main(["--quick", "--stored-only", "--output-dir", str(tmp_path)])
    assert again["primary"] == result["primary"] and again["arms"] == result["arms"]


def test_every_figure_on_the_sixth_study_page_comes_from_the_pilots_and_the_script():
    from test_docs_figures import assert_stated_and_nothing_else, minus, page

    def interval(row: dict) -> str:
        return minus(f"{row['diff'] * 100:+.2f} [{row['ci95'][0] * 100:+.2f}, {row['ci95'][1] * 100:+.2f}]")

    answers, pilot_2 = json.loads(sixth_study.PILOT.read_text()), json.loads(sixth_study.PILOT_2.read_text())
    sizing, seen = answers["sizing"], answers["versus_uniform_n8"]
    batches, seeds = arms.BUDGET // 8, list(sixth_study.SEEDS)
    fifth_spo_visits = batches * arms.ROLLOUTS / arms.REVISITED_POOL
    expected = [
        f"about {fifth_spo_visits:.0f} times a run under SPO", f"pool of {arms.REVISITED_POOL:,}".replace(",", " "),
        f"fresh pool of {arms.FRESH_POOL:,}".replace(",", " "), f"ρ of {arms.SPO_CONSTANT_RHO}",
        f"{seeds[0]}–{seeds[-1]}, paired and fresh", f"({min(pilot.SEEDS)}–{max(pilot.PILOT_2_SEEDS)})",
        f"cap of {len(seeds)}",
        f"{sizing['largest_paired_sd'] * 100:.2f} points, needs more than {pilot.SEED_RANGE[1]} seeds",
        f"effect of {sizing['mde80_at_study_seeds'] * 100:.2f} points",
        f"effect of {pilot.TARGET_MDE * 100:.0f} point", f"above {minus(f'{-sixth_study.MARGIN * 100:.0f}')} point",
        interval(answers["gates"]["sorting-fresh"]["room"]), interval(answers["gates"]["brackets-fresh"]["room"]),
        interval(pilot_2["gates"]["brackets-20-24-fresh"]["room"]),
        *[interval(sixth_study.room_gate(regime)) for regime in sixth_study.REVISITED],
        *[interval(seen[regime][f"{arm} - uniform-n8"]) for arm in ("spo", "n2-earlier-or-batch")
          for regime in ("sorting-fresh", "brackets-fresh")],
    ]
    assert batches * arms.ROLLOUTS / arms.FRESH_POOL == 2 and len(sixth_study.PRIMARY) == 6  # "twice", "six"
    assert answers["gates"]["sorting-fresh"]["passed"] and not answers["gates"]["brackets-fresh"]["passed"]
    assert not pilot_2["gates"]["brackets-20-24-fresh"]["passed"]
    allowed = ("8 times the prompts", "2 rollouts a prompt", "under 8 or 2 rollouts", "eight primaries", "8 rollouts", "16 rollouts", "1 000 problems",
               "16 to 24 brackets", "20 and 24 brackets", "on 20 seeds", "at least 1 point", "one of SPO",
               "uniform GRPO with 16", "against 8")
    # The question, the pre-registration and the pilots; the results' sections are `test_sixth_study_page.py`'s
    text = page("docs/studies/sixth.md")
    assert_stated_and_nothing_else(text[text.index("## The question"):text.index("## The primaries")], expected,
                                   allowed)


def test_the_trainer_time_benchmark_times_each_batchs_stages_where_the_arm_has_them(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "overhead"))
    import sixth_study_arms

    batches = sixth_study_arms.WARM_UP + 2
    spo = sixth_study_arms.run_arm("sorting-revisited", "spo", batches, tmp_path / "spo", quick=True)
    uniform = sixth_study_arms.run_arm("sorting-revisited", "uniform-n8", batches + 1, tmp_path / "uniform",
                                       quick=True)
    assert (spo["batches_timed"], uniform["batches_timed"]) == (1, 2)  # the warm-up and the last batch left out
    for figures in (spo, uniform):
        parts = figures["part_seconds"]
        assert min(parts.values()) >= 0 and parts["generation"] > 0 and parts["updates"] > 0
        assert sum(parts[name] for name in ("generation", "rewards", "forward_passes", "bookkeeping", "updates")) \
            == pytest.approx(figures["batch_seconds"])  # means: the parts add up to the batch
    # SPO's settle runs rho's passes over prompts that came back (inside the generation stage's passes); uniform's
    # trainer has no SPO stage, and its only pass there is TRL's old policy's
    assert 0 < spo["part_seconds"]["spo_settle"] and "spo_settle" not in uniform["part_seconds"]
    assert spo["part_seconds"]["forward_passes"] > uniform["part_seconds"]["forward_passes"] > 0


def test_the_page_says_every_run_is_stored_only_when_the_summary_holds_them_all_from_the_studys_code():
    summary = json.loads((sixth_study.RESULTS / "sixth_study.json").read_text())
    page = (Path(__file__).resolve().parents[1] / "docs" / "studies" / "sixth.md").read_text()
    assert "every registered run is stored, trained by the study's code" in " ".join(page.split())
    assert summary["runs"] == summary["runs_registered"] == len(sixth_study.job_order(list(sixth_study.SEEDS)))
    assert summary["runs_with_other_code"] == []
    assert {machine["code"] for machine in summary["machines"]} == {sixth_study.STUDY_CODE}
