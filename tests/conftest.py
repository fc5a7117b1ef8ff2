import os

import pytest
from helpers import ALPHABET, make_dataset

from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tokenizer():
    return build_char_tokenizer(ALPHABET)


@pytest.fixture
def tiny_model(tokenizer):
    return build_tiny_model(tokenizer, seed=0)


@pytest.fixture
def dataset():
    return make_dataset()
