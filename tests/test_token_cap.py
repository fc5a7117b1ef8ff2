"""The token cap: expected completion tokens at most `cap` x the uniform allocation's, checked against brute force."""

import itertools

import numpy as np
import pytest

from trl_budget import CoBAAllocator, KnapsackAllocator
from trl_budget.allocators.token_cap import allocate_under_token_cap, expected_tokens


def all_allocations(prompts: int, budget: int, low: int, high: int):
    for counts in itertools.product(range(low, high + 1), repeat=prompts):
        if sum(counts) == budget:
            yield np.array(counts)


@pytest.mark.parametrize("allocator", [KnapsackAllocator(2, 8, fallback=False), CoBAAllocator(2, 8)],
                         ids=["knapsack", "coba"])
def test_capped_allocations_against_brute_force(allocator):
    rng = np.random.default_rng(0)
    candidates = list(all_allocations(4, 16, 2, 8))
    exact = fitted = 0
    for _ in range(60):
        rates, lengths, cap = rng.integers(1, 8, 4) / 8, rng.uniform(5, 100, 4), rng.uniform(0.8, 1.1)
        result = allocate_under_token_cap(allocator, rates, 16, 0.5, lengths, cap)
        limit = cap * expected_tokens(np.full(4, 4), lengths)
        tokens = expected_tokens(result.counts, lengths)
        value = allocator.value(result.counts, rates, 0.5)
        assert result.counts.sum() == 16 and result.counts.min() >= 2 and result.counts.max() <= 8
        assert result.token_ratio == pytest.approx(tokens / expected_tokens(np.full(4, 4), lengths))
        if not result.fits:  # no allocation of 16 slots fits: the cheapest is returned
            assert tokens == pytest.approx(min(expected_tokens(c, lengths) for c in candidates))
            continue
        fitted += 1
        assert tokens <= limit + 1e-9
        # Exact: no allocation with at most as many expected tokens has a higher value.
        at_most = [allocator.value(c, rates, 0.5) for c in candidates if expected_tokens(c, lengths) <= tokens + 1e-9]
        assert value >= max(at_most) - 1e-12
        # Not always exact for the cap itself (the Lagrangian gap), but never above its optimum.
        under_cap = max(allocator.value(c, rates, 0.5) for c in candidates if expected_tokens(c, lengths) <= limit)
        assert value <= under_cap + 1e-12
        exact += value >= under_cap - 1e-12
    assert fitted >= 50 and exact >= fitted // 2  # measured: 66 of 95 for knapsack, 66 of 93 for coba (100 batches)


def test_a_cap_that_binds_not_changes_nothing_and_one_that_binds_moves_rollouts_to_short_prompts():
    allocator = KnapsackAllocator(2, 32, fallback=False)
    rates = np.array([0.5, 0.5, 0.1, 0.9])
    lengths = np.array([10.0, 200.0, 50.0, 50.0])
    free = allocator.allocate(rates, 32, None)
    loose = allocate_under_token_cap(allocator, rates, 32, None, lengths, cap=100.0)
    assert loose.multiplier == 0.0 and loose.fits and np.array_equal(loose.counts, free)
    tight = allocate_under_token_cap(allocator, rates, 32, None, lengths, cap=0.8)
    assert tight.fits and tight.token_ratio <= 0.8 and tight.multiplier > 0
    assert tight.counts[0] > tight.counts[1]  # equal pass rates: the short prompt keeps more rollouts


def test_a_capped_run_logs_its_token_ratio_and_keeps_it_under_the_cap(tmp_path, tokenizer):
    from helpers import make_dataset, make_trainer

    trainer = make_trainer(tmp_path, tokenizer, budget_token_cap=0.9, max_steps=6, pass_rate_min_rollouts=1,
                           knapsack_fallback=False, max_completion_length=8, per_device_train_batch_size=24,
                           dataset=make_dataset(12))
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "budget/expected_token_ratio" in entry]
    assert len(logs) == 6
    fitted = [entry for entry in logs if entry["budget/token_cap_fits"] == 1]
    assert fitted and all(entry["budget/expected_token_ratio"] <= 0.9 + 1e-9 for entry in fitted)
    assert any(entry["budget/token_cap_multiplier"] > 0 for entry in fitted)  # the cap bound and was met
    assert all(entry["budget/completion_tokens"] > 0 for entry in logs)
    assert np.isfinite(trainer.tracker.expected_lengths([trainer.last_rollout_plan.keys[0]])).all()


def test_a_token_cap_needs_an_allocator_that_prices_rollouts(tmp_path, tokenizer):
    from helpers import make_trainer

    with pytest.raises(ValueError, match="budget_token_cap=1.2 needs an allocator that prices rollouts"):
        make_trainer(tmp_path, tokenizer, budget_token_cap=1.2, budget_allocator="uniform",
                     model="no-such-org/no-such-model")


def test_lengths_whose_tokens_overflow_are_refused_not_reported_as_fitting():
    # Before: 2 x 1e308 overflowed to inf, every comparison with the limit failed, and the result said fits=True
    # with a token ratio of NaN: the cap was not enforced.
    with pytest.raises(ValueError, match="budget_token_cap cannot be enforced: .* overflow"):
        allocate_under_token_cap(KnapsackAllocator(2, 8), np.array([0.5, 0.5]), 8, 0.5, np.array([1e308, 1e308]), 1.0)
