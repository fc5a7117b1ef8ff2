"""A study's figures per run and per arm, read alike by the studies whose runs store their learning curve and costs
(the fifth and sixth): the curve's area, the costs after the first batches, each arm's means, and which comparisons
are not yet paired on every seed."""

from __future__ import annotations

import numpy as np

from trl_budget.demo.report import comparison_cells
from trl_budget.demo.study_stats import comparison_name, compare_runs, runs_family, study_metric


def curve_area(run: dict) -> float:
    """The learning curve's area: the mean held-out accuracy over the trained evaluations."""
    return float(np.mean([point["accuracy"] for point in run["curve"] if point["step"] > 0]))


def after_first_epoch(run: dict, name: str, skip: int) -> float:
    values = [value for value in run.get(name, [])[skip:] if value is not None]
    return float(np.mean(values)) if values else float("nan")


def run_cost(run: dict, skip: int) -> dict:
    """One run's cost and mechanism figures: per generation batch after the first `skip` batches, and in all."""
    updates = len(run["entropy"])
    entropy = run["entropy"][skip * updates // len(run["effective_ratio"]):]
    prior = run.get("spo_prior_rollouts", 0.0)
    return {"generated_rollouts": after_first_epoch(run, "generated_rollouts", skip),
            "trained_rollouts": after_first_epoch(run, "trained_rollouts", skip),
            "trained_tokens": after_first_epoch(run, "completion_tokens", skip),
            "generated_in_all": float(sum(run["generated_rollouts"])) + prior, "prior_rollouts": prior,
            "prior_seconds": run.get("spo_prior_seconds", 0.0),
            "rho_forward_rows": run.get("spo_forward_passes_rows", 0.0), "updates": updates,
            "visits_mean": run["prompt_visits"]["mean"], "visits_p10": run["prompt_visits"]["p10"],
            "visits_p90": run["prompt_visits"]["p90"], "never_drawn": run["prompt_visits"]["never"],
            "nonzero_advantage_share": after_first_epoch(run, "effective_ratio", skip),
            "prompts_with_gradient": after_first_epoch(run, "prompts_with_gradient", skip),
            "entropy": float(np.mean(entropy)) if entropy else float("nan"),
            "accuracy_start": run["curve"][0]["accuracy"], "accuracy_update_60": run["curve"][1]["accuracy"],
            "seconds": run["seconds"]}


def with_area(runs: dict, comparison: tuple[str, str, str], seeds: list[int], test: dict) -> dict:
    """The comparison's test, with the learning curve's area beside it (descriptive)."""
    return {**test, "curve_area": compare_runs(runs, comparison, seeds, curve_area)}


def incomplete(runs: dict, comparisons: list[tuple[str, str, str]], seeds: list[int]) -> list[str]:
    """The comparisons not yet paired on every seed: kept in their Holm family at p = 1 (never rejected), so that a
    summary of a study under way, or with a failed run, corrects at the pre-registered family size."""
    return [comparison_name(c) for c in comparisons if not compare_runs(runs, c, seeds).get("complete")]


def tested_primaries(runs: dict, primary: list, seeds: list[int], mde80, room_gates: dict) -> dict:
    """The primary family's Holm-corrected tests, each with its curve area, its registered and observed MDE
    (`mde80(comparison[, paired_sd])`) and its regime's room gate (`room_gates[regime]`)."""
    family = runs_family(runs, primary, seeds, incomplete(runs, primary, seeds))
    for comparison in primary:
        name = comparison_name(comparison)
        test = with_area(runs, comparison, seeds, family[name])
        test["mde80"] = mde80(comparison)
        test["mde80_observed"] = mde80(comparison, test["paired_sd"]) if "paired_sd" in test else None
        test["room_gate"] = room_gates[comparison[0]]
        family[name] = test
    return family


def tested_secondaries(runs: dict, secondary: dict, seeds: list[int]) -> dict:
    """Each regime's secondary family (`secondary`: regime -> comparisons), Holm-corrected within the regime, each
    test with its curve area."""
    tested = {}
    for regime, comparisons in secondary.items():
        family = runs_family(runs, comparisons, seeds, incomplete(runs, comparisons, seeds))
        tested[regime] = {comparison_name(c): with_area(runs, c, seeds, family[comparison_name(c)])
                          for c in comparisons}
    return tested


def arm_rows(runs: dict, seeds: list[int], skip: int, regimes, labels, baseline: str) -> dict:
    """Per regime and arm (of `labels`) with stored runs: the metric's mean and SD, the curve area, the mean of every
    cost figure (`run_cost`), and the arm against `baseline`."""
    costs = {job: run_cost(run, skip) for job, run in runs.items()}
    arms = {}
    for regime in regimes:
        for label in labels:
            have = [s for s in seeds if (regime, label, s) in runs]
            if not have:
                continue
            values = [study_metric(runs[regime, label, s]) for s in have]
            figures = [costs[regime, label, s] for s in have]
            arms.setdefault(regime, {})[label] = {
                "seeds": len(have), "metric_mean": float(np.mean(values)),
                "metric_sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                "curve_area_mean": float(np.mean([curve_area(runs[regime, label, s]) for s in have])),
                **{name: float(np.mean([f[name] for f in figures])) for name in figures[0]},
                **({} if label == baseline else {"vs_uniform_n8": compare_runs(runs, (regime, label, baseline),
                                                                               seeds)})}
    return arms


# The columns a study's table of arms can show (`arms_table`): header -> the cell of an arm's row (`arm_rows`).
ARM_COLUMNS = {
    "seeds": lambda row: f"{row['seeds']}",
    "metric": lambda row: f"{row['metric_mean']:.4f}",
    "minus uniform-n8 (95% CI)": lambda row: comparison_cells(row.get("vs_uniform_n8", {}))["diff"],
    "curve area": lambda row: f"{row['curve_area_mean']:.4f}",
    "update 60 (start)": lambda row: f"{row['accuracy_update_60']:.3f} ({row['accuracy_start']:.3f})",
    "generated / batch": lambda row: f"{row['generated_rollouts']:.0f}",
    "generated in all": lambda row: f"{row['generated_in_all']:.0f}",
    "trained tokens": lambda row: f"{row['trained_tokens']:.0f}",
    "visits": lambda row: f"{row['visits_mean']:.1f}",
    "non-zero advantage": lambda row: f"{row['nonzero_advantage_share']:.3f}",
    "entropy": lambda row: f"{row['entropy']:.3f}",
    "seconds": lambda row: f"{row['seconds']:.0f}",
}


def arms_table(summary: dict, columns: list[str]) -> str:
    """The summary's arms, a markdown table a regime, in the `ARM_COLUMNS` named by `columns`."""
    lines = []
    for regime, arms in summary["arms"].items():
        lines += [f"\n{regime}:", "| arm | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
        lines += [f"| {label} | " + " | ".join(ARM_COLUMNS[column](row) for column in columns) + " |"
                  for label, row in arms.items()]
    return "\n".join(lines)
