"""Which rule the trainer's defaults set, decided from the fifth study's results by a rule fixed before they were read.

    python benchmarks/fifth_study/defaults_rule.py      # the rule results/fifth_study.json gives

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
    return "group" if any(verdict(test) < 0 for test in history_vs_uniform) else "history"


if __name__ == "__main__":
    rule = chosen_rule(json.loads(RESULTS.read_text()))
    print(rule, DEFAULTS[rule])
