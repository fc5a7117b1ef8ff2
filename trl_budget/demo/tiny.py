"""Tiny causal language models and character tokenizers built locally, with no download."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")


def build_char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """A character-level tokenizer over `alphabet`, with pad, eos and unk tokens."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for char in dict.fromkeys(alphabet):
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def build_tiny_model(tokenizer, hidden_size: int = 32, num_layers: int = 1, seed: int = 0, head_size: int = 16,
                     tie_word_embeddings: bool = True) -> LlamaForCausalLM:
    """A small Llama-architecture causal LM sized for `tokenizer`, initialised from `seed`.

    vLLM's CPU attention needs a head size of 32, 64, 80, 96, ... and its in-place weight reload needs untied
    embeddings: `head_size=32, tie_word_embeddings=False` builds a model that a vLLM engine on CPU can serve.
    """
    import torch

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=max(1, hidden_size // head_size),
        num_key_value_heads=max(1, hidden_size // head_size),
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=tie_word_embeddings,
    )
    return LlamaForCausalLM(config)
