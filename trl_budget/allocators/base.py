"""What every built-in allocator checks: its bounds, the pass rates, the failure rate and the budget it must meet."""

from __future__ import annotations

import numpy as np

from ..checks import check_whole_number


def _check_bounds(min_generations: int, max_generations: int) -> None:
    check_whole_number("min_generations", min_generations, 1)
    check_whole_number("max_generations", max_generations, 1)
    if min_generations > max_generations:
        raise ValueError(
            f"min_generations ({min_generations}) must not exceed max_generations ({max_generations})."
        )


def _check_pass_rates(pass_rates) -> np.ndarray:
    rates = np.asarray(pass_rates, dtype=np.float64)
    if rates.ndim != 1 or rates.size == 0:
        raise ValueError(f"pass_rates must be a non-empty 1-D array, got shape {rates.shape}.")
    seen = rates[~np.isnan(rates)]
    if np.any((seen < 0) | (seen > 1)):
        bad = seen[(seen < 0) | (seen > 1)][0]
        raise ValueError(f"pass_rates must lie in [0, 1] (NaN marks an unseen prompt); found {bad}.")
    return rates


def _check_failure_rate(failure_rate: float | None) -> None:
    if failure_rate is not None and not 0.0 <= failure_rate <= 1.0:
        raise ValueError(f"failure_rate must lie in [0, 1] or be None, got {failure_rate}.")


class _BoundedAllocator:
    """Validation shared by every allocator: bounds, pass rates and the budget they must meet."""

    def __init__(self, min_generations: int, max_generations: int):
        _check_bounds(min_generations, max_generations)
        self.min_generations = int(min_generations)
        self.max_generations = int(max_generations)

    def _check_request(self, pass_rates, budget: int, failure_rate: float | None) -> np.ndarray:
        rates = _check_pass_rates(pass_rates)
        _check_failure_rate(failure_rate)
        if int(budget) != budget:
            raise ValueError(f"budget must be an integer number of rollouts, got {budget}.")
        low, high = rates.size * self.min_generations, rates.size * self.max_generations
        if not low <= budget <= high:
            raise ValueError(
                f"budget {budget} cannot be split over {rates.size} prompts with between {self.min_generations} and "
                f"{self.max_generations} rollouts each: it must lie in [{low}, {high}]. Change the budget or the "
                "min_generations / max_generations bounds."
            )
        return rates

    def _check_counts(self, counts, pass_rates) -> tuple[np.ndarray, np.ndarray]:
        rates = _check_pass_rates(pass_rates)
        counts = np.asarray(counts)
        if counts.shape != rates.shape:
            raise ValueError(f"counts has shape {counts.shape} but pass_rates has shape {rates.shape}.")
        return counts.astype(np.float64), rates

    def __call__(self, pass_rates, budget: int, failure_rate: float | None = None) -> np.ndarray:
        return self.allocate(pass_rates, budget, failure_rate)

    def __repr__(self) -> str:
        options = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({options})"
