"""trl_budget: per-prompt rollout budgets for GRPO in Hugging Face TRL (Knapsack RL and CoBA-RL)."""

from .allocators import Allocator, CoBAAllocator, KnapsackAllocator, UniformAllocator
from .config import BudgetGRPOConfig
from .tracker import CapabilityTracker, prompt_key
from .trainer import BudgetGRPOTrainer

__version__ = "0.1.0"

__all__ = [
    "Allocator",
    "BudgetGRPOConfig",
    "BudgetGRPOTrainer",
    "CapabilityTracker",
    "CoBAAllocator",
    "KnapsackAllocator",
    "UniformAllocator",
    "prompt_key",
]
