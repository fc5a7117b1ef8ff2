"""What the model can do: per-prompt pass rates from recent visits and a global failure rate."""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["CapabilityTracker", "prompt_key"]

_STATE_VERSION = 2


def prompt_key(prompt: Any) -> str:
    """A stable key for a prompt's content: the same on every process, machine and run, whatever the data order.

    Works for plain strings and for conversational prompts (lists of message dicts).
    """
    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


class _PromptRecord:
    """One prompt's history: rollouts scored in total, its latest visits, and the outcomes of its latest rollouts."""

    __slots__ = ("scored", "recent", "visits")

    def __init__(self, scored: int, recent: int, visits: deque):
        self.scored = scored  # scored rollouts over every visit, never trimmed (the minimum-rollouts rule needs it)
        self.recent = recent  # outcomes of the latest rollouts as bits, the newest in bit 0
        self.visits = visits  # (successes, scored rollouts) of the latest visits, the newest last


class CapabilityTracker:
    """Pass rates of prompts from their most recent visits, and the model's global failure rate.

    A rollout counts as a success when its reward is at least `success_threshold`. With binary rewards keep the default
    1.0; with continuous rewards set it to the score that counts as solving the prompt (e.g. 0.5 for a reward in
    [0, 1]), since both allocators reason about the probability of success. NaN rewards (unscorable rollouts) are
    ignored, never counted as failures.

    A prompt's pass rate pools its latest visits, newest first: at most `window` of them and, when `rollout_pool` is
    set, at most its latest `rollout_pool` rollouts (cut inside a visit if need be, keeping that visit's last rollouts)
    unless the latest visit alone has that many, in which case its own pass rate is used whole. The rate is NaN (the
    prompt counts as unseen) until the prompt has `min_rollouts` scored rollouts in total.

    The two releases' rules:
        - Knapsack RL (`rl_dataset.py`, `min_buffer_length=8`, `reward_buffer_length=16`): `min_rollouts=8`,
          `rollout_pool=16`, and a `window` of 16 visits, which never binds (each visit has a scored rollout).
        - CoBA-RL (`budget_allocators.py`, run script `sliding_window_size=1`): `window=1` and
          `failure_rate_window=1`, no pool, any scored rollout counts (the class default of that release is 3 and 3).

    Args:
        window: how many recent visits of a prompt its pass rate pools (1: the last visit).
        success_threshold: reward at or above which a rollout is a success.
        failure_rate_window: how many recent batches the global failure rate averages over; each batch gives 1 - the
            mean over its prompts of their pass rates in that batch.
        min_rollouts: scored rollouts a prompt needs in total before it has a pass rate.
        rollout_pool: most recent rollouts the pass rate pools (None or 0: whole visits, `window` of them).
    """

    def __init__(
        self,
        window: int = 1,
        success_threshold: float = 1.0,
        failure_rate_window: int = 1,
        min_rollouts: int = 1,
        rollout_pool: int | None = None,
    ):
        for name, value in (("window", window), ("failure_rate_window", failure_rate_window),
                            ("min_rollouts", min_rollouts)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value}.")
        if rollout_pool is not None and (int(rollout_pool) != rollout_pool or rollout_pool < 0):
            raise ValueError(f"rollout_pool must be None, 0 (off) or a positive number of rollouts, got {rollout_pool}.")
        if not np.isfinite(success_threshold):
            raise ValueError(f"success_threshold must be a finite number, got {success_threshold}.")
        self.window = int(window)
        self.success_threshold = float(success_threshold)
        self.failure_rate_window = int(failure_rate_window)
        self.min_rollouts = int(min_rollouts)
        self.rollout_pool = int(rollout_pool) if rollout_pool else None
        self._records: dict[str, _PromptRecord] = {}
        self._batch_failure_rates: deque[float] = deque(maxlen=self.failure_rate_window)

    def __len__(self) -> int:
        return len(self._records)

    def settings(self) -> dict[str, Any]:
        """The settings a saved state must have been made with."""
        return {"window": self.window, "success_threshold": self.success_threshold,
                "failure_rate_window": self.failure_rate_window, "min_rollouts": self.min_rollouts,
                "rollout_pool": self.rollout_pool}

    def update(self, keys: Sequence[Hashable], rewards_per_rollout) -> None:
        """Record one visit per distinct key from the rewards of its rollouts in this batch.

        Args:
            keys: the prompt key of each rollout, in the order the rollouts were generated.
            rewards_per_rollout: one reward per rollout, NaN where the rollout could not be scored.
        """
        rewards = np.asarray(rewards_per_rollout, dtype=np.float64)
        if rewards.ndim != 1 or rewards.size != len(keys):
            raise ValueError(
                f"update needs one reward per key: got {len(keys)} keys and rewards of shape {rewards.shape}."
            )
        outcomes: dict[str, list[bool]] = {}
        for key, reward in zip(keys, rewards.tolist()):
            if reward == reward:  # NaN (unscorable) rewards are skipped
                outcomes.setdefault(str(key), []).append(reward >= self.success_threshold)
        if not outcomes:
            return
        pool_mask = (1 << self.rollout_pool) - 1 if self.rollout_pool else 0
        for key, visit in outcomes.items():
            record = self._records.get(key)
            if record is None:
                record = self._records[key] = _PromptRecord(0, 0, deque(maxlen=self.window))
            record.scored += len(visit)
            record.visits.append((sum(visit), len(visit)))
            if pool_mask:
                for success in visit:
                    record.recent = ((record.recent << 1) | success) & pool_mask
        batch_pass_rate = sum(sum(visit) / len(visit) for visit in outcomes.values()) / len(outcomes)
        self._batch_failure_rates.append(1.0 - batch_pass_rate)

    def pass_rates(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Pass rate of each key from its recent visits; NaN for a key with fewer than `min_rollouts` scored."""
        rates = np.full(len(keys), np.nan)
        for i, key in enumerate(keys):
            record = self._records.get(str(key))
            if record is not None and record.scored >= self.min_rollouts:
                rates[i] = self._pass_rate(record)
        return rates

    def _pass_rate(self, record: _PromptRecord) -> float:
        pooled = sum(total for _, total in record.visits)
        if not self.rollout_pool:
            return sum(wins for wins, _ in record.visits) / pooled
        last_wins, last_total = record.visits[-1]
        if last_total >= self.rollout_pool:
            return last_wins / last_total
        latest = min(self.rollout_pool, pooled)
        return (record.recent & ((1 << latest) - 1)).bit_count() / latest

    @property
    def failure_rate(self) -> float | None:
        """Moving average of 1 - mean pass rate over the last batches; None before the first update."""
        if not self._batch_failure_rates:
            return None
        return float(np.mean(self._batch_failure_rates))

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state (no pickle), for saving with a checkpoint.

        Each prompt is `[scored rollouts, latest outcomes as an integer of bits, [[successes, rollouts], ...]]`.
        """
        return {
            "version": _STATE_VERSION,
            **self.settings(),
            "prompts": {
                key: [record.scored, record.recent, [list(visit) for visit in record.visits]]
                for key, record in self._records.items()
            },
            "batch_failure_rates": list(self._batch_failure_rates),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by `state_dict`; the tracker's own settings must match the saved ones."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"unsupported tracker state version {state.get('version')!r}; this trl_budget reads version "
                f"{_STATE_VERSION}. A state of version 1 lacks the rollout counts and outcomes that the pass-rate "
                "rules now need: resume it with the trl_budget release that wrote it, or remove the file to start "
                "with unseen pass rates."
            )
        mine = self.settings()
        theirs = {name: state.get(name) for name in mine}
        if mine != theirs:
            raise ValueError(
                f"the saved tracker state was made with {theirs}, but this tracker uses {mine}; create the tracker "
                "with the saved settings to restore it."
            )
        self._records = {
            key: _PromptRecord(int(scored), int(recent), deque((tuple(v) for v in visits), maxlen=self.window))
            for key, (scored, recent, visits) in state["prompts"].items()
        }
        self._batch_failure_rates = deque(state["batch_failure_rates"], maxlen=self.failure_rate_window)
