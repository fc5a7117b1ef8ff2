"""The rounds of one generation batch: what each round generated, and how its rows lie in the batch's plan.

A batch is generated in one or more rounds (one engine request each). Every round generates `counts[i]` rollouts of
prompt i, dealt over the processes (`balanced_slot_order`), and TRL scores them. `GeneratedRounds` keeps each round's
output (this process's rows), the order its rows were dealt in, and the rewards and completion lengths gathered from
every process; from these it lays every row into the plan (each prompt's rollouts contiguous, round after round),
merges the rounds' outputs into one batch and says which plan slot each of this process's rows holds.

Which counts each round gets is a round rule's decision (`round_rules`): one round for both releases' one-shot
allocation, a probe and then the rest, or rounds until every prompt is mixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .rollout_plan import stage_slots

__all__ = ["GeneratedRounds", "TrainedRows", "gather_output", "merge_outputs", "take_rows"]


@dataclass
class _Round:
    output: dict[str, Any]  # TRL's generation output for this process's rows
    order: np.ndarray  # the round slot of every row, process by process
    counts: np.ndarray  # rollouts of each prompt in this round
    rewards: torch.Tensor  # rewards per function of every row, gathered in `order`
    lengths: torch.Tensor  # completion tokens of every row, gathered in `order`
    outcomes: np.ndarray  # 1.0 (success), 0.0 (failure) or NaN (unscored) of every row, in `order`


class GeneratedRounds:
    """The rounds generated so far for one batch of `num_prompts` prompts, and their in-batch evidence."""

    def __init__(self, num_prompts: int, processes: int, rank: int):
        self.processes, self.rank = processes, rank
        self.rounds: list[_Round] = []
        self.counts = np.zeros(num_prompts, dtype=np.int64)  # rollouts of each prompt so far
        self.wins = np.zeros(num_prompts)  # successes among its scored rollouts so far
        self.trials = np.zeros(num_prompts)  # its scored rollouts so far
        # Rounds generated prompt by prompt (`per_prompt_engine`): how many, and the order TRL logged their rows in
        # (each row's index among those rounds' rows, round by round).
        self.rounds_ahead, self.logged_ahead = 0, None

    def __len__(self) -> int:
        return len(self.rounds)

    @property
    def num_prompts(self) -> int:
        return self.counts.size

    def add(self, output: dict[str, Any], order: np.ndarray, counts: np.ndarray, rewards: torch.Tensor,
            lengths: torch.Tensor, outcomes: np.ndarray) -> None:
        """Record a round: its output, deal order, counts, and every row's gathered rewards, lengths and outcome."""
        counts = np.asarray(counts, dtype=np.int64)
        self.rounds.append(_Round(output, order, counts, rewards, lengths, np.asarray(outcomes, dtype=np.float64)))
        prompt_of_row = np.repeat(np.arange(counts.size), counts)[order]
        scored = ~np.isnan(outcomes)
        self.counts = self.counts + counts
        self.wins = self.wins + np.bincount(prompt_of_row[scored], outcomes[scored], minlength=counts.size)
        self.trials = self.trials + np.bincount(prompt_of_row[scored], minlength=counts.size)

    def add_evidence(self, counts: np.ndarray, outcomes: np.ndarray) -> None:
        """Record a round known only by its outcomes (no TRL output, rewards or lengths): `counts[i]` rollouts of
        prompt i, their `outcomes` prompt by prompt; what a rule decides on, replayed or scripted."""
        outcomes = np.asarray(outcomes, dtype=np.float64)
        self.add({}, np.arange(outcomes.size), counts, torch.zeros(outcomes.size, 1), torch.zeros(outcomes.size),
                 outcomes)

    def add_prompts(self, number: int) -> None:
        """Make room for `number` more prompts, after the batch's others, with no rollouts yet (dynamic sampling's
        next generation batch); every earlier round generated none of them."""
        def grown(values: np.ndarray) -> np.ndarray:
            return np.concatenate([values, np.zeros(number, dtype=values.dtype)])

        self.counts, self.wins, self.trials = grown(self.counts), grown(self.wins), grown(self.trials)
        for generated in self.rounds:
            generated.counts = grown(generated.counts)

    def outcomes_in_plan_order(self) -> np.ndarray:
        """Every generated row's outcome (1, 0, NaN) at its plan slot: each prompt's rows in the order generated."""
        outcomes = np.empty(int(self.counts.sum()))
        outcomes[self.slot_order()] = np.concatenate([generated.outcomes for generated in self.rounds])
        return outcomes

    def counts_per_round(self) -> tuple[np.ndarray, ...]:
        return tuple(generated.counts for generated in self.rounds)

    def mixed(self) -> np.ndarray:
        """Prompts whose rollouts so far hold a success and a failure."""
        return (self.wins > 0) & (self.wins < self.trials)

    # ------------------------------------------------------------------------------------------- the plan's layout

    def row_slots(self) -> list[np.ndarray]:
        """Per round, the plan slot of each of its rows (process by process): each prompt's slots are contiguous, its
        rollouts of earlier rounds first."""
        offsets = np.zeros_like(self.counts)
        slots = []
        for generated in self.rounds:
            slots.append(stage_slots(self.counts, generated.counts, offsets)[generated.order])
            offsets = offsets + generated.counts
        return slots

    def slot_order(self) -> np.ndarray:
        """The plan slot of every row of the batch, round by round and process by process."""
        return np.concatenate(self.row_slots())

    def logged_slot_order(self) -> np.ndarray:
        """The plan slot of every row in the order TRL logged them: round by round, except the rows of rounds
        generated prompt by prompt, logged as they were scored."""
        slots = self.slot_order()
        if self.logged_ahead is None:
            return slots
        ahead = int(sum(generated.counts.sum() for generated in self.rounds[: self.rounds_ahead]))
        return np.concatenate([slots[:ahead][self.logged_ahead], slots[ahead:]])

    @property
    def in_plan_order_already(self) -> bool:
        """One round on one process: its rows are the plan's slots in order, nothing to permute."""
        return self.processes == 1 and len(self.rounds) == 1

    def gathered_in_plan_order(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row's rewards per function and completion tokens, in plan order."""
        rewards = torch.cat([generated.rewards for generated in self.rounds])
        lengths = torch.cat([generated.lengths for generated in self.rounds])
        if self.in_plan_order_already:
            return rewards, lengths
        slot_order = torch.as_tensor(self.slot_order(), device=rewards.device)
        in_order, lengths_in_order = torch.empty_like(rewards), torch.empty_like(lengths)
        in_order[slot_order], lengths_in_order[slot_order] = rewards, lengths
        return in_order, lengths_in_order

    def my_slots(self) -> np.ndarray:
        """The plan slots of this process's rows, in the order of `merged_output`."""
        return self._slots_of(self.rank)

    def merged_output(self, pad_token_id: int) -> dict[str, Any]:
        """This process's rows of every round as one TRL generation output, round after round."""
        return merge_outputs([generated.output for generated in self.rounds], pad_token_id)

    # ------------------------------------------------------------------------------------------- the trained rows

    def all_trained(self, pad_token_id: int, rewards: torch.Tensor) -> "TrainedRows":
        """Every generated row is trained, where it was generated (`rewards`: `gathered_in_plan_order()`'s)."""
        return TrainedRows(self.merged_output(pad_token_id), self.counts, rewards, self.slot_order(), self.my_slots(),
                           self.in_plan_order_already, np.arange(rewards.shape[0]))

    def selected(self, chosen: np.ndarray, counts: np.ndarray, pad_token_id: int, gather, rewards: torch.Tensor
                 ) -> "TrainedRows":
        """Only the generated rows at plan slots `chosen` are trained (`counts[i]` of prompt i, prompt by prompt);
        `rewards` are every generated row's, in plan order (`gathered_in_plan_order()`).

        The trained rows are dealt to the processes in turn, an equal contiguous share each, so that every process
        trains the same number of rows; rows generated on another process come through `gather` (an all-gather of
        every field, padded to the widest).
        """
        share = chosen.size // self.processes
        mine = chosen[self.rank * share : (self.rank + 1) * share]
        generated = self.merged_output(pad_token_id)
        if self.processes > 1:
            generated = gather_output(generated, gather, pad_token_id)
        held = np.concatenate([self._slots_of(rank) for rank in range(self.processes)])
        row_of_slot = np.empty(held.size, dtype=np.int64)
        row_of_slot[held] = np.arange(held.size)
        output = take_rows(generated, row_of_slot[mine])
        loss_mask = generated["completion_mask"] * generated.get("tool_mask", 1)
        output["num_items_in_batch"] = loss_mask[torch.as_tensor(row_of_slot[chosen], device=loss_mask.device)].sum()
        slot_order = np.arange(chosen.size)
        chosen_rewards = rewards[torch.as_tensor(chosen, device=rewards.device)]
        return TrainedRows(output, np.asarray(counts, dtype=np.int64), chosen_rewards, slot_order,
                           slot_order[self.rank * share : (self.rank + 1) * share], self.processes == 1, chosen)

    def _slots_of(self, rank: int) -> np.ndarray:
        """The plan slots of process `rank`'s rows, in the order of its `merged_output`."""
        return np.concatenate([slots.reshape(self.processes, -1)[rank] for slots in self.row_slots()])


@dataclass
class TrainedRows:
    """The rows of a batch that are trained: this process's share, and where every one sits in the plan."""

    output: dict[str, Any]  # TRL's generation output of this process's trained rows
    counts: np.ndarray  # trained rows of each prompt (the plan's groups)
    rewards: torch.Tensor  # rewards per function of every trained row, in plan order
    slot_order: np.ndarray  # the plan slot of every trained row, process by process
    my_slots: np.ndarray  # the plan slots of this process's rows, in the order of `output`
    in_plan_order: bool  # this process's rows are the plan's slots in order: nothing to permute
    generated_slots: np.ndarray  # the generated row (its slot in the generation plan) of every trained slot


# How each tensor of TRL's generation output is padded when rounds are put together.
_LEFT_PADDED = {"prompt_ids", "prompt_mask"}
_PER_TOKEN = {"completion_ids", "completion_mask", "old_per_token_logps", "sampling_per_token_logps",
              "ref_per_token_logps", "importance_sampling_ratio", "tool_mask"}
_PER_ROW = {"advantages"}


def merge_outputs(outputs: list[dict], pad_token_id: int) -> dict:
    """TRL's generation outputs of several rounds as one batch: the rows of each, in turn.

    Prompts are left-padded and completions right-padded to the longest, as TRL pads them; masks pad with 0.
    `num_items_in_batch` (loss tokens over all processes) adds up.
    """
    first = outputs[0]
    if len(outputs) == 1:
        return first
    if any(set(output) != set(first) for output in outputs):
        fields = [sorted(output) for output in outputs]
        raise RuntimeError(f"the rounds returned different fields: {fields}.")
    merged = {}
    for name, value in first.items():
        values = [output[name] for output in outputs]
        if name == "num_items_in_batch":
            merged[name] = sum(values[1:], value)
        elif name in _PER_ROW or (name == "importance_sampling_ratio" and all(v.shape[1] == 1 for v in values)):
            merged[name] = torch.cat(values)
        elif name in _LEFT_PADDED or name in _PER_TOKEN:
            pad = pad_token_id if name in ("prompt_ids", "completion_ids") else 0
            side = "left" if name in _LEFT_PADDED else "right"
            width = max(v.shape[1] for v in values)
            merged[name] = torch.cat([_pad_to(v, width, pad, side) for v in values])
        else:
            raise RuntimeError(
                f"a batch generated in several rounds (a probe stage or rounds_generations) cannot merge the "
                f"generation output {name!r} (multimodal inputs are not supported with rounds yet); set "
                "probe_generations=0 and rounds_generations=0 for this run."
            )
    return merged


def gather_output(output: dict, gather, pad_token_id: int) -> dict:
    """Every process's rows of a generation output, process after process (`gather`: an all-gather along rows),
    each field padded to the widest any process holds."""
    gathered = {}
    for name, value in output.items():
        if name == "num_items_in_batch":
            continue
        if name in _LEFT_PADDED or name in _PER_TOKEN:
            width = int(gather(torch.tensor([value.shape[1]], device=value.device)).max())
            pad = pad_token_id if name in ("prompt_ids", "completion_ids") else 0
            value = _pad_to(value, width, pad, "left" if name in _LEFT_PADDED else "right")
        elif name not in _PER_ROW:
            raise RuntimeError(f"rows generated on another process cannot carry the generation output {name!r} "
                               "(multimodal inputs are not supported with down-sampled rounds yet).")
        gathered[name] = gather(value)
    return gathered


def take_rows(output: dict, rows: np.ndarray) -> dict:
    """The generation output's `rows`, in that order (`num_items_in_batch`, a batch's total, left out)."""
    index = torch.as_tensor(rows)
    return {name: value[index.to(value.device)] for name, value in output.items() if name != "num_items_in_batch"}


def _pad_to(tensor: torch.Tensor, width: int, value, side: str) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    padding = tensor.new_full((tensor.shape[0], missing, *tensor.shape[2:]), value)
    return torch.cat([padding, tensor] if side == "left" else [tensor, padding], dim=1)
