"""The demo's and the benchmark's settings: the warm start and the RL run (plain dataclasses, cheap to import)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace


# The second allocation study's learning rate (RLSettings.study), chosen on uniform GRPO alone: the one candidate of
# benchmarks/second_study/study_pilot.py that passed every criterion (room gate, uniform ending above its start,
# rollouts without a gradient, batches allocated from history).
STUDY_RATE = 1e-4


@dataclass(frozen=True)
class WarmStartSettings:
    """Supervised warm start of the tiny model: enough to solve easy problems, not hard ones."""

    hidden_size: int = 64
    num_layers: int = 2
    steps: int = 1500
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 0
    label_noise: float = 0.0  # share of supervised answers with one digit changed: a weaker start, for RL to correct

    def fingerprint(self) -> str:
        described = {name: value for name, value in asdict(self).items() if not (name == "label_noise" and not value)}
        return hashlib.sha1(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]


# Reinforce-Ada at the generation cost of uniform GRPO with 8 rollouts per prompt (the third study's arms and the demo):
# K = 4 trained of each prompt, 4 a round for every prompt still active, at most 512 generated per batch of 64 prompts.
REINFORCE_ADA_TRAINED = 4
REINFORCE_ADA_AT_EQUAL_COST = {"reinforce_ada_samples_per_round": 4, "reinforce_ada_max_rounds": 16,
                               "reinforce_ada_max_generated": 512}


@dataclass
class RLSettings:
    """The RL run of the demo and of the allocator benchmark."""

    steps: int = 480  # optimizer updates
    prompts_per_step: int = 8  # prompts per generation batch
    num_generations: int = 8
    updates_per_batch: int = 1  # optimizer updates per generation batch (TRL's steps_per_generation)
    min_generations: int = 2
    max_generations: int = 32
    train_prompts: int = 240
    eval_prompts: int = 240
    train_eval_prompts: int | None = None  # training prompts whose accuracy is measured (None: all)
    levels: tuple[int, ...] | None = None  # difficulty levels of the problems (None: all six)
    eval_every: int = 60
    eval_samples: int = 4
    histogram_steps: tuple[int, ...] = field(default=(1, 160, 320, 480))
    learning_rate: float = 2e-4
    lr_scheduler_type: str = "linear"  # TRL's default: linear decay to 0; "constant_with_warmup" keeps the rate
    warmup_steps: int = 0
    temperature: float = 1.0
    data_seed: int = 0

    @classmethod
    def for_steps(cls, steps: int, evaluations: int) -> "RLSettings":
        """Settings for a run of `steps`, evaluated `evaluations` times, histograms at its start, thirds and end."""
        marks = tuple(sorted({1, steps // 3 or 1, 2 * steps // 3 or 1, steps}))
        return cls(steps=steps, eval_every=max(1, steps // evaluations), histogram_steps=marks)

    @classmethod
    def pool(cls, steps: int = 480) -> "RLSettings":
        """The allocation study's regime: the releases' batch shape on a large pool of middling problems.

        64 prompts x 8 rollouts on average per generation batch, 8 optimizer updates per batch, each prompt between 2
        and 128 rollouts, a pool of 1 500 problems of three levels (2+1 digits, 2+2, 2x1) that each come back two or
        three times in 480 updates, held-out accuracy on 480 problems of the same levels.
        """
        batches = max(1, steps // 8)  # histograms after a third, two thirds and all of the generation batches
        marks = tuple(8 * b for b in sorted({1, max(1, batches // 3), max(1, 2 * batches // 3), batches}))
        return cls(steps=steps, prompts_per_step=64, num_generations=8, updates_per_batch=8, max_generations=128,
                   train_prompts=1500, eval_prompts=480, train_eval_prompts=240, levels=(1, 3, 4),
                   eval_every=max(8, steps // 8), histogram_steps=marks)

    @classmethod
    def study(cls, steps: int = 960) -> "RLSettings":
        """The second allocation study's regime (benchmarks/second_study/allocation_study.py), chosen on uniform alone.

        The pool regime at a constant learning rate of 1e-4 (`STUDY_RATE`) after 16 warm-up steps (a linear decay
        spends most of its rate before allocation has history), 960 updates so that 80% of generation batches are
        allocated from history, and greedy accuracy on 1 000 held-out problems every 60 updates.
        """
        return replace(cls.pool(steps), learning_rate=STUDY_RATE, lr_scheduler_type="constant_with_warmup",
                       warmup_steps=16, eval_prompts=1000, eval_samples=0, eval_every=min(60, max(8, steps // 8)))

    @property
    def rollouts_per_step(self) -> int:
        """Rollouts per optimizer update."""
        return self.prompts_per_step * self.num_generations // self.updates_per_batch
