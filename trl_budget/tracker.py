"""What the model can do: per-prompt pass rates from recent visits and a global failure rate."""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["CapabilityTracker", "prompt_key"]

_STATE_VERSION = 1


def prompt_key(prompt: Any) -> str:
    """A stable key for a prompt's content: the same on every process, machine and run, whatever the data order.

    Works for plain strings and for conversational prompts (lists of message dicts).
    """
    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


class CapabilityTracker:
    """Pass rates of prompts from their most recent visits, and the model's global failure rate.

    A rollout counts as a success when its reward is at least `success_threshold`. With binary rewards keep the default
    1.0; with continuous rewards set it to the score that counts as solving the prompt (e.g. 0.5 for a reward in
    [0, 1]), since both allocators reason about the probability of success. NaN rewards (unscorable rollouts) are
    ignored, never counted as failures.

    Args:
        window: how many recent visits of a prompt its pass rate pools (1: the last visit, as both papers do).
        success_threshold: reward at or above which a rollout is a success.
        failure_rate_window: how many recent batches the global failure rate averages over.
    """

    def __init__(self, window: int = 1, success_threshold: float = 1.0, failure_rate_window: int = 10):
        if window < 1:
            raise ValueError(f"window must be at least 1 visit, got {window}.")
        if failure_rate_window < 1:
            raise ValueError(f"failure_rate_window must be at least 1 batch, got {failure_rate_window}.")
        if not np.isfinite(success_threshold):
            raise ValueError(f"success_threshold must be a finite number, got {success_threshold}.")
        self.window = int(window)
        self.success_threshold = float(success_threshold)
        self.failure_rate_window = int(failure_rate_window)
        self._visits: dict[str, deque[tuple[int, int]]] = {}
        self._batch_failure_rates: deque[float] = deque(maxlen=self.failure_rate_window)

    def __len__(self) -> int:
        return len(self._visits)

    def update(self, keys: Sequence[Hashable], rewards_per_rollout) -> None:
        """Record one visit per distinct key from the rewards of its rollouts in this batch.

        Args:
            keys: the prompt key of each rollout.
            rewards_per_rollout: one reward per rollout, NaN where the rollout could not be scored.
        """
        rewards = np.asarray(rewards_per_rollout, dtype=np.float64)
        if rewards.ndim != 1 or rewards.size != len(keys):
            raise ValueError(
                f"update needs one reward per key: got {len(keys)} keys and rewards of shape {rewards.shape}."
            )
        tallies: dict[str, list[int]] = {}
        for key, reward in zip(keys, rewards.tolist()):
            if reward == reward:  # NaN (unscorable) rewards are skipped
                tally = tallies.setdefault(str(key), [0, 0])
                tally[0] += reward >= self.success_threshold
                tally[1] += 1
        if not tallies:
            return
        for key, (wins, total) in tallies.items():
            self._visits.setdefault(key, deque(maxlen=self.window)).append((wins, total))
        batch_pass_rate = sum(wins / total for wins, total in tallies.values()) / len(tallies)
        self._batch_failure_rates.append(1.0 - batch_pass_rate)

    def pass_rates(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Pass rate of each key over its recent visits; NaN for a key never scored."""
        rates = np.full(len(keys), np.nan)
        for i, key in enumerate(keys):
            visits = self._visits.get(str(key))
            if visits:
                rates[i] = sum(w for w, _ in visits) / sum(n for _, n in visits)
        return rates

    @property
    def failure_rate(self) -> float | None:
        """Moving average of 1 - mean pass rate over the last batches; None before the first update."""
        if not self._batch_failure_rates:
            return None
        return float(np.mean(self._batch_failure_rates))

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state (no pickle), for saving with a checkpoint."""
        return {
            "version": _STATE_VERSION,
            "window": self.window,
            "success_threshold": self.success_threshold,
            "failure_rate_window": self.failure_rate_window,
            "visits": {key: [list(v) for v in visits] for key, visits in self._visits.items()},
            "batch_failure_rates": list(self._batch_failure_rates),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by `state_dict`; the tracker's own settings must match the saved ones."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported tracker state version {state.get('version')!r}; expected {_STATE_VERSION}.")
        mine = {"window": self.window, "success_threshold": self.success_threshold,
                "failure_rate_window": self.failure_rate_window}
        theirs = {name: state[name] for name in mine}
        if mine != theirs:
            raise ValueError(
                f"the saved tracker state was made with {theirs}, but this tracker uses {mine}; create the tracker "
                "with the saved settings to restore it."
            )
        self._visits = {
            key: deque((tuple(v) for v in visits), maxlen=self.window) for key, visits in state["visits"].items()
        }
        self._batch_failure_rates = deque(state["batch_failure_rates"], maxlen=self.failure_rate_window)
