"""Prompt selection as part of the budget (`prompt_sampling`): each generation batch's prompts drawn by weight from a
larger pool of candidates, before the allocator shares the batch's rollouts among them.

SPO's rule (`prompt_sampling="spo"`): from each pool the release's dataloader brings, draw the batch's prompts with
weights sqrt(p (1 - p)) + 0.05 of each candidate's SPO estimate p, without replacement (with it when the batch needs
more prompts than the pool holds). The pools come from `PromptStream`, in the order of TRL's own sampler: a pool of the
whole training set (the default, as the release's pool of 14 000 covers its data) makes every generation batch a draw
from all prompts; a smaller pool walks the data pool by pool, so that over a pass of the data every prompt is a
candidate once, trained as often as it is drawn (zero times or several). The draw is the main process's, on every
process, from a generator seeded with the run's seed, whose state a checkpoint keeps: a resumed run draws what an
uninterrupted one would.

The allocator's value (`prompt_sampling="value"`): the same draw, with each candidate weighed by the chosen allocator's
value of giving it the batch's even share of rollouts (`num_generations`) at the budget tracker's pass rate
(`prompt_values` of Knapsack RL and CoBA-RL, or of a user's allocator that defines it). The values are scaled to SPO's
range: the pool's most valuable prompt weighs 0.5 + 0.05, as SPO's most uncertain one does, a prompt of no value 0.05,
so that no prompt is starved for good; a prompt without an estimate weighs as the most valuable one (SPO's unseen
prompt, at p = 0.5, weighs the most too), so that every prompt is tried before the values rank it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .checks import shown
from .dynamic_sampling import PromptStream, training_rows
from .prior import history_pass_rates
from .prompts import keys_of
from .rollout_plan import decided_on_main_process
from .spo import draw_prompts, sampling_weights

__all__ = ["PROMPT_SAMPLING_RULES", "PromptSampler", "SAMPLER_STATE_NAME", "allocator_value_weights",
           "checked_prompt_values", "spo_weights", "value_sampling_weights"]

SAMPLER_STATE_NAME = "budget_prompt_sampler.json"
_BANDS = np.array([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])


def spo_weights(p_hats_of: Callable[[list[str]], np.ndarray]) -> Callable:
    """SPO's weights of a pool's keys, with the estimates they come from."""
    def weights(keys: list[str], rows_of: Callable) -> tuple[np.ndarray, np.ndarray]:
        p_hats = p_hats_of(keys)
        return sampling_weights(p_hats), p_hats

    return weights


def value_sampling_weights(values, pass_rates) -> np.ndarray:
    """Weights 0.5 v / max(v) + 0.05 of the prompts' values v (the max over prompts with an estimate); a prompt without
    one (NaN pass rate) weighs 0.55, as the most valuable; with no value anywhere, every seen prompt weighs 0.05."""
    values, rates = np.asarray(values, dtype=np.float64), np.asarray(pass_rates, dtype=np.float64)
    unseen = np.isnan(rates)
    top = values[~unseen].max(initial=0.0)
    scaled = np.where(unseen, 1.0, values / top if top > 0 else 0.0)
    return 0.5 * scaled + 0.05


def allocator_value_weights(allocator, tracker, args) -> Callable:
    """The allocator's value weights of a pool's prompts, at `args.num_generations` rollouts each, with the pass rates
    they come from (the budget tracker's, with the prior column's for unseen prompts as the allocator sees them)."""
    reads_rows = args.pass_rate_prior_column is not None or args.prompt_group_column is not None

    def weights(keys: list[str], rows_of: Callable) -> tuple[np.ndarray, np.ndarray]:
        rates, _, _ = history_pass_rates(tracker, rows_of() if reads_rows else [], keys, args)
        values = checked_prompt_values(allocator, rates, args.num_generations, tracker.failure_rate)
        return value_sampling_weights(values, rates), rates

    return weights


def checked_prompt_values(allocator, pass_rates: np.ndarray, generations: int, failure_rate) -> np.ndarray:
    """`allocator.prompt_values` at `generations` rollouts each: one finite value >= 0 per prompt with a pass rate
    (an unseen prompt's value is never read: it weighs as the most valuable)."""
    values = np.asarray(allocator.prompt_values(np.full(len(pass_rates), generations), pass_rates, failure_rate),
                        dtype=np.float64)
    if values.shape == pass_rates.shape:
        values = np.where(np.isnan(pass_rates), 0.0, values)
    if values.shape != pass_rates.shape or not np.all(np.isfinite(values) & (values >= 0)):
        bad = values if values.shape != pass_rates.shape else values[~(np.isfinite(values) & (values >= 0))][:3]
        raise ValueError(f"prompt_sampling='value' weighs prompts by {type(allocator).__name__}.prompt_values, which "
                         f"must give one finite value >= 0 per prompt with a pass rate ({len(pass_rates)} prompts), "
                         f"but gave {shown(bad)}. Fix the allocator's prompt_values.")
    return values


PROMPT_SAMPLING_RULES = ("spo", "value")


class PromptSampler:
    """Draws each generation batch's `prompts_per_batch` prompts from the next pool of `stream` by weight.

    Args:
        stream: the pools, in TRL's sampler order.
        prompts_per_batch: prompts a generation batch trains.
        weights_of: `(keys, rows_of) -> (weights, estimates)` of a pool's prompts (`rows_of()` reads their rows).
        seed: the draws' generator seed (the main process's).
        main_process: whether this process draws (every process receives its draw).
    """

    def __init__(self, stream: PromptStream, prompts_per_batch: int, weights_of: Callable, seed: int,
                 main_process: bool = True):
        self.stream, self.prompts_per_batch, self.weights_of = stream, prompts_per_batch, weights_of
        self.main_process = main_process
        self.rng = np.random.default_rng(seed)
        self._keys_of_index: dict[int, str] = {}
        self.last_metrics: dict[str, float] = {}

    @classmethod
    def for_trainer(cls, trainer) -> "PromptSampler | None":
        """A trainer's sampler under its rule (None without prompt sampling): pools of `prompt_sampling_pool` training
        rows (all of them by default) in its sampler's order (the main process's seed),
        `prompts_per_generation_batch()` drawn from each."""
        args = trainer.args
        rule = args.resolved_prompt_sampling()
        if rule is None:
            return None
        weights_of = (spo_weights(trainer.spo.tracker.p_hats) if rule == "spo" else
                      allocator_value_weights(trainer.allocator, trainer.tracker, args))
        rows = training_rows(trainer)
        stream = PromptStream(rows, args.prompt_sampling_pool or len(rows), trainer.shuffle_dataset,
                              trainer._layout_seed)
        return cls(stream, args.prompts_per_generation_batch(), weights_of, trainer._layout_seed,
                   trainer.accelerator.is_main_process)

    def next_prompts(self, id_column: str | None) -> tuple[list[dict[str, Any]], list[str]]:
        """The next generation batch's prompts (rows of the data) and their tracker keys."""
        indices = self.stream.next_indices()
        keys = self._keys(indices, id_column)
        weights, estimates = self.weights_of(keys, lambda: [self.stream.dataset[int(index)] for index in indices])
        chosen, _ = decided_on_main_process(self.main_process, "Prompt sampling",
                                            lambda: draw_prompts(weights, self.prompts_per_batch, self.rng))
        chosen = np.asarray(chosen)
        self.last_metrics = selected_shares(estimates, chosen)
        return [self.stream.dataset[int(indices[i])] for i in chosen], [keys[i] for i in chosen]

    def _keys(self, indices: list[int], id_column: str | None) -> list[str]:
        """The keys of the rows at `indices`, each computed once a run."""
        missing = [index for index in indices if index not in self._keys_of_index]
        if missing:
            rows = [self.stream.dataset[int(index)] for index in missing]
            self._keys_of_index.update(zip(missing, keys_of(rows, id_column)))
        return [self._keys_of_index[index] for index in indices]

    def state_dict(self) -> dict[str, Any]:
        return {"stream": self.stream.state_dict(), "generator": self.rng.bit_generator.state,
                "prompts_per_batch": self.prompts_per_batch}

    def load_state_dict(self, state: dict[str, Any], path: str) -> None:
        """Put the pools and the draws' generator where the saved sampler stood."""
        if not (isinstance(state, dict) and isinstance(state.get("stream"), dict)
                and isinstance(state.get("generator"), dict)):
            raise ValueError(f"{path} holds no prompt sampler ('stream' and 'generator'). Resume from an earlier "
                             "checkpoint, or delete the file to draw from the start of the training data again.")
        self.stream.load_state_dict(state["stream"], path)
        try:
            self.rng.bit_generator.state = state["generator"]
        except (TypeError, ValueError, KeyError, OverflowError) as error:
            raise ValueError(f"{path} holds a generator state this run cannot use ({error}). Resume from an earlier "
                             "checkpoint, or delete the file to draw afresh.") from error


def selected_shares(estimates: np.ndarray, chosen: np.ndarray) -> dict[str, float]:
    """Per band of the pool's estimates p (0-0.2, ..., 0.8-1, and `unseen` for prompts without one): draws of the
    band's prompts per prompt of the band in the pool (1: drawn as often as the band is large; a draw with replacement
    can pass 1)."""
    estimates = np.asarray(estimates, dtype=np.float64)
    names = [f"p{low:.1f}-{high:.1f}" for low, high in zip(_BANDS[:-1], _BANDS[1:])] + ["unseen"]
    band = np.where(np.isnan(estimates), len(names) - 1,
                    np.clip(np.searchsorted(_BANDS, estimates, side="right") - 1, 0, len(_BANDS) - 2))
    in_pool = np.bincount(band, minlength=len(names))
    drawn = np.bincount(band[chosen], minlength=len(names))
    return {f"prompt_sampling/selected_share/{name}": float(drawn[i] / in_pool[i])
            for i, name in enumerate(names) if in_pool[i]}
