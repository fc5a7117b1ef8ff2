"""DAPO's dynamic sampling (arXiv 2503.14476, §3.2) as verl's DAPO recipe releases it, on the rounds mechanism.

Where rounds until mixed add rollouts to the *same* prompts, dynamic sampling draws *new* ones: every round is a
generation batch of fresh prompts from the training data, `num_generations` rollouts each. A prompt whose rollouts all
agree (on the reward, or on success) is dropped; rounds go on until the kept prompts fill the training batch, whose
first prompts in the data's order are trained and the rest generated for nothing, as verl's `batch[:traj_bsz]`. When
`max_gen_batches` generation batches hold too few, training stops with an error, as verl's recipe raises.

The prompts come from `PromptStream`: the training data in the order of TRL's own sampler (the same seed, the same
permutation per pass), generation batch after generation batch, a fresh permutation each pass. A prompt comes at most
once a pass; a training batch whose generation batches span the end of a pass can hold it twice, one group from each
pass, as verl's recipe (whose batch under construction outlives the epoch) trains it. Its position is saved with the
checkpoint, so a resumed run draws what an uninterrupted one would; with another generation batch size (oversample or
num_generations changed on resume) it goes on from the same place in the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from transformers.utils import logging
from trl.trainer.utils import RepeatSampler

from .prompts import keys_of
from .rounds import GeneratedRounds

__all__ = ["DynamicSampling", "PromptStream", "STREAM_STATE_NAME", "refuse_short_dataset",
           "saved_position", "varied_rewards"]

STREAM_STATE_NAME = "budget_prompt_stream.json"
# A training batch still short after this many generation batches is warned about: verl's DAPO recipe sets its cap
# there, NeMo RL's default and dynamic_sampling_max_gen_batches's stop there, past it fewer than one prompt in
# ten (with oversample 1) carries a gradient, and without a cap nothing else would tell of a run that draws on and on.
GEN_BATCHES_BEFORE_WARNING = 10

logger = logging.get_logger(__name__)


def refuse_short_dataset(rows: int, prompts_per_batch: int) -> None:
    """A dataset smaller than one generation batch would give the stream empty batches: refuse it."""
    if rows < prompts_per_batch:
        raise ValueError(
            f"dynamic_sampling draws generation batches of {prompts_per_batch} prompts (the training batch's "
            f"prompts x dynamic_sampling_oversample), but the training dataset has {rows}. Lower "
            "dynamic_sampling_oversample, or add prompts."
        )


def training_rows(trainer):
    """A trainer's training rows as TRL's dataloader would bring them: unused columns removed where TRL removes them."""
    import datasets

    dataset = trainer.train_dataset
    if isinstance(dataset, datasets.Dataset) and trainer.args.remove_unused_columns:
        dataset = trainer._remove_unused_columns(dataset, description="training")
    return dataset


class PromptStream:
    """The training dataset's rows, `prompts_per_batch` at a time, in the order TRL's `RepeatSampler` (seeded with
    `seed`) walks it: each pass one permutation (`shuffle`) whose last incomplete batch is left out, as TRL's sampler
    leaves it; after the last batch of a pass, the next pass. Every process holding the same stream draws the same rows.

    Its position is the pass and the prompts drawn of that pass's permutation, which do not depend on the batch size:
    a stream restored with other `prompts_per_batch` goes on from the same place in generation batches of its own size.
    """

    def __init__(self, dataset, prompts_per_batch: int, shuffle: bool, seed: int):
        refuse_short_dataset(len(dataset), prompts_per_batch)
        self.dataset, self.prompts_per_batch, self.shuffle, self.seed = dataset, prompts_per_batch, shuffle, seed
        self._start()

    @classmethod
    def for_trainer(cls, trainer) -> "PromptStream":
        """A trainer's stream: its training rows as TRL's dataloader would bring them (unused columns removed where
        TRL removes them), in its sampler's order (the main process's seed), `dynamic_sampling_oversample`
        batches' worth of prompts at a time."""
        args = trainer.args
        prompts = args.generation_batch_size // trainer.num_generations * args.dynamic_sampling_oversample
        return cls(training_rows(trainer), prompts, trainer.shuffle_dataset, trainer._layout_seed)

    def _start(self) -> None:
        # TRL's sampler with batches of one prompt yields a pass's whole permutation (the same draw of its generator
        # whatever the batch size); the stream cuts it into generation batches itself.
        self._sampler = RepeatSampler(self.dataset, mini_repeat_count=1, batch_size=1, repeat_count=1,
                                      shuffle=self.shuffle, seed=self.seed)
        self._order: list[int] = []  # this pass's permutation
        self.offset = 0  # prompts of it drawn so far
        self.drawn = 0  # generation batches drawn so far
        self.passes = 0  # passes over the data begun

    def _next_pass(self) -> None:
        self._order, self.offset = list(iter(self._sampler)), 0
        self.passes += 1

    def next_indices(self) -> list[int]:
        """The dataset indices of the next generation batch."""
        if len(self._order) - self.offset < self.prompts_per_batch:  # the pass's last incomplete batch is left out
            self._next_pass()
        batch = self._order[self.offset : self.offset + self.prompts_per_batch]
        self.offset += self.prompts_per_batch
        self.drawn += 1
        return batch

    def next_batch(self) -> list[dict[str, Any]]:
        """The rows of the next generation batch."""
        return [self.dataset[int(index)] for index in self.next_indices()]

    def next_prompts(self, id_column: str | None) -> tuple[list[dict[str, Any]], list[str]]:
        """The next generation batch's rows and their prompts' tracker keys."""
        rows = self.next_batch()
        return rows, keys_of(rows, id_column)

    def state_dict(self) -> dict[str, int]:
        return {"drawn": self.drawn, "passes": self.passes, "pass_offset": self.offset,
                "prompts_per_batch": self.prompts_per_batch, "dataset_rows": len(self.dataset),
                "seed": int(self.seed), "shuffle": bool(self.shuffle)}

    def load_state_dict(self, state: dict[str, Any], path: str) -> None:
        """Replay the stream to where the saved one stood; a stream of other data, seed or shuffling is refused. Its
        batch size may differ (another `dynamic_sampling_oversample` or `num_generations`): the stream goes on
        from the same place in the same pass, in generation batches of this size."""
        if not isinstance(state, dict):
            raise ValueError(f"{path} holds a {type(state).__name__}, not a stream position. Resume from an earlier "
                             "checkpoint, or delete the file to draw from the start of the training data again.")
        mine = self.state_dict()
        differences = {name: (state.get(name), mine[name]) for name in ("dataset_rows", "seed", "shuffle")
                       if state.get(name) != mine[name]}
        if differences:
            said = ", ".join(f"{name} {saved!r} there, {current!r} now" for name, (saved, current)
                             in differences.items())
            raise ValueError(
                f"{path} was written drawing from other data or with other settings ({said}), so the prompts this "
                "run would draw next are unknown. Resume with the dataset, seed and shuffle_dataset it was saved "
                "with, or delete the file to draw from the start of the data again."
            )
        try:
            drawn, passes, offset = saved_position(state)
        except ValueError as error:
            raise ValueError(f"{path} holds no stream position: {error}. Resume from an earlier checkpoint, or delete "
                             "the file to draw from the start of the training data again.") from error
        self._start()
        for _ in range(passes):
            self._next_pass()
        self.offset, self.drawn = offset, drawn
        if state.get("prompts_per_batch") != self.prompts_per_batch:
            logger.info(f"{path} was written drawing generation batches of {state.get('prompts_per_batch')} prompts; "
                        f"this run draws {self.prompts_per_batch}, going on from prompt {offset} of pass {passes}.")


def saved_position(state: dict[str, Any]) -> tuple[int, int, int]:
    """The generation batches drawn, the passes begun and the prompts drawn of the last one, from a stream's saved
    state; a file that holds only the batches drawn (written before the position was saved) gives the rest by its
    batch size."""
    try:
        rows, drawn = int(state["dataset_rows"]), int(state["drawn"])
        if "passes" in state:
            passes, offset = int(state["passes"]), int(state["pass_offset"])
        else:
            size = int(state["prompts_per_batch"])
            per_pass = rows // size
            passes = -(-drawn // per_pass)  # a pass begins at its first batch
            offset = (drawn - (passes - 1) * per_pass) * size if passes else 0
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
        raise ValueError(f"{type(error).__name__}: {error}") from None
    # A pass begins at a generation batch: more passes than batches drawn is no position a stream reaches (and would
    # be replayed pass by pass).
    if drawn < 0 or not 0 <= passes <= drawn or not 0 <= offset <= rows or (passes == 0 and offset):
        raise ValueError(f"{drawn} generation batches drawn, pass {passes} at prompt {offset} of {rows}")
    return drawn, passes, offset


class DynamicSampling:
    """Round rule: each round a generation batch of new prompts, `num_generations` rollouts each, until `needed`
    prompts are kept or `max_gen_batches` (0: no cap) generation batches are spent. Each generation batch's kept and
    needed prompts are logged at info level; a batch still short after `GEN_BATCHES_BEFORE_WARNING` is warned about.

    Args:
        prompts, keys: the batch's prompts and their tracker keys so far (the first generation batch's); the rule
            appends each later generation batch's to them.
        draw: `() -> (prompts, keys)` of the next generation batch.
        varied: `rounds -> bool per prompt`: the prompt's rollouts differ (on the rule's metric).
        needed: prompts of the training batch.
        num_generations: rollouts of every prompt.
        max_gen_batches: most generation batches (rounds) per training batch; 0: no cap.
        metric: the metric's setting, for the error at the cap.
        main_process: whether this process writes the logs (every process decides alike).
    """

    single_round = False

    def __init__(self, prompts: list, keys: list, draw: Callable[[], tuple[list, list]],
                 varied: Callable[[GeneratedRounds], np.ndarray], needed: int, num_generations: int,
                 max_gen_batches: int, metric: str, main_process: bool = True):
        self.prompts, self.keys, self.draw, self.varied = prompts, keys, draw, varied
        self.needed, self.num_generations, self.max_gen_batches, self.metric = (needed, num_generations,
                                                                                 max_gen_batches, metric)
        self.main_process = main_process
        self.pass_rates, self.history_counts = None, None
        self.kept: np.ndarray | None = None  # after the last round: the trained prompts, in the data's order
        self.varied_prompts = 0  # prompts whose rollouts differ, trained or not

    @classmethod
    def for_batch(cls, stream: PromptStream, prompts: list, keys: list, needed: int, args,
                  weighted: Callable) -> "DynamicSampling":
        """The rule of one training batch of `needed` prompts, by a config's settings, drawing from `stream`;
        `weighted(rewards_per_func)` sums the rewards as the trainer does."""
        from accelerate import PartialState

        def varied(rounds: GeneratedRounds) -> np.ndarray:
            return rounds.mixed() if args.dynamic_sampling_metric == "success" else varied_rewards(rounds,
                                                                                                         weighted)

        return cls(prompts, keys, lambda: stream.next_prompts(args.prompt_id_column), varied, needed,
                   args.num_generations, args.dynamic_sampling_max_gen_batches,
                   args.dynamic_sampling_metric, PartialState().is_main_process)

    def next_round(self, rounds: GeneratedRounds) -> np.ndarray | None:
        if len(rounds) == 0:
            return np.full(rounds.num_prompts, self.num_generations, dtype=np.int64)
        varied = np.flatnonzero(self.varied(rounds))
        self._log_progress(rounds, varied)
        if varied.size >= self.needed:
            self.kept, self.varied_prompts = varied[: self.needed], int(varied.size)
            self.pass_rates = np.divide(rounds.wins, rounds.trials, out=np.full(rounds.num_prompts, np.nan),
                                        where=rounds.trials > 0)  # what the filter saw, as Reinforce-Ada's rule
            return None
        if self.max_gen_batches and len(rounds) >= self.max_gen_batches:
            raise RuntimeError(self._cap_message(rounds, varied.size))
        if len(rounds) == GEN_BATCHES_BEFORE_WARNING and self.main_process:
            logger.warning(self._still_short_message(rounds, varied.size))
        prompts, keys = self.draw()
        self.prompts.extend(prompts)
        self.keys.extend(keys)
        earlier = rounds.num_prompts
        rounds.add_prompts(len(prompts))
        counts = np.zeros(rounds.num_prompts, dtype=np.int64)
        counts[earlier:] = self.num_generations
        return counts

    def _log_progress(self, rounds: GeneratedRounds, varied: np.ndarray) -> None:
        """One line per generation batch, as verl's recipe prints them: what it kept, what the training batch has."""
        if not self.main_process:
            return
        size = rounds.num_prompts // len(rounds)
        latest = int((varied >= rounds.num_prompts - size).sum())
        logger.info(f"Dynamic sampling, generation batch {len(rounds)} ({size} prompts): {latest} kept; "
                    f"{varied.size} of the {self.needed} the training batch needs kept so far.")

    def _cap_message(self, rounds: GeneratedRounds, kept: int) -> str:
        return (
            f"Dynamic sampling kept {kept} of the {self.needed} prompts a training batch needs after {len(rounds)} "
            f"generation batches of {rounds.num_prompts // len(rounds)} prompts "
            f"(dynamic_sampling_max_gen_batches={self.max_gen_batches}): the rollouts of the others all "
            f"agreed on the {self.metric} (dynamic_sampling_metric). The data is too easy or too hard for the "
            "model. Raise dynamic_sampling_max_gen_batches (0: no cap, as verl's max_num_gen_batches=0), "
            "dynamic_sampling_oversample (more prompts per generation batch) or num_generations (more "
            "rollouts per prompt, so that rarer successes or failures show, and fewer prompts per training batch; "
            f"a divisor of generation_batch_size={self.needed * self.num_generations}). Each of them can be changed "
            "when resuming from the last checkpoint: the run goes on drawing prompts where it stood."
        )

    def _still_short_message(self, rounds: GeneratedRounds, kept: int) -> str:
        if self.max_gen_batches:
            limit = f"it draws on up to dynamic_sampling_max_gen_batches={self.max_gen_batches}"
            cap = "Lower dynamic_sampling_max_gen_batches to stop such a batch sooner with an error"
        else:
            limit = "dynamic_sampling_max_gen_batches=0 lets it draw until the batch is full, however long"
            cap = (f"Set dynamic_sampling_max_gen_batches ({GEN_BATCHES_BEFORE_WARNING} in verl's DAPO recipe "
                   "and by default) to stop such a batch with an error instead")
        metric = (", or set dynamic_sampling_metric='reward' to keep also the prompts whose rewards differ "
                  "where their outcomes agree" if self.metric == "success" else "")
        return (
            f"Dynamic sampling has drawn {len(rounds)} generation batches ({rounds.num_prompts} prompts) for this "
            f"training batch and kept {kept} of the {self.needed} prompts it needs: the rollouts of the others all "
            f"agreed on the {self.metric} (dynamic_sampling_metric), and {limit}. The data is too easy or too "
            f"hard for the model. {cap}; or train on prompts the model sometimes solves and sometimes fails{metric}. "
            "Each generation batch's kept prompts are logged at info level (logger trl_budget.dynamic_sampling)."
        )

    def trained_slots(self, rounds: GeneratedRounds) -> tuple[np.ndarray, np.ndarray]:
        """The plan slots of the kept prompts' rollouts, and the trained rollouts of every prompt (0 if dropped)."""
        starts = np.cumsum(rounds.counts) - rounds.counts
        chosen = (starts[self.kept, None] + np.arange(self.num_generations)).ravel()
        counts = np.zeros(rounds.num_prompts, dtype=np.int64)
        counts[self.kept] = self.num_generations
        return chosen, counts


def varied_rewards(rounds: GeneratedRounds, weighted: Callable) -> np.ndarray:
    """Per prompt: its scored rollouts' weighted rewards (`weighted(rewards_per_func)`) are not all equal."""
    rewards = weighted(rounds.gathered_in_plan_order()[0]).double().cpu().numpy()
    starts = np.cumsum(rounds.counts) - rounds.counts
    with np.errstate(invalid="ignore"):  # a prompt whose rollouts are all unscored has NaN for both
        return np.fmax.reduceat(rewards, starts) > np.fmin.reduceat(rewards, starts)
