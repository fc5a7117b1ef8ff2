"""Where a run's budget went: each prompt's pass rate and rollouts at every checkpoint of a training run's output
folder, the shares of solved, hopeless, learning and unseen prompts over time, and the run's logged `budget/*` figures;
as a text table, CSV and JSON files, a PNG, and (`BudgetReportCallback`) W&B tables at each save.

A prompt's status comes from what the run decides by: SPO's p = alpha / (alpha + beta) and its visits where the run
kept SPO's tracker; the prompt's reward history (its spread, and its mean among the run's) where the tracker kept one
for the history advantage baseline, the default rule's; the capability tracker's pass rate otherwise (DEFINITIONS). The prompts counted are those
the run's saved states hold, whether prompt texts are given or not.

Read from the files a run leaves: each `checkpoint-N/budget_tracker_state.json` restored into a `CapabilityTracker`
built with the settings saved in it, SPO's `budget_spo_state.json` where the run used SPO, and the log history of the
newest `trainer_state.json`. Plain numpy and JSON: a report needs no torch, transformers or TRL; the PNG needs
matplotlib (the `demo` extra), the callback transformers and wandb.
"""

from __future__ import annotations

import csv
import functools
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import CHECKPOINT_FOLDER
from .spo import SPO_STATE_NAME
from .checkpoint import TRACKER_STATE_NAME, TRAINER_STATE_NAME, latest_complete_checkpoint
from .prompts import keys_of
from .spo import SPOTracker
from .tracker import CapabilityTracker, prompt_key

__all__ = ["BudgetReportCallback", "DEFINITIONS", "RunReport", "build_report", "checkpoint_rows", "figure_columns",
           "format_report", "plot_report", "prompt_table", "prompt_texts", "read_prompts_file", "report_json",
           "shares_table", "status_history", "write_report"]

logger = logging.getLogger(__name__)

REPORT_FOLDER = "report"
SOLVED, HOPELESS, LEARNING, UNSEEN, STALLED = "solved", "hopeless", "learning", "unseen", "stalled"
STATUSES = (SOLVED, LEARNING, HOPELESS, UNSEEN)
HISTORY_STATUSES = (SOLVED, LEARNING, STALLED, HOPELESS, UNSEEN)  # a run read by its reward history
STATUS_COLOURS = {SOLVED: "tab:green", LEARNING: "tab:blue", STALLED: "tab:orange", HOPELESS: "tab:red",
                  UNSEEN: "tab:gray"}
# SPO's estimate p = alpha / (alpha + beta) at or beyond which a visited prompt reads solved / hopeless: SPO expects at
# most one failure (success) in ten rollouts. From the uninformed prior Beta(0.5, 0.5), four outcomes running get
# there and three do not, at any constant rho from the release's lowest, 0.875, to 1 (tests/test_run_report.py).
SPO_SOLVED_AT, SPO_HOPELESS_AT = 0.9, 0.1
# A reward history's spread is rounding, not rewards that differ, up to this share of its mean (three equal rewards of
# 0.1 leave squared deviations of 6e-34); and a history's mean sits at the run's highest or lowest within this share.
HISTORY_RELATIVE_TOLERANCE = 1e-9
TRACKER, SPO, HISTORY = "tracker", "spo", "history"  # where a report's statuses come from
DEFINITIONS = {
    SOLVED: "the tracker's pass rate is 1: every rollout of the prompt's latest visits (as its pass-rate rule pools "
            "them) succeeded",
    HOPELESS: "the tracker's pass rate is 0: none of them succeeded",
    LEARNING: "the pass rate is strictly between 0 and 1",
    UNSEEN: "no pass rate yet: never drawn by that checkpoint, or fewer than min_rollouts scored rollouts",
    f"spo_{SOLVED}": f"SPO's estimate p = alpha / (alpha + beta) is at least {SPO_SOLVED_AT}: SPO expects at most one "
                     "failure in ten rollouts (from its uninformed prior, four successes running)",
    f"spo_{HOPELESS}": f"SPO's estimate is at most {SPO_HOPELESS_AT}: it expects at most one success in ten rollouts",
    f"spo_{LEARNING}": f"SPO's estimate is strictly between {SPO_HOPELESS_AT} and {SPO_SOLVED_AT}",
    f"spo_{UNSEEN}": "SPO's tracker has not visited the prompt (0 visits), whatever its prior: not drawn by that "
                     "checkpoint, or drawn only in its last batch, whose rows SPO settles when the next batch starts",
    f"history_{LEARNING}": "the prompt's reward history has a spread: its rollouts' rewards differ (the deviation the "
                           "history baseline divides by is above 0, beyond rounding: more than "
                           f"{HISTORY_RELATIVE_TOLERANCE:g} of the history's mean), so the baseline gives it a gradient",
    f"history_{SOLVED}": "no spread, and the history's mean is the highest mean any prompt's history holds at that "
                         "checkpoint (within rounding) and above the lowest: its rewards agree at the top of the run's",
    f"history_{HOPELESS}": "no spread, and the mean is the lowest any prompt's history holds, below the highest: its "
                           "rewards agree at the bottom of the run's",
    f"history_{STALLED}": "no spread, and the mean lies strictly between the lowest and the highest (or every history "
                          "holds the same mean): its rewards agree, neither at the top nor at the bottom of the run's, "
                          "and the history baseline gives it no gradient",
    f"history_{UNSEEN}": "no reward in its history: not drawn by that checkpoint (or only while the tracker kept no "
                         "history)",
    "statuses_from": "'spo' where the run kept SPO's tracker (a budget_spo_state.json in its checkpoints: SPO's "
                     "allocator, advantage baseline or prompt sampling), whose estimates decide the prompts drawn and "
                     "their advantages: the spo_* statuses; 'history' where the newest checkpoint's tracker kept a "
                     "reward history (advantage_baseline 'history', the default rule's), which decides the "
                     "advantages: the history_* statuses; 'tracker' otherwise: the capability tracker's pass rate",
    "history_mean": "the mean of the prompt's reward history (its weighted rewards, each earlier visit weighed "
                    "1 - 1/reward_history_window times the next), as the tracker saved it",
    "history_spread": "the history's deviation, sqrt(squared deviations / (weight - 1)), the one the history baseline "
                      "divides by (0 for a history of at most one reward's weight)",
    "rollouts": "the prompt's scored rollouts since the run began, every one generated (trained or not); "
                "unscorable ones are not counted",
    "shares": "over the prompts the run's saved states hold: any checkpoint's tracker (every prompt drawn by then) or "
              "SPO's state (every training prompt, where its priors came from offline scores); the same with or "
              "without --prompts, which names prompts and adds none (prompts_file_unmatched counts those of the file "
              "that no state holds)",
    "spo_estimate": "SPO's alpha / (alpha + beta) for prompts in SPO's saved state",
    "spo_visits": "the rows SPO's tracker has settled into the prompt's estimate (one a scored rollout)",
}
ZERO_STD_GROUPS = "budget/zero_std_groups"
LOGGED_IN_TABLE = ("budget/effective_ratio", ZERO_STD_GROUPS)  # the shares table's logged columns
LOGGED_IN_FIGURE = ("budget/effective_ratio", ZERO_STD_GROUPS, "budget/prompts_with_gradient",
                    "budget/unseen_prompts")
_DIGEST = re.compile(r"[0-9a-f]{32}")  # prompt_key's blake2b digest (16 bytes) as hex
MATPLOTLIB_MISSING = ("the report's figure needs matplotlib, which the 'demo' extra installs: "
                      "pip install 'trl_budget[demo]' (or pass --no-plot to write the tables alone).")


# --------------------------------------------------------------------------------------------- reading a run


@dataclass
class RunReport:
    """A run's prompts over its checkpoints. Every array is checkpoints x prompts, in `steps` and `keys` order;
    `texts` maps a key to its prompt's text where known; `logs` holds the logged `budget/*` entries with their step."""

    output_dir: str
    steps: list[int]
    keys: list[str]
    pass_rates: np.ndarray  # NaN: unseen
    wins: np.ndarray  # the successes and rollouts the pass rate is computed from
    trials: np.ndarray
    rollouts: np.ndarray  # scored rollouts since the run began
    spo_estimates: np.ndarray | None = None  # NaN where SPO's state lacks the prompt; None: no SPO state at all
    spo_visits: np.ndarray | None = None
    history: np.ndarray | None = None  # checkpoints x prompts x (weight, mean, m2); None: the tracker kept none
    texts: dict[str, str] = field(default_factory=dict)
    logs: list[dict[str, float]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # checkpoint folders without a tracker state

    @property
    def statuses_from(self) -> str:
        """`SPO` where the run kept SPO's tracker, `HISTORY` where its tracker kept a reward history, `TRACKER`
        otherwise (DEFINITIONS["statuses_from"])."""
        if self.spo_estimates is not None:
            return SPO
        return TRACKER if self.history is None else HISTORY

    @property
    def status_names(self) -> tuple[str, ...]:
        """The statuses a prompt of this run can have, in the tables' order."""
        return HISTORY_STATUSES if self.statuses_from == HISTORY else STATUSES

    @functools.cached_property
    def statuses(self) -> np.ndarray:
        """Each prompt's status at each checkpoint, from the estimate its run decides by (DEFINITIONS)."""
        if self.statuses_from == SPO:
            return _statuses(self.spo_estimates, self.spo_visits == 0, SPO_SOLVED_AT, SPO_HOPELESS_AT)
        if self.statuses_from == HISTORY:
            return _history_statuses(self.history_means, self.history_spreads)
        return _statuses(self.pass_rates, np.isnan(self.pass_rates), 1.0, 0.0)

    @property
    def history_means(self) -> np.ndarray:
        """Each prompt's reward history's mean (NaN: no reward in it)."""
        weight, mean = self.history[..., 0], self.history[..., 1]
        return np.where(weight > 0, mean, np.nan)

    @property
    def history_spreads(self) -> np.ndarray:
        """Each history's deviation as the history baseline takes it, 0 for at most one reward's weight (NaN: no
        reward in it)."""
        weight, m2 = self.history[..., 0], self.history[..., 2]
        spread = np.sqrt(np.divide(m2, weight - 1, out=np.zeros_like(m2), where=weight > 1))
        return np.where(weight > 0, spread, np.nan)

    @property
    def estimates(self) -> np.ndarray:
        """The estimates the statuses come from: SPO's p, the reward history's mean, or the tracker's pass rate (NaN:
        none)."""
        if self.statuses_from == SPO:
            return self.spo_estimates
        return self.history_means if self.statuses_from == HISTORY else self.pass_rates

    @property
    def unmatched_texts(self) -> list[str]:
        """Keys of the given texts that no saved state holds: not among the report's prompts."""
        known = set(self.keys)
        return [key for key in self.texts if key not in known]

    def name(self, key: str) -> str:
        return self.texts.get(key, key)

    @property
    def keys_are_digests(self) -> bool:
        return any(_DIGEST.fullmatch(key) and key not in self.texts for key in self.keys)


def _statuses(estimates: np.ndarray, unseen: np.ndarray, solved_at: float, hopeless_at: float) -> np.ndarray:
    statuses = np.full(estimates.shape, LEARNING, dtype=object)
    statuses[estimates >= solved_at], statuses[estimates <= hopeless_at] = SOLVED, HOPELESS
    statuses[unseen] = UNSEEN
    return statuses


def _history_statuses(means: np.ndarray, spreads: np.ndarray) -> np.ndarray:
    """Statuses from reward histories (checkpoints x prompts): learning where the rewards differ, else solved, hopeless
    or stalled by the mean's place between the lowest and highest mean of the checkpoint's histories."""
    seen = ~np.isnan(means)
    top = np.where(seen, means, -np.inf).max(axis=1, keepdims=True)
    bottom = np.where(seen, means, np.inf).min(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):  # a checkpoint without histories: infinite bounds, every prompt unseen
        at_top = np.isclose(means, top, rtol=HISTORY_RELATIVE_TOLERANCE, atol=0)
        at_bottom = np.isclose(means, bottom, rtol=HISTORY_RELATIVE_TOLERANCE, atol=0)
        differ = spreads > HISTORY_RELATIVE_TOLERANCE * np.abs(means)
    statuses = np.full(means.shape, STALLED, dtype=object)
    statuses[at_top & ~at_bottom], statuses[at_bottom & ~at_top] = SOLVED, HOPELESS
    statuses[differ], statuses[~seen] = LEARNING, UNSEEN
    return statuses


def build_report(output_dir: str | os.PathLike, texts: dict[str, str] | None = None) -> RunReport:
    """The report of the run in `output_dir`, from every `checkpoint-N` holding a tracker state.

    Args:
        texts: prompt texts by tracker key (`read_prompts_file`), to name the prompts; they add none to the report
            (those that no saved state holds are `unmatched_texts`), so its counts are the same without them.

    Raises:
        ValueError: the folder is missing, holds no checkpoint with a tracker state, or a state file is unreadable;
            the message names the file and what to do.
    """
    output_dir = os.fspath(output_dir)
    if not os.path.isdir(output_dir):
        raise ValueError(f"{output_dir} is not a folder: name the output_dir of a training run (the folder holding "
                         "its checkpoint-N folders).")
    folders = _checkpoint_folders(output_dir)
    with_state = [(step, folder) for step, folder in folders
                  if os.path.exists(os.path.join(folder, TRACKER_STATE_NAME))]
    if not with_state:
        found = f"its checkpoints ({', '.join(os.path.basename(f) for _, f in folders)}) lack" if folders else (
            "it has no checkpoint-N folder, hence no")
        raise ValueError(f"{output_dir} holds no tracker state to report on: {found} {TRACKER_STATE_NAME}. The "
                         "report reads the state BudgetGRPOTrainer saves with each checkpoint (save_strategy 'steps' "
                         "or 'epoch', not 'no'): run it on the output_dir of such a run once it has saved one.")
    trackers = [_read_tracker(os.path.join(folder, TRACKER_STATE_NAME)) for _, folder in with_state]
    spo = [_read_spo(os.path.join(folder, SPO_STATE_NAME)) for _, folder in with_state]
    texts = dict(texts or {})
    keys = list(dict.fromkeys([key for tracked, _, _ in trackers for key in tracked]
                              + [key for state in spo if state is not None for key in state.alpha]))
    return RunReport(output_dir, [step for step, _ in with_state], keys, *_tracker_columns(trackers, keys),
                     *_spo_columns(spo, keys), history=_history_columns(trackers, keys), texts=texts,
                     logs=_budget_logs(output_dir),
                     skipped=[folder for step, folder in folders if (step, folder) not in with_state])


def _checkpoint_folders(output_dir: str) -> list[tuple[int, str]]:
    """The `checkpoint-N` folders of `output_dir`, by step."""
    names = sorted((int(match.group(1)), name) for name in os.listdir(output_dir)
                   if (match := CHECKPOINT_FOLDER.fullmatch(name)))
    return [(step, os.path.join(output_dir, name)) for step, name in names
            if os.path.isdir(os.path.join(output_dir, name))]


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"{path} cannot be read as {what} ({type(error).__name__}: {error}): it was cut short or "
                         "edited. Restore it from a copy, or move that checkpoint out of the folder to report on the "
                         "others.") from error


def _read_tracker(path: str) -> tuple[list[str], CapabilityTracker, np.ndarray]:
    """The state's keys, the tracker restored from it (built with the settings saved in it), and its scored rollouts
    per key; the state is checked by `load_state_dict` before any of it is read."""
    state = _read_json(path, "a tracker state")
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a tracker state (a JSON object).")
    try:
        # Missing settings take the defaults: load_state_dict then names what the state lacks or its version.
        tracker = CapabilityTracker(**{name: state[name] for name in CapabilityTracker().settings() if name in state})
        tracker.load_state_dict(state)
    except ValueError as error:
        raise ValueError(f"{path} is not a tracker state this trl_budget can read: {error}") from error
    return state["keys"], tracker, np.asarray(state["scored"], dtype=np.int64)


def _read_spo(path: str) -> SPOTracker | None:
    """SPO's tracker as the checkpoint saved it (SPOStage's file: the tracker, and the last batch's rows that wait to
    be settled into it when the next batch starts), built with its saved rho, clip_lower and rows; None without the file."""
    if not os.path.exists(path):
        return None
    state = _read_json(path, "SPO's state")
    saved = state.get("tracker") if isinstance(state, dict) else None
    try:
        if not isinstance(saved, dict):
            raise ValueError("it holds no 'tracker' object")
        tracker = SPOTracker(rho=saved.get("rho"), clip_lower=saved.get("clip_lower"), rows=saved.get("rows", "last"))
        tracker.load_state_dict(saved)
    except ValueError as error:
        raise ValueError(f"{path} is not an SPO state this trl_budget can read: {error}") from error
    return tracker


def _tracker_columns(trackers, keys: list[str]) -> tuple[np.ndarray, ...]:
    """Pass rates, their successes and rollouts, and the scored rollouts of `keys` at each checkpoint."""
    shape = (len(trackers), len(keys))
    rates, wins, trials = np.full(shape, np.nan), np.zeros(shape), np.zeros(shape)
    rollouts = np.zeros(shape, dtype=np.int64)
    column = {key: index for index, key in enumerate(keys)}
    for row, (tracked, tracker, scored) in enumerate(trackers):
        rates[row] = tracker.pass_rates(keys)
        wins[row], trials[row] = tracker.evidence(keys)
        rollouts[row, [column[key] for key in tracked]] = scored
    return rates, wins, trials, rollouts


def _history_columns(trackers, keys: list[str]) -> np.ndarray | None:
    """The reward history (weight, mean, squared deviations) of `keys` at each checkpoint, zeros where a tracker
    holds none; None where the newest checkpoint's tracker kept no history (its run did not use the history
    baseline)."""
    if trackers[-1][1].reward_history_window is None:
        return None
    return np.stack([np.stack(tracker.reward_moments(keys), axis=1) for _, tracker, _ in trackers])


def _spo_columns(states: list[SPOTracker | None], keys: list[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """SPO's estimate and visits of `keys` at each checkpoint (NaN and 0 where its state lacks the key)."""
    if all(state is None for state in states):
        return None, None
    estimates, visits = np.full((len(states), len(keys)), np.nan), np.zeros((len(states), len(keys)), dtype=np.int64)
    for row, state in enumerate(states):
        known = [index for index, key in enumerate(keys) if state is not None and key in state.alpha]
        if known:
            estimates[row, known] = state.p_hats([keys[index] for index in known])
            visits[row, known] = [state.visits.get(keys[index], 0) for index in known]
    return estimates, visits


def _budget_logs(output_dir: str) -> list[dict[str, float]]:
    """The `budget/*` entries of the run's log history, each with its step: from the newest complete checkpoint's
    `trainer_state.json`, or the output folder's own where it goes further (`trainer.save_state()`)."""
    newest, _ = latest_complete_checkpoint(output_dir)
    candidates = [os.path.join(folder, TRAINER_STATE_NAME) for folder in (newest, output_dir) if folder is not None]
    states = [state for path in candidates if os.path.exists(path)
              if isinstance(state := _read_json(path, "a trainer state"), dict)]
    if not states:
        return []
    history = max(states, key=lambda state: state.get("global_step", 0)).get("log_history", [])
    # transformers writes a NaN as JSON's NaN, which the report's JSON refuses: None (no value) stands for it.
    return [{"step": entry["step"], **{name: _number(value) for name, value in entry.items()
                                       if name.startswith("budget/")}}
            for entry in history if any(name.startswith("budget/") for name in entry)]


# ---------------------------------------------------------------------------------------------- prompt texts


def read_prompts_file(path: str | os.PathLike) -> dict[str, str]:
    """Prompt texts by tracker key, from a JSON list or a JSONL file. Each entry is a prompt (a string, or a
    conversation: a list of messages) or a dataset row holding one under `prompt` (its images, if any, are part of the
    key, as the trainer keys it). Runs keyed by `prompt_id_column` show their ids and need no file."""
    path = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"--prompts {path} cannot be read ({error}); name a JSON or JSONL file of prompts.") from error
    try:
        entries = json.loads(text)
        entries = entries if isinstance(entries, list) else [entries]
    except json.JSONDecodeError:
        entries = [_jsonl_entry(path, number, line) for number, line in enumerate(text.splitlines(), start=1)
                   if line.strip()]
    return prompt_texts(entries, f"--prompts {path}")


def prompt_texts(entries: Iterable[Any], source: str) -> dict[str, str]:
    """Each entry's text by its tracker key: a prompt (a string or a list of messages), or a row holding one under
    `prompt`. `source` names where the entries come from, in errors."""
    return {_key_of(source, index, entry): _shown(entry["prompt"] if isinstance(entry, dict) else entry)
            for index, entry in enumerate(entries)}


def _jsonl_entry(path: str, number: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"--prompts {path}: line {number} is not JSON ({error}); give a JSON list of prompts, or "
                         "one prompt (or dataset row) per line.") from error


def _key_of(source: str, index: int, entry: Any) -> str:
    if isinstance(entry, dict):
        if "prompt" not in entry:
            raise ValueError(f"{source}: entry {index} is an object without a 'prompt' (its fields: {sorted(entry)}); "
                             "give each prompt, or rows with their prompt under 'prompt'.")
        return keys_of([entry], None)[0]
    if not isinstance(entry, (str, list)):
        raise ValueError(f"{source}: entry {index} is {entry!r}; a prompt is a string or a list of messages.")
    return prompt_key(entry)


def _shown(prompt: Any) -> str:
    """A prompt as one line of text: the string, or a conversation's last user message (else its JSON)."""
    if isinstance(prompt, str):
        return " ".join(prompt.split())
    users = [message.get("content") for message in prompt if isinstance(message, dict)
             and message.get("role") == "user"] if isinstance(prompt, list) else []
    if users and isinstance(users[-1], str):
        return " ".join(users[-1].split())
    return json.dumps(prompt, ensure_ascii=False, default=str)


# ----------------------------------------------------------------------------------------------------- tables


def shares_table(report: RunReport) -> tuple[list[str], list[list]]:
    """One row per checkpoint: the prompts of each status (count and share), the rollouts scored by then and since the
    previous checkpoint, and the mean of each logged figure of `LOGGED_IN_TABLE` since the previous checkpoint."""
    logs = meaningful_logs(report.logs)
    logged = [name for name in LOGGED_IN_TABLE if any(name in entry for entry in logs)]
    columns = ["step", "prompts", *[f"{status}{suffix}" for status in report.status_names
                                    for suffix in ("", "_share")], "rollouts", "new_rollouts", *logged]
    statuses, total = report.statuses, len(report.keys)
    rows, previous_step, previous_rollouts = [], -1, 0
    for index, step in enumerate(report.steps):
        counts = [int(np.sum(statuses[index] == status)) for status in report.status_names]
        rollouts = int(report.rollouts[index].sum())
        means = [_mean_logged(logs, name, previous_step, step) for name in logged]
        rows.append([step, total, *[value for count in counts for value in (count, count / total if total else 0.0)],
                     rollouts, rollouts - previous_rollouts, *means])
        previous_step, previous_rollouts = step, rollouts
    return columns, rows


def meaningful_logs(logs: list[dict]) -> list[dict]:
    """The logged entries less the figures they cannot mean: `budget/zero_std_groups` where every trained group was
    one rollout (`budget/rollouts_max` 1, as under SPO), which agrees with itself and so reads 1, "no gradient",
    beside rollouts that all have one (`budget/effective_ratio`)."""
    return [{name: value for name, value in entry.items()
             if not (name == ZERO_STD_GROUPS and entry.get("budget/rollouts_max") == 1)} for entry in logs]


def _mean_logged(logs: list[dict], name: str, after: int, until: int) -> float | None:
    values = [entry[name] for entry in logs if entry.get(name) is not None and after < entry["step"] <= until]
    return float(np.mean(values)) if values else None


def prompt_table(report: RunReport) -> tuple[list[str], list[list]]:
    """One row per prompt at the latest checkpoint, by rollouts (most first): its figures (`figure_columns`), the
    share of the run's rollouts it got, and the checkpoints where its status changed."""
    latest, spent = len(report.steps) - 1, report.rollouts[-1].sum()
    rows = [[report.keys[column], report.texts.get(report.keys[column], ""), *_figures(report, latest, column),
             float(report.rollouts[latest, column] / spent) if spent else 0.0,
             status_history(report.steps, report.statuses[:, column])]
            for column in np.argsort(-report.rollouts[latest], kind="stable")]
    return ["key", "prompt", *figure_columns(report), "rollout_share", "status_history"], rows


def checkpoint_rows(report: RunReport) -> tuple[list[str], list[list]]:
    """Every prompt at every checkpoint, with its figures (`figure_columns`): the long form of the report."""
    rows = [[step, key, report.texts.get(key, ""), *_figures(report, index, column)]
            for index, step in enumerate(report.steps) for column, key in enumerate(report.keys)]
    return ["step", "key", "prompt", *figure_columns(report)], rows


def figure_columns(report: RunReport) -> list[str]:
    """A prompt's figures at a checkpoint: its status, pass rate and the successes and rollouts that rate pools, its
    scored rollouts since the start, SPO's estimate and visits where the run used SPO, and its reward history's mean
    and spread where the tracker kept one."""
    spo = ["spo_estimate", "spo_visits"] if report.spo_estimates is not None else []
    history = ["history_mean", "history_spread"] if report.history is not None else []
    return ["status", "pass_rate", "wins", "trials", "rollouts", *spo, *history]


def _figures(report: RunReport, index: int, column: int) -> list:
    """The `figure_columns` of prompt `column` at checkpoint `index`; None where there is no estimate."""
    figures = [report.statuses[index, column], _number(report.pass_rates[index, column]),
               int(report.wins[index, column]), int(report.trials[index, column]), int(report.rollouts[index, column])]
    if report.spo_estimates is not None:
        figures += [_number(report.spo_estimates[index, column]), int(report.spo_visits[index, column])]
    if report.history is not None:
        figures += [_number(report.history_means[index, column]), _number(report.history_spreads[index, column])]
    return figures


def _number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def status_history(steps: Sequence[int], statuses: Sequence[str], most: int = 4) -> str:
    """Where a prompt's status changed, as `status@step` from its first checkpoint (the latest `most` changes)."""
    changes = [f"{status}@{step}" for index, (step, status) in enumerate(zip(steps, statuses))
               if index == 0 or status != statuses[index - 1]]
    return " > ".join(["...", *changes[-most:]] if len(changes) > most else changes)


# -------------------------------------------------------------------------------------------------- the text


def format_report(report: RunReport, top: int | None = 20) -> str:
    """The report as text: the definitions, the shares over checkpoints, the `top` prompts by rollouts (None: all)."""
    share_columns, share_rows = shares_table(report)
    prompt_columns, prompt_rows = prompt_table(report)
    shown_rows = prompt_rows if top is None else prompt_rows[:top]
    spent = int(report.rollouts[-1].sum())
    lines = [f"Run {report.output_dir}: {len(report.steps)} checkpoint(s) (steps "
             f"{', '.join(map(str, report.steps))}), {len(report.keys)} prompts, {spent} rollouts scored.",
             STATUS_LINES[report.statuses_from] + " Shares are over the prompts the run's saved states hold.", "",
             "Prompts by status over checkpoints:"]
    lines += _aligned(_share_header(share_columns), [_share_cells(share_columns, row) for row in share_rows])
    lines += ["", f"Prompts by rollouts at step {report.steps[-1]} ({len(shown_rows)} of {len(prompt_rows)}):"]
    # The estimate the status comes from stands before it (SPO's p and visits, the reward history's mean and spread,
    # or the tracker's pass rate), the pass rate last where it decides nothing.
    lines += _aligned(PROMPT_HEADERS[report.statuses_from],
                      [_prompt_cells(dict(zip(prompt_columns, row)), report.statuses_from) for row in shown_rows])
    if report.keys_are_digests:
        lines += ["", "Prompts are shown by their tracker key, a digest of the prompt's content (trl_budget's "
                  "prompt_key): the run's folder holds no prompt texts. Pass --prompts FILE (a JSON list or JSONL of "
                  "the training prompts or rows) to show them."]
    if report.unmatched_texts:
        lines += ["", f"{len(report.unmatched_texts)} of the {len(report.texts)} prompts given for their texts are in "
                  "no saved state, so not among the prompts counted: never drawn by the latest checkpoint, or not "
                  "this run's prompts."]
    if report.skipped:
        lines += ["", f"Skipped (no {TRACKER_STATE_NAME}): {', '.join(report.skipped)}."]
    return "\n".join(lines)


STATUS_LINES = {
    TRACKER: "A prompt's status at a checkpoint, from the tracker's pass rate (its saved pass-rate rule): solved = 1, "
             "hopeless = 0, learning = in between, unseen = no estimate yet.",
    SPO: f"A prompt's status at a checkpoint, from SPO's estimate p = alpha / (alpha + beta) as the checkpoint saved "
         f"it (before its last batch): solved p >= {SPO_SOLVED_AT}, hopeless p <= {SPO_HOPELESS_AT}, learning in "
         "between, unseen = not visited by SPO yet.",
    HISTORY: "A prompt's status at a checkpoint, from the prompt's reward history (the history advantage baseline's): "
             "learning = its rewards differ (a spread), else by its mean among the means of the checkpoint's "
             "histories: solved = the highest, hopeless = the lowest, stalled = in between; unseen = no reward yet.",
}
PROMPT_HEADERS = {
    TRACKER: ["prompt", "rollouts", "share", "pass rate", "status", "status history"],
    SPO: ["prompt", "rollouts", "share", "spo p", "spo visits", "status", "status history", "pass rate"],
    HISTORY: ["prompt", "rollouts", "share", "history mean", "spread", "status", "status history", "pass rate"],
}


def _share_header(columns: list[str]) -> list[str]:
    return [name.removeprefix("budget/") for name in columns if not name.endswith("_share") and name != "prompts"]


def _share_cells(columns: list[str], row: list) -> list[str]:
    values = dict(zip(columns, row))
    cells = []
    for name in columns:
        if name in HISTORY_STATUSES:
            cells.append(f"{values[name]} ({values[name + '_share']:.0%})")
        elif name.startswith("budget/"):
            cells.append("-" if values[name] is None else f"{values[name]:.3f}")
        elif not name.endswith("_share") and name != "prompts":
            cells.append(str(values[name]))
    return cells


def _prompt_cells(row: dict, statuses_from: str) -> list[str]:
    rate = "-" if row["pass_rate"] is None else f"{row['pass_rate']:.2f} ({row['wins']}/{row['trials']})"
    shown = [_clipped(row["prompt"] or row["key"]), str(row["rollouts"]), f"{row['rollout_share']:.1%}"]
    status = [row["status"], row["status_history"]]
    if statuses_from == SPO:
        spo = ["-" if row["spo_estimate"] is None else f"{row['spo_estimate']:.2f}", str(row["spo_visits"])]
        return [*shown, *spo, *status, rate]
    if statuses_from == HISTORY:
        history = ["-" if row[name] is None else f"{row[name]:.3g}" for name in ("history_mean", "history_spread")]
        return [*shown, *history, *status, rate]
    return [*shown, rate, *status]


def _clipped(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _aligned(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]


# -------------------------------------------------------------------------------------------------- the files


def write_report(report: RunReport, folder: str | os.PathLike | None = None, plot: bool = True) -> dict[str, Path]:
    """Write the report's files into `folder` (default: the run's `report` subfolder): `shares.csv`, `prompts.csv`
    (the latest checkpoint, every prompt), `prompts_by_checkpoint.csv` (every prompt at every checkpoint),
    `report.json` (all of it, with the definitions and the logged `budget/*` entries) and, with `plot`,
    `report.png`. Returns their paths by name."""
    folder = Path(folder if folder is not None else Path(report.output_dir) / REPORT_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / name for name in ("shares.csv", "prompts.csv", "prompts_by_checkpoint.csv",
                                              "report.json")}
    for name, table in (("shares.csv", shares_table), ("prompts.csv", prompt_table),
                        ("prompts_by_checkpoint.csv", checkpoint_rows)):
        _write_csv(paths[name], *table(report))
    paths["report.json"].write_text(json.dumps(report_json(report), indent=1, allow_nan=False))
    if plot:
        paths["report.png"] = plot_report(report, folder / "report.png")
    return paths


def _write_csv(path: Path, columns: list[str], rows: Iterable[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(["" if value is None else value for value in row] for row in rows)


def report_json(report: RunReport) -> dict[str, Any]:
    """The whole report as JSON: per prompt, each figure as a list over `steps` (null: no value)."""
    statuses = report.statuses
    prompts = []
    for column, key in enumerate(report.keys):
        entry = {"key": key, "prompt": report.texts.get(key), "status": statuses[:, column].tolist(),
                 "pass_rate": [_number(rate) for rate in report.pass_rates[:, column]],
                 "wins": report.wins[:, column].astype(int).tolist(),
                 "trials": report.trials[:, column].astype(int).tolist(),
                 "rollouts": report.rollouts[:, column].tolist()}
        if report.spo_estimates is not None:
            entry.update(spo_estimate=[_number(estimate) for estimate in report.spo_estimates[:, column]],
                         spo_visits=report.spo_visits[:, column].tolist())
        if report.history is not None:
            entry.update(history_mean=[_number(mean) for mean in report.history_means[:, column]],
                         history_spread=[_number(spread) for spread in report.history_spreads[:, column]])
        prompts.append(entry)
    share_columns, share_rows = shares_table(report)
    return {"output_dir": report.output_dir, "definitions": DEFINITIONS, "statuses_from": report.statuses_from,
            "steps": report.steps, "shares": [dict(zip(share_columns, row)) for row in share_rows],
            "prompts": prompts, "prompts_file_unmatched": len(report.unmatched_texts), "logs": report.logs,
            "skipped": report.skipped}


def _matplotlib():
    """matplotlib's Figure (drawn without pyplot, so no backend is chosen for the user), a locator of whole steps and
    the pass rates' colour map, unseen in grey; or an ImportError naming the extra that installs matplotlib."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as error:
        raise ImportError(MATPLOTLIB_MISSING) from error
    return Figure, MaxNLocator, matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")


ESTIMATE_NAMES = {TRACKER: "pass rate", SPO: "SPO's estimate p", HISTORY: "reward history's mean"}


def _colour_range(report: RunReport) -> tuple[float, float]:
    """The heat map's range: [0, 1] for rates and SPO's p; the reward histories' own range, on their scale."""
    if report.statuses_from != HISTORY or np.isnan(report.history_means).all():
        return 0.0, 1.0
    low, high = float(np.nanmin(report.history_means)), float(np.nanmax(report.history_means))
    return (low - 0.5, high + 0.5) if low == high else (low, high)


def plot_report(report: RunReport, path: str | os.PathLike, top: int = 30) -> Path:
    """PNG: the status shares over checkpoints, the rollouts of the 10 prompts that got the most, the estimates the
    statuses come from (pass rates, or SPO's p) of the `top` prompts by rollouts at every checkpoint, and the logged
    `budget/*` shares over steps."""
    Figure, MaxNLocator, colormap = _matplotlib()
    figure = Figure(figsize=(14, 9), layout="constrained")
    (shares_axis, rollouts_axis), (rates_axis, logs_axis) = figure.subplots(2, 2)
    columns, rows = shares_table(report)
    for status in report.status_names:
        shares_axis.plot(report.steps, [row[columns.index(f"{status}_share")] for row in rows], marker="o",
                         color=STATUS_COLOURS[status], label=status)
    shares_axis.set(xlabel="step (checkpoint)", ylabel="share of prompts", ylim=(-0.02, 1.02),
                    title=f"Prompts {', '.join(report.status_names)}")
    order = np.argsort(-report.rollouts[-1], kind="stable")
    for column in order[:10]:
        rollouts_axis.plot(report.steps, report.rollouts[:, column], marker="o",
                           label=_clipped(report.name(report.keys[column]), 24))
    rollouts_axis.set(xlabel="step (checkpoint)", ylabel="rollouts scored since the start",
                      title="Where the rollouts went: the 10 prompts that got the most")
    shown = order[:top]
    low, high = _colour_range(report)
    image = rates_axis.imshow(np.ma.masked_invalid(report.estimates[:, shown].T), aspect="auto", vmin=low, vmax=high,
                              cmap=colormap, interpolation="nearest")
    rates_axis.set_yticks(range(len(shown)), [_clipped(report.name(report.keys[c]), 24) for c in shown],
                          fontsize="x-small")
    ticks = np.unique(np.linspace(0, len(report.steps) - 1, min(len(report.steps), 10)).round().astype(int))
    rates_axis.set_xticks(ticks, [str(report.steps[t]) for t in ticks])
    estimate = ESTIMATE_NAMES[report.statuses_from]
    rates_axis.set(xlabel="step (checkpoint)", title=f"{estimate[0].upper() + estimate[1:]} of the {len(shown)} prompts with the "
                   "most rollouts (grey: none)")
    figure.colorbar(image, ax=rates_axis, label=estimate)
    for name in LOGGED_IN_FIGURE:
        points = [(entry["step"], entry[name]) for entry in meaningful_logs(report.logs) if name in entry]
        if points:
            logs_axis.plot(*zip(*points), marker=".", label=name)
    logs_axis.set(xlabel="step", ylabel="share", title="Logged budget/* figures (trainer_state.json)")
    if not report.logs:
        logs_axis.text(0.5, 0.5, "no budget/* entries in the log history", ha="center", va="center",
                       transform=logs_axis.transAxes)
    for axis in (shares_axis, rollouts_axis, logs_axis):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize="x-small")
        axis.grid(alpha=0.3)
    figure.suptitle(f"Where the budget went: {report.output_dir}")
    path = Path(path)
    figure.savefig(path, dpi=100)
    return path


# ----------------------------------------------------------------------------------------- W&B during training


@functools.cache
def _callback_class() -> type:
    from transformers import TrainerCallback

    class BudgetReportCallback(TrainerCallback):
        """At each checkpoint save, logs the report of the run so far to W&B, on the main process, when a W&B run is
        active (`wandb.run`): `budget_report/prompts` (`prompt_table`: each prompt's rollouts, pass rate, status at
        the checkpoint just saved) and `budget_report/shares` (`shares_table`: the statuses over checkpoints).
        `trl-budget grpo` adds it where W&B is on; in Python, add it yourself:
        `BudgetGRPOTrainer(..., callbacks=[BudgetReportCallback()])`.

        Args:
            prompts: the training prompts (or rows holding them under `prompt`), to show texts in place of digests.
        """

        def __init__(self, prompts: Sequence[Any] | None = None):
            self.texts = prompt_texts(prompts if prompts is not None else [], "BudgetReportCallback(prompts=...)")

        def on_save(self, args, state, control, **kwargs):
            if not state.is_world_process_zero:
                return
            try:
                import wandb
            except ImportError:
                return
            if wandb.run is None:
                return
            try:
                report = build_report(args.output_dir, self.texts)
            except ValueError as error:  # a report is no reason to stop training: say why it is missing
                logger.warning(f"BudgetReportCallback logged no report at step {state.global_step}: {error}")
                return
            tables = {name: wandb.Table(columns=columns, data=rows) for name, (columns, rows) in
                      (("budget_report/prompts", prompt_table(report)), ("budget_report/shares", shares_table(report)))}
            wandb.log({**tables, "train/global_step": state.global_step})

    return BudgetReportCallback


def __getattr__(name: str):
    # The callback's base class is transformers': built on first use, so that the report itself loads no framework.
    if name == "BudgetReportCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
