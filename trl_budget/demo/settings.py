"""The demo's and the benchmark's settings: the warm start and the RL run (plain dataclasses, cheap to import)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class WarmStartSettings:
    """Supervised warm start of the tiny model: enough to solve easy problems, not hard ones."""

    hidden_size: int = 64
    num_layers: int = 2
    steps: int = 1500
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 0

    def fingerprint(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class RLSettings:
    """The RL run of the demo and of the allocator benchmark."""

    steps: int = 480
    prompts_per_step: int = 8
    num_generations: int = 8
    min_generations: int = 2
    max_generations: int = 32
    train_prompts: int = 240
    eval_prompts: int = 240
    eval_every: int = 60
    eval_samples: int = 4
    histogram_steps: tuple[int, ...] = field(default=(1, 160, 320, 480))
    learning_rate: float = 2e-4
    temperature: float = 1.0
    data_seed: int = 0

    @classmethod
    def for_steps(cls, steps: int, evaluations: int) -> "RLSettings":
        """Settings for a run of `steps`, evaluated `evaluations` times, histograms at its start, thirds and end."""
        marks = tuple(sorted({1, steps // 3 or 1, 2 * steps // 3 or 1, steps}))
        return cls(steps=steps, eval_every=max(1, steps // evaluations), histogram_steps=marks)

    @property
    def rollouts_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations
