"""SPO's allocation (`budget_allocator="spo"`): one rollout of each prompt, the batch's rollouts spent on more prompts
(the release trains `n = 1`: no group, no group barrier). Choosing it also chooses SPO's baseline and prompt sampling
(`BudgetGRPOConfig` resolves them); `SPOAllocator` itself is the allocation alone."""

from __future__ import annotations

from ..checks import check_whole_number
from .uniform import UniformAllocator
from .registry import register_allocator


@register_allocator("spo")
class SPOAllocator(UniformAllocator):
    """Every prompt gets `rollouts_per_prompt` rollouts (1, as SPO's release): the batch draws `budget /
    rollouts_per_prompt` prompts, so a budget of any other size is refused."""

    def __init__(self, rollouts_per_prompt: int = 1):
        check_whole_number("rollouts_per_prompt", rollouts_per_prompt, 1)
        super().__init__(rollouts_per_prompt, rollouts_per_prompt)
        self.rollouts_per_prompt = int(rollouts_per_prompt)
