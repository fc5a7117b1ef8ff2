import itertools

import numpy as np
import pytest

from trl_budget import CoBAAllocator, KnapsackAllocator, UniformAllocator
from trl_budget.allocators import spread_evenly

from reference_allocators import heap_greedy, release_knapsack_counts

ALLOCATORS = [
    UniformAllocator(2, 16),
    KnapsackAllocator(2, 16),
    KnapsackAllocator(2, 16, fallback=False),
    CoBAAllocator(2, 16),
    CoBAAllocator(2, 16, bucket_heuristic=True),
]


def brute_force_best(value_of, lows, highs, budget):
    """Best objective over every integer allocation within the bounds that spends the budget exactly."""
    best = -np.inf
    for counts in itertools.product(*(range(lo, hi + 1) for lo, hi in zip(lows, highs))):
        if sum(counts) == budget:
            best = max(best, value_of(np.array(counts)))
    return best


def random_rates(rng, size, unseen=0.0, extremes=0.0):
    rates = rng.integers(1, 8, size) / 8.0
    rates[rng.random(size) < extremes / 2] = 0.0
    rates[rng.random(size) < extremes / 2] = 1.0
    rates[rng.random(size) < unseen] = np.nan
    return rates


@pytest.mark.parametrize("seed", range(40))
def test_knapsack_without_fallback_is_optimal_on_mixed_prompts(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 5))
    rates = random_rates(rng, size, unseen=0.2, extremes=0.3)
    if seed % 3 == 0:  # continuous pass rates too
        rates = np.where(np.isnan(rates), np.nan, rng.random(size))
    allocator = KnapsackAllocator(2, 9, fallback=False)
    budget = int(rng.integers(2 * size, 9 * size + 1))
    counts = allocator.allocate(rates, budget)
    mixed = (rates > 0) & (rates < 1)
    if not mixed.any():
        return
    mixed_budget = int(counts[mixed].sum())
    best = brute_force_best(
        lambda c: KnapsackAllocator.prompt_value(c, rates[mixed]).sum(), [2] * mixed.sum(), [9] * mixed.sum(),
        mixed_budget,
    )
    assert allocator.value(counts, rates) == pytest.approx(best, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("seed", range(40))
def test_coba_is_optimal(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 5))
    rates = random_rates(rng, size, unseen=0.2, extremes=0.2)
    if np.isnan(rates).all():
        rates[0] = 0.5
    failure_rate = float(rng.random()) if seed % 2 else None
    allocator = CoBAAllocator(1, 10)
    budget = int(rng.integers(size, 10 * size + 1))
    counts = allocator.allocate(rates, budget, failure_rate)
    best = brute_force_best(lambda c: allocator.value(c, rates, failure_rate), [1] * size, [10] * size, budget)
    assert allocator.value(counts, rates, failure_rate) == pytest.approx(best, rel=1e-12)


def test_knapsack_fallback_follows_the_release():
    rates = np.array([0.0, 0.0, 0.5, 0.25, 1.0, np.nan])
    allocator = KnapsackAllocator(2, 128)
    counts = allocator.allocate(rates, 6 * 32)
    # Base counts 2, 2, 2, 2, 2 and 32 (unseen: the even share) leave 150 spare. Release costs, truncated:
    # int(log(0.1)/log(0.5)) = 3 and int(log(0.1)/log(0.75)) = 8, so S = 11 < 150 and the fallback fires.
    np.testing.assert_array_equal(allocator.fallback_cost(rates[2:4]), [3, 8])
    # The excess 139 goes in equal parts to the two p = 0 prompts and the unseen one: 47, 46, 46.
    np.testing.assert_array_equal(counts[[0, 1, 4, 5]], [2 + 47, 2 + 46, 2, 32 + 46])
    assert counts[2] + counts[3] == 2 + 2 + 11  # the mixed prompts share exactly S above N_low


def test_knapsack_fallback_needs_a_strictly_smaller_cost():
    rates = np.array([0.5, 0.5, 0.0, 0.0])  # base 8, spare 8; S = 3 + 3 = 6 < 8: fires
    np.testing.assert_array_equal(KnapsackAllocator(2, 128).allocate(rates, 16), [5, 5, 3, 3])
    rates = np.array([0.5, 0.5, 0.0])  # base 6, spare 6; S = 6 is not smaller: the mixed prompts take it all
    np.testing.assert_array_equal(KnapsackAllocator(2, 128).allocate(rates, 12), [5, 5, 2])


def test_knapsack_fallback_without_never_solved_prompts_raises_the_solved_ones():
    rates = np.array([0.5, 1.0, 1.0])  # base 6, spare 18; S = 3: the excess 15 goes to the p = 1 prompts, 8 and 7
    np.testing.assert_array_equal(KnapsackAllocator(2, 128).allocate(rates, 24), [5, 10, 9])


def test_knapsack_without_mixed_prompts_feeds_never_solved_and_unseen_prompts():
    rates = np.array([0.0, 1.0, np.nan, 1.0])  # base 2, 2, 8, 2; spare 18 to prompts 0 and 2 in equal parts
    np.testing.assert_array_equal(KnapsackAllocator(2, 128, default_generations=8).allocate(rates, 32), [11, 2, 17, 2])
    np.testing.assert_array_equal(KnapsackAllocator(2, 128).allocate(np.ones(4), 32), [8, 8, 8, 8])


def test_knapsack_keeps_max_generations_where_the_release_exceeds_it():
    rates = np.array([0.0, 0.5, 1.0, 1.0])  # the release would give the p = 0 prompt 2 + 122
    counts = KnapsackAllocator(2, 64).allocate(rates, 4 * 32)
    assert counts.max() <= 64 and counts.sum() == 128
    np.testing.assert_array_equal(counts, [64, 5, 30, 29])  # the rest goes to the other non-mixed prompts


def test_knapsack_fallback_off_spends_everything_on_mixed_prompts():
    rates = np.array([0.0, 0.0, 0.5, 0.25, 1.0])
    counts = KnapsackAllocator(2, 128, fallback=False).allocate(rates, 5 * 32)
    assert counts[0] == counts[1] == counts[4] == 2
    assert counts[2] + counts[3] == 5 * 32 - 6


def test_knapsack_gives_an_unsolved_prompt_many_rollouts_in_a_mostly_solved_batch():
    rates = np.array([0.0] + [1.0] * 15 + [0.75] * 16)
    counts = KnapsackAllocator(2, 128).allocate(rates, 32 * 8)
    # Base 2 + 15 x 2 + 16 x 2 = 64, spare 192; S = 16 x int(8.004) = 128 < 192: the excess 64 goes to prompt 0.
    assert counts[0] == 2 + 64
    assert (counts[16:] == 2 + 8).all()


def release_batches(count: int):
    """Random batches as the trainer sees them: pass rates k/8 or k/16 (unseen, 0 and 1 included), N_up 16/32/128."""
    rng = np.random.default_rng(2025)
    for index in range(count):
        size = int(rng.integers(2, 65))
        trials = (8, 16)[index % 2]
        rates = rng.integers(0, trials + 1, size) / trials
        rates[rng.random(size) < rng.uniform(0, 0.4)] = np.nan
        yield rates, (16, 32, 128)[index % 3]


def test_knapsack_has_the_release_effect_on_random_batches():
    compared = 0
    for rates, max_n in release_batches(160):
        n = 8
        allocator = KnapsackAllocator(2, max_n, default_generations=n)
        counts = allocator.allocate(rates, rates.size * n)
        release = release_knapsack_counts(rates, n, 2, max_n)
        assert counts.sum() == release.sum() == rates.size * n and counts.max() <= max_n
        if release.max() > max_n:
            continue  # the release exceeds N_up there; this allocator keeps the bound (test above)
        compared += 1
        mixed = (rates > 0) & (rates < 1)
        np.testing.assert_array_equal(counts[~mixed], release[~mixed])
        assert counts[mixed].sum() == release[mixed].sum()
        assert allocator.value(counts, rates) == pytest.approx(allocator.value(release, rates), rel=1e-12, abs=1e-15)
    assert compared >= 120


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=repr)
@pytest.mark.parametrize("kind", ["mixed", "unseen", "solved", "failed", "extremes"])
def test_invariants(allocator, kind):
    rng = np.random.default_rng(7)
    for _ in range(30):
        size = int(rng.integers(1, 40))
        rates = {
            "mixed": random_rates(rng, size, unseen=0.2, extremes=0.2),
            "unseen": np.full(size, np.nan),
            "solved": np.ones(size),
            "failed": np.zeros(size),
            "extremes": rng.choice([0.0, 1.0, np.nan], size),
        }[kind]
        budget = int(rng.integers(2 * size, 16 * size + 1))
        counts = allocator.allocate(rates, budget, float(rng.random()))
        assert counts.dtype == np.int64 and counts.shape == (size,)
        assert counts.sum() == budget
        assert counts.min() >= 2 and counts.max() <= 16


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=repr)
def test_deterministic_and_order_independent_of_copies(allocator):
    rng = np.random.default_rng(3)
    rates = random_rates(rng, 200, unseen=0.1, extremes=0.3)
    first = allocator.allocate(rates, 200 * 8, 0.4)
    again = allocator.allocate(rates.copy(), 200 * 8, 0.4)
    np.testing.assert_array_equal(first, again)


def test_ties_go_to_the_lowest_index():
    rates = np.full(4, 0.5)
    counts = KnapsackAllocator(2, 16, fallback=False).allocate(rates, 4 * 4 + 2)
    np.testing.assert_array_equal(counts, [5, 5, 4, 4])
    np.testing.assert_array_equal(UniformAllocator(1, 16).allocate(rates, 18), [5, 5, 4, 4])


def test_coba_all_unseen_is_uniform():
    counts = CoBAAllocator(2, 16).allocate(np.full(5, np.nan), 41)
    np.testing.assert_array_equal(counts, [9, 8, 8, 8, 8])


def test_coba_shifts_from_easy_to_hard_prompts_as_the_model_improves():
    allocator = CoBAAllocator(2, 64)
    rates = np.array([0.2, 0.8])
    weak = allocator.allocate(rates, 40, failure_rate=0.9)
    strong = allocator.allocate(rates, 40, failure_rate=0.1)
    assert weak[1] > weak[0]  # weak model: exploit the easy prompt
    assert strong[0] > strong[1]  # strong model: explore the hard prompt
    assert allocator.beta_parameters(rates, 0.9)[0] > allocator.beta_parameters(rates, 0.1)[0]


def test_coba_beta_parameters_follow_the_paper():
    allocator = CoBAAllocator()
    alpha, beta = allocator.beta_parameters(None, 0.8)
    assert alpha == pytest.approx(1 + 9 * 0.8) and beta == pytest.approx(11 - alpha)
    alpha, _ = allocator.beta_parameters(None, 0.3)
    assert alpha == pytest.approx(1 + 9 / (1 + np.exp(-10 * (0.3 - 0.5))))
    assert allocator.beta_parameters(None, 1.0)[0] == pytest.approx(10.0)


def test_coba_bucket_heuristic_feeds_very_hard_prompts_by_weight():
    rates = np.array([0.0, 0.02, 0.5, 0.6, 1.0])
    counts = CoBAAllocator(2, 128, bucket_heuristic=True, exploration_share=0.5).allocate(rates, 5 * 16, 0.5)
    spare = 5 * 16 - 5 * 2
    assert counts[2] + counts[3] - 4 <= int(0.5 * spare) + 0
    assert counts[0] >= counts[1] > 2 and counts[4] == 2


def test_spread_evenly_respects_bounds():
    counts = spread_evenly(20, np.array([2, 2, 5, 2]), np.array([3, 10, 10, 10]))
    np.testing.assert_array_equal(counts, [3, 6, 6, 5])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: KnapsackAllocator(0, 8), "at least 1"),
        (lambda: CoBAAllocator(9, 8), "must not exceed"),
        (lambda: KnapsackAllocator(fallback_confidence=1.0), "fallback_confidence"),
        (lambda: CoBAAllocator(kappa=2.0), "kappa"),
    ],
)
def test_bad_settings(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=repr)
@pytest.mark.parametrize(
    "rates, budget, failure_rate, message",
    [
        ([0.5, 0.5], 3, None, r"must lie in \[4, 32\]"),
        ([0.5, 0.5], 33, None, r"must lie in \[4, 32\]"),
        ([0.5, 1.5], 8, None, r"\[0, 1\]"),
        ([0.5, -0.1], 8, None, r"\[0, 1\]"),
        ([[0.5, 0.5]], 8, None, "1-D"),
        ([], 8, None, "non-empty"),
        ([0.5, 0.5], 8.5, None, "integer"),
        ([0.5, 0.5], 8, 1.5, "failure_rate"),
    ],
)
def test_bad_requests(allocator, rates, budget, failure_rate, message):
    with pytest.raises(ValueError, match=message):
        allocator.allocate(rates, budget, failure_rate)


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=repr)
def test_value_rejects_mismatched_shapes(allocator):
    with pytest.raises(ValueError, match="shape"):
        allocator.value(np.array([2, 2, 2]), np.array([0.5, 0.5]))


def test_value_ranks_allocations():
    rates = np.array([0.5, 1.0])
    allocator = KnapsackAllocator(2, 16, fallback=False)
    best = allocator.allocate(rates, 12)
    assert allocator.value(best, rates) > allocator.value(np.array([6, 6]), rates)


@pytest.mark.parametrize("allocator", [KnapsackAllocator(2, 10**9, fallback=False), CoBAAllocator(2, 10**9)], ids=repr)
def test_work_is_bounded_by_the_budget_not_by_max_generations(allocator):
    rates = np.random.default_rng(0).integers(1, 16, 256) / 16
    counts = allocator.allocate(rates, 256 * 8, 0.5)  # a (256 x 10^9) gain matrix would not fit in memory
    assert counts.sum() == 256 * 8 and counts.min() >= 2


@pytest.mark.parametrize("objective", ["knapsack", "coba"])
def test_agrees_with_the_heap_greedy_at_two_hundred_prompts(objective):
    rng = np.random.default_rng(11)
    rates = np.where(rng.random(200) < 0.5, rng.integers(1, 16, 200) / 16, rng.random(200) * 0.98 + 0.01)
    budget = 200 * 8
    if objective == "knapsack":
        allocator = KnapsackAllocator(2, 64, fallback=False)
        gain = lambda i, n: KnapsackAllocator._gains(rates[i], n, None)  # noqa: E731
    else:
        allocator = CoBAAllocator(2, 64)
        curve = allocator.saturation_curve(rates, 0.4)
        gain = lambda i, n: curve(rates[i], n, None)  # noqa: E731
    counts = allocator.allocate(rates, budget, 0.4)
    reference = heap_greedy(gain, rates.size, 2, 64, budget)
    assert allocator.value(counts, rates, 0.4) == pytest.approx(allocator.value(reference, rates, 0.4), rel=1e-12)


@pytest.mark.parametrize("objective", ["knapsack", "coba"])
@pytest.mark.parametrize("rates_kind", ["continuous", "near the ends", "k/16"])
def test_threshold_search_gives_the_dense_solution(objective, rates_kind, monkeypatch):
    import trl_budget.allocators.solver as allocators

    rng = np.random.default_rng(5)
    size = 3000
    near_zero, near_one = rng.random(size) * 0.02 + 0.001, 0.999 - rng.random(size) * 0.02
    rates = {"continuous": rng.random(size) * 0.98 + 0.01,
             "near the ends": np.where(rng.random(size) < 0.5, near_zero, near_one),
             "k/16": rng.integers(1, 16, size) / 16}[rates_kind]
    allocator = KnapsackAllocator(2, 128, fallback=False) if objective == "knapsack" else CoBAAllocator(2, 128)
    for budget in (size * 3, size * 10, size * 60):
        monkeypatch.setattr(allocators, "DENSE_GAINS_LIMIT", 0)  # always the threshold search
        searched = allocator.allocate(rates, budget, 0.3)
        monkeypatch.setattr(allocators, "DENSE_GAINS_LIMIT", 10**12)  # always the gain matrix
        dense = allocator.allocate(rates, budget, 0.3)
        np.testing.assert_array_equal(searched, dense)
