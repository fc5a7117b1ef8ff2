"""VIP's Gaussian-process predictor (trl_budget.success_prediction) against a direct dense computation."""

import numpy as np
import pytest

from trl_budget.success_prediction import SuccessRatePredictor


def dense_prediction(embeddings, observed, rates, length_scale=0.4, prior=-1.0, jitter=1e-4):
    """The release's fit, written out densely: a distance matrix over every prompt, the kernel, an inverse."""
    distance = np.linalg.norm(embeddings[:, None, :] - embeddings[None, :, :], axis=-1)
    kernel = np.exp(-0.5 * (distance / length_scale) ** 2)
    logits = np.log(np.clip(rates, 1e-6, 1 - 1e-6) / (1 - np.clip(rates, 1e-6, 1 - 1e-6)))
    inner = kernel[np.ix_(observed, observed)] + jitter * np.eye(observed.size)
    mean = prior + kernel[:, observed] @ np.linalg.solve(inner, logits - prior)
    mean[observed] = logits
    return 1.0 / (1.0 + np.exp(-mean))


def dense_carried_means(embeddings, fits, length_scale=0.4, prior=-5.0, jitter=1e-4):
    """The release trainer's fits written out densely (`reuse_mean=True`): each fit's posterior mean over every
    prompt is the next fit's prior. `fits`: (observed prompts, their rates) per fit; returns the logits after each."""
    distance = np.linalg.norm(embeddings[:, None, :] - embeddings[None, :, :], axis=-1)
    kernel = np.exp(-0.5 * (distance / length_scale) ** 2)
    mean, after = np.full(embeddings.shape[0], prior), []
    for observed, rates in fits:
        logits = np.log(np.clip(rates, 1e-6, 1 - 1e-6) / (1 - np.clip(rates, 1e-6, 1 - 1e-6)))
        inner = kernel[np.ix_(observed, observed)] + jitter * np.eye(observed.size)
        mean = mean + kernel[:, observed] @ np.linalg.solve(inner, logits - mean[observed])
        mean[observed] = logits
        after.append(mean.copy())
    return after


def small_dataset(seed, prompts=60, dimensions=8):
    rng = np.random.default_rng(seed)
    embeddings = rng.normal(size=(prompts, dimensions))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)  # unit vectors, as all-MiniLM-L6-v2 gives
    observed = rng.choice(prompts, size=prompts // 2, replace=False)
    rates = rng.integers(0, 9, observed.size) / 8.0  # with 0 and 1: the clip matters
    return embeddings, observed, rates


@pytest.mark.parametrize("seed", range(4))
def test_predictions_equal_the_dense_computation(seed):
    embeddings, observed, rates = small_dataset(seed)
    predictor = SuccessRatePredictor(embeddings, block_rows=7).fit(observed, rates)  # several blocks
    everyone = np.arange(embeddings.shape[0])
    np.testing.assert_allclose(predictor.predict(everyone), dense_prediction(embeddings, observed, rates),
                               rtol=1e-9, atol=1e-12)


def test_an_observed_prompt_is_predicted_as_its_observation_and_an_unseen_one_moves_off_the_prior():
    embeddings, observed, rates = small_dataset(5)
    predictor = SuccessRatePredictor(embeddings).fit(observed, rates)
    np.testing.assert_allclose(predictor.predict(observed), np.clip(rates, 1e-6, 1 - 1e-6), rtol=1e-9)
    unseen = np.setdiff1d(np.arange(embeddings.shape[0]), observed)
    prior = 1 / (1 + np.exp(1.0))
    assert np.all(SuccessRatePredictor(embeddings).predict(unseen) == prior)
    assert np.abs(predictor.predict(unseen) - prior).max() > 0.05


def test_a_prompt_near_an_observed_one_is_predicted_near_its_rate():
    embeddings = np.array([[0.0, 0.0], [0.01, 0.0], [5.0, 0.0]])
    predictor = SuccessRatePredictor(embeddings).fit([0], [0.9])
    near, far = predictor.predict([1, 2])
    assert near == pytest.approx(0.9, abs=0.01) and far == pytest.approx(1 / (1 + np.e), abs=1e-12)


def test_more_observations_than_the_bound_keep_the_most_recent():
    embeddings, observed, rates = small_dataset(2)
    last_seen = np.arange(observed.size)[::-1]  # the first given are the most recent
    bounded = SuccessRatePredictor(embeddings, max_observed=10).fit(observed, rates, last_seen=last_seen)
    assert set(bounded.observed) == set(observed[:10])
    dense = dense_prediction(embeddings, observed[:10], rates[:10])
    np.testing.assert_allclose(bounded.predict(np.arange(embeddings.shape[0])), dense, rtol=1e-9, atol=1e-12)
    by_order = SuccessRatePredictor(embeddings, max_observed=10).fit(observed, rates)
    assert set(by_order.observed) == set(observed[-10:])


@pytest.mark.parametrize("seed", range(2))
def test_a_carried_mean_equals_the_dense_computation_fit_after_fit(seed):
    embeddings, _, _ = small_dataset(seed)
    rng = np.random.default_rng(seed)
    # Three batches of 12 prompts, drawn with overlaps: a prompt observed again is fitted from its carried mean.
    fits = [(rng.choice(60, size=12, replace=False), rng.integers(0, 9, 12) / 8.0) for _ in range(3)]
    predictor = SuccessRatePredictor(embeddings, prior_mean=-5.0, block_rows=7, carry_mean=True)
    everyone = np.arange(embeddings.shape[0])
    for (observed, rates), dense in zip(fits, dense_carried_means(embeddings, fits)):
        predicted = predictor.fit(observed, rates).predict(everyone)
        np.testing.assert_allclose(predicted, 1 / (1 + np.exp(-dense)), rtol=1e-9, atol=1e-12)
    # The same fits without the carried mean forget the first two batches: other predictions.
    forgetting = SuccessRatePredictor(embeddings, prior_mean=-5.0).fit(*fits[-1]).predict(everyone)
    assert np.abs(forgetting - predicted).max() > 0.05


def test_a_carried_mean_restored_goes_on_as_the_predictor_that_carried_it():
    embeddings, observed, rates = small_dataset(3)
    first, second = (observed[:15], rates[:15]), (observed[10:], rates[10:])
    carried = SuccessRatePredictor(embeddings, carry_mean=True).fit(*first)
    restored = SuccessRatePredictor(embeddings, carry_mean=True).start_from(carried.carried_mean).fit(*second)
    assert np.array_equal(restored.carried_mean, carried.fit(*second).carried_mean)


@pytest.mark.parametrize("make, message", [
    (lambda e: SuccessRatePredictor(e[0]), "embeddings must be a \\(prompts, dimensions\\) array"),
    (lambda e: SuccessRatePredictor(np.full((3, 2), np.nan)), "embeddings hold NaN"),
    (lambda e: SuccessRatePredictor(e, length_scale=0), "length_scale must be a finite number above 0"),
    (lambda e: SuccessRatePredictor(e, max_observed=0), "max_observed must be a whole number of at least 1"),
    (lambda e: SuccessRatePredictor(e).fit([0, 1], [0.5]), "rates has shape"),
    (lambda e: SuccessRatePredictor(e).fit([0, 1], [0.5, np.nan]), "rates must lie in \\[0, 1\\]"),
    (lambda e: SuccessRatePredictor(e).fit([0, 0], [0.5, 0.2]), "repeats a prompt"),
    (lambda e: SuccessRatePredictor(e).predict([0, 99]), "names prompt 99"),
    (lambda e: SuccessRatePredictor(e).predict([0.5]), "dataset row numbers"),
    (lambda e: SuccessRatePredictor(e, max_observed=1).fit([0, 1], [0.5, 0.2], last_seen=[1]), "last_seen must"),
    (lambda e: SuccessRatePredictor(e).start_from(np.zeros(4)), "start_from needs a predictor made with carry_mean"),
    (lambda e: SuccessRatePredictor(e, carry_mean=True).start_from(np.zeros(3)), "carried_mean must hold a finite"),
])
def test_bad_input_is_refused_with_what_was_wrong(make, message):
    with pytest.raises(ValueError, match=message):
        make(np.eye(4))


def test_the_docs_state_the_stored_scale_measurement():
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("vip_prediction_scale",
                                                  root / "benchmarks/overhead/vip_prediction_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    record = json.loads((root / "benchmarks/overhead/results/vip_prediction_scale.json").read_text())
    assert record["prompts"] == 17_000
    assert module.markdown_table(record) in (root / "docs/vip.md").read_text()
