"""benchmarks/engine_cost/per_prompt_rounds.py's schedules: the rollouts the package's round rules decide for scripted
outcomes, and the first round whose decisions the prompts share (from there on a per-prompt path must wait for every
prompt)."""

import numpy as np
import pytest

import per_prompt_rounds

PROMPTS = per_prompt_rounds.PROMPTS
MIXED = np.tile([1, 0], (PROMPTS, 32))  # every prompt alternates success and failure
FAILING = np.zeros((PROMPTS, 64), dtype=np.int64)  # every prompt always fails


def totals(rule: str, outcomes: np.ndarray) -> tuple[list[int], int | None]:
    rounds, shared = per_prompt_rounds.schedule(per_prompt_rounds.RULES[rule](), outcomes)
    assert all(len(counts) == PROMPTS for counts in rounds)
    return [sum(counts) for counts in rounds], shared


def test_reinforce_ada_stops_a_prompt_at_its_first_mixed_round_and_shares_nothing_under_its_budget():
    # 4 a round: 2 successes and 2 failures finish every prompt at once; nothing is shared, nothing topped up
    assert totals("reinforce-ada-positive", MIXED) == ([4 * PROMPTS], None)
    # always failing: 4 a round until the 512 are spent; the budget ends the batch rather than cutting a round
    assert totals("reinforce-ada-positive", FAILING) == ([4 * PROMPTS, 4 * PROMPTS], None)


def test_rounds_until_mixed_shares_its_top_up_round():
    # first 2 each, all mixed; the 384 left are spread over every prompt in one shared round
    assert totals("rounds-uniform", MIXED) == ([2 * PROMPTS, 512 - 2 * PROMPTS], 1)
    # never mixed: +1 a round for every prompt, each round as asked, until the budget is spent
    assert totals("rounds-uniform", FAILING) == ([2 * PROMPTS] + [PROMPTS] * 6, None)
    # few, large rounds: first 4 each, then the other 256 in the shared top-up
    assert totals("rounds-uniform-large", MIXED) == ([4 * PROMPTS, 4 * PROMPTS], 1)


def test_every_drawn_batch_generates_the_budget_and_finds_its_shared_round_within_the_schedule():
    for entry in per_prompt_rounds.batches(2):
        assert len(entry["letters"]) == PROMPTS
        for rule, rounds in entry["schedules"].items():
            assert sum(map(sum, rounds)) == per_prompt_rounds.BUDGET
            shared = entry["first_shared_round"][rule]
            assert shared is None or 0 < shared < len(rounds)


def test_per_prompt_rounds_decide_exactly_what_the_synchronous_rule_decides_whatever_finishes_first():
    rng = np.random.default_rng(0)
    for entry in per_prompt_rounds.batches(2):
        for rule, build in per_prompt_rounds.RULES.items():
            for _ in range(3):  # each prompt's rounds finishing in a drawn order
                rounds, ahead = per_prompt_rounds.per_prompt_schedule(build(), entry["outcomes"], rng)
                assert rounds == entry["schedules"][rule], rule
                assert ahead == entry["rounds_decided_prompt_by_prompt"][rule], rule


def test_a_prompt_runs_ahead_while_the_budget_cannot_bind_and_waits_where_it_might():
    # one prompt always failing, the others solved at once: its 15 further rounds can never meet the budget
    # (256 + 15 x 4 <= 512), so it runs through them alone and nothing is left to decide together
    one_hard = np.ones((PROMPTS, 64), dtype=np.int64)
    one_hard[0] = 0
    rounds, ahead = per_prompt_rounds.per_prompt_schedule(per_prompt_rounds.RULES["reinforce-ada-positive"](),
                                                          one_hard)
    assert ahead == len(rounds) == 16 and [sum(counts) for counts in rounds] == [4 * PROMPTS] + [4] * 15
    # every prompt failing: a second round provably fits (256 + 256); a third might not, so every prompt waits there,
    # and the rule, deciding on all of them, finds the budget spent
    rounds, ahead = per_prompt_rounds.per_prompt_schedule(per_prompt_rounds.RULES["reinforce-ada-positive"](),
                                                          FAILING)
    assert (ahead, [sum(counts) for counts in rounds]) == (2, [4 * PROMPTS] * 2)
    # rounds until mixed, all mixed after the first: nothing runs ahead, the top-up is decided on every prompt
    rounds, ahead = per_prompt_rounds.per_prompt_schedule(per_prompt_rounds.RULES["rounds-uniform"](), MIXED)
    assert (ahead, [sum(counts) for counts in rounds]) == (1, [2 * PROMPTS, 512 - 2 * PROMPTS])


def test_the_rest_waits_for_every_prompt():
    ahead = per_prompt_rounds.ReplayedPerPrompt(per_prompt_rounds.RULES["reinforce-ada-positive"](), FAILING)
    ahead.first_round()
    with pytest.raises(RuntimeError, match="every prompt has stopped or waits"):
        ahead.rest()


def vip_rounds_until_mixed():
    """Rounds until mixed (2 first, 2 a round, at most 32) whose budget left VIP's objective splits."""
    from trl_budget.allocators.vip import VIPAllocator
    from trl_budget.round_rules import UntilMixed

    allocator = VIPAllocator(2, 32, rule="grpo")
    return UntilMixed(2, 2, 32, per_prompt_rounds.BUDGET, 1, None, lambda wins, trials: wins / np.maximum(trials, 1),
                      lambda rates, counts, spare: allocator.top_up(rates, counts, spare))


def test_vips_rounds_until_mixed_decide_prompt_by_prompt_what_the_synchronous_rule_decides():
    rng, spread_by_value = np.random.default_rng(0), False
    for entry in per_prompt_rounds.batches(2):
        synchronous, shared = per_prompt_rounds.schedule(vip_rounds_until_mixed(), entry["outcomes"])
        assert sum(map(sum, synchronous)) == per_prompt_rounds.BUDGET and shared is not None
        for _ in range(3):  # each prompt's rounds finishing in a drawn order
            assert per_prompt_rounds.per_prompt_schedule(vip_rounds_until_mixed(), entry["outcomes"], rng)[0] == \
                synchronous
        top_up = np.array(synchronous[-1])  # the shared top-up: VIP's objective, not an even spread
        spread_by_value |= top_up.max() - top_up.min() > 1
    assert spread_by_value
