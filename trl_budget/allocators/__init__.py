"""Rollout-budget allocators: how many rollouts each prompt of a generation batch receives.

Pure numpy, no torch and no TRL, so that every allocator can be used and tested alone on arrays. One module per idea:
`registry` (names and dotted paths), `solver` (the exact greedy solver they share), `base` (the checks every
allocator makes), one module per allocator (`uniform`, `knapsack`, `coba`, `spo` (one rollout a prompt), `vip` (VIP's variance-minimising split), and `reinforce_ada`, a rule of rounds chosen by the same name), and
`token_cap` (a cap on expected
completion tokens, solved by a search on its Lagrange multiplier).
"""

from .registry import Allocator, allocator_class, allocator_names, register_allocator, release_pass_rate_rule
from .solver import spread_evenly, take_largest_gains
from .uniform import UniformAllocator  # registered in this order: uniform, knapsack, coba
from .knapsack import KnapsackAllocator  # noqa: I001
from .coba import CoBAAllocator
from .reinforce_ada import ReinforceAda
from .spo import SPOAllocator
from .vip import VIPAllocator

__all__ = [
    "Allocator",
    "CoBAAllocator",
    "KnapsackAllocator",
    "ReinforceAda",
    "SPOAllocator",
    "UniformAllocator",
    "VIPAllocator",
    "allocator_class",
    "allocator_names",
    "register_allocator",
    "release_pass_rate_rule",
    "spread_evenly",
    "take_largest_gains",
]
