"""A task whose answer names its prompt, and a tiny model that solves it: each completion shows where it came from.

Prompts are `a+b=` for distinct digit pairs; the model is trained, in seconds, to answer with `a` followed by a few
random digits, the copied digit weighed 20 times in the loss. The first character of a completion is then its
prompt's first digit (with probability 0.9993 at temperature 1, and about 0.99999 at the tests' temperature 0.7), so
a completion handed to the wrong prompt shows, row by row. The random tail makes the completions'
lengths vary, which gives the parity reward mixed groups to allocate over.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from datasets import Dataset

from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model

ALPHABET = "0123456789+-*= "


def copy_dataset(size: int = 10, seed: int = 0) -> Dataset:
    """`size` (at most 10) prompts `a+b=` whose first digits `a` all differ, so that no two prompts share an answer."""
    rng = np.random.default_rng(seed)
    firsts, seconds = rng.permutation(10)[:size], rng.integers(0, 10, size)
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a)} for a, b in zip(firsts, seconds)])


def belongs_to_its_prompt(prompt: str, completion: str) -> bool:
    return completion[:1] == prompt[:1]


def misplaced_rows(plan, output, tokenizer, slots=None) -> list[tuple[str, str, str]]:
    """Rows whose completion the plan credits to another prompt than the one it was generated for.

    The plan credits row i to the prompt of its slot `slots[i]` (default `plan.slot_order`: every row, on one
    process); the row shows the prompt the engine was given and the completion it returned. Returns (credited prompt,
    prompt shown, completion) for every row that disagrees.
    """
    prompt_of_slot = np.repeat(np.arange(len(plan.prompts)), plan.counts)
    wrong = []
    for row, slot in enumerate((plan.slot_order if slots is None else slots).tolist()):
        credited = plan.prompts[prompt_of_slot[slot]]["prompt"]
        shown = tokenizer.decode(output["prompt_ids"][row][output["prompt_mask"][row].bool()], skip_special_tokens=True)
        completion = tokenizer.decode(output["completion_ids"][row][output["completion_mask"][row].bool()],
                                      skip_special_tokens=True)
        if shown != credited or not belongs_to_its_prompt(credited, completion):
            wrong.append((credited, shown, completion))
    return wrong


def build_copy_model(folder: str | Path, steps: int = 600, seed: int = 0) -> Path:
    """Train the tiny model on the copy task and save it (with its tokenizer) to `folder`; returns the folder.

    Two layers, hidden size 64, head size 32 and untied embeddings: what vLLM's CPU backend can serve and reload.
    """
    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=seed, head_size=32,
                             tie_word_embeddings=False)
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        inputs, labels = _copy_batch(tokenizer, rng, 64)
        logits = model(input_ids=inputs).logits[:, :-1]
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels[:, 1:], reduction="none")
        answer = labels[:, 1:] != -100
        first = answer & ~torch.nn.functional.pad(answer, (1, 0))[:, :-1]  # the copied digit: weighed 20 times
        loss = (losses * (1 + 19 * first)).sum() / answer.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _copy_batch(tokenizer, rng, size: int):
    """Token ids of `a+b=` + `a` + 0-3 random digits + eos, padded right; the loss covers the answer only."""
    rows, prompt_lengths = [], []
    for a, b in rng.integers(0, 10, (size, 2)):
        tail = "".join(str(digit) for digit in rng.integers(0, 10, rng.integers(0, 4)))
        prompt = tokenizer(f"{a}+{b}=")["input_ids"]
        rows.append(prompt + tokenizer(f"{a}{tail}")["input_ids"] + [tokenizer.eos_token_id])
        prompt_lengths.append(len(prompt))
    width = max(map(len, rows))
    inputs = torch.full((size, width), tokenizer.pad_token_id)
    labels = torch.full((size, width), -100)
    for i, (row, start) in enumerate(zip(rows, prompt_lengths)):
        inputs[i, : len(row)] = torch.tensor(row)
        labels[i, start : len(row)] = torch.tensor(row[start:])
    return inputs, labels
