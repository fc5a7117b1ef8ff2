"""SPO's stage of the batch (`advantage_baseline="spo"`): the baseline from each prompt's Beta before this batch, the
advantages normalized over the batch, and the tracker's update once the policy has trained on the batch.

The release updates its tracker after the actor's update, with rho from the drift between the prompt's last response's
log-probabilities then and under the updated policy. The trainer's updates for a generation batch end where the next
batch begins, so the batch's rows wait here (`record`) and are settled when the next batch starts (`settle`), under
the policy that trained on them: the release's timing. Their wait is saved with a checkpoint, so a resumed run
settles them as an uninterrupted one would.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .advantages import groups_without_spread
from .prompts import keys_of
from .settings.common import allocator_in_words
from .spo import SPO_STATE_NAME, SPOTracker, forgetting_factor, is_token_ids, response_drift, spo_advantages, spo_prior

__all__ = ["SPOStage", "SPO_STATE_NAME", "offline_priors", "offline_text"]

_QUANTILES = (10, 30, 50, 70, 90)
# A refusal's fix where the config is not known: every rule that reads SPO's tracker off.
WITHOUT_SPO = "or train without SPO's baseline, prompt sampling and allocator"

# `log_probs_of(prompts, completions)`: the current policy's log-probability of each completion's tokens (one array
# per completion), given token ids.
LogProbsOf = Callable[[list[list[int]], list[list[int]]], list[np.ndarray]]


class SPOStage:
    """The SPO tracker in the batch's flow: p before the batch, advantages, and the batch's rows waiting to update it.

    Args:
        tracker: the `SPOTracker` (its priors set).
        normalize: normalize the advantages over the batch (the release's); False: r - p as it is
            (`scale_rewards="none"`).
    """

    def __init__(self, tracker: SPOTracker, normalize: bool = True, reward_range: list[float] | None = None):
        self.tracker, self.normalize = tracker, normalize
        self.reward_range = reward_range  # the weighted reward's [low, high], mapped onto [0, 1]; None: [0, 1]
        self.pending: dict[str, Any] | None = None  # the last batch's rows, not yet in the tracker
        self.prior_to_sample = False  # the run samples the priors before its first batch
        self.priors_given = False  # the config names offline scores (a file, a column, or the pre-pass)
        self.other_rule = WITHOUT_SPO  # the fix a refusal of the rewards names
        self.warned_outside = False  # a reward outside the range after the first batch is warned about once

    @classmethod
    def for_run(cls, args, dataset, reward_funcs) -> "SPOStage":
        """The stage of a run: its config's tracker, each training prompt's prior from its offline scores (when the
        config names them), normalized unless `scale_rewards="none"`; its rewards' scale checked before any
        generation."""
        check_spo_reward_scale(args.spo_reward_range, reward_funcs, args.reward_weights, rule_without_spo(args))
        tracker = args.make_spo_tracker()
        if args.spo_offline_values is not None or args.spo_offline_column is not None:
            tracker.set_priors(*offline_priors(args, dataset))
        stage = cls(tracker, normalize=args.scale_rewards != "none", reward_range=args.spo_reward_range)
        stage.prior_to_sample = bool(args.spo_offline_sampling)
        stage.priors_given = args.has_spo_offline_scores()
        stage.other_rule = rule_without_spo(args)
        return stage

    def set_sampled_priors(self, keys: list[str], rewards: np.ndarray, offline_n: int, seed: int) -> None:
        """Each prompt's prior from the pre-pass's rewards: `keys` and `rewards` of every rollout (NaN: unscored,
        left out), scored as the release scores its offline values (above 0 a success)."""
        scores: dict[str, list[float]] = {}
        for key, reward in zip(keys, self.shares_of_success(rewards, "SPO's prior").tolist()):
            scores.setdefault(key, [])
            if reward == reward:
                scores[key].append(reward)
        rng = np.random.default_rng(seed)
        # An unscored rollout is no evidence (as everywhere in the package): a prompt's prior counts its scored ones,
        # up to offline_n; a prompt none of whose rollouts was scored keeps Beta(0.5, 0.5)'s estimate.
        self.tracker.set_priors(list(scores), [spo_prior(values, min(offline_n, len(values)), self.tracker.clip_lower,
                                                         rng) for values in scores.values()])
        self.prior_to_sample = False

    def advantages(self, keys: list[str], counts: np.ndarray, rewards: torch.Tensor,
                   metrics: dict[str, list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The trained rows' advantages (`counts[i]` rows of prompt `keys[i]`, consecutive, weighted `rewards` in plan
        order) against each prompt's p from before this batch, normalized over the batch; with `is_std_zero` per row,
        as GRPO reports it: whether the row's group (its prompt's rows of the batch) has rewards without spread."""
        row_keys = np.repeat(np.asarray(keys, dtype=object), counts)
        values = self.shares_of_success(rewards.detach().to(torch.float64).cpu().numpy(), "advantage_baseline='spo'",
                                        metrics)
        alpha, beta = self.tracker.beta_parameters(row_keys)
        p_hats = alpha / (alpha + beta)
        advantages = spo_advantages(values, p_hats, self.normalize)
        scored = ~np.isnan(values)
        record_batch_metrics(metrics, values[scored], alpha[scored], beta[scored], p_hats[scored], advantages[scored])
        return (torch.as_tensor(advantages, device=rewards.device).to(rewards.dtype),
                torch.as_tensor(np.repeat(groups_without_spread(values, counts), counts), device=rewards.device))

    def record(self, keys: list[str], counts: np.ndarray, rewards: torch.Tensor,
               responses: dict[str, tuple[list[int], list[int]]]) -> None:
        """Keep the batch's trained rows (weighted `rewards` in plan order) and, KL-adaptive, the last row's prompt and
        completion ids of each prompt, until `settle`."""
        shares = self.shares_of_success(rewards.detach().to(torch.float64).cpu().numpy(), "SPO's tracker")
        self.pending = {"keys": [str(key) for key in np.repeat(np.asarray(keys, dtype=object), counts)],
                        "rewards": [float(value) for value in shares.tolist()],
                        "responses": {key: {"prompt_ids": list(map(int, prompt)),
                                            "completion_ids": list(map(int, completion))}
                                      for key, (prompt, completion) in responses.items()}}

    def shares_of_success(self, rewards: np.ndarray, who: str, metrics: dict[str, list[float]] | None = None
                          ) -> np.ndarray:
        """Weighted rewards as SPO counts them, shares of a success in [0, 1]: mapped from `reward_range`. A reward
        outside the range is refused before anything has trained; after that, when the run has spent compute, it is
        clipped to the range, warned about once and counted (`spo/rewards_outside_range`), so that the run goes on."""
        low, high = self.reward_range or (0.0, 1.0)
        rewards = np.asarray(rewards, dtype=np.float64)
        if not (self.tracker.visits or self.pending is not None):  # the first batch: nothing trained yet
            check_rewards_in_range(rewards, low, high, who, self.reward_range is None, self.other_rule)
        else:
            outside = (rewards < low) | (rewards > high)
            if outside.any() and not self.warned_outside:
                self.warned_outside = True
                declared = "spo_reward_range is not set" if self.reward_range is None else "spo_reward_range"
                warnings.warn(f"{who}: a rollout's weighted reward is {float(rewards[outside][0])!r}, outside "
                              f"[{low:g}, {high:g}] ({declared}); "
                              "SPO counts every such reward as the nearest end of the range, and spo/rewards_outside_"
                              "range logs their share. Declare the range every weighted reward lies in with "
                              "spo_reward_range=[low, high] for the next run.", UserWarning, stacklevel=2)
            if metrics is not None:
                metrics["spo/rewards_outside_range"].append(float(outside.mean()))
            rewards = np.clip(rewards, low, high)  # NaN stays NaN: unscored
        return rewards if self.reward_range is None else (rewards - low) / (high - low)

    def settle(self, log_probs_of: LogProbsOf, metrics: dict[str, list[float]]) -> None:
        """Update the tracker with the waiting rows: rho constant, or from each prompt's drift under the policy now
        (its response kept from its previous visit scored again; a first visit has none: D = 0), then keep each
        prompt's new response with its log-probabilities now. With KL-adaptive rho the kept and the new responses are
        scored together (`log_probs_of`: one forward pass a chunk of rows); a constant rho reads none."""
        if self.pending is None:
            return
        keys, rewards = self.pending["keys"], np.asarray(self.pending["rewards"], dtype=np.float64)
        if not self.tracker.kl_adaptive:
            self.tracker.update(keys, rewards, self.tracker.rho)
            metrics["spo/rho"].append(float(self.tracker.rho))
            metrics["spo/D"].append(0.0)
        else:
            self._settle_kl_adaptive(keys, rewards, log_probs_of, metrics)
        visits = np.array([self.tracker.visits.get(key, 0) for key in dict.fromkeys(keys)], dtype=np.float64)
        for name, value in (("min", visits.min()), ("max", visits.max()), ("mean", visits.mean())):
            metrics[f"spo/cur_sampled_number/{name}"].append(float(value))
        self.pending = None

    def _settle_kl_adaptive(self, keys: list[str], rewards: np.ndarray, log_probs_of: LogProbsOf,
                            metrics: dict[str, list[float]]) -> None:
        new = self.pending["responses"]
        seen = [key for key in new if key in self.tracker.responses]
        kept = [self.tracker.responses[key] for key in seen]
        fresh = [new[key] for key in new]
        log_probs = log_probs_of([r["prompt_ids"] for r in kept + fresh], [r["completion_ids"] for r in kept + fresh])
        drift = dict.fromkeys(new, 0.0)  # a first visit: no earlier response, D = 0
        for key, response, now in zip(seen, kept, log_probs[: len(kept)]):
            drift[key] = float(response_drift(np.asarray(response["log_probs"])[None], now[None],
                                              np.ones((1, len(now))))[0])
        rho, raw = forgetting_factor(np.array([drift[key] for key in keys]), self.tracker.clip_lower)
        self.tracker.update(keys, rewards, rho)
        for key, response, now in zip(new, fresh, log_probs[len(kept):]):
            self.tracker.responses[key] = {**response, "log_probs": [float(value) for value in now]}
        first = np.array([key not in seen for key in keys])
        metrics["spo/rho"].append(float(raw.mean()))
        metrics["spo/rho_clipped"].append(float(rho.mean()))
        metrics["spo/rho_clip_ratio"].append(float((rho != raw).mean()))
        metrics["spo/D"].append(float(np.mean([drift[key] for key in keys])))
        metrics["spo/first_sampled_ratio"].append(float(first.mean()))
        metrics["spo/forward_passes_rows"].append(float(len(kept) + len(fresh)))

    def state_dict(self) -> dict[str, Any]:
        return {"tracker": self.tracker.state_dict(), "pending": self.pending}

    def load_state_dict(self, state: dict[str, Any], path: str = "the SPO state") -> None:
        """Restore `state_dict()`'s state; a `ValueError` names the file, what is wrong and the remedy."""
        try:
            if not isinstance(state, dict) or "tracker" not in state:
                raise ValueError("it must hold 'tracker' and 'pending'")
            pending = state.get("pending")
            if pending is not None and not _is_pending(pending):
                raise ValueError("its 'pending' rows must hold as many keys (strings) as rewards (numbers in [0, 1], "
                                 "or NaN for an unscored row), and each prompt's response (prompt and completion ids)")
            keys = {key for key in (pending or {}).get("keys", [])}
            if self.tracker.kl_adaptive and pending is not None and not keys <= set(pending["responses"]):
                raise ValueError("its 'pending' rows name a prompt without its response, which KL-adaptive rho needs")
            self.tracker.load_state_dict(state["tracker"])
        except ValueError as error:
            raise ValueError(f"{path} cannot be restored: {str(error).rstrip('.')}. Resume from an earlier checkpoint "
                             "with the settings it names, or delete the file to start SPO's tracker again from every "
                             "prompt's prior.") from error
        if self.priors_given:  # the saved estimates are the run's; offline scores only start a run
            warnings.warn(f"{path} carries every prompt's SPO estimate, which the resumed run goes on from; the offline "
                          "scores this run's config names (spo_offline_values, spo_offline_column or "
                          "spo_offline_sampling) are not used: they give a run's priors at its start.", UserWarning,
                          stacklevel=2)
        self.prior_to_sample = False
        self.pending = pending


def _is_pending(pending: Any) -> bool:
    """The rows waiting to settle, as `record` keeps them."""
    if not (isinstance(pending, dict) and isinstance(pending.get("keys"), list)
            and isinstance(pending.get("rewards"), list) and len(pending["keys"]) == len(pending["rewards"])
            and isinstance(pending.get("responses"), dict)):
        return False
    rewards_fit = all(isinstance(r, (int, float)) and not isinstance(r, bool) and (r != r or 0 <= r <= 1)
                      for r in pending["rewards"])
    responses_fit = all(isinstance(response, dict) and set(response) == {"prompt_ids", "completion_ids"}
                        and is_token_ids(response["prompt_ids"]) and is_token_ids(response["completion_ids"])
                        for response in pending["responses"].values())
    return all(isinstance(key, str) for key in pending["keys"]) and rewards_fit and responses_fit


def rule_without_spo(args) -> str:
    """The one change that trains `args`' run without SPO's tracker: under SPO's allocator GRPO's groups; else the
    baseline and the sampling that read it."""
    if args.budget_allocator == "spo":
        return ("or train GRPO's groups, which take rewards on any scale: remove budget_allocator='spo' (the default "
                "is 'uniform')")
    return "or set advantage_baseline and prompt_sampling to rules without SPO's tracker ('history' and None, say)"


def check_rewards_in_range(rewards: np.ndarray, low: float, high: float, who: str, undeclared: bool,
                           other_rule: str = WITHOUT_SPO) -> None:
    """SPO's Beta counts successes: alpha grows by r and beta by 1 - r, for r mapped onto [0, 1] from the weighted
    reward's range, so a reward outside it would make one of them negative and p leave [0, 1] (and the sampling
    weights NaN). The release trains 0/1 rewards; partial credit in between counts as a fraction."""
    scored = rewards[~np.isnan(rewards)]
    outside = scored[(scored < low) | (scored > high)]
    if outside.size:
        declared = ("spo_reward_range is not set, so rewards must lie in [0, 1]" if undeclared else
                    f"spo_reward_range=[{low:g}, {high:g}]")
        raise ValueError(
            f"{who} counts each weighted reward as a share of a success (alpha grows by r, beta by 1 - r, r mapped "
            f"onto [0, 1]); {declared}, and a rollout's weighted reward is {float(outside[0])!r}. Declare the range "
            f"every weighted reward lies in with spo_reward_range=[low, high], {other_rule}."
        )


def check_spo_reward_scale(reward_range: list[float] | None, reward_funcs, reward_weights, other_rule: str) -> None:
    """Before any generation: with no declared range, SPO takes every reward function's reward to lie in [0, 1], so
    their weighted sum must stay in [0, 1]; a reward model's scores are not bounded at all."""
    if reward_range is not None:
        return
    funcs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    models = [func for func in funcs if isinstance(func, (str, torch.nn.Module))]
    if models:
        raise ValueError(
            f"SPO's tracker counts each weighted reward as a share of a success in [0, 1], but a reward model "
            f"({models[0] if isinstance(models[0], str) else type(models[0]).__name__}) gives scores with no bound. "
            f"Declare the range its weighted rewards lie in with spo_reward_range=[low, high], {other_rule}."
        )
    weights = [float(weight) for weight in (reward_weights if reward_weights is not None else [1.0] * len(funcs))]
    low, high = sum(min(weight, 0.0) for weight in weights), sum(max(weight, 0.0) for weight in weights)
    if low < 0 or high > 1:
        raise ValueError(
            f"SPO's tracker counts each weighted reward as a share of a success in [0, 1]: {len(funcs)} reward "
            f"function{'s' if len(funcs) > 1 else ''} with rewards in [0, 1], weighted {weights}, sum to rewards in "
            f"[{low:g}, {high:g}]. Declare that range with spo_reward_range=[{low:g}, {high:g}] (SPO maps it onto "
            f"[0, 1]), or set reward_weights that keep the sum in [0, 1], {other_rule}."
        )


def record_batch_metrics(metrics: dict[str, list[float]], rewards: np.ndarray, alpha: np.ndarray, beta: np.ndarray,
                         p_hats: np.ndarray, advantages: np.ndarray) -> None:
    """The release's per-batch figures (means over the batch's scored rows, before the update)."""
    if not rewards.size:
        return
    for name, values in (("reward", rewards), ("alpha", alpha), ("beta", beta), ("Neff", alpha + beta),
                         ("p_hats", p_hats), ("adv_before_norm", rewards - p_hats)):
        metrics[f"spo/{name}"].append(float(values.mean()))
    for quantile, value in zip(_QUANTILES, np.percentile(advantages, _QUANTILES)):
        metrics[f"spo/adv_after_norm/p{quantile}"].append(float(value))


def offline_text(row: dict[str, Any], id_column: str | None) -> str:
    """What names a row's prompt in an offline-values file: its `id_column` value, or its text as the release keys
    it (a plain prompt stripped; a conversation's first user message's content stripped: the release takes the first
    message, which with a system message would give every prompt the system's text)."""
    if id_column is not None:
        return str(row[id_column])
    prompt = row.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
        users = [message for message in prompt if isinstance(message, dict) and message.get("role") == "user"]
        prompt = (users or prompt)[0].get("content")
    if not isinstance(prompt, str):
        raise ValueError(
            f"spo_offline_values keys prompts by their text, but a training prompt is {prompt!r}, not text. Set "
            "prompt_id_column and key the file by its values, or give the scores in a column (spo_offline_column)."
        )
    return prompt.strip()


def offline_priors(args, dataset) -> tuple[list[str], list[tuple[float, float]]]:
    """Each training prompt's key and Beta prior from its offline scores (`spo_offline_values` or
    `spo_offline_column`), or a `ValueError` naming a file it cannot read, an entry that is no list of scores, or a
    prompt without scores (the release gives such a prompt no chance of being drawn, and fails if one is trained;
    here the run is refused before it starts)."""
    from .setup_checks import refuse_unindexable

    refuse_unindexable(dataset, "SPO's offline scores are matched to every prompt before training, read",
                       ", or train without offline scores (Beta(0.5, 0.5) for every prompt)")
    rows = [dataset[index] for index in range(len(dataset))]
    keys = keys_of(rows, args.prompt_id_column)
    if args.spo_offline_column is not None:
        found = [row.get(args.spo_offline_column) for row in rows]
        where = f"column {args.spo_offline_column!r} (spo_offline_column)"
    else:
        scores_of = _read_offline_values(args.spo_offline_values)
        refuse_shared_texts(rows, keys, args.prompt_id_column)
        found = [scores_of.get(offline_text(row, args.prompt_id_column)) for row in rows]
        where = f"{args.spo_offline_values} (spo_offline_values)"
    missing = [row for row, scores in zip(rows, found) if scores is None]
    if missing:
        raise ValueError(
            f"{len(missing)} of the {len(rows)} training prompts have no offline scores in {where}, the first: "
            f"{offline_text(missing[0], args.prompt_id_column)!r}. SPO's prior needs every prompt's scores (its "
            "release never draws a prompt without them). Add their scores, remove those prompts, or train without "
            "offline scores (every prompt at Beta(0.5, 0.5))."
        )
    for row, scores in zip(rows, found):
        _check_scores(scores, f"the scores of {offline_text(row, args.prompt_id_column)!r} in {where}")
    rng = np.random.default_rng(args.seed)  # the release samples its sub-sets unseeded; seeded, a run repeats
    return keys, [spo_prior(scores, args.spo_offline_n, args.spo_rho_clip_lower, rng) for scores in found]


def refuse_shared_texts(rows: list[dict[str, Any]], keys: list[str], id_column: str | None) -> None:
    """Two different prompts whose texts name them alike in the file (they differ in spaces around them, or in a
    message other than the first user's) would share one prior: refuse them."""
    first_key: dict[str, str] = {}
    for row, key in zip(rows, keys):
        text = offline_text(row, id_column)
        if first_key.setdefault(text, key) != key:
            raise ValueError(
                f"two different training prompts are both named {text!r} in spo_offline_values (it keys a prompt by "
                "its first user message, stripped, as the release does), so they would share one prior. Set "
                "prompt_id_column and key the file by its values, or give the scores in a column "
                "(spo_offline_column)."
            )


def _read_offline_values(path: str) -> dict[str, list]:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"spo_offline_values={path!r} cannot be read ({type(error).__name__}: {error}). Give a JSON "
                         'file of each prompt\'s scores by the initial policy, {"prompt text": [1, 0, ...]}.') from error
    if not isinstance(values, dict):
        raise ValueError(f"spo_offline_values={path!r} holds a {type(values).__name__}; it must be a JSON object of "
                         'each prompt\'s scores, {"prompt text": [1, 0, ...]}.')
    return values


def _check_scores(scores: Any, what: str) -> None:
    if not (isinstance(scores, (list, tuple)) and all(
            isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score)
            for score in scores)):
        raise ValueError(f"{what} are {scores!r}; they must be a list of finite numbers (a score of each sampled "
                         "response; above 0 counts as a success).")
