"""A tiny model whose completions have reasoning-like lengths, set by hand: for the engine-cost benchmark at real lengths.

The prompt is one letter naming a length class k. The model is a Markov chain over tokens, written into a Llama's
weights: every layer adds nothing (its output projections are zero), so the next token's logits depend on the current
token alone (one-hot embeddings, lm_head rows holding the log-probabilities). After the class letter it writes its
filler letter; after each filler, `<eos>` with probability 1 / mean_k, else the filler again. A completion's length is
geometric with mean `mean_k` (capped by `max_completion_length`), exactly, at temperature 1. `class_means` ties the
classes to difficulty as reasoning models' lengths are tied to it: the harder the prompt (the lower its pass rate),
the longer its completions.

Two layers, hidden size 64, head size 32, untied embeddings: what vLLM's CPU backend serves and reloads.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

CLASSES = "abcdefgh"  # prompt letters, one per length class
FILLERS = "ABCDEFGH"  # the letter each class's completion repeats
IMPOSSIBLE = -40.0  # log-probability of every transition the chain never takes


def class_means(shortest: float, longest: float, classes: int = len(CLASSES)) -> np.ndarray:
    """Mean completion length of each class: class 0 (the easiest, pass rate 1) `shortest`, the last class (pass rate
    0) `longest`, evenly in between."""
    return np.linspace(shortest, longest, classes)


def class_of_pass_rate(pass_rate: float, classes: int = len(CLASSES)) -> int:
    """The length class of a prompt of this pass rate: 0 for a prompt always solved, the last for one never solved."""
    return min(int((1.0 - pass_rate) * classes), classes - 1)


def build_length_model(folder: str | Path, means: np.ndarray) -> Path:
    """Write the model and its tokenizer to `folder`; completions of class k have mean length `means[k]`."""
    import torch

    from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model

    tokenizer = build_char_tokenizer(CLASSES + FILLERS)
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, head_size=32, tie_word_embeddings=False)
    vocab, width = len(tokenizer), model.config.hidden_size
    logits = np.full((vocab, vocab), IMPOSSIBLE)  # logits[current, next]
    logits[:, tokenizer.eos_token_id] = 0.0  # any other token ends the completion
    for k, (letter, filler) in enumerate(zip(CLASSES, FILLERS)):
        current, repeated = tokenizer.convert_tokens_to_ids([letter, filler])
        logits[current] = IMPOSSIBLE
        logits[current, repeated] = 0.0
        logits[repeated] = IMPOSSIBLE
        logits[repeated, tokenizer.eos_token_id] = math.log(1.0 / means[k])
        logits[repeated, repeated] = math.log(1.0 - 1.0 / means[k])
    with torch.no_grad():
        for layer in model.model.layers:  # every block adds nothing: the residual stream is the token's embedding
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embeddings = torch.zeros(vocab, width)
        embeddings[:, :vocab] = torch.eye(vocab)
        model.model.embed_tokens.weight.copy_(embeddings)
        model.model.norm.weight.fill_(1.0)
        # The final norm turns the one-hot e_t into sqrt(width) e_t, so row `next` of lm_head holds logits / sqrt.
        head = torch.zeros(vocab, width)
        head[:, :vocab] = torch.as_tensor(logits.T, dtype=torch.float32) / math.sqrt(width)
        model.lm_head.weight.copy_(head)
    model.config.rms_norm_eps = 1e-12
    model.config.max_position_embeddings = 4096
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
