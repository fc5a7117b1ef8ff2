import os

import numpy as np
import pytest
from datasets import Dataset

from trl_budget.tiny import build_char_tokenizer, build_tiny_model

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ALPHABET = "0123456789+-*= "


def make_dataset(size: int = 6, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, 10, (size, 2))
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in pairs])


def parity_reward(completions, answer, **kwargs):
    """Deterministic in the completion; mixed across rollouts of the same prompt under a random policy."""
    return [float(len(c) % 2 == int(a) % 2) for c, a in zip(completions, answer)]


@pytest.fixture(scope="session")
def tokenizer():
    return build_char_tokenizer(ALPHABET)


@pytest.fixture
def tiny_model(tokenizer):
    return build_tiny_model(tokenizer, seed=0)


@pytest.fixture
def dataset():
    return make_dataset()


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
