"""Rounds generated prompt by prompt on vLLM (`rounds_prompt_by_prompt`), colocated or served.

The round-synchronous path sends one blocking request a round, so every prompt of a round waits for the round's
longest completion before any prompt's next round is sent. Here the requests are sent round by round of each prompt:
in colocate mode the in-process engine's request queue is driven directly (every rollout its own request, n = 1, as
TRL's colocate generation sends them; the engine stepped), in server mode each prompt's round is its own request to
TRL's `vllm-serve` (n = its rollouts, on a thread of its own, so that the server's engine batches every round in
flight). As soon as all of a prompt's rollouts of a round have finished they are scored, and the prompt's next round,
when `PerPromptSchedule` finds it provably the prompt's own, is sent while the other prompts' rollouts keep decoding.
What finished in one step is scored together by TRL's own pipeline (`_generate_and_score_completions`), whose
generation step returns the engine's completions for exactly those rows (`Replayed`, which checks that each goes to the
prompt it was generated from). Once every prompt has stopped or waits, the rounds are handed back to the rule (which is
replayed over them, checking every round) and laid out as the synchronous path lays them out; the rest of the batch, if
any, is the synchronous path's. On several processes each process runs the same schedule on the same events
(`generate_prompt_by_prompt` says how), so every process decides alike, whatever finishes first where.

Relies on TRL 1.16's vLLM internals: `vllm_generation.llm` (the in-process engine), `vllm_generation.vllm_client` (the
server's client, on the main process) and their sampling settings, `_tokenize_prompts`, and the weight-sync
bookkeeping `_last_loaded_step`."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

from .per_prompt import PerPromptSchedule
from .rounds import GeneratedRounds, merge_outputs, take_rows

__all__ = ["Replayed", "generate_prompt_by_prompt", "sampling_params"]

_batches = itertools.count()  # request ids stay unique across batches


class Replayed:
    """Completions the engine generated, handed to TRL's generation step for the rows being scored: it must ask for
    exactly the prompts they were generated from, in order."""

    def __init__(self, prompt_ids: list[list[int]], completion_ids: list[list[int]], logprobs: list | None):
        self.prompt_ids, self.completion_ids, self.logprobs = prompt_ids, completion_ids, logprobs

    def take(self, prompt_ids: list[list[int]]) -> tuple[list[list[int]], list | None]:
        if [list(ids) for ids in prompt_ids] != self.prompt_ids:
            raise RuntimeError(
                "rounds prompt by prompt: TRL tokenized the rows being scored into other prompts than the engine "
                "generated their completions from, so a completion would be credited to another prompt.")
        return self.completion_ids, self.logprobs


def sampling_params(generation):
    """The sampling parameters TRL's colocate generation uses (`VLLMGeneration.generate`): one rollout a request."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    kwargs = {"n": 1, **_sampling(generation), **generation.generation_kwargs}
    if generation.structured_outputs_regex is not None:
        kwargs["structured_outputs"] = StructuredOutputsParams(regex=generation.structured_outputs_regex)
    elif isinstance(kwargs.get("structured_outputs"), dict):
        kwargs["structured_outputs"] = StructuredOutputsParams(**kwargs["structured_outputs"])
    return SamplingParams(**kwargs)


def _sampling(generation) -> dict:
    """The sampling settings TRL's generation sends in both modes."""
    return {"repetition_penalty": generation.repetition_penalty, "temperature": generation.temperature,
            "top_p": generation.top_p, "top_k": generation.top_k,
            "min_p": 0.0 if generation.min_p is None else generation.min_p,
            "max_tokens": generation.max_completion_length, "logprobs": generation.logprobs}


# A finished rollout as `_score` needs it: its round's key (prompt, round), its index in the round, its completion's
# token ids and the sampled tokens' logprobs (None when TRL asks for none).
Rollout = tuple[tuple[int, int], int, list[int], list[float] | None]


class _EngineRollouts:
    """Colocate mode: every process generates its share of each round (rollouts rank·c/P to (rank+1)·c/P − 1 of a
    round of c) on its own in-process engine, one request a rollout; after every engine step the processes share
    which rollouts finished."""

    def __init__(self, trainer, prompt_ids: list[list[int]]):
        generation = trainer.vllm_generation
        self.prompt_ids = prompt_ids
        self.processes, self.rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
        self.engine, self.params, self.batch = generation.llm.llm_engine, sampling_params(generation), next(_batches)
        self.requests: dict[str, tuple[int, int, int]] = {}  # request id -> (prompt, round, rollout), this process's

    def send(self, prompt: int, round_index: int, count: int) -> None:
        share = count // self.processes
        for rollout in range(self.rank * share, (self.rank + 1) * share):
            request = f"trl-budget-{self.batch}-{prompt}-{round_index}-{rollout}"
            self.engine.add_request(request, {"prompt_token_ids": self.prompt_ids[prompt]}, self.params)
            self.requests[request] = (prompt, round_index, rollout)

    def step(self) -> tuple[int, list[tuple[int, int]], list[Rollout]]:
        """One engine step: the requests pending on every process, the round of every rollout finished on any
        process, and this process's finished rollouts."""
        from trl.generation.vllm_generation import extract_logprobs

        mine = []
        for output in self.engine.step() if self.requests else ():
            if output.finished and output.request_id in self.requests:
                prompt, round_index, rollout = self.requests.pop(output.request_id)
                logprobs = extract_logprobs([output])[0]
                mine.append(((prompt, round_index), rollout, list(output.outputs[0].token_ids),
                             None if logprobs is None else [top[0] for top in logprobs[0]]))
        event = (len(self.requests), [key for key, *_ in mine])
        if self.processes == 1:
            return (*event, mine)
        from accelerate.utils import gather_object

        events = gather_object([event])
        return sum(pending for pending, _ in events), [key for _, keys in events for key in keys], mine

    def close(self) -> None:
        if self.requests:  # a failure: nothing of this batch stays in the engine
            self.engine.abort_request(list(self.requests))


class _ServerRollouts:
    """Server mode: the main process sends each prompt's round to TRL's vLLM server as a request of its own (n = its
    rollouts, on a thread of its own), so that rounds of different prompts are in flight together and the server's
    engine batches them; each step waits for at least one round and broadcasts the finished rounds to every process,
    which takes its share of each (rollouts rank·c/P to (rank+1)·c/P − 1)."""

    def __init__(self, trainer, prompt_ids: list[list[int]]):
        from concurrent.futures import ThreadPoolExecutor

        generation = trainer.vllm_generation
        self.prompt_ids = prompt_ids
        self.processes, self.rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
        self.main = trainer.accelerator.is_main_process
        self.client = generation.vllm_client if self.main else None
        self.params = {**_sampling(generation), "structured_outputs_regex": generation.structured_outputs_regex,
                       "generation_kwargs": generation.generation_kwargs}
        self.pool = ThreadPoolExecutor(max_workers=max(len(prompt_ids), 1)) if self.main else None
        self.in_flight: dict = {}  # future -> (prompt, round)

    def send(self, prompt: int, round_index: int, count: int) -> None:
        if self.main:
            future = self.pool.submit(self.client.generate, prompts=[self.prompt_ids[prompt]], n=count, **self.params)
            self.in_flight[future] = (prompt, round_index)

    def step(self) -> tuple[int, list[tuple[int, int]], list[Rollout]]:
        """Wait for a round: the requests pending, the round of every rollout finished, and this process's share."""
        payload = [self._finished_rounds() if self.main else None]
        if self.processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(payload, from_process=0)
        pending, rounds, error = payload[0]
        if error is not None:  # raised on every process, so that none waits for the others
            raise RuntimeError(f"rounds prompt by prompt: a request to the vLLM server failed: {error}")
        everywhere, mine = [], []
        for key, completions, logprobs in rounds:
            everywhere += [key] * len(completions)
            share = len(completions) // self.processes
            for rollout in range(self.rank * share, (self.rank + 1) * share):
                mine.append((key, rollout, completions[rollout],
                             None if logprobs is None else [top[0] for top in logprobs[rollout]]))
        return pending, everywhere, mine

    def _finished_rounds(self) -> tuple[int, list, str | None]:
        from concurrent.futures import FIRST_COMPLETED, wait

        done = wait(list(self.in_flight), return_when=FIRST_COMPLETED)[0] if self.in_flight else ()
        rounds = []
        for future in sorted(done, key=self.in_flight.get):  # by key: the order never depends on timing
            key = self.in_flight.pop(future)
            try:
                output = future.result()
            except Exception as error:  # sent to every process, which raise it together
                return len(self.in_flight), [], f"{type(error).__name__}: {error}"
            rounds.append((key, output["completion_ids"], output["logprobs"]))
        return len(self.in_flight), rounds, None

    def close(self) -> None:
        if self.main:
            for future in self.in_flight:
                future.cancel()
            self.pool.shutdown(wait=True)  # a request already sent finishes; its rollouts are dropped


class _Scored:
    """One iteration's finished rounds, scored together on every process: (prompt, round) of each, in key order, and
    where its rows lie. Every process scores an equal share of each round (`share[key]` rollouts: its rollouts
    `rank * share ...`), so the gathered rewards, lengths and outcomes hold every process's rows in turn, each process's
    laid out alike: the rounds in key order, each round's share in rollout order."""

    def __init__(self, keys: list[tuple[int, int]], shares: list[int], processes: int, output: dict,
                 rewards: torch.Tensor, lengths: torch.Tensor, outcomes: np.ndarray):
        self.output, self.rewards, self.lengths, self.outcomes = output, rewards, lengths, outcomes
        self.processes, self.local_rows = processes, int(sum(shares))
        starts = np.cumsum([0, *shares])
        self.rows = {key: np.arange(starts[i], starts[i + 1]) for i, key in enumerate(keys)}  # this process's rows

    def gathered_rows(self, key: tuple[int, int], rank: int) -> np.ndarray:
        """Where process `rank`'s rows of round `key` lie in the gathered rewards, lengths and outcomes."""
        return rank * self.local_rows + self.rows[key]

    def round_outcomes(self, key: tuple[int, int]) -> np.ndarray:
        """The outcomes of round `key`, in rollout order (process by process)."""
        return np.concatenate([self.outcomes[self.gathered_rows(key, rank)] for rank in range(self.processes)])


def generate_prompt_by_prompt(trainer, rule, prompts: list[dict[str, Any]]) -> GeneratedRounds:
    """The batch's rounds up to where every prompt has stopped or waits for the rule's shared decision, generated on
    the trainer's vLLM engine prompt by prompt and scored by TRL; laid out as the synchronous path lays them.

    On several processes every process runs the same schedule on the same events: each prompt's round is dealt evenly
    over the processes; each step, every process learns which rollouts finished anywhere (colocate: one collective
    after each engine step; server: the main process broadcasts the rounds the server returned), so all of them see a
    round complete in the same step; the step's complete rounds are scored on every process at once, each scoring its
    share; and the schedule hears of them in the order of their keys. Where a round cannot be dealt evenly, nothing
    goes prompt by prompt."""
    processes, rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
    schedule = PerPromptSchedule(rule, len(prompts))
    first = schedule.first_round()
    if processes > 1 and (not schedule.alone or (first % processes).any()):
        return GeneratedRounds(len(prompts), processes, rank)  # every round the synchronous path's
    generation = trainer.vllm_generation
    if trainer.state.global_step != trainer._last_loaded_step:  # as TRL's generation step syncs the weights
        generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step
    prompt_ids = [list(ids) for ids in trainer._tokenize_prompts([row["prompt"] for row in prompts])[0]]
    source = (_ServerRollouts if generation.mode == "server" else _EngineRollouts)(trainer, prompt_ids)
    finished: dict[tuple[int, int], dict[int, Rollout]] = {}  # (prompt, round) -> this process's rollouts finished
    done: dict[tuple[int, int], int] = {}  # (prompt, round) -> its rollouts finished on every process

    def send(prompt: int, round_index: int, count: int) -> None:
        finished[(prompt, round_index)], done[(prompt, round_index)] = {}, 0
        source.send(prompt, round_index, count)

    scored: list[_Scored] = []
    try:
        for prompt, count in enumerate(first):
            if count:
                send(prompt, 0, int(count))
        while True:
            pending, everywhere, mine = source.step()
            for rollout in mine:
                finished[rollout[0]][rollout[1]] = rollout
            for key in everywhere:
                done[key] += 1
            ready = sorted({key for key in everywhere if done[key] == schedule.rounds[key[1]][key[0]]})
            going = []
            if ready:
                scored.append(_score(trainer, prompts, prompt_ids, ready, finished, processes))
                for key in ready:
                    going += schedule.finished(*key, scored[-1].round_outcomes(key))
            for prompt, round_index, count in going:
                send(prompt, round_index, count)
            if not pending and not going:  # the same on every process: every rollout sent has finished
                break
    finally:
        source.close()
    return _laid_out(trainer, schedule, scored)


def _score(trainer, prompts, prompt_ids, ready: list[tuple[int, int]], finished: dict, processes: int) -> _Scored:
    """TRL's scoring of this process's rows of the `ready` rounds, with its engine's completions as its generation."""
    shares = [len(finished[key]) for key in ready]
    rollouts = [round_[index] for round_ in map(finished.pop, ready) for index in sorted(round_)]
    row_prompts = [prompt for (prompt, _), share in zip(ready, shares) for _ in range(share)]
    logprobs = [rollout[3] for rollout in rollouts]
    trainer._replayed = Replayed([prompt_ids[prompt] for prompt in row_prompts], [rollout[2] for rollout in rollouts],
                                 None if any(lp is None for lp in logprobs) else logprobs)
    try:
        output, rewards, lengths = trainer._scored_rows([prompts[prompt] for prompt in row_prompts], trl_rows=False)
    finally:
        trainer._replayed = None
    return _Scored(ready, shares, processes, output, rewards, lengths, trainer.rewards.outcomes(rewards))


def _laid_out(trainer, schedule: PerPromptSchedule, scored: list[_Scored]) -> GeneratedRounds:
    """The rounds decided prompt by prompt as the synchronous path lays them out: each round's rows process by
    process, each process's prompt by prompt, with this process's TRL outputs and every process's rewards, lengths and
    outcomes; and the order TRL logged them in."""
    processes, rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
    pad_token_id = getattr(trainer, "_tokenizer", trainer.processing_class).pad_token_id
    evidence = schedule.synchronous_rounds()  # replays the rule over the rounds, checking every one
    piece_of = {key: piece for piece in scored for key in piece.rows}
    rounds = GeneratedRounds(schedule.num_prompts, processes, rank)
    for round_index, counts in enumerate(schedule.rounds):
        keys = [(int(prompt), round_index) for prompt in np.flatnonzero(counts)]
        shares, starts = counts // processes, np.cumsum(counts) - counts  # starts: each prompt's first round slot
        order = np.concatenate([starts[prompt] + process * shares[prompt] + np.arange(shares[prompt])
                                for process in range(processes) for prompt, _ in keys])
        gathered = [(piece_of[key], piece_of[key].gathered_rows(key, process))
                    for process in range(processes) for key in keys]  # in `order`
        output = merge_outputs([take_rows(piece_of[key].output, piece_of[key].rows[key]) for key in keys],
                               pad_token_id)
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
        output["num_items_in_batch"] = _summed(trainer, loss_mask.sum())  # the round's tokens on every process
        rounds.add(output, order, counts, torch.cat([piece.rewards[torch.as_tensor(rows)] for piece, rows in gathered]),
                   torch.cat([piece.lengths[torch.as_tensor(rows)] for piece, rows in gathered]),
                   np.concatenate([piece.outcomes[rows] for piece, rows in gathered]))
    if not np.array_equal(rounds.wins, evidence.wins):
        raise RuntimeError("rounds prompt by prompt: the rows laid out do not hold the outcomes the rule decided on.")
    rounds.rounds_ahead = len(schedule.rounds)
    rounds.logged_ahead = _logged_order(scored, schedule.rounds, processes)
    return rounds


def _summed(trainer, value: torch.Tensor) -> torch.Tensor:
    """`value` summed over the processes."""
    if trainer.accelerator.num_processes == 1:
        return value
    return trainer.accelerator.gather(value.reshape(1)).sum()


def _logged_order(scored: list[_Scored], rounds: list[np.ndarray], processes: int) -> np.ndarray:
    """Each row's index among the rounds' rows (round by round, each round process by process and each process's
    rows prompt by prompt), in the order TRL logged them: scoring by scoring, each gathered process by process."""
    first_row = {}  # (prompt, round, process) -> the index of its first row among the rounds' rows
    offset = 0
    for round_index, counts in enumerate(rounds):
        shares = counts // processes
        for process in range(processes):
            for prompt in np.flatnonzero(counts):
                first_row[(int(prompt), round_index, process)] = offset
                offset += int(shares[prompt])
    return np.concatenate([first_row[(*key, process)] + np.arange(rows.size)
                           for piece in scored for process in range(processes)
                           for key, rows in piece.rows.items()]).astype(np.int64)
