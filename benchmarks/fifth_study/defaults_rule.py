"""Which rule the trainer's defaults set, decided from the fifth study's results by a rule outside its pre-registration.

    python benchmarks/fifth_study/defaults_rule.py   # the rule results/fifth_study.json gives, the default inside the
                                                     # drop-in contract, and the demo's answer

What the commit order shows: this rule was committed (0fda16d) after every run it reads was stored (the 240 runs of
the four arms in the primaries and room gates, 292 of the study's 420) and before the study's summary,
results/fifth_study.json, was first committed (bf3dc6e, after the last run). The stored runs hold each run's accuracy,
so the repository cannot show that none was read first: the rule is post hoc. It names SPO as released, with its
prior; the defaults leave the prior out (the study's `spo-no-prior` arm), a choice made after the results, from the
secondary `spo - spo-no-prior`, which detected no gain from the prior: post hoc as well.

The drop-in contract (README; docs/trainer.md) later ruled the first outcome out of the defaults: SPO changes what a
TRL user's `num_generations`, steps and epochs mean, so it is chosen by name. `contract_rule` is this rule without its
first branch, the default among the rules that keep the contract. It reads no figure the rule above does not, but it
was written after the results were stored: post hoc, like the rule.

It also writes the answer `trl-budget demo` prints for its default pair (SPO without a prior against uniform GRPO),
`trl_budget/demo/spo_answer.json`: the study's `spo-no-prior - uniform-n8` on arithmetic, the demo's task and regime.

The fourth study settled the allocation: no rule that moves rollouts gained on a second task family, and Knapsack RL
(the old default) lost where waste is heavy, so the default allocation is uniform GRPO's unless SPO, which also
chooses the prompts, wins here. The fifth study decides between three defaults, in this order:

1. `spo`: SPO as released (one rollout a prompt, prompts drawn by its weights, its baseline), if `uniform-n8-history -
   spo` is significant after Holm and negative (SPO ahead of the history baseline) in at least two of the three
   families, significant and positive in none, and SPO is ahead at equal generated rollouts (its prior's included) in
   each family where it won. A default that changes TRL's batch layout has to beat the one that keeps it clearly.
2. `history`: uniform allocation with the history baseline (the fourth study's finding on both its families), unless
   the fifth study's secondary `uniform-n8-history - uniform-n8` is significant and negative in some family.
3. `group`: uniform allocation with GRPO's own baseline, TRL's GRPO unchanged, otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "fifth_study.json"
DEMO_ANSWER = Path(__file__).resolve().parents[2] / "trl_budget" / "demo" / "spo_answer.json"
# The study's arm the defaults train (SPO, its prior off) against uniform GRPO, in the demo's task and regime.
DEMO_COMPARISON, DEMO_FAMILY = "arithmetic: spo-no-prior - uniform-n8", "arithmetic"
FAMILIES = ("arithmetic", "sorting", "brackets")
# The settings each outcome makes the defaults: every one a BudgetGRPOConfig field.
DEFAULTS = {
    "spo": {"budget_allocator": "spo", "advantage_baseline": "spo", "prompt_sampling": "spo"},
    "history": {"budget_allocator": "uniform", "advantage_baseline": "history"},
    "group": {"budget_allocator": "uniform", "advantage_baseline": "group"},
}


def verdict(test: dict) -> int:
    """+1: the arm significantly ahead of its reference after Holm; -1: significantly behind; 0: neither."""
    if not test.get("holm", {}).get("significant"):
        return 0
    return 1 if test["diff"] > 0 else -1


def chosen_rule(study: dict) -> str:
    """The default rule ('spo', 'history' or 'group') the fifth study's summary gives."""
    against_spo = {family: study["primary"][f"{family}: uniform-n8-history - spo"] for family in FAMILIES}
    spo_wins = [family for family, test in against_spo.items() if verdict(test) < 0]
    equal_rollouts = {family: study["at_equal_cost"][family]["uniform-n8-history - spo"]["generated_rollouts"]
                      for family in FAMILIES}
    if (len(spo_wins) >= 2 and not any(verdict(test) > 0 for test in against_spo.values())
            and all(equal_rollouts[family]["diff"] < 0 for family in spo_wins)):
        return "spo"
    history_vs_uniform = [study["secondary"][family][f"{family}: uniform-n8-history - uniform-n8"]
                          for family in FAMILIES]
    return contract_rule(study)


def contract_rule(study: dict) -> str:
    """The default among the rules that keep GRPOTrainer's contract (uniform allocation in TRL's order): the history
    baseline, unless it lost to uniform GRPO significantly in some family; else GRPO's own."""
    history_vs_uniform = [study["secondary"][family][f"{family}: uniform-n8-history - uniform-n8"]
                          for family in FAMILIES]
    return "group" if any(verdict(test) < 0 for test in history_vs_uniform) else "history"


def points(value: float) -> str:
    return f"{value * 100:+.2f}"


def demo_answer(study: dict) -> dict:
    """What the demo prints for its default pair: the study's test of the defaults' arm against uniform GRPO in the
    demo's regime, with the registered primary (SPO with its prior) and the room gate for scale."""
    test = study["secondary"][DEMO_FAMILY][DEMO_COMPARISON]
    primary = study["primary"][f"{DEMO_FAMILY}: spo - uniform-n8"]
    gate = study["room_gates"][DEMO_FAMILY]
    low, high = test["ci95"]
    p = f"= {test['p']:.3f}" if test["p"] >= 0.001 else "< 0.001"
    held = "significant" if test["holm"]["significant"] else "not significant"
    answer = (f"SPO as budget_allocator='spo' runs it (one rollout a prompt, drawn by SPO's weights, its baseline, "
              f"no offline prior) against uniform GRPO at the same rollouts and updates: {points(test['diff'])} points "
              f"of "
              f"greedy held-out accuracy (95% interval [{points(low)}, {points(high)}], exact p {p}, "
              f"{test['seeds']} paired seeds; {held} after Holm over the family's "
              f"{len(study['secondary'][DEMO_FAMILY])} secondaries). With its offline prior, the study's primary: "
              f"{points(primary['diff'])}. For scale: uniform with twice the rollouts gains {points(gate['diff'])}.")
    return {"answer": answer, "comparison": DEMO_COMPARISON, "metric": study["preregistered"]["metric"],
            "test": {name: test[name] for name in ("diff", "ci95", "p", "seeds", "complete")},
            "significant_after_holm": test["holm"]["significant"], "room_gate": gate}


if __name__ == "__main__":
    study = json.loads(RESULTS.read_text())
    rule = chosen_rule(study)
    print(rule, DEFAULTS[rule])
    inside = contract_rule(study)
    print(f"inside the drop-in contract: {inside} {DEFAULTS[inside]}")
    DEMO_ANSWER.write_text(json.dumps(demo_answer(study), indent=2) + "\n")
    print(f"{DEMO_ANSWER}: {demo_answer(study)['answer']}")
