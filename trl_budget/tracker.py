"""What the model can do: per-prompt pass rates from recent visits and a global failure rate."""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .checks import check_whole_number, is_finite_number, is_missing, is_whole_number, shown

__all__ = ["CapabilityTracker", "SettingsMismatch", "group_name", "prompt_key"]

_STATE_VERSION = 4  # 4 adds the reward history, 3 the prompt groups; versions 2 and 3 still load
MAX_ROLLOUT_POOL = 64  # the latest outcomes of a prompt are kept as the bits of one unsigned 64-bit integer


def prompt_key(prompt: Any) -> str:
    """A stable key for a prompt's content: the same on every process, machine and run, whatever the data order.

    Works for plain strings, conversational prompts (lists of message dicts) and prompts holding images: an image
    (PIL, numpy array or torch tensor) is keyed by its pixels, never by its place in memory.
    """
    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=_content_of)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _content_of(value: Any) -> Any:
    """JSON stand-in for what `json` cannot encode: a digest of an image's or array's content, else its `str`."""
    if hasattr(value, "tobytes") and hasattr(value, "mode") and hasattr(value, "size"):  # a PIL image
        pixels = hashlib.blake2b(value.tobytes(), digest_size=16).hexdigest()
        if value.mode in ("P", "PA"):  # the pixels are palette indices: the colours they show live in the palette
            palette = hashlib.blake2b(bytes(value.getpalette() or []), digest_size=16).hexdigest()
            return {"image": [value.mode, list(value.size), pixels, palette]}
        return {"image": [value.mode, list(value.size), pixels]}
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        digest = hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest()
        return {"array": [str(data.dtype), list(data.shape), digest]}
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def group_name(group: Any) -> str | None:
    """A prompt's group as the tracker names it: its text; None (no group) for None or NaN."""
    return None if is_missing(group) else str(group)


def merged_moments(weight: np.ndarray, mean: np.ndarray, m2: np.ndarray, values: list[np.ndarray], decay: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each prompt's reward history after one more visit: its earlier moments (`weight`, the decayed number of
    rewards; their `mean`; `m2`, the decayed sum of squared deviations from it) weighed by `decay`, merged with the
    visit's scored rewards (`values[i]` of prompt i) by Chan's pairwise rule."""
    weight, mean, m2 = (np.array(column, dtype=np.float64) for column in (weight, mean, m2))
    for prompt, visit in enumerate(values):
        visit = visit[~np.isnan(visit)]
        if not visit.size:
            continue
        old = weight[prompt] * decay
        total = old + visit.size
        delta = visit.mean() - mean[prompt]
        m2[prompt] = m2[prompt] * decay + ((visit - visit.mean()) ** 2).sum() + delta**2 * old * visit.size / total
        mean[prompt] += delta * visit.size / total
        weight[prompt] = total
    return weight, mean, m2


def _count_bits(values: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(values).astype(np.int64)
    return np.unpackbits(values.astype(np.uint64).view(np.uint8)).reshape(-1, 64).sum(axis=1)


class SettingsMismatch(ValueError):
    """A saved state was made with other tracker settings than this tracker's; `differences` maps each to both."""

    def __init__(self, saved: dict[str, Any], current: dict[str, Any], message: str | None = None):
        self.differences = {name: (saved[name], current[name]) for name in current if saved[name] != current[name]}
        listed = ", ".join(f"{name}: saved {old!r}, now {new!r}" for name, (old, new) in self.differences.items())
        super().__init__(message or f"the saved tracker state was made with other settings ({listed}); create the "
                         "tracker with the saved settings to restore it.")
        self.saved, self.current = saved, current


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

    The state is held in columns (one row per prompt: about 0.2 KB of memory per prompt with the defaults), so that
    millions of prompts fit on every process and save in well under a second.

    Args:
        window: how many recent visits of a prompt its pass rate pools (1: the last visit).
        success_threshold: reward at or above which a rollout is a success.
        failure_rate_window: how many recent batches the global failure rate averages over; each batch gives 1 - the
            mean over its prompts of their pass rates in that batch.
        min_rollouts: scored rollouts a prompt needs in total before it has a pass rate.
        rollout_pool: most recent rollouts the pass rate pools, at most 64 (None or 0: whole visits, `window` of them).
        reward_history_window: keep each prompt's reward history (the moments of its weighted rewards, for the history
            advantage baseline), each earlier visit weighed `1 - 1/reward_history_window` times the next, so that the
            history weighs about as many visits; None: none kept.
    """

    def __init__(
        self,
        window: int = 1,
        success_threshold: float = 1.0,
        failure_rate_window: int = 1,
        min_rollouts: int = 1,
        rollout_pool: int | None = None,
        reward_history_window: float | None = None,
    ):
        for name, value in (("window", window), ("failure_rate_window", failure_rate_window),
                            ("min_rollouts", min_rollouts)):
            check_whole_number(name, value, 1)
        if rollout_pool is not None and not (is_whole_number(rollout_pool) and 0 <= rollout_pool <= MAX_ROLLOUT_POOL):
            raise ValueError(
                f"rollout_pool must be None, 0 (off) or a number of rollouts up to {MAX_ROLLOUT_POOL}, got "
                f"{shown(rollout_pool)}."
            )
        if not is_finite_number(success_threshold):
            raise ValueError(f"success_threshold must be a finite number, got {shown(success_threshold)}.")
        if reward_history_window is not None and not (is_finite_number(reward_history_window)
                                                      and reward_history_window >= 1):
            raise ValueError(f"reward_history_window must be a finite number of visits, at least 1, or None, got "
                             f"{shown(reward_history_window)}.")
        self.reward_history_window = None if reward_history_window is None else float(reward_history_window)
        self.window = int(window)
        self.success_threshold = float(success_threshold)
        self.failure_rate_window = int(failure_rate_window)
        self.min_rollouts = int(min_rollouts)
        self.rollout_pool = int(rollout_pool) if rollout_pool else None
        # With a pool no longer than the window, the window never binds and only the last visit is needed.
        self._visits_kept = 1 if self.rollout_pool and self.window >= self.rollout_pool else self.window
        self._row_of: dict[str, int] = {}
        self._scored = np.zeros(0, dtype=np.int64)  # scored rollouts over every visit (the minimum-rollouts rule)
        self._recent = np.zeros(0, dtype=np.uint64)  # latest outcomes as bits, the newest in bit 0
        self._wins = np.zeros((0, self._visits_kept), dtype=np.int32)  # latest visits, the newest in the last column
        self._trials = np.zeros((0, self._visits_kept), dtype=np.int32)  # 0: no visit
        self._group = np.zeros(0, dtype=np.int64)  # 1 + the prompt's group index; 0: no group
        self._length = np.zeros(0)  # mean completion tokens of the prompt's latest visit; NaN: not measured
        self._reward_moments = np.zeros((0, 3))  # decayed count, mean and sum of squared deviations of its rewards
        self._group_index: dict[str, int] = {}
        self._group_wins, self._group_trials = np.zeros(0), np.zeros(0)  # pooled current evidence of each group
        self._batch_failure_rates: deque[float] = deque(maxlen=self.failure_rate_window)

    def __len__(self) -> int:
        return len(self._row_of)

    def settings(self) -> dict[str, Any]:
        """The settings a saved state must have been made with."""
        return {"window": self.window, "success_threshold": self.success_threshold,
                "failure_rate_window": self.failure_rate_window, "min_rollouts": self.min_rollouts,
                "rollout_pool": self.rollout_pool, "reward_history_window": self.reward_history_window}

    # ------------------------------------------------------------------------------------------------- updating

    def update(self, keys: Sequence[Hashable], rewards_per_rollout, groups: Sequence[Hashable] | None = None,
               lengths=None, reward_values=None) -> float | None:
        """Record one visit per distinct key from the rewards of its rollouts in this batch.

        Args:
            keys: the prompt key of each rollout, in the order the rollouts were generated.
            rewards_per_rollout: one reward per rollout, NaN where the rollout could not be scored.
            groups: the group (level, source, topic) of each rollout's prompt, or None: the tracker then also pools
                each group's evidence, for `prior_pass_rates`. Groups are named by their text (`str`); a None or NaN
                entry means the prompt belongs to no group: it lends and borrows no pooled rate.
            lengths: each rollout's completion tokens, or None: a prompt's expected length (`expected_lengths`) is
                the mean over its latest visit.
            reward_values: each rollout's weighted reward (NaN where unscored), for the reward history; with
                `reward_history_window` set it is required.

        Returns:
            This batch's failure rate (1 - the mean of its prompts' pass rates), or None if nothing was scored.
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
            return None
        if lengths is not None:
            self._record_lengths(keys, lengths)
        if self.reward_history_window is not None:
            names, *moments = self.reward_moments_after(keys, reward_values)
            rows = self._rows_for(names)  # first: it may grow (and so replace) the columns
            self._reward_moments[rows] = np.stack(moments, axis=1)
        rows = self._rows_for(list(outcomes))
        self._pool_into_groups(rows, -1)  # their evidence changes: out of the group pools, back in below
        if groups is not None:
            self._assign_groups(rows, list(outcomes), keys, groups)
        wins = np.array([sum(visit) for visit in outcomes.values()], dtype=np.int64)
        trials = np.array([len(visit) for visit in outcomes.values()], dtype=np.int64)
        self._scored[rows] += trials
        self._wins[rows, :-1] = self._wins[rows, 1:]
        self._trials[rows, :-1] = self._trials[rows, 1:]
        self._wins[rows, -1] = wins
        self._trials[rows, -1] = trials
        if self.rollout_pool:
            mask = (1 << self.rollout_pool) - 1
            for row, visit in zip(rows.tolist(), outcomes.values()):
                bits = int(self._recent[row])
                for success in visit[-self.rollout_pool :]:
                    bits = ((bits << 1) | success) & mask
                self._recent[row] = bits
        self._pool_into_groups(rows, +1)
        batch_failure_rate = 1.0 - float(np.mean(wins / trials))
        self._batch_failure_rates.append(batch_failure_rate)
        return batch_failure_rate

    def _rows_for(self, keys: list[str]) -> np.ndarray:
        """Rows of `keys`, appending rows (grown geometrically) for keys not seen before."""
        new = [key for key in keys if key not in self._row_of]
        start = len(self._row_of)
        if start + len(new) > self._scored.size:
            self._grow(max(2 * self._scored.size, start + len(new), 64))
        for offset, key in enumerate(new):
            self._row_of[key] = start + offset
        return np.fromiter((self._row_of[key] for key in keys), dtype=np.int64, count=len(keys))

    def _grow(self, capacity: int) -> None:
        def grown(column: np.ndarray) -> np.ndarray:
            bigger = np.zeros((capacity, *column.shape[1:]), dtype=column.dtype)
            bigger[: column.shape[0]] = column
            return bigger

        self._scored, self._recent = grown(self._scored), grown(self._recent)
        self._wins, self._trials = grown(self._wins), grown(self._trials)
        self._group, self._reward_moments = grown(self._group), grown(self._reward_moments)
        self._length = np.concatenate([self._length, np.full(capacity - self._length.size, np.nan)])

    # --------------------------------------------------------------------------------------- reward history

    def reward_moments(self, keys: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each key's reward history: the decayed number of its rewards, their mean and their decayed sum of squared
        deviations (all 0 for a key never seen, or seen before the history was kept)."""
        rows = self._rows_of(keys)
        moments = np.zeros((len(keys), 3))
        moments[rows >= 0] = self._reward_moments[rows[rows >= 0]]
        return moments[:, 0], moments[:, 1], moments[:, 2]

    def reward_moments_after(self, keys: Sequence[Hashable], reward_values
                             ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """What `update` makes of the reward histories with one more visit (`keys` and `reward_values`: one per
        rollout, NaN where unscored), without recording it: the history baseline pools exactly what the tracker then
        keeps. Returns the distinct keys, in order of first appearance, and their moments."""
        if self.reward_history_window is None:
            raise ValueError("this tracker keeps no reward history: create it with a reward_history_window.")
        names, values = _values_by_key(keys, reward_values)
        return names, *merged_moments(*self.reward_moments(names), values, 1.0 - 1.0 / self.reward_history_window)

    def reward_moments_of_groups(self, keys: Sequence[Hashable], groups: list[np.ndarray]
                                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each group's baseline moments: its key's reward history before this visit merged with that group's own
        rewards (`groups[i]`, NaN where unscored), one group at a time, so that two groups of one key in a batch (a
        prompt text the data repeats) are each merged with the history alone, as GRPO keeps them apart."""
        if self.reward_history_window is None:
            raise ValueError("this tracker keeps no reward history: create it with a reward_history_window.")
        return merged_moments(*self.reward_moments([str(key) for key in keys]), groups,
                              1.0 - 1.0 / self.reward_history_window)

    # --------------------------------------------------------------------------------------------- lengths

    def _record_lengths(self, keys: Sequence[Hashable], lengths) -> None:
        lengths = np.asarray(lengths, dtype=np.float64)
        if lengths.shape != (len(keys),):
            raise ValueError(f"update needs one length per key: got {len(keys)} keys and lengths of shape "
                             f"{lengths.shape}.")
        names, key_index = np.unique(np.asarray([str(key) for key in keys]), return_inverse=True)
        means = np.bincount(key_index, lengths) / np.bincount(key_index)
        rows = self._rows_for(names.tolist())  # first: it may grow (and so replace) the columns
        self._length[rows] = means

    def _rows_of(self, keys: Sequence[Hashable]) -> np.ndarray:
        """The row of each key; -1 for a key never seen."""
        return np.fromiter((self._row_of.get(str(key), -1) for key in keys), dtype=np.int64, count=len(keys))

    def expected_lengths(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Each key's mean completion tokens over its latest visit; NaN where never measured."""
        rows = self._rows_of(keys)
        lengths = np.full(len(keys), np.nan)
        lengths[rows >= 0] = self._length[rows[rows >= 0]]
        return lengths

    # ---------------------------------------------------------------------------------------------- groups

    def _assign_groups(self, rows: np.ndarray, row_keys: list[str], keys: Sequence[Hashable],
                       groups: Sequence[Hashable]) -> None:
        """Record the group of each row (`row_keys[i]` is row i's key; `groups` is aligned with `keys`)."""
        if len(groups) != len(keys):
            raise ValueError(f"update needs one group per key: got {len(keys)} keys and {len(groups)} groups.")
        group_of_key = {str(key): group_name(group) for key, group in zip(keys, groups)}
        self._group[rows] = 1 + self._group_ids([group_of_key[key] for key in row_keys])

    def _group_ids(self, names: Sequence[str | None], add: bool = True) -> np.ndarray:
        """The index of each group name (-1 for no group, None, and for a name not pooled yet unless `add`)."""
        for name in names:
            if add and name is not None and name not in self._group_index:
                self._group_index[name] = len(self._group_index)
        if len(self._group_index) > self._group_wins.size:
            missing = np.zeros(len(self._group_index) - self._group_wins.size)
            self._group_wins = np.concatenate([self._group_wins, missing])
            self._group_trials = np.concatenate([self._group_trials, missing])
        return np.fromiter((self._group_index.get(name, -1) for name in names), dtype=np.int64, count=len(names))

    def _pool_into_groups(self, rows: np.ndarray, sign: int) -> None:
        """Add (+1) or remove (-1) the current evidence of `rows` to or from their groups' pools."""
        grouped = rows[self._group[rows] > 0]
        if grouped.size:
            wins, trials = self._evidence_of_rows(grouped)
            np.add.at(self._group_wins, self._group[grouped] - 1, sign * wins)
            np.add.at(self._group_trials, self._group[grouped] - 1, sign * trials)

    def group_pass_rates(self, groups: Sequence[Hashable]) -> np.ndarray:
        """Each group's pooled pass rate (its prompts' current evidence together); NaN below `min_rollouts`, and for
        no group (None or NaN)."""
        ids = self._group_ids([group_name(group) for group in groups], add=False)
        rates = np.full(len(ids), np.nan)
        known = ids >= 0
        wins, trials = self._group_wins[ids[known]], self._group_trials[ids[known]]
        rates[known] = np.divide(wins, trials, out=np.full(wins.size, np.nan), where=trials >= self.min_rollouts)
        return rates

    def prior_pass_rates(self, keys: Sequence[Hashable], prior_rates=None, groups: Sequence[Hashable] | None = None,
                         strength: float = 8.0) -> tuple[np.ndarray, np.ndarray]:
        """Pass rates, with a prior for the keys that `pass_rates` calls unseen; and which keys used it.

        A seen key keeps its release-rule rate exactly. An unseen key takes its prior p0 — its own entry of
        `prior_rates` where finite, else its group's pooled rate once the group has `min_rollouts` of evidence — as
        `strength` pseudo-rollouts beside its own rollouts so far: (wins + strength x p0) / (rollouts + strength).
        Keys with no prior stay NaN.
        """
        rates = self.pass_rates(keys)
        prior = np.full(len(keys), np.nan) if prior_rates is None else np.asarray(prior_rates, dtype=np.float64)
        if groups is not None:
            prior = np.where(np.isfinite(prior), prior, self.group_pass_rates(groups))
        use = np.isnan(rates) & np.isfinite(prior)
        if use.any():
            rows = self._rows_of(keys)
            wins, trials = np.zeros(len(keys)), np.zeros(len(keys))
            known = use & (rows >= 0)
            if known.any():
                wins[known], trials[known] = self._evidence_of_rows(rows[known])
            rates[use] = (wins[use] + strength * prior[use]) / (trials[use] + strength)
        return rates, use

    # ------------------------------------------------------------------------------------------------- reading

    def pass_rates(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Pass rate of each key from its recent visits; NaN for a key with fewer than `min_rollouts` scored."""
        wins, trials = self.evidence(keys)
        return np.divide(wins, trials, out=np.full(len(keys), np.nan), where=trials > 0)

    def evidence(self, keys: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
        """The successes and rollouts that each key's pass rate is computed from (0 and 0 below `min_rollouts`)."""
        rows = self._rows_of(keys)
        wins, trials = np.zeros(len(keys)), np.zeros(len(keys))
        known = rows >= 0
        known[known] = self._scored[rows[known]] >= self.min_rollouts
        if known.any():
            wins[known], trials[known] = self._evidence_of_rows(rows[known])
        return wins, trials

    def _evidence_of_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        wins, trials = self._wins[rows].astype(np.int64), self._trials[rows].astype(np.int64)
        if not self.rollout_pool:
            return wins.sum(axis=1), trials.sum(axis=1)
        last_wins, last_trials = wins[:, -1], trials[:, -1]
        # A window at least as long as the pool never binds (each visit has a scored rollout): every rollout counts.
        in_window = self._scored[rows] if self.window >= self.rollout_pool else trials.sum(axis=1)
        latest = np.minimum(self.rollout_pool, in_window)
        masks = ((np.ones(rows.size, dtype=np.uint64) << latest.astype(np.uint64)) - np.uint64(1))
        masks[latest >= 64] = np.iinfo(np.uint64).max
        pooled_wins = _count_bits(self._recent[rows] & masks)
        whole_visit = last_trials >= self.rollout_pool
        return np.where(whole_visit, last_wins, pooled_wins), np.where(whole_visit, last_trials, latest)

    @property
    def failure_rate(self) -> float | None:
        """Moving average of 1 - mean pass rate over the last batches; None before the first update."""
        if not self._batch_failure_rates:
            return None
        return sum(self._batch_failure_rates) / len(self._batch_failure_rates)

    # ------------------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state (no pickle), for saving with a checkpoint.

        Columns, one entry per prompt in `keys` order: `scored` (rollouts over every visit), `recent` (latest outcomes
        as an integer of bits, the newest in bit 0), and `wins` / `trials` of its latest visits, prompt after prompt
        (the visits kept per prompt follow from the settings; oldest first; 0 trials means no visit), `group`
        (1 + the index of its group in `groups`; 0: none) and `lengths` (mean completion tokens of its latest visit,
        null where never measured). The groups' pools are not stored: they follow from these.
        """
        size = len(self._row_of)
        return {
            "version": _STATE_VERSION,
            **self.settings(),
            "keys": list(self._row_of),
            "scored": self._scored[:size].tolist(),
            "recent": self._recent[:size].tolist(),
            "wins": self._wins[:size].ravel().tolist(),
            "trials": self._trials[:size].ravel().tolist(),
            "batch_failure_rates": list(self._batch_failure_rates),
            "groups": list(self._group_index),
            "group": self._group[:size].tolist(),
            "lengths": [None if length != length else length for length in self._length[:size].tolist()],
            "reward_moments": self._reward_moments[:size].ravel().tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by `state_dict`, after checking every entry of it.

        Raises:
            ValueError: naming the first setting or entry that this tracker cannot use.
        """
        version = state.get("version") if isinstance(state, dict) else None
        if version not in _READABLE_VERSIONS:
            raise ValueError(_unreadable_version_message(version))
        keys = state.get("keys")
        size = len(keys) if isinstance(keys, list) else 0  # a 'keys' that is no list is refused below
        if version == 2:  # written before groups and lengths existed: none
            state = {**state, "groups": [], "group": [0] * size, "lengths": [None] * size}
        if version in (2, 3):
            # Written before the reward history existed: every prompt's history starts at its next visit, whatever
            # this tracker's window (the pass rates carry over as they were).
            state = {**state, "reward_history_window": self.reward_history_window,
                     "reward_moments": [0.0] * (3 * size)}
        mine = {name: value for name, value in self.settings().items() if name != "reward_history_window"}
        theirs = {name: state.get(name) for name in mine}
        if mine != theirs:
            raise SettingsMismatch(theirs, mine)
        saved_window = _checked_history_window(state)
        keys, scored, recent, wins, trials, failure_rates = _checked_columns(state, self._visits_kept,
                                                                              self.rollout_pool)
        if len(set(keys)) != len(keys):
            raise ValueError("the saved tracker state lists a prompt key twice; each prompt must appear once.")
        group_names, group = _checked_groups(state, keys)
        lengths = _checked_lengths(state, keys)
        moments = self._history_carried_over(saved_window, _checked_moments(state, keys))
        self._row_of = {key: row for row, key in enumerate(keys)}
        self._reward_moments = moments
        self._scored, self._recent, self._wins, self._trials = scored, recent, wins, trials
        self._batch_failure_rates = deque(failure_rates.tolist(), maxlen=self.failure_rate_window)
        self._group, self._group_index = group, {name: index for index, name in enumerate(group_names)}
        self._length = lengths
        self._group_wins, self._group_trials = np.zeros(len(group_names)), np.zeros(len(group_names))
        self._pool_into_groups(np.arange(len(keys)), +1)

    def _history_carried_over(self, saved_window: float | None, moments: np.ndarray) -> np.ndarray:
        """The saved reward histories as this tracker keeps them. The history is the one setting a run may change on
        resume (switching the advantage baseline to or from 'history', or its window): started where none was kept,
        as for a state from before histories existed, each prompt's history starting at its next visit; dropped where
        this tracker keeps none; carried over with another window, later visits weighed by the new one."""
        if saved_window == self.reward_history_window:
            return moments
        if saved_window is None:
            change = ("the saved state keeps no reward history: each prompt's history starts at its next visit, so "
                      "the history baseline begins as GRPO's group baseline on every prompt")
        elif self.reward_history_window is None:
            change = "this run keeps no reward history (advantage_baseline is not 'history'): the saved one is dropped"
        else:
            change = ("the saved histories carry over, and from now on each earlier visit weighs "
                      f"1 - 1/{self.reward_history_window:g} times the next")
        warnings.warn(f"The tracker's reward history was kept with reward_history_window={saved_window!r} "
                      f"(advantage_history_window) and this run's is {self.reward_history_window!r}; {change}.",
                      UserWarning, stacklevel=3)
        return moments if saved_window is not None and self.reward_history_window is not None else np.zeros_like(
            moments)


def _checked_history_window(state: dict[str, Any]) -> float | None:
    """The reward history window the state was saved with: None or a number of visits, at least 1."""
    window = state.get("reward_history_window")
    if window is not None and not (is_finite_number(window) and window >= 1):
        raise ValueError(f"the saved tracker state's 'reward_history_window' is {window!r}; it must be None (no "
                         "reward history) or a finite number of visits, at least 1.")
    return window


_READABLE_VERSIONS = (2, 3, _STATE_VERSION)
# A prompt's expected completion tokens: no model writes a billion-token completion, and the token cap multiplies
# lengths by rollout counts, which a length near the float maximum would overflow to infinity.
MAX_EXPECTED_LENGTH = 1e9


def _unreadable_version_message(version: Any) -> str:
    readable = ", ".join(map(str, _READABLE_VERSIONS[:-1])) + f" and {_READABLE_VERSIONS[-1]}"
    if is_whole_number(version) and version > _STATE_VERSION:
        return (f"the tracker state has version {version}, which a newer trl_budget wrote; this one reads versions "
                f"{readable}. Upgrade trl_budget to resume it, or remove the file to start with unseen pass rates.")
    if version == 1:
        return (f"the tracker state has version 1; this trl_budget reads versions {readable}. A state of version 1 "
                "lacks the rollout counts and outcomes that the pass-rate rules now need: resume it with the "
                "trl_budget release that wrote it, or remove the file to start with unseen pass rates.")
    return (f"unsupported tracker state version {version!r}; this trl_budget reads versions {readable}. The file "
            "was not written by trl_budget's tracker, or was edited: remove it to start with unseen pass rates.")


_INT32_MAX = int(np.iinfo(np.int32).max)
_INT64_MAX = int(np.iinfo(np.int64).max)


def _checked_integers(state: dict[str, Any], name: str, keys: list[str], per_key: int, largest: int) -> np.ndarray:
    """The column `name` as int64, each entry a JSON integer in [0, `largest`] (the dtype that stores it).

    A float (1.7, or 3.0), a string ("3"), a boolean or a number beyond the storing dtype is refused here, naming the
    entry: a cast would silently round, parse or wrap it.
    """
    values = state[name]
    if not isinstance(values, list):
        raise ValueError(f"the saved tracker state's {name!r} is a {type(values).__name__}, not a list of integers.")
    if set(map(type, values)) - {int}:
        index = next(i for i, value in enumerate(values) if type(value) is not int)
        raise ValueError(f"{_entry(name, index, keys, per_key)} is {values[index]!r}; it must be a whole number "
                         "written as a JSON integer.")
    if values and not (0 <= min(values) and max(values) <= largest):
        index = next(i for i, value in enumerate(values) if not 0 <= value <= largest)
        raise ValueError(f"{_entry(name, index, keys, per_key)} is {values[index]}, outside [0, {largest}].")
    return np.asarray(values, dtype=np.int64 if largest <= _INT64_MAX else np.uint64)


def _entry(name: str, index: int, keys: list[str], per_key: int) -> str:
    row = index // per_key
    owner = f" (prompt {keys[row]!r})" if row < len(keys) else ""
    return f"entry {index} of {name!r}{owner}"


def _checked_columns(state: dict[str, Any], visits_kept: int, rollout_pool: int | None):
    """The state's columns as arrays, or a `ValueError` that names the first entry breaking a rule."""
    missing = [name for name in ("keys", "scored", "recent", "wins", "trials", "batch_failure_rates")
               if name not in state]
    if missing:
        raise ValueError(f"the saved tracker state is incomplete: it lacks {missing}.")
    keys = state["keys"]
    if not isinstance(keys, list) or set(map(type, keys)) - {str}:
        raise ValueError("the saved tracker state's 'keys' must be a list of strings (the prompt keys).")
    scored = _checked_integers(state, "scored", keys, 1, _INT64_MAX)
    recent = _checked_integers(state, "recent", keys, 1, (1 << (rollout_pool or 0)) - 1)
    wins = _checked_integers(state, "wins", keys, visits_kept, _INT32_MAX)
    trials = _checked_integers(state, "trials", keys, visits_kept, _INT32_MAX)
    failure_rates = state["batch_failure_rates"]
    if not isinstance(failure_rates, list) or set(map(type, failure_rates)) - {int, float} or not all(
        0 <= rate <= 1 for rate in failure_rates
    ):
        raise ValueError(f"the saved batch failure rates {failure_rates!r} must be a list of numbers in [0, 1].")
    expected = (len(keys), visits_kept)
    lined_up = scored.shape == recent.shape == expected[:1] and wins.size == trials.size == np.prod(expected)
    if not lined_up:
        raise ValueError(
            f"the saved tracker state's columns do not line up: {len(keys)} keys, {scored.size} scored counts, "
            f"{recent.size} outcome sets, {wins.size} and {trials.size} visit entries (expected "
            f"{np.prod(expected)}: {visits_kept} per prompt)."
        )
    wins, trials = wins.reshape(expected), trials.reshape(expected)
    checks = [
        (np.flatnonzero((wins > trials).any(axis=1)), "has more successes than rollouts in a visit"),
        (np.flatnonzero(trials.sum(axis=1) > scored), "has fewer rollouts in total than in its latest visits"),
        (np.flatnonzero(trials[:, -1] < 1), "has no scored rollout in its latest visit"),
    ]
    for rows, rule in checks:
        if rows.size:
            row = int(rows[0])
            raise ValueError(
                f"prompt {keys[row]!r} {rule} (scored {int(scored[row])}, visits "
                f"{list(zip(wins[row].tolist(), trials[row].tolist()))}, latest outcomes {int(recent[row])})."
            )
    return keys, scored, recent.astype(np.uint64), wins.astype(np.int32), trials.astype(np.int32), np.asarray(
        failure_rates, dtype=np.float64)


def _checked_groups(state: dict[str, Any], keys: list[str]) -> tuple[list[str], np.ndarray]:
    """The group names and each prompt's group column, or a `ValueError` naming what is wrong."""
    missing = [name for name in ("groups", "group", "lengths") if name not in state]
    if missing:
        raise ValueError(f"the saved tracker state is incomplete: it lacks {missing}.")
    names = state["groups"]
    if not isinstance(names, list) or set(map(type, names)) - {str} or len(set(names)) != len(names):
        raise ValueError("the saved tracker state's 'groups' must be a list of distinct group names (strings).")
    group = _checked_integers(state, "group", keys, 1, len(names))
    if group.size != len(keys):
        raise ValueError(f"the saved tracker state's columns do not line up: {len(keys)} keys and {group.size} "
                         "entries of 'group' (one per prompt); every column holds one entry per key.")
    return names, group


def _checked_lengths(state: dict[str, Any], keys: list[str]) -> np.ndarray:
    """Each prompt's mean completion tokens (NaN for null), or a `ValueError` naming the first bad entry."""
    values = state["lengths"]
    if not isinstance(values, list) or len(values) != len(keys):
        raise ValueError(f"the saved tracker state's 'lengths' must be a list of {len(keys)} numbers or nulls (one "
                         "per key).")
    for index, value in enumerate(values):
        if value is not None and (type(value) not in (int, float) or not 0 <= value <= MAX_EXPECTED_LENGTH):
            raise ValueError(f"entry {index} of 'lengths' (prompt {keys[index]!r}) is {value!r}; it must be a number "
                             f"of tokens from 0 to {MAX_EXPECTED_LENGTH:.0e}, or null.")
    return np.array([np.nan if value is None else float(value) for value in values], dtype=np.float64)


def _values_by_key(keys: Sequence[Hashable], values) -> tuple[list[str], list[np.ndarray]]:
    """The distinct keys in order of first appearance, and the values of each."""
    if values is None:
        raise ValueError("update needs reward_values (each rollout's weighted reward) to keep the reward history.")
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (len(keys),):
        raise ValueError(f"update needs one reward value per key: got {len(keys)} keys and values of shape "
                         f"{values.shape}.")
    names = [str(key) for key in keys]
    order = list(dict.fromkeys(names))
    index = {name: position for position, name in enumerate(order)}
    members = [[] for _ in order]
    for position, name in enumerate(names):
        members[index[name]].append(position)
    return order, [values[rows] for rows in members]


def _checked_moments(state: dict[str, Any], keys: list[str]) -> np.ndarray:
    """Each prompt's reward moments (count, mean, squared deviations), or a `ValueError` naming the first bad one."""
    values = state.get("reward_moments")
    if not isinstance(values, list) or len(values) != 3 * len(keys):
        raise ValueError(f"the saved tracker state's 'reward_moments' must be a list of {3 * len(keys)} numbers "
                         "(three per key: the decayed count, mean and squared deviations of its rewards).")
    for index, value in enumerate(values):
        if type(value) not in (int, float) or not math.isfinite(value) or (index % 3 != 1 and value < 0):
            raise ValueError(f"entry {index} of 'reward_moments' (prompt {keys[index // 3]!r}) is {value!r}; it must "
                             "be a finite number (the count and squared deviations at least 0).")
    return np.asarray(values, dtype=np.float64).reshape(len(keys), 3)
