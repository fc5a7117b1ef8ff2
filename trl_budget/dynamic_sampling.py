"""DAPO's dynamic sampling (arXiv 2503.14476, §3.2) as verl's DAPO recipe releases it, on the rounds mechanism.

Where rounds until mixed add rollouts to the *same* prompts, dynamic sampling draws *new* ones: every round is a
generation batch of fresh prompts from the training data, `num_generations` rollouts each. A prompt whose rollouts all
agree (on the reward, or on success) is dropped; rounds go on until the kept prompts fill the training batch, whose
first prompts in the data's order are trained and the rest generated for nothing, as verl's `batch[:traj_bsz]`. When
`max_gen_batches` generation batches hold too few, training stops with an error, as verl's recipe raises.

The prompts come from `PromptStream`: the training data in the order of TRL's own sampler (the same seed, the same
permutation per pass), generation batch after generation batch, a fresh permutation each pass. Its position is saved
with the checkpoint, so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from trl.trainer.utils import RepeatSampler

from .prompts import keys_of
from .rounds import GeneratedRounds

__all__ = ["DynamicSampling", "PromptStream", "STREAM_STATE_NAME", "refuse_short_dataset", "varied_rewards"]

STREAM_STATE_NAME = "budget_prompt_stream.json"


def refuse_short_dataset(rows: int, prompts_per_batch: int) -> None:
    """A dataset smaller than one generation batch would give the stream empty batches: refuse it."""
    if rows < prompts_per_batch:
        raise ValueError(
            f"budget_dynamic_sampling draws generation batches of {prompts_per_batch} prompts (the training batch's "
            f"prompts x budget_dynamic_sampling_oversample), but the training dataset has {rows}. Lower "
            "budget_dynamic_sampling_oversample, or add prompts."
        )


class PromptStream:
    """The training dataset's rows, `prompts_per_batch` at a time, in the order TRL's `RepeatSampler` (seeded with
    `seed`) walks it: each pass one permutation (`shuffle`) whose last incomplete batch is left out, as TRL's sampler
    leaves it; after the last batch of a pass, the next pass. Every process holding the same stream draws the same rows.
    """

    def __init__(self, dataset, prompts_per_batch: int, shuffle: bool, seed: int):
        refuse_short_dataset(len(dataset), prompts_per_batch)
        self.dataset, self.prompts_per_batch, self.shuffle, self.seed = dataset, prompts_per_batch, shuffle, seed
        self._start()

    @classmethod
    def for_trainer(cls, trainer) -> "PromptStream":
        """A trainer's stream: its training rows as TRL's dataloader would bring them (unused columns removed where
        TRL removes them), in its sampler's order (the main process's seed), `budget_dynamic_sampling_oversample`
        batches' worth of prompts at a time."""
        import datasets

        args, dataset = trainer.args, trainer.train_dataset
        if isinstance(dataset, datasets.Dataset) and args.remove_unused_columns:
            dataset = trainer._remove_unused_columns(dataset, description="training")
        prompts = args.generation_batch_size // trainer.num_generations * args.budget_dynamic_sampling_oversample
        return cls(dataset, prompts, trainer.shuffle_dataset, trainer._layout_seed)

    def _start(self) -> None:
        self._sampler = RepeatSampler(self.dataset, mini_repeat_count=1, batch_size=self.prompts_per_batch,
                                      repeat_count=1, shuffle=self.shuffle, seed=self.seed)
        self._pass: list[int] = []
        self.drawn = 0  # generation batches drawn so far
        self.passes = 0  # passes over the data begun

    def next_indices(self) -> list[int]:
        """The dataset indices of the next generation batch."""
        if not self._pass:
            self._pass = list(iter(self._sampler))  # the next permutation, cut to whole batches
            self.passes += 1
        batch, self._pass = self._pass[: self.prompts_per_batch], self._pass[self.prompts_per_batch :]
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
        return {"drawn": self.drawn, "prompts_per_batch": self.prompts_per_batch, "dataset_rows": len(self.dataset),
                "seed": int(self.seed), "shuffle": bool(self.shuffle)}

    def load_state_dict(self, state: dict[str, Any], path: str) -> None:
        """Replay the stream to where the saved one stood; a stream of other data or settings is refused."""
        mine = self.state_dict()
        differences = {name: (state.get(name), mine[name]) for name in mine if name != "drawn"
                       and state.get(name) != mine[name]}
        if differences:
            said = ", ".join(f"{name} {saved!r} there, {current!r} now" for name, (saved, current)
                             in differences.items())
            raise ValueError(
                f"{path} was written by dynamic sampling over other data or settings ({said}), so the prompts this "
                "run would draw next are unknown. Resume with the dataset, seed, shuffle_dataset and batch settings "
                "it was saved with, or delete the file to draw from the start of the data again."
            )
        self._start()
        for _ in range(int(state["drawn"])):
            self.next_indices()


class DynamicSampling:
    """Round rule: each round a generation batch of new prompts, `num_generations` rollouts each, until `needed`
    prompts are kept or `max_gen_batches` (0: no cap) generation batches are spent.

    Args:
        prompts, keys: the batch's prompts and their tracker keys so far (the first generation batch's); the rule
            appends each later generation batch's to them.
        draw: `() -> (prompts, keys)` of the next generation batch.
        varied: `rounds -> bool per prompt`: the prompt's rollouts differ (on the rule's metric).
        needed: prompts of the training batch.
        num_generations: rollouts of every prompt.
        max_gen_batches: most generation batches (rounds) per training batch; 0: no cap.
        metric: the metric's setting, for the error at the cap.
    """

    single_round = False

    def __init__(self, prompts: list, keys: list, draw: Callable[[], tuple[list, list]],
                 varied: Callable[[GeneratedRounds], np.ndarray], needed: int, num_generations: int,
                 max_gen_batches: int, metric: str):
        self.prompts, self.keys, self.draw, self.varied = prompts, keys, draw, varied
        self.needed, self.num_generations, self.max_gen_batches, self.metric = (needed, num_generations,
                                                                                 max_gen_batches, metric)
        self.pass_rates, self.history_counts = None, None
        self.kept: np.ndarray | None = None  # after the last round: the trained prompts, in the data's order
        self.varied_prompts = 0  # prompts whose rollouts differ, trained or not

    @classmethod
    def for_batch(cls, stream: PromptStream, prompts: list, keys: list, needed: int, args,
                  weighted: Callable) -> "DynamicSampling":
        """The rule of one training batch of `needed` prompts, by a config's settings, drawing from `stream`;
        `weighted(rewards_per_func)` sums the rewards as the trainer does."""
        def varied(rounds: GeneratedRounds) -> np.ndarray:
            return rounds.mixed() if args.budget_dynamic_sampling_metric == "success" else varied_rewards(rounds,
                                                                                                         weighted)

        return cls(prompts, keys, lambda: stream.next_prompts(args.prompt_id_column), varied, needed,
                   args.num_generations, args.budget_dynamic_sampling_max_gen_batches,
                   args.budget_dynamic_sampling_metric)

    def next_round(self, rounds: GeneratedRounds) -> np.ndarray | None:
        if len(rounds) == 0:
            return np.full(rounds.num_prompts, self.num_generations, dtype=np.int64)
        varied = np.flatnonzero(self.varied(rounds))
        if varied.size >= self.needed:
            self.kept, self.varied_prompts = varied[: self.needed], int(varied.size)
            self.pass_rates = np.divide(rounds.wins, rounds.trials, out=np.full(rounds.num_prompts, np.nan),
                                        where=rounds.trials > 0)  # what the filter saw, as Reinforce-Ada's rule
            return None
        if self.max_gen_batches and len(rounds) >= self.max_gen_batches:
            raise RuntimeError(
                f"Dynamic sampling kept {varied.size} of the {self.needed} prompts a training batch needs after "
                f"{len(rounds)} generation batches of {rounds.num_prompts // len(rounds)} prompts "
                f"(budget_dynamic_sampling_max_gen_batches={self.max_gen_batches}): the rollouts of the others all "
                f"agreed on the {self.metric} (budget_dynamic_sampling_metric). The data is too easy or too hard "
                "for the model. Raise budget_dynamic_sampling_max_gen_batches (0: no cap, as verl's "
                "max_num_gen_batches=0), budget_dynamic_sampling_oversample or num_generations."
            )
        prompts, keys = self.draw()
        self.prompts.extend(prompts)
        self.keys.extend(keys)
        earlier = rounds.num_prompts
        rounds.add_prompts(len(prompts))
        counts = np.zeros(rounds.num_prompts, dtype=np.int64)
        counts[earlier:] = self.num_generations
        return counts

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
