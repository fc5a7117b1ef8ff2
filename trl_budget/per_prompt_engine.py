"""Rounds generated prompt by prompt on the colocated vLLM engine (`budget_per_prompt_rounds`).

The round-synchronous path sends one blocking request a round, so every prompt of a round waits for the round's
longest completion before any prompt's next round is sent. Here the engine's request queue is driven directly: every
rollout is its own request (n = 1, as TRL's colocate generation sends them); the engine is stepped; as soon as all of a
prompt's rollouts of a round have finished they are scored, and the prompt's next round, when `PerPromptSchedule` finds
it provably the prompt's own, is added to the engine while the other prompts' rollouts keep decoding. What finished in
one engine step is scored together by TRL's own pipeline (`_generate_and_score_completions`), whose generation step
returns the engine's completions for exactly those rows (`Replayed`, which checks that each goes to the prompt it was
generated from). Once every prompt has stopped or waits, the rounds are handed back to the rule (which is replayed over
them, checking every round) and laid out as the synchronous path lays them out; the rest of the batch, if any, is the
synchronous path's.

Relies on TRL 1.16's colocate internals: `vllm_generation.llm` (the in-process engine) and its sampling settings,
`_tokenize_prompts`, and the weight-sync bookkeeping `_last_loaded_step`.
"""

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

    kwargs = {"n": 1, "repetition_penalty": generation.repetition_penalty, "temperature": generation.temperature,
              "top_p": generation.top_p, "top_k": generation.top_k,
              "min_p": 0.0 if generation.min_p is None else generation.min_p,
              "max_tokens": generation.max_completion_length, "logprobs": generation.logprobs,
              **generation.generation_kwargs}
    if generation.structured_outputs_regex is not None:
        kwargs["structured_outputs"] = StructuredOutputsParams(regex=generation.structured_outputs_regex)
    elif isinstance(kwargs.get("structured_outputs"), dict):
        kwargs["structured_outputs"] = StructuredOutputsParams(**kwargs["structured_outputs"])
    return SamplingParams(**kwargs)


class _Scored:
    """One engine step's finished rounds, scored together: (prompt, round) of each, their rows in the output."""

    def __init__(self, keys: list[tuple[int, int]], counts: list[int], output: dict, rewards: torch.Tensor,
                 lengths: torch.Tensor, outcomes: np.ndarray):
        self.output, self.rewards, self.lengths, self.outcomes = output, rewards, lengths, outcomes
        starts = np.cumsum([0, *counts])
        self.rows = {key: np.arange(starts[i], starts[i + 1]) for i, key in enumerate(keys)}


def generate_prompt_by_prompt(trainer, rule, prompts: list[dict[str, Any]]) -> GeneratedRounds:
    """The batch's rounds up to where every prompt has stopped or waits for the rule's shared decision, generated on
    the trainer's colocated engine prompt by prompt and scored by TRL; laid out as the synchronous path lays them."""
    schedule = PerPromptSchedule(rule, len(prompts))
    generation = trainer.vllm_generation
    if trainer.state.global_step != trainer._last_loaded_step:  # as TRL's generation step syncs the weights
        generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step
    prompt_ids = [list(ids) for ids in trainer._tokenize_prompts([row["prompt"] for row in prompts])[0]]
    engine, params, batch = generation.llm.llm_engine, sampling_params(generation), next(_batches)
    requests: dict[str, tuple[int, int, int]] = {}  # request id -> (prompt, round, rollout)
    finished: dict[tuple[int, int], dict[int, Any]] = {}  # (prompt, round) -> its rollouts finished so far

    def submit(prompt: int, round_index: int, count: int) -> None:
        finished[(prompt, round_index)] = {}
        for rollout in range(count):
            request = f"trl-budget-{batch}-{prompt}-{round_index}-{rollout}"
            engine.add_request(request, {"prompt_token_ids": prompt_ids[prompt]}, params)
            requests[request] = (prompt, round_index, rollout)

    scored: list[_Scored] = []
    try:
        for prompt, count in enumerate(schedule.first_round()):
            if count:
                submit(prompt, 0, int(count))
        while requests:
            ready = []
            for output in engine.step():
                if output.finished and output.request_id in requests:
                    prompt, round_index, rollout = requests.pop(output.request_id)
                    finished[(prompt, round_index)][rollout] = output
                    if len(finished[(prompt, round_index)]) == schedule.rounds[round_index][prompt]:
                        ready.append((prompt, round_index))
            if ready:
                scored.append(_score(trainer, prompts, prompt_ids, ready, finished))
                for key in ready:
                    for going in schedule.finished(*key, scored[-1].outcomes[scored[-1].rows[key]]):
                        submit(*going)
    finally:
        if requests:  # a failure: nothing of this batch stays in the engine
            engine.abort_request(list(requests))
    return _laid_out(schedule, scored, getattr(trainer, "_tokenizer", trainer.processing_class).pad_token_id)


def _score(trainer, prompts, prompt_ids, ready: list[tuple[int, int]], finished: dict) -> _Scored:
    """TRL's scoring of the rows of the `ready` rounds, with the engine's completions as its generation."""
    from trl.generation.vllm_generation import extract_logprobs

    sizes = [len(finished[key]) for key in ready]
    outputs = [rollouts[rollout] for rollouts in map(finished.pop, ready) for rollout in sorted(rollouts)]
    row_prompts = [prompt for (prompt, _), size in zip(ready, sizes) for _ in range(size)]
    logprobs, _ = extract_logprobs(outputs)
    trainer._replayed = Replayed([prompt_ids[prompt] for prompt in row_prompts],
                                 [list(output.outputs[0].token_ids) for output in outputs],
                                 None if logprobs is None else [[top[0] for top in seq] for seq in logprobs])
    try:
        output, rewards, lengths = trainer._scored_rows([prompts[prompt] for prompt in row_prompts], trl_layout=False)
    finally:
        trainer._replayed = None
    return _Scored(ready, sizes, output, rewards, lengths, trainer.rewards.outcomes(rewards))


def _laid_out(schedule: PerPromptSchedule, scored: list[_Scored], pad_token_id: int) -> GeneratedRounds:
    """The rounds decided prompt by prompt as the synchronous path lays them out: each round's rows prompt by prompt,
    with their TRL outputs, rewards, lengths and outcomes; and the order TRL logged them in."""
    evidence = schedule.synchronous_rounds()  # replays the rule over the rounds, checking every one
    where = {key: (piece, rows) for piece in scored for key, rows in piece.rows.items()}
    rounds = GeneratedRounds(schedule.num_prompts, 1, 0)
    position = {}  # (piece, row) -> the row's index among the rounds' rows, round by round
    for round_index, counts in enumerate(schedule.rounds):
        parts = [where[(int(prompt), round_index)] for prompt in np.flatnonzero(counts)]
        for piece, rows in parts:
            for row in rows:
                position[(id(piece), int(row))] = len(position)
        output = merge_outputs([take_rows(piece.output, rows) for piece, rows in parts], pad_token_id)
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
        output["num_items_in_batch"] = loss_mask.sum()  # one process: its tokens are the batch's
        rounds.add(output, np.arange(int(counts.sum())), counts,
                   torch.cat([piece.rewards[torch.as_tensor(rows)] for piece, rows in parts]),
                   torch.cat([piece.lengths[torch.as_tensor(rows)] for piece, rows in parts]),
                   np.concatenate([piece.outcomes[rows] for piece, rows in parts]))
    if not np.array_equal(rounds.wins, evidence.wins):
        raise RuntimeError("rounds prompt by prompt: the rows laid out do not hold the outcomes the rule decided on.")
    rounds.rounds_ahead = len(schedule.rounds)
    rounds.logged_ahead = np.array([position[(id(piece), row)] for piece in scored
                                    for row in range(len(piece.outcomes))], dtype=np.int64)
    return rounds
