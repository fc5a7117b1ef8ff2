"""What the tests share: tiny data, rewards, a config and one way to build the trainer."""

import numpy as np
import torch
from datasets import Dataset

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.demo.tiny import build_tiny_model

ALPHABET = "0123456789+-*= "


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
        min_generations=2,
        max_generations=8,
        seed=0,
        temperature=1.0,
    )
    kwargs.update(overrides)
    return kwargs


def make_trainer(output_dir, tokenizer, *, reward_funcs=parity_reward, dataset=None, model=None,
                 trainer_class=BudgetGRPOTrainer, **options):
    """The trainer on the tiny model and data; `options` are config settings or trainer keyword arguments."""
    trainer_options = {name: options.pop(name) for name in ("allocator", "tracker", "peft_config", "eval_dataset")
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
