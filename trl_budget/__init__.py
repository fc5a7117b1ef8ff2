"""trl_budget: per-prompt rollout budgets for GRPO in Hugging Face TRL (Knapsack RL and CoBA-RL).

The allocators and the capability tracker are plain numpy: `from trl_budget import KnapsackAllocator` works without
torch, transformers or TRL installed. The config and the trainer import TRL when first used (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "Allocator": "allocators",
    "CoBAAllocator": "allocators",
    "KnapsackAllocator": "allocators",
    "ReinforceAda": "allocators",
    "SPOAllocator": "allocators",
    "SPOTracker": "spo",
    "UniformAllocator": "allocators",
    "allocator_names": "allocators",
    "register_allocator": "allocators",
    "CapabilityTracker": "tracker",
    "prompt_key": "tracker",
    "BudgetGRPOConfig": "config",
    "BudgetGRPOTrainer": "trainer",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .allocators import (
        Allocator,
        CoBAAllocator,
        KnapsackAllocator,
        ReinforceAda,
        SPOAllocator,
        UniformAllocator,
        allocator_names,
        register_allocator,
    )
    from .config import BudgetGRPOConfig
    from .spo import SPOTracker
    from .tracker import CapabilityTracker, prompt_key
    from .trainer import BudgetGRPOTrainer


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
