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


@pytest.fixture(scope="session")
def tool_model(tmp_path_factory):
    """The tiny model trained to call the calculator tool (tool_task.py), saved once for every test that uses it."""
    from tool_task import build_tool_model

    return build_tool_model(tmp_path_factory.mktemp("tool-model"))
