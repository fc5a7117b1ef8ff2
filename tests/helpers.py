"""What the tests share: tiny data, rewards, a config, one way to build the trainer and one way to leave a
multi-process run."""

import os
import socket
import sys

import numpy as np
import torch
from datasets import Dataset

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.demo.tiny import build_tiny_model

ALPHABET = "0123456789+-*= "


def free_port() -> int:
    """A port nothing listens on now, so that two launches on one machine do not meet on accelerate's default."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def make_dataset(size: int = 6, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, 10, (size, 2))
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in pairs])


def parity_reward(completions, answer, **kwargs):
    """Deterministic in the completion; mixed across rollouts of the same prompt under a random policy."""
    return [float(len(c) % 2 == int(a) % 2) for c, a in zip(completions, answer)]


def always_one(completions, **kwargs):
    """A reward every rollout earns, as a format reward that a well-formatted wrong answer still gets."""
    return [1.0] * len(completions)


def config_kwargs(output_dir, **overrides):
    kwargs = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=4,
        max_steps=4,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        budget_allocator="knapsack",  # the rule most tests exercise; the defaults have tests of their own
        budget_min_generations=2,
        budget_max_generations=8,
        seed=0,
        temperature=1.0,
    )
    kwargs.update(overrides)
    return kwargs


def grpo_kwargs(output_dir, **overrides):
    """`config_kwargs` less the budget's own settings: what a plain `GRPOConfig` takes."""
    kwargs = config_kwargs(output_dir, **overrides)
    for name in ("budget_allocator", "budget_min_generations", "budget_max_generations"):
        kwargs.pop(name)
    return kwargs


def make_trainer(output_dir, tokenizer, *, reward_funcs=parity_reward, dataset=None, model=None,
                 trainer_class=BudgetGRPOTrainer, **options):
    """The trainer on the tiny model and data; `options` are config settings or trainer keyword arguments."""
    trainer_options = {name: options.pop(name) for name in ("allocator", "tracker", "peft_config", "eval_dataset",
                                                            "rollout_func", "environment_factory", "tools")
                       if name in options}
    return trainer_class(
        model=model if model is not None else build_tiny_model(tokenizer),
        reward_funcs=reward_funcs,
        args=BudgetGRPOConfig(**config_kwargs(output_dir, **options)),
        train_dataset=dataset if dataset is not None else make_dataset(),
        processing_class=tokenizer,
        **trainer_options,
    )


def parameters_of(trainer) -> dict[str, torch.Tensor]:
    return {name: parameter.detach().clone() for name, parameter in trainer.model.named_parameters()}


def assert_parameters_changed(before: dict[str, torch.Tensor], trainer) -> None:
    """TRL's own check that training trained: every trainable parameter moved."""
    for name, parameter in trainer.model.named_parameters():
        if parameter.requires_grad:
            assert not torch.equal(before[name], parameter), f"parameter {name} did not change"


# The markers of TRL's qwen3 chat template, each one token of a character tokenizer.
QWEN3_MARKERS = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                 "<think>", "</think>")


def build_chat_tokenizer(alphabet: str = ALPHABET):
    """A character tokenizer carrying TRL's own qwen3 chat template (which TRL accepts for environments and tools),
    its markers as special tokens, `<|im_end|>` as the end of a turn."""
    import importlib.resources

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(("<|endoftext|>", *QWEN3_MARKERS))}
    for char in dict.fromkeys(alphabet + "abcdefghijklmnopqrstuvwxyz_<>|/\n:"):
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                        unk_token="<|endoftext|>", padding_side="left",
                                        additional_special_tokens=list(QWEN3_MARKERS))
    tokenizer.chat_template = importlib.resources.files("trl.chat_templates").joinpath("qwen3.jinja").read_text()
    return tokenizer


def assert_resumes_exactly(output_dir, tokenizer, **options):
    """Six steps straight, against three and a resume from their checkpoint: the tracker ends the same. Three prompts,
    each four times in one epoch, so that they come back within the epoch, whose order a resume keeps."""
    from datasets import concatenate_datasets

    options = dict(dataset=concatenate_datasets([make_dataset(3)] * 4), max_steps=6, save_strategy="steps",
                   save_steps=3, **options)
    full = make_trainer(output_dir / "full", tokenizer, **options)
    full.train()
    make_trainer(output_dir / "part", tokenizer, **{**options, "max_steps": 3}).train()
    resumed = make_trainer(output_dir / "part", tokenizer, **options)
    resumed.train(resume_from_checkpoint=str(output_dir / "part" / "checkpoint-3"))
    assert resumed.tracker.state_dict() == full.tracker.state_dict()


def leave_without_teardown(accelerator) -> None:
    """End a process of a multi-process run once every process has finished, without tearing down torch's gloo group.

    Its worker thread frees a finished collective's tensors a moment after the collective returns, and needs the GIL to
    do so: at interpreter shutdown that aborts the process (SIGABRT), and in `destroy_process_group()` it deadlocks
    against the main thread, which joins the worker while holding the GIL. Every collective of the run is complete once
    all processes pass the barrier."""
    accelerator.wait_for_everyone()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
