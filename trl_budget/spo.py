"""SPO, Single-stream Policy Optimization (Xu & Ding, arXiv 2509.13232, ICLR 2026), as its release does it
(`verl-project/verl-recipe`, `spo/spo_ray_trainer.py`): the rules as small pure functions, and `SPOTracker`, the
per-prompt state they read and write. Plain numpy, like the capability tracker.

Per prompt a Beta(alpha, beta):

- **Prior** from `offline_n` scores of the initial policy, binarized (`> 0`): with `s` successes and
  `N_init = 1 / (1 - clip_lower)`, alpha = N_init (s + 0.5) / (offline_n + 1), beta = N_init (offline_n - s + 0.5) /
  (offline_n + 1); `offline_n = 0` gives alpha = beta = 0.5 (`spo_prior`).
- **Baseline**: p = alpha / (alpha + beta) *before* this batch's rewards, so r - p is independent of the rollout it
  scores; the batch's r - p are then normalized over the whole batch, (A - mean) / (std + 1e-8)
  (`spo_advantages`).
- **Forgetting**: alpha <- rho alpha + r, beta <- rho beta + (1 - r), with rho constant or KL-adaptive: D, the mean
  over the prompt's last response of |log-prob then - log-prob now|, gives rho = 2^(-D / 0.06) clipped to
  [clip_lower, 0.96] (`forgetting_factor`); a first visit has D = 0.
- **Prioritized sampling**: prompts drawn with weights sqrt(p (1 - p)) + 0.05 (`sampling_weights`, `draw_prompts`).

Where a prompt has several rows in one batch, every row's update starts from the same old alpha and beta and the last
row in the batch's order is the one kept, with its response: the release's rule, followed here.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .checks import check_whole_number, is_finite_number, shown

__all__ = ["DRIFT_HALF_LIFE", "RHO_MAX", "SAMPLING_FLOOR", "SPOTracker", "draw_prompts", "forgetting_factor",
           "response_drift", "sampling_weights", "spo_advantages", "spo_prior"]

SAMPLING_FLOOR = 0.05  # the release's EXPLORATION_EPSILON: every candidate keeps a chance
DRIFT_HALF_LIFE = 0.06  # the drift D at which a prompt's evidence halves (the release's D_half)
RHO_MAX = 0.96  # the release's upper clip on the forgetting factor: evidence always fades
NORMALIZATION_EPSILON = 1e-8  # added to the batch's standard deviation, as the release adds it
_STATE_VERSION = 1
SPO_STATE_NAME = "budget_spo_state.json"  # SPO's stage in a checkpoint (spo_stage.SPOStage)
UPDATE_ROWS = ("last", "all")  # how a prompt's several rows in one batch update its estimate


def check_clip_lower(clip_lower: Any) -> None:
    if not (is_finite_number(clip_lower) and 0 <= clip_lower < RHO_MAX):
        raise ValueError(f"clip_lower must be a number in [0, {RHO_MAX}) (the fastest forgetting allowed; the release "
                         f"uses 0.875), got {shown(clip_lower)}.")


def spo_prior(scores: Sequence[float] | None, offline_n: int, clip_lower: float,
              rng: np.random.Generator) -> tuple[float, float]:
    """A prompt's Beta(alpha, beta) before training, from `scores` of the initial policy.

    Scores are binarized (`> 0`); with more than `offline_n`, `offline_n` of them are drawn without replacement (the
    release draws them with Python's unseeded `random.sample`; here `rng` draws them, so a run repeats). Fewer than
    `offline_n` scores count the missing ones as failures, as the release's formula does (it divides by `offline_n`,
    not by the scores it has). `offline_n = 0`, or no scores at all with `offline_n = 0`, gives alpha = beta = 0.5.
    """
    check_whole_number("offline_n", offline_n, 0)
    check_clip_lower(clip_lower)
    if offline_n == 0:
        return 0.5, 0.5
    outcomes = np.array([1 if score > 0 else 0 for score in (scores or [])], dtype=np.int64)
    if outcomes.size > offline_n:
        outcomes = rng.choice(outcomes, size=offline_n, replace=False)
    successes, n_init = int(outcomes.sum()), 1.0 / (1.0 - clip_lower)
    return (n_init * (successes + 0.5) / (offline_n + 1),
            n_init * (offline_n - successes + 0.5) / (offline_n + 1))


def spo_advantages(rewards: np.ndarray, p_hats: np.ndarray, normalize: bool = True) -> np.ndarray:
    """Each row's r - p against its prompt's p from before this batch, normalized over the batch's scored rows:
    (A - mean) / (std + 1e-8), the standard deviation unbiased, as the release takes it over the whole batch.

    Unscored rows (NaN rewards) get 0 and count in neither the mean nor the deviation; a batch of one scored row has no
    deviation (0) where the release's would be NaN. With `normalize=False`, r - p as it is.
    """
    raw = np.asarray(rewards, dtype=np.float64) - np.asarray(p_hats, dtype=np.float64)
    scored = ~np.isnan(raw)
    advantages = np.zeros_like(raw)
    if not normalize:
        advantages[scored] = raw[scored]
        return advantages
    values = raw[scored]
    if values.size:
        deviation = values.std(ddof=1) if values.size > 1 else 0.0
        advantages[scored] = (values - values.mean()) / (deviation + NORMALIZATION_EPSILON)
    return advantages


def response_drift(old_log_probs: np.ndarray, new_log_probs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """D per response: the mean over its tokens (`mask`) of |old - new| log-probabilities, as verl's `masked_mean`
    takes it (the sum over the mask divided by its count plus 1e-8). Rows are responses, columns tokens."""
    mask = np.asarray(mask, dtype=np.float64)
    difference = np.abs(np.asarray(old_log_probs, dtype=np.float64) - np.asarray(new_log_probs, dtype=np.float64))
    return (np.where(mask > 0, difference, 0.0)).sum(axis=-1) / (mask.sum(axis=-1) + 1e-8)


def forgetting_factor(drift: np.ndarray, clip_lower: float) -> tuple[np.ndarray, np.ndarray]:
    """The KL-adaptive rho of each drift D: 2^(-D / 0.06), and that clipped to [clip_lower, 0.96]; returns
    `(clipped, raw)` (the release logs both)."""
    raw = np.power(2.0, -np.asarray(drift, dtype=np.float64) / DRIFT_HALF_LIFE)
    return np.clip(raw, clip_lower, RHO_MAX), raw


def sampling_weights(p_hats: np.ndarray) -> np.ndarray:
    """SPO's priority of each prompt: sqrt(p (1 - p)) + 0.05, the most for prompts solved half the time."""
    p_hats = np.asarray(p_hats, dtype=np.float64)
    return np.sqrt(p_hats * (1.0 - p_hats)) + SAMPLING_FLOOR


def draw_prompts(weights: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of `size` candidates drawn with probabilities proportional to `weights`: without replacement, or with
    it when more are needed than there are candidates (the release's rule); uniform when every weight is 0."""
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    probabilities = weights / total if total > 0 else np.full(weights.size, 1.0 / weights.size)
    return rng.choice(weights.size, size=size, replace=size > weights.size, p=probabilities)


class SPOTracker:
    """SPO's per-prompt state: Beta(alpha, beta), visits, and (KL-adaptive rho) the last response of each prompt with
    its log-probabilities under the policy that last trained on it.

    Args:
        rho: `"kl"` (KL-adaptive, the release's default) or a constant in (0, 1].
        clip_lower: the lowest rho (fastest forgetting) and the prior's weight `1 / (1 - clip_lower)`; 0.875.
        rows: how a prompt's several rows in one batch update it: `"last"` (the release's rule: the last row's
            update is kept, one reward of the group) or `"all"` (every row's reward counts).
    """

    def __init__(self, rho: str | float = "kl", clip_lower: float = 0.875, rows: str = "last"):
        check_clip_lower(clip_lower)
        if rows not in UPDATE_ROWS:
            raise ValueError(f"rows must be 'last' (the release's rule: one row of a prompt's group is kept) or 'all' "
                             f"(every row's reward counts), got {shown(rows)}.")
        self.rows = rows
        if rho != "kl" and not (is_finite_number(rho) and 0 < rho <= 1):
            raise ValueError(f"rho must be 'kl' (KL-adaptive, the release's default) or a constant forgetting factor "
                             f"in (0, 1] (the release's constant is 0.875), got {shown(rho)}.")
        self.rho, self.clip_lower = rho if rho == "kl" else float(rho), float(clip_lower)
        self.alpha: dict[str, float] = {}
        self.beta: dict[str, float] = {}
        self.visits: dict[str, int] = {}
        self.responses: dict[str, dict[str, list]] = {}  # key -> prompt_ids, completion_ids, log_probs
        self.default_prior: tuple[float, float] | None = (0.5, 0.5)  # for keys without a prior; None: refuse them

    @property
    def kl_adaptive(self) -> bool:
        return self.rho == "kl"

    def __len__(self) -> int:
        return len(self.alpha)

    def set_priors(self, keys: Sequence[Hashable], priors: Sequence[tuple[float, float]]) -> None:
        """Each key's Beta before any visit; keys left out then have no prior (`default_prior` is dropped)."""
        for key, (alpha, beta) in zip(keys, priors):
            self.alpha[str(key)], self.beta[str(key)] = float(alpha), float(beta)
        self.default_prior = None

    def _prior(self, key: str) -> tuple[float, float]:
        if key in self.alpha:
            return self.alpha[key], self.beta[key]
        if self.default_prior is None:
            raise ValueError(f"prompt {key!r} has no SPO prior: the offline values name every prompt the run trains, "
                             "and this one is not among them. Add its scores, or train without offline values.")
        return self.default_prior

    def beta_parameters(self, keys: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
        """alpha and beta of each key (its prior until its first visit)."""
        pairs = [self._prior(str(key)) for key in keys]
        return np.array([a for a, _ in pairs], dtype=np.float64), np.array([b for _, b in pairs], dtype=np.float64)

    def p_hats(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Each key's estimated success rate alpha / (alpha + beta)."""
        alpha, beta = self.beta_parameters(keys)
        return alpha / (alpha + beta)

    def update(self, keys: Sequence[Hashable], rewards: np.ndarray, rhos: np.ndarray) -> None:
        """alpha <- rho alpha + r, beta <- rho beta + (1 - r), row by row from the values before this batch; where a
        key has several rows, the last one's is kept (the release's rule), or under `rows="all"` every one counts:
        alpha <- rho alpha + the rows' rewards, beta <- rho beta + their failures. Unscored rows (NaN) change nothing,
        and each scored row counts one visit."""
        keys = [str(key) for key in keys]
        alpha, beta = self.beta_parameters(keys)
        rewards, rhos = np.asarray(rewards, dtype=np.float64), np.broadcast_to(np.asarray(rhos, np.float64),
                                                                                (len(keys),))
        if self.rows == "all":
            self._update_with_every_row(keys, alpha, beta, rewards, rhos)
            return
        for row, key in enumerate(keys):
            if math.isnan(rewards[row]):
                continue
            self.alpha[key] = float(rhos[row] * alpha[row] + rewards[row])
            self.beta[key] = float(rhos[row] * beta[row] + (1.0 - rewards[row]))
            self.visits[key] = self.visits.get(key, 0) + 1

    def _update_with_every_row(self, keys: list[str], alpha: np.ndarray, beta: np.ndarray, rewards: np.ndarray,
                               rhos: np.ndarray) -> None:
        """Each key forgets once (its rho is its prompt's, the same on each of its rows) and gains every scored row."""
        scored: dict[str, tuple[int, float, int]] = {}  # key -> (a row of it, rewards, rows)
        for row, key in enumerate(keys):
            if not math.isnan(rewards[row]):
                _, total, count = scored.get(key, (row, 0.0, 0))
                scored[key] = (row, total + float(rewards[row]), count + 1)
        for key, (row, total, count) in scored.items():
            self.alpha[key] = float(rhos[row] * alpha[row] + total)
            self.beta[key] = float(rhos[row] * beta[row] + (count - total))
            self.visits[key] = self.visits.get(key, 0) + count

    # ------------------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON state: the settings, each key's alpha, beta and visits, and the kept responses."""
        keys = list(self.alpha)
        return {"version": _STATE_VERSION, "rho": self.rho, "clip_lower": self.clip_lower, "rows": self.rows,
                "default_prior": None if self.default_prior is None else list(self.default_prior),
                "keys": keys, "alpha": [self.alpha[k] for k in keys], "beta": [self.beta[k] for k in keys],
                "visits": {k: v for k, v in self.visits.items()}, "responses": self.responses}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`'s state, after checking it: a `ValueError` names the first entry it cannot use."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"the SPO state has version {state.get('version') if isinstance(state, dict) else None!r}"
                             f"; this trl_budget reads version {_STATE_VERSION}.")
        for name, setting, mine in (("rho", "spo_rho", self.rho), ("clip_lower", "spo_rho_clip_lower",
                                                                    self.clip_lower)):
            if state.get(name) is None:
                raise ValueError(f"the SPO state has no {name!r}, which every saved state holds")
            if state.get(name) != mine:
                raise ValueError(f"the SPO state was saved with {name}={state.get(name)!r} and this run's is "
                                 f"{mine!r}; set {setting}={state.get(name)!r} to resume it")
        saved_rows = state.get("rows", "last")  # a state saved before the setting existed was updated by the last row
        if saved_rows != self.rows:
            raise ValueError(f"the SPO state was saved with rows={saved_rows!r} and this run's is {self.rows!r}; set "
                             f"spo_update_rows={saved_rows!r} to resume it")
        keys, alpha, beta = state.get("keys"), state.get("alpha"), state.get("beta")
        if not (isinstance(keys, list) and isinstance(alpha, list) and isinstance(beta, list)
                and len(keys) == len(alpha) == len(beta) and all(isinstance(k, str) for k in keys)):
            raise ValueError("the SPO state's 'keys', 'alpha' and 'beta' must be lists of one length (keys strings).")
        for name, values in (("alpha", alpha), ("beta", beta)):
            bad = [v for v in values if not (is_finite_number(v) and v >= 0)]
            if bad:
                raise ValueError(f"the SPO state's {name!r} holds {bad[0]!r}; each must be a finite number, 0 or more.")
        empty = [key for key, a, b in zip(keys, alpha, beta) if a + b <= 0]
        if empty:
            raise ValueError(f"the SPO state gives prompt {empty[0]!r} alpha = beta = 0, which is no estimate; every "
                             "prompt's alpha + beta must be above 0.")
        visits, responses, default = state.get("visits"), state.get("responses"), state.get("default_prior")
        if not (isinstance(visits, dict) and all(isinstance(v, int) and v >= 0 for v in visits.values())):
            raise ValueError("the SPO state's 'visits' must map keys to whole numbers of visits.")
        if not (isinstance(responses, dict) and all(_is_response(r) for r in responses.values())):
            raise ValueError("the SPO state's 'responses' must map keys to a prompt's ids, completion ids and as many "
                             "log-probabilities.")
        if not (default is None or (isinstance(default, list) and len(default) == 2
                                    and all(is_finite_number(v) and v > 0 for v in default))):
            raise ValueError("the SPO state's 'default_prior' must be None or two positive numbers.")
        self.alpha, self.beta = dict(zip(keys, map(float, alpha))), dict(zip(keys, map(float, beta)))
        self.visits, self.responses = dict(visits), dict(responses)
        self.default_prior = None if default is None else (float(default[0]), float(default[1]))


def _is_response(response: Any) -> bool:
    """A kept response: token ids (whole numbers, 0 or more) of its prompt and completion, and a finite
    log-probability of each completion token."""
    return (isinstance(response, dict) and set(response) == {"prompt_ids", "completion_ids", "log_probs"}
            and is_token_ids(response["prompt_ids"]) and is_token_ids(response["completion_ids"])
            and isinstance(response["log_probs"], list) and len(response["completion_ids"]) == len(response["log_probs"])
            and all(is_finite_number(value) for value in response["log_probs"]))


def is_token_ids(ids: Any) -> bool:
    return isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
