"""GRPO's rule: the same count for every prompt."""

from __future__ import annotations

import numpy as np

from .base import _BoundedAllocator
from .registry import register_allocator


@register_allocator("uniform")
class UniformAllocator(_BoundedAllocator):
    """GRPO's rule: every prompt gets the same count (the remainder, if any, goes to the first prompts)."""

    def __init__(self, min_generations: int = 1, max_generations: int = 1 << 30):
        super().__init__(min_generations, max_generations)

    def allocate(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
        rates = self._check_request(pass_rates, budget, failure_rate)
        base, remainder = divmod(int(budget), rates.size)
        counts = np.full(rates.size, base, dtype=np.int64)
        counts[:remainder] += 1
        return counts

    def value(self, counts, pass_rates, failure_rate: float | None = None) -> float:
        """Minus the spread of the counts: 0 for an even split, lower for any other."""
        counts, _ = self._check_counts(counts, pass_rates)
        return -float(np.sum((counts - counts.mean()) ** 2))
