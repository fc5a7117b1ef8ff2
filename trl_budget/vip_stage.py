"""VIP's stage of the batch (`budget_allocator="vip"`): every batch prompt's success rate predicted by the Gaussian
process (`success_prediction`), unseen prompts included. What a fit sees (`vip_fit`): the tracker's rates of every
prompt seen so far, each fit from the prior ("tracked"); or, as the release's trainer fits, the tracker's rates of
the last batch's prompts only, each fit's posterior mean over the dataset carried as the next fit's prior
("release"; the carried mean is kept with each checkpoint).

The embeddings are made once per dataset, before the first batch: the policy's own (its last hidden layer,
mean-pooled over each prompt's tokens, through `forward_passes.PolicyPasses`: dealt over the processes and gathered,
so every process holds the same rows), or read from a `.npy` file with a row per training dataset row. They are
saved with each checkpoint (`VIP_EMBEDDINGS_NAME`) and restored on resume, so that a resumed run predicts with the
embeddings of the run it continues, not those of its resumed policy.
"""

from __future__ import annotations

import os

import numpy as np

from .dynamic_sampling import training_rows
from .prompts import keys_of
from .success_prediction import SuccessRatePredictor

__all__ = ["VIPStage", "VIP_EMBEDDINGS_NAME", "first_batch_rates", "rates_with_rollouts", "read_embeddings", "uses_vip"]

VIP_EMBEDDINGS_NAME = "budget_vip_embeddings.npz"


def uses_vip(args, allocator=None) -> bool:
    """Whether the run predicts its rates with VIP's stage: VIP's allocator, by name or given as an object."""
    from .allocators.vip import VIPAllocator

    return isinstance(allocator, VIPAllocator) or (allocator is None and args.budget_allocator == "vip")


def first_batch_rates(args, allocator, prompts: int) -> np.ndarray:
    """The rates a first batch is allocated from: NaN (unseen), or under VIP every prompt at its prior's rate."""
    if not uses_vip(args, allocator):
        return np.full(prompts, np.nan)
    return np.full(prompts, 1.0 / (1.0 + np.exp(-args.predictor_options()["prior_mean"])))


def rates_with_rollouts(fresh_rates: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The rates VIP's top-up reads after rounds until mixed: each prompt's fresh rate (its history and the batch's
    rollouts, as every allocator's top-up reads them: `probe.fresh_pass_rates`), and its prediction from before the
    batch where it has neither (every rollout unscored, no history).

    Why not a refit of the predictor with the batch's outcomes: the Gaussian process's posterior mean at an observed
    prompt is that prompt's own observation (`SuccessRatePredictor.predict`), and after the first round every prompt
    of the batch has been observed. A refit would give each of them its observed rate and add its predictions only
    where a prompt has no scored rollout, which is what this gives, without a second fit a batch; and the history is
    weighed against the batch's rollouts as under the other allocators (probe_history_weight, probe_prior_strength).
    """
    return np.where(np.isnan(fresh_rates), predictions, fresh_rates)


def read_embeddings(path: str, rows: int) -> np.ndarray:
    """The `vip_embeddings` file's array, checked: a finite row per training dataset row."""
    embeddings = np.load(path, allow_pickle=False)
    if embeddings.ndim != 2 or embeddings.shape[0] != rows:
        raise ValueError(f"vip_embeddings={path!r} holds an array of shape {embeddings.shape}; it needs a row per "
                         f"training dataset row ({rows}). Recompute it over the training dataset.")
    embeddings = np.asarray(embeddings, dtype=np.float64)
    if not np.isfinite(embeddings).all():
        row = int(np.flatnonzero(~np.isfinite(embeddings).all(axis=1))[0])
        raise ValueError(f"vip_embeddings={path!r} holds NaN or infinity (row {row} first). Recompute the "
                         "embeddings: every training dataset row needs a finite one.")
    return embeddings


class VIPStage:
    """The predictor of a run: its embeddings by prompt key, its options, the last batch's predictions.

    Args:
        predictor_options: `SuccessRatePredictor`'s length_scale, prior_mean, max_observed and carry_mean (True: the
            release's fit, on the last batch with the posterior mean carried).
        source: "policy", or the path of a `.npy` file with a row per training dataset row.
        file_rows: that file's array, already read and checked against the dataset (None: read it when needed).
    """

    def __init__(self, predictor_options: dict, source: str = "policy", file_rows: np.ndarray | None = None):
        self.predictor_options, self.source = dict(predictor_options), source
        self.file_rows = file_rows
        self.keys: list[str] | None = None  # the dataset's distinct prompt keys, in order of first appearance
        self.embeddings: np.ndarray | None = None  # a row per key
        self.last_visit: np.ndarray | None = None  # per key, the batch of its latest rollouts (-1: none yet)
        self.batches = 0  # batches whose visits are recorded
        self.carried_mean: np.ndarray | None = None  # release fit: the posterior mean per key (None: the prior)

    @classmethod
    def for_run(cls, args, train_dataset=None) -> "VIPStage":
        """The run's stage; an embeddings file is read and checked here, when the trainer is built, before any model
        is loaded, and that array is the one the run uses."""
        file_rows = None
        if args.vip_embeddings != "policy" and train_dataset is not None and hasattr(train_dataset, "__len__"):
            file_rows = read_embeddings(args.vip_embeddings, len(train_dataset))
        return cls(args.predictor_options(), args.vip_embeddings, file_rows)

    def prepare(self, trainer) -> None:
        """The dataset's embeddings, once (a restored checkpoint's are kept)."""
        if self.embeddings is not None:
            self.file_rows = None
            return
        rows = list(training_rows(trainer))
        keys = keys_of(rows, trainer.args.prompt_id_column)
        first_row = {}
        for row, key in enumerate(keys):
            first_row.setdefault(key, row)
        if self.source == "policy":
            embeddings = trainer.policy_passes.prompt_embeddings([rows[row]["prompt"] for row in first_row.values()])
        else:
            checked = self.file_rows is not None and len(self.file_rows) == len(rows)
            every_row = self.file_rows if checked else read_embeddings(self.source, len(rows))
            embeddings = every_row[list(first_row.values())]
            self.file_rows = None  # the rows of the dataset's distinct prompts are kept, not the whole file
        self.keys, self.embeddings = list(first_row), embeddings
        self.last_visit = np.full(len(self.keys), -1, dtype=np.int64)

    def predicted_rates(self, batch_keys: list[str], tracker) -> np.ndarray:
        """Each batch prompt's success rate: the Gaussian process fitted to the tracked rates of every seen prompt
        (the most recently visited `max_observed`), or under the release's fit to those of the last batch's prompts
        from the carried mean, predicting the batch."""
        row_of = {key: row for row, key in enumerate(self.keys)}
        missing = [key for key in batch_keys if key not in row_of]
        if missing:
            raise ValueError(f"prompt {missing[0]!r} of the batch is not in the training dataset VIP embedded: VIP "
                             "predicts the training prompts' rates from their embeddings.")
        tracked = tracker.pass_rates(self.keys)
        fitted = ~np.isnan(tracked)
        predictor = SuccessRatePredictor(self.embeddings, **self.predictor_options)
        if predictor.carried_mean is not None:
            # the last batch's prompts: none before the first recorded batch (-1, no visit, is not batch -1)
            fitted &= (self.last_visit >= 0) & (self.last_visit == self.batches - 1)
            if self.carried_mean is not None:
                predictor.start_from(self.carried_mean)
        seen = np.flatnonzero(fitted)
        if seen.size:
            predictor.fit(seen, tracked[seen], last_seen=self.last_visit[seen])
        self.carried_mean = predictor.carried_mean
        batch_rows = np.array([row_of[key] for key in batch_keys], dtype=np.int64)
        return predictor.predict(batch_rows)

    def visited(self, batch_keys: list[str], counts: np.ndarray) -> None:
        """Record the batch's visits (prompts given rollouts), which choose the observations a bounded fit keeps."""
        row_of = {key: row for row, key in enumerate(self.keys)}
        self.last_visit[[row_of[key] for key, count in zip(batch_keys, counts) if count > 0]] = self.batches
        self.batches += 1

    # ---------------------------------------------------------------------------------------- checkpoints

    def save_files(self, checkpoint: str) -> None:
        """The embeddings and their keys, each prompt's last visit and, under the release's fit, the carried mean,
        written atomically into the checkpoint folder."""
        if self.embeddings is None:
            return
        path = os.path.join(checkpoint, VIP_EMBEDDINGS_NAME)
        temporary = f"{path}.tmp-{os.getpid()}.npz"
        carried = {} if self.carried_mean is None else {"carried_mean": self.carried_mean}
        np.savez(temporary, keys=np.asarray(self.keys, dtype=str), embeddings=self.embeddings,
                 last_visit=self.last_visit, batches=np.int64(self.batches), **carried)
        os.replace(temporary, path)

    def load_files(self, checkpoint: str) -> bool:
        """The checkpoint's embeddings, if it has them (False: they are made again before the next batch). A
        checkpoint without a carried mean (a run of the tracked fit) starts the release's fit from the prior."""
        path = os.path.join(checkpoint, VIP_EMBEDDINGS_NAME)
        if not os.path.exists(path):
            return False
        try:
            with np.load(path, allow_pickle=False) as saved:
                keys, embeddings = [str(key) for key in saved["keys"]], np.asarray(saved["embeddings"], np.float64)
                last_visit, batches = np.asarray(saved["last_visit"], np.int64), int(saved["batches"])
                carried = np.asarray(saved["carried_mean"], np.float64) if "carried_mean" in saved.files else None
        except (OSError, ValueError, KeyError) as error:
            raise ValueError(f"{path} cannot be read ({type(error).__name__}: {error}). Resume from an earlier "
                             "checkpoint, or delete the file: the embeddings are then made again from the resumed "
                             "policy.") from error
        if embeddings.ndim != 2 or not embeddings.shape[0] == last_visit.size == len(keys) or not (
                carried is None or carried.shape == last_visit.shape):
            raise ValueError(f"{path} holds {embeddings.shape[0]} embeddings for {len(keys)} prompts. Resume from an "
                             "earlier checkpoint, or delete the file.")
        self.keys, self.embeddings, self.last_visit, self.batches = keys, embeddings, last_visit, batches
        self.carried_mean = carried
        return True
