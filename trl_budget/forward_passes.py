"""The policy's forward passes that the batch's stages need besides TRL's own, behind one interface: `PolicyPasses`.

SPO's KL-adaptive rho reads log-probabilities of kept responses (`log_probs`, `last_responses`), SPO's prior from the
run itself generates and scores rollouts of every training prompt before the first batch (`sample_spo_prior`), and
VIP's predictor reads an embedding of every training prompt (`prompt_embeddings`). Each pass deals its rows over the
processes, every process making the same number of forward passes (a sharded model gathers its parameters in every
one), and gathers the results, so that every process holds the same numbers.
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import pad

from .dynamic_sampling import training_rows
from .prompts import keys_of


class PolicyPasses:
    """The forward passes of `trainer`'s policy that its stages ask for (see the module)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.skips_trl_log_probs = False  # TRL's log-prob passes are skipped while rows no loss trains are scored

    def unread_log_probs(self, input_ids: torch.Tensor, logits_to_keep: int) -> tuple[torch.Tensor, None, None]:
        """What stands for TRL's log-probabilities of rows no loss trains (`skips_trl_log_probs`): zeros, in its
        shape, never read (the rows' output is dropped, and what TRL logs of it taken back out)."""
        return torch.zeros(input_ids.size(0), logits_to_keep, device=input_ids.device), None, None

    @property
    def _pad_id(self) -> int:
        return getattr(self.trainer, "_tokenizer", self.trainer.processing_class).pad_token_id

    def _my_rows(self, total: int) -> tuple[list[int], list[int]]:
        """This process's share of `total` rows, and that share filled up to every process's size (its last row,
        or row 0, repeated) so that every process makes the same forward passes."""
        accelerator = self.trainer.accelerator
        share = -(-total // accelerator.num_processes)
        first = accelerator.process_index * share
        mine = list(range(first, min(first + share, total)))
        return mine, mine + [mine[-1] if mine else 0] * (share - len(mine))

    def log_probs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        """The current policy's log-probability of each completion's tokens after its prompt, on every process."""
        if not prompts:
            return []
        trainer = self.trainer
        mine, rows = self._my_rows(len(prompts))
        device, pad_id = trainer.accelerator.device, self._pad_id
        # Token ids as integers even where a completion is empty (a truncated one under mask_truncated_completions
        # keeps no token), and at least one completion column, so that the forward pass keeps the completion's logits.
        width = max([1] + [len(completions[i]) for i in rows])
        prompt_ids, prompt_mask = self._left_padded([prompts[i] for i in rows])
        completion_ids = pad([torch.tensor(completions[i] + [pad_id] * (width - len(completions[i])), device=device,
                                           dtype=torch.long) for i in rows], pad_id)
        completion_mask = pad([torch.tensor([1] * len(completions[i]) + [0] * (width - len(completions[i])),
                                            device=device, dtype=torch.long) for i in rows], 0)
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
            log_probs, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, torch.cat([prompt_ids, completion_ids], dim=1),
                torch.cat([prompt_mask, completion_mask], dim=1), completion_ids.size(1),
                batch_size=trainer.args.per_device_train_batch_size)
        found = [(i, log_probs[j, : len(completions[i])].float().cpu().tolist()) for j, i in enumerate(mine)]
        by_row = dict(gather_object(found))
        return [np.asarray(by_row[i], dtype=np.float64) for i in range(len(prompts))]

    def _left_padded(self, token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.trainer.accelerator.device
        ids = pad([torch.tensor(tokens, device=device, dtype=torch.long) for tokens in token_lists], self._pad_id,
                  padding_side="left")
        mask = pad([torch.ones(len(tokens), device=device, dtype=torch.long) for tokens in token_lists], 0,
                   padding_side="left")
        return ids, mask

    def prompt_embeddings(self, prompts: list[Any]) -> np.ndarray:
        """Each prompt's embedding under the policy: its last hidden layer mean-pooled over the prompt's tokens (as
        TRL tokenizes the prompt for generation) and L2-normalised; `(prompts, hidden size)` float64, the same on
        every process."""
        trainer = self.trainer
        token_lists = [list(map(int, ids)) for ids in trainer._tokenize_prompts(list(prompts))[0]]
        mine, rows = self._my_rows(len(token_lists))
        found, size, was_training = [], trainer.args.per_device_train_batch_size, trainer.model.training
        trainer.model.eval()  # no dropout: an embedding is a function of the prompt
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
            for start in range(0, len(rows), size):
                chunk = rows[start:start + size]
                ids, mask = self._left_padded([token_lists[i] for i in chunk])
                hidden = trainer.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)
                pooled = pooled.double().cpu().numpy()  # unit vectors, as VIP's release makes its embeddings
                found.extend((i, pooled[j].tolist()) for j, i in enumerate(chunk) if start + j < len(mine))
        trainer.model.train(was_training)
        by_row = dict(gather_object(found))
        return np.array([by_row[i] for i in range(len(token_lists))], dtype=np.float64)

    def last_responses(self, keys: list[str], trained) -> dict[str, tuple[list[int], list[int]]]:
        """Each prompt's last trained row in plan order (SPO's release keeps the last row a prompt has in a batch):
        its prompt and completion ids, from whichever process holds it, on every process."""
        ends = np.cumsum(trained.counts) - 1
        last_slot = {key: int(end) for key, end, count in zip(keys, ends, trained.counts) if count > 0}
        key_of_slot = {slot: key for key, slot in last_slot.items()}
        output = trained.output
        mine = []
        for row, slot in enumerate(np.asarray(trained.my_slots).tolist()):
            if slot in key_of_slot:
                prompt = output["prompt_ids"][row][output["prompt_mask"][row].bool()].tolist()
                completion = output["completion_ids"][row][output["completion_mask"][row].bool()].tolist()
                mine.append((key_of_slot[slot], prompt, completion))
        return {key: (prompt, completion) for key, prompt, completion in gather_object(mine)}

    def sample_spo_prior(self, spo) -> None:
        """SPO's prior from the run itself (`spo_offline_sampling`): `spo_offline_n` rollouts of every training
        prompt, generated and scored as the batches' are, a generation batch's worth of rows at a time (the last one
        filled up with its own last row, whose extra rollouts are left out). What TRL logs of them is taken back out,
        so that the first step's figures are its own; the rollouts generated (the fill included) and the time are
        logged."""
        trainer, args = self.trainer, self.trainer.args
        started = time.perf_counter()
        rows = list(training_rows(trainer))
        keys, offline_n = keys_of(rows, args.prompt_id_column), args.spo_offline_n
        repeated = [index for index in range(len(rows)) for _ in range(offline_n)]
        size, processes = args.generation_batch_size, trainer.accelerator.num_processes
        rank, rewards = trainer.accelerator.process_index, []
        with logs_taken_back(trainer), trl_log_probs_skipped(self):
            for start in range(0, len(repeated), size):
                chunk = repeated[start : start + size]
                filled = chunk + [chunk[-1]] * (size - len(chunk))
                local = size // processes
                mine = [rows[index] for index in filled[rank * local : (rank + 1) * local]]
                _, gathered, _ = trainer._scored_rows(mine, trl_rows=False)
                rewards.extend(trainer.rewards.weighted(gathered).cpu().tolist()[: len(chunk)])
        spo.set_sampled_priors([keys[index] for index in repeated], np.array(rewards), offline_n,
                               trainer._layout_seed)
        generated = -(-len(repeated) // size) * size  # whole generation batches, the last one's fill included
        trainer._metrics["train"]["spo/prior_rollouts"].append(float(generated))
        trainer._metrics["train"]["spo/prior_seconds"].append(time.perf_counter() - started)


@contextmanager
def trl_log_probs_skipped(passes: PolicyPasses):
    """TRL's log-prob passes skipped inside (`PolicyPasses.skips_trl_log_probs`)."""
    passes.skips_trl_log_probs = True
    try:
        yield
    finally:
        passes.skips_trl_log_probs = False


@contextmanager
def logs_taken_back(trainer):
    """What TRL logs inside (its metrics, completion logs and token count) is taken back out on leaving."""
    metrics, logs = copy.deepcopy(trainer._metrics["train"]), copy.deepcopy(trainer._logs)
    tokens = trainer.state.num_input_tokens_seen
    yield
    trainer._metrics["train"].clear()
    trainer._metrics["train"].update(metrics)
    trainer._logs, trainer.state.num_input_tokens_seen = logs, tokens
