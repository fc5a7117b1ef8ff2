"""trl_budget: per-prompt rollout budgets for GRPO in Hugging Face TRL (Knapsack RL and CoBA-RL)."""

from .allocators import CoBAAllocator, KnapsackAllocator, UniformAllocator
from .tracker import CapabilityTracker, prompt_key

__version__ = "0.1.0"

__all__ = ["CapabilityTracker", "CoBAAllocator", "KnapsackAllocator", "UniformAllocator", "prompt_key"]
