"""A tool-calling task whose rollouts show their prompt, and a tiny model that does it: `a+b=` -> call `add(a, b)`,
then answer with the tool's reply.

The tokenizer is a character tokenizer with qwen3's markers (`<|im_start|>`, `<|im_end|>`, `<tool_call>`, ...) as
special tokens, and a compact chat template in qwen3's format that TRL accepts for tools (prefix-preserving, renders a
tool-calling conversation) with TRL's own qwen3 response template to parse the calls. The model (two layers, hidden 64,
head size 32, untied embeddings: what vLLM's CPU backend can serve) is trained in under a minute on whole
conversations; greedily it then calls `add` with its prompt's digits and answers with the tool's reply, so a rollout
handed to another prompt shows, row by row: its call names other digits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from datasets import Dataset

from trl_budget.demo.tiny import build_tiny_model

TEMPLATE = (
    "{% for message in messages %}"
    "{% if message.role == 'user' %}<|im_start|>user\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}<tool_call>\n{{ {'name': call.function.name, "
    "'arguments': call.function.arguments} | tojson }}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def build_tool_tokenizer():
    from helpers import build_chat_tokenizer
    from trl.chat_template_utils import qwen3_template

    tokenizer = build_chat_tokenizer("0123456789+-*= {}\",")
    tokenizer.chat_template = TEMPLATE
    tokenizer.response_template = qwen3_template
    return tokenizer


def conversation(a: int, b: int) -> list[dict]:
    """The whole conversation the model learns: the question, the call, the tool's reply, the answer."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}
    return [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "add", "content": str(a + b)}, {"role": "assistant", "content": str(a + b)}]


def tool_dataset(size: int = 6, seed: int = 0) -> Dataset:
    """`size` (at most 10) conversational prompts `a+b=` whose first digits all differ."""
    rng = np.random.default_rng(seed)
    firsts, seconds = rng.permutation(10)[:size], rng.integers(0, 10, size)
    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)}
                              for a, b in zip(firsts, seconds)])


def build_tool_model(folder: str | Path, steps: int = 800, seed: int = 0) -> Path:
    """Train the tiny model on whole tool conversations and save it with its tokenizer; returns the folder."""
    tokenizer = build_tool_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, seed=seed, head_size=32,
                             tie_word_embeddings=False)
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    # Each of the 100 conversations rendered and tokenized once: rendering the template with the tool's schema, batch
    # after batch, took longer than the training steps themselves.
    pairs = [(a, b) for a in range(10) for b in range(10)]
    texts = [tokenizer.apply_chat_template(conversation(a, b), tools=[add], tokenize=False) for a, b in pairs]
    token_ids = dict(zip(pairs, tokenizer(texts)["input_ids"]))
    for _ in range(steps):
        batch = [token_ids[int(a), int(b)] for a, b in rng.integers(0, 10, (32, 2))]
        encoded = tokenizer.pad({"input_ids": batch}, return_tensors="pt")
        labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        loss = model(**encoded, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def called_with(completion: list[dict]) -> tuple | None:
    """The arguments of a rollout's first `add` call, and the tool's reply to it, from TRL's completion messages."""
    call = next((message for message in completion if message.get("tool_calls")), None)
    reply = next((message for message in completion if message.get("role") == "tool"), None)
    if call is None or reply is None:
        return None
    arguments = call["tool_calls"][0]["function"]["arguments"]
    return (arguments.get("a"), arguments.get("b")), reply["content"]


def final_answer(completion: list[dict]) -> str:
    return completion[-1].get("content") or "" if completion[-1].get("role") == "assistant" else ""
