"""Success rates predicted for every batch prompt, seen or not: VIP's Gaussian process over prompt embeddings.

As VIP's release predicts (`GPR` in `src/vip/success_rate_prediction/gaussian_process.py` of `HieuNT91/VIP`): a
Gaussian process in logit space over the distance between prompt embeddings, with

- kernel k(d) = exp(-d^2 / (2 l^2)), length scale l = 0.4, on the Euclidean distance d between embeddings;
- targets logit(p), the observed rates clipped to [1e-6, 1 - 1e-6]; prior mean -1 (sigmoid(-1) = 0.27);
- the posterior mean m + K(x, X) (K(X, X) + 1e-4 I)^-1 (g - m), by a Cholesky solve; at an observed prompt the
  posterior mean is its observation g itself;
- the prediction sigmoid(posterior mean).

What the release embeds: each prompt's question text, once per dataset, with the sentence-transformers model
`all-MiniLM-L6-v2` (mean pooling over tokens, then L2 normalisation: 384 numbers a prompt); distances by
`torch.cdist`. Here embeddings are an input, an array with a row per dataset prompt.

How it scales: the release builds the full distance matrix of the dataset (17 398 x 17 398 for DAPO-Math-17k, 1.2 GB
in float32, and its kernel 1.2 GB more) and a covariance over every prompt. Here no dataset-wide matrix exists:
distances are computed in blocks, only for the rows needed (the observed prompts against themselves for the fit,
the batch against the observed prompts for a prediction), and the observed set is bounded by `max_observed`: with
more observations than that, the most recently seen are kept. The Cholesky factor is then at most max_observed^2
numbers (128 MB at 4 096), its cost O(max_observed^3) once per fit. With at most `max_observed` observations the
predictions equal the dense computation's (tests/test_success_prediction.py); beyond it, older observations are
left out.

Carrying the mean (`carry_mean=True`), as the release's trainer runs its `GPR` (`reuse_mean=True`): each fit's
posterior mean, over every prompt of the dataset, is the next fit's prior, so that a fit on the last batch alone
still remembers what earlier batches showed. The carried mean is one number a prompt (a logit), updated at every fit
by the kernel between the dataset and the fit's observations, block by block: O(prompts x observations) time, no
dataset-wide matrix. At an observed prompt it is set to the observation, as the release sets it.
"""

from __future__ import annotations

import numpy as np

from .checks import check_finite, check_whole_number

RATE_CLIP = 1e-6


class SuccessRatePredictor:
    """VIP's Gaussian process over prompt embeddings (see the module).

    Args:
        embeddings: `(prompts, dimensions)` array, a row per dataset prompt; prompts are named by their row.
        length_scale: the RBF kernel's length scale (the release's 0.4).
        prior_mean: the prior mean in logit space (the release's -1).
        jitter: added to the observed covariance's diagonal before its Cholesky factorisation (the release's 1e-4).
        max_observed: the most observations a fit keeps (the most recently seen); bounds memory and the O(m^3) fit.
        block_rows: rows of distances computed at once.
        carry_mean: each fit's posterior mean is the next fit's prior (the release trainer's `reuse_mean=True`);
            False: every fit starts from `prior_mean`.
    """

    def __init__(self, embeddings, length_scale: float = 0.4, prior_mean: float = -1.0, jitter: float = 1e-4,
                 max_observed: int = 4096, block_rows: int = 1024, carry_mean: bool = False):
        embeddings = np.asarray(embeddings, dtype=np.float64)
        if embeddings.ndim != 2 or embeddings.shape[0] == 0 or embeddings.shape[1] == 0:
            raise ValueError(f"embeddings must be a (prompts, dimensions) array with a row per prompt, got shape "
                             f"{embeddings.shape}.")
        if not np.isfinite(embeddings).all():
            raise ValueError("embeddings hold NaN or infinity; recompute them (a prompt's row must be finite).")
        check_finite("length_scale", length_scale, 0.0, "above 0")
        check_finite("jitter", jitter, 0.0, "above 0 (it keeps the Cholesky factorisation stable)")
        check_finite("prior_mean", prior_mean, -np.inf, "(a logit)")
        check_whole_number("max_observed", max_observed, 1)
        check_whole_number("block_rows", block_rows, 1)
        self.embeddings = embeddings
        self.squared_norms = np.einsum("ij,ij->i", embeddings, embeddings)
        self.length_scale, self.prior_mean, self.jitter = float(length_scale), float(prior_mean), float(jitter)
        self.max_observed, self.block_rows = int(max_observed), int(block_rows)
        self.observed = np.empty(0, dtype=np.int64)
        self.observed_logits = np.empty(0)
        self.weights = np.empty(0)  # (K + jitter I)^-1 (g - prior mean)
        # With carry_mean, the posterior mean in logit space of every prompt, the prior of the next fit.
        self.carried_mean = np.full(embeddings.shape[0], self.prior_mean) if carry_mean else None

    def start_from(self, carried_mean) -> "SuccessRatePredictor":
        """Carry on from a posterior mean that an earlier predictor carried (its `carried_mean`, e.g. restored from
        a checkpoint): a logit per prompt."""
        if self.carried_mean is None:
            raise ValueError("start_from needs a predictor made with carry_mean=True.")
        carried_mean = np.asarray(carried_mean, dtype=np.float64)
        if carried_mean.shape != self.carried_mean.shape or not np.isfinite(carried_mean).all():
            raise ValueError(f"carried_mean must hold a finite logit per prompt ({self.carried_mean.size}), got shape "
                             f"{carried_mean.shape}.")
        self.carried_mean = carried_mean.copy()
        return self

    def fit(self, prompts, rates, last_seen=None) -> "SuccessRatePredictor":
        """Condition on observed success rates: `rates[k]` of dataset prompt `prompts[k]`. `last_seen` (e.g. the
        step of each prompt's latest visit) chooses which `max_observed` to keep; by default the last ones given."""
        prompts, rates = self._checked_observations(prompts, rates)
        keep = self._most_recent(prompts, last_seen)
        prompts, rates = prompts[keep], rates[keep]
        logits = _logit(np.clip(rates, RATE_CLIP, 1.0 - RATE_CLIP))
        covariance = self.kernel(prompts, prompts)
        covariance[np.diag_indices_from(covariance)] += self.jitter
        from scipy.linalg import cho_solve, cholesky  # scipy only where a fit needs it

        prior = self.prior_mean if self.carried_mean is None else self.carried_mean[prompts]
        factor = cholesky(covariance, lower=True, check_finite=False, overwrite_a=True)
        self.weights = cho_solve((factor, True), logits - prior, check_finite=False)
        self.observed, self.observed_logits = prompts, logits
        if self.carried_mean is not None:  # the posterior mean of every prompt becomes the next fit's prior
            self.carried_mean += self._posterior_shift(np.arange(self.carried_mean.size))
            self.carried_mean[prompts] = logits
        return self

    def predict(self, prompts) -> np.ndarray:
        """Predicted success rates of dataset prompts `prompts`: an observed prompt's is its observation (through
        the logit and back), any other's the posterior mean's sigmoid (the prior's, sigmoid(-1), before any fit).
        With carry_mean, the carried posterior mean's sigmoid, at an observation of an earlier fit too."""
        prompts = self._checked_prompts(prompts, "prompts")
        if self.carried_mean is not None:
            return 1.0 / (1.0 + np.exp(-self.carried_mean[prompts]))
        means = np.full(prompts.size, self.prior_mean)
        if self.observed.size:
            means += self._posterior_shift(prompts)
            position = {int(prompt): k for k, prompt in enumerate(self.observed)}
            seen = np.array([int(p) in position for p in prompts], dtype=bool)
            means[seen] = self.observed_logits[[position[int(p)] for p in prompts[seen]]]
        return 1.0 / (1.0 + np.exp(-means))

    def _posterior_shift(self, rows: np.ndarray) -> np.ndarray:
        """K(rows, observed) (K + jitter I)^-1 (g - prior): what the last fit adds to the prior mean of `rows`."""
        shift = np.empty(rows.size)
        for first in range(0, rows.size, self.block_rows):
            block = rows[first:first + self.block_rows]
            shift[first:first + block.size] = self.kernel(block, self.observed) @ self.weights
        return shift

    def kernel(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """exp(-d^2 / (2 l^2)) between the embeddings of prompts `rows` and `columns`, computed block by block."""
        out = np.empty((rows.size, columns.size))
        for first in range(0, rows.size, self.block_rows):
            block = rows[first:first + self.block_rows]
            squared = (self.squared_norms[block, None] + self.squared_norms[None, columns]
                       - 2.0 * self.embeddings[block] @ self.embeddings[columns].T)
            distance = np.sqrt(np.maximum(squared, 0.0))
            out[first:first + block.size] = np.exp(-0.5 * (distance / self.length_scale) ** 2)
        return out

    def _most_recent(self, prompts: np.ndarray, last_seen) -> np.ndarray:
        """Positions of the observations kept: all, or the `max_observed` seen last (the later given on ties)."""
        if prompts.size <= self.max_observed:
            return np.arange(prompts.size)
        if last_seen is None:
            return np.arange(prompts.size - self.max_observed, prompts.size)
        last_seen = np.asarray(last_seen, dtype=np.float64)
        if last_seen.shape != prompts.shape or not np.isfinite(last_seen).all():
            raise ValueError(f"last_seen must be a finite number per observation ({prompts.size}), got shape "
                             f"{last_seen.shape}.")
        order = np.lexsort((np.arange(prompts.size), last_seen))
        return np.sort(order[-self.max_observed:])

    def _checked_observations(self, prompts, rates) -> tuple[np.ndarray, np.ndarray]:
        prompts = self._checked_prompts(prompts, "prompts")
        rates = np.asarray(rates, dtype=np.float64)
        if rates.shape != prompts.shape:
            raise ValueError(f"rates has shape {rates.shape} but prompts has shape {prompts.shape}: one rate per "
                             "observed prompt.")
        if not (np.all(rates >= 0.0) and np.all(rates <= 1.0)):  # also refuses NaN
            bad = rates[~((rates >= 0.0) & (rates <= 1.0))][0]
            raise ValueError(f"rates must lie in [0, 1]; found {bad}. Fit only prompts with an observed rate.")
        if np.unique(prompts).size != prompts.size:
            raise ValueError("prompts repeats a prompt: give each observed prompt once, with its latest rate.")
        return prompts, rates

    def _checked_prompts(self, prompts, name: str) -> np.ndarray:
        values = np.asarray(prompts)
        if values.ndim != 1 or not (values.size == 0 or np.issubdtype(values.dtype, np.integer)):
            raise ValueError(f"{name} must be a 1-D array of dataset row numbers (integers), got {values.dtype} of "
                             f"shape {values.shape}.")
        values = values.astype(np.int64)
        if values.size and (values.min() < 0 or values.max() >= self.embeddings.shape[0]):
            bad = values[(values < 0) | (values >= self.embeddings.shape[0])][0]
            raise ValueError(f"{name} names prompt {bad}, but embeddings has rows 0 to "
                             f"{self.embeddings.shape[0] - 1}.")
        return values


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1.0 - p))
