"""What the demo and the benchmark print and draw: summaries over seeds, a table, a PNG report."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .study_stats import first_reach, paired_interval


def spent(point: dict) -> float:
    """Rollouts generated up to a curve's point (runs recorded before rounds existed: the rollouts trained, the same)."""
    return point.get("generated", point["rollouts"])


def mean_curve(runs: list[dict], metric: str) -> np.ndarray:
    """One metric of the runs' curves (`"accuracy"` or `"train_accuracy"`), averaged over the runs point by point."""
    return np.mean([[point[metric] for point in run["curve"]] for run in runs], axis=0)


def summarize(runs: list[dict]) -> dict[str, dict]:
    """Per allocator, mean and std over seeds of the figures the demo and the benchmark report."""
    by_allocator: dict[str, list[dict]] = {}
    for run in runs:
        by_allocator.setdefault(run["allocator"], []).append(run)
    uniform_final = {}
    if "uniform" in by_allocator:
        for metric in ("accuracy", "train_accuracy"):
            uniform_final[metric] = float(np.mean([run["curve"][-1][metric] for run in by_allocator["uniform"]]))
    summary = {}
    for allocator, group in by_allocator.items():
        final = [run["curve"][-1]["accuracy"] for run in group]
        final_train = [run["curve"][-1]["train_accuracy"] for run in group]
        effective = [float(np.mean(run["effective_ratio"])) for run in group]
        row = {
            "seeds": len(group),
            "start_accuracy": float(np.mean([run["curve"][0]["accuracy"] for run in group])),
            "final_accuracy_mean": float(np.mean(final)),
            "final_accuracy_std": float(np.std(final)),
            "start_train_accuracy": float(np.mean([run["curve"][0]["train_accuracy"] for run in group])),
            "final_train_accuracy_mean": float(np.mean(final_train)),
            "final_train_accuracy_std": float(np.std(final_train)),
            "effective_ratio_mean": float(np.mean(effective)),
            "effective_ratio_std": float(np.std(effective)),
            "rollouts_spent": spent(group[0]["curve"][-1]),
        }
        for metric, target in uniform_final.items():
            # Only after training has started: a start above the target would say nothing about the allocator.
            reached = np.flatnonzero(mean_curve(group, metric)[1:] >= target) + 1
            rollouts = int(spent(group[0]["curve"][reached[0]])) if reached.size else None
            row[f"rollouts_to_uniform_final_{metric}"] = rollouts
        if "uniform" in by_allocator:
            row.update(_against_uniform(group, by_allocator["uniform"]))
        summary[allocator] = row
    return summary


def _against_uniform(group: list[dict], uniform: list[dict]) -> dict:
    """Paired differences to uniform (same seeds), and how many rollouts uniform needs to match this variant."""
    uniform_by_seed = {run["seed"]: run for run in uniform}
    paired = [(run, uniform_by_seed[run["seed"]]) for run in group if run["seed"] in uniform_by_seed]
    row = {}
    for metric in ("accuracy", "train_accuracy"):
        differences = [r["curve"][-1][metric] - u["curve"][-1][metric] for r, u in paired]
        mean, ci = paired_interval(differences) if len(differences) > 1 else (float(np.mean(differences)), None)
        suffix = "" if metric == "accuracy" else "_train"
        row[f"final{suffix}_accuracy_diff"], row[f"final{suffix}_accuracy_ci95"] = mean, ci
    effective = [(np.mean(r["effective_ratio"]), np.mean(u["effective_ratio"])) for r, u in paired]
    row["effective_ratio_vs_uniform"] = float(np.mean([mine for mine, _ in effective]) /
                                              np.mean([theirs for _, theirs in effective]))
    # Uniform's rollouts to reach this variant's final held-out accuracy, over this variant's rollouts (mean curves).
    rollouts = [spent(point) for point in uniform[0]["curve"]]
    final = float(np.mean([run["curve"][-1]["accuracy"] for run in group]))
    needed = first_reach(rollouts, mean_curve(uniform, "accuracy").tolist(), final)
    row["uniform_rollouts_ratio"] = None if needed is None else needed / spent(group[0]["curve"][-1])
    row["uniform_reaches_final_accuracy"] = needed is not None
    return row


def format_table(summary: dict[str, dict]) -> str:
    """A plain-text table of `summarize`'s figures."""
    header = ("allocator", "held-out accuracy", "training-set accuracy", "effective ratio", "rollouts")
    lines = ["{:<20} {:>26} {:>26} {:>16} {:>9}".format(*header)]
    for allocator, row in summary.items():
        def spread(name: str) -> str:  # mean ± std over seeds, or the single value
            text = f"{row[name + '_mean']:.3f}"
            return text + f"±{row[name + '_std']:.3f}" if row["seeds"] > 1 else text

        held_out = f"{row['start_accuracy']:.3f} -> {spread('final_accuracy')}"
        train = f"{row['start_train_accuracy']:.3f} -> {spread('final_train_accuracy')}"
        effective = spread("effective_ratio")
        lines.append(f"{allocator:<20} {held_out:>26} {train:>26} {effective:>16} {row['rollouts_spent']:>9}")
    return "\n".join(lines)


def comparison_cells(comparison: dict) -> dict[str, str]:
    """A study's comparison as table cells, in points: the difference with its 95% interval, the exact p, the Holm
    step's interval with the Holm p, and the Bonferroni interval ("—" where there is none)."""
    def interval(bounds) -> str:
        return f"[{bounds[0] * 100:+.2f}, {bounds[1] * 100:+.2f}]"

    test = comparison.get("holm")
    return {
        "diff": "—" if comparison.get("diff") is None else f"{comparison['diff'] * 100:+.2f} "
                                                           f"{interval(comparison['ci95'])}",
        "p": "—" if comparison.get("p") is None else f"{comparison['p']:.4f}",
        "holm": "—" if test is None else f"{interval(test['ci_holm'])}, p {test['p_holm']:.3f}",
        "bonferroni": "—" if test is None else interval(test["ci_bonferroni"]),
    }


def accuracy_label(eval_samples: int, temperature: float) -> str:
    """What the accuracy curves measure (`RLSettings.eval_samples`): greedy answers, or the mean of sampled ones."""
    if eval_samples == 0:
        return "greedy exact-match accuracy"
    return f"exact-match accuracy ({eval_samples} samples, T={temperature:g})"


def plot_report(runs: list[dict], path: Path, title: str = "trl_budget", eval_samples: int = 0,
                temperature: float = 1.0) -> Path:
    """PNG: held-out accuracy against rollouts, effective ratio over training, rollouts-per-prompt histograms.

    `eval_samples` and `temperature` are the runs' evaluation settings (0: greedy decoding), named on the axis.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    allocators = list(dict.fromkeys(run["allocator"] for run in runs))
    colours = dict(zip(allocators, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    figure, (accuracy_axis, ratio_axis, histogram_axis) = plt.subplots(1, 3, figsize=(16, 4.5))
    for allocator in allocators:
        group = [run for run in runs if run["allocator"] == allocator]
        rollouts = [spent(point) for point in group[0]["curve"]]
        accuracy = np.array([[point["accuracy"] for point in run["curve"]] for run in group])
        accuracy_axis.plot(rollouts, accuracy.mean(0), marker="o", color=colours[allocator],
                           label=f"{allocator} (held-out)")
        if len(group) > 1:
            accuracy_axis.fill_between(rollouts, accuracy.mean(0) - accuracy.std(0),
                                       accuracy.mean(0) + accuracy.std(0), color=colours[allocator], alpha=0.2)
        train = np.array([[point["train_accuracy"] for point in run["curve"]] for run in group])
        accuracy_axis.plot(rollouts, train.mean(0), linestyle="--", color=colours[allocator],
                           label=f"{allocator} (training set)")
        ratio = np.array([run["effective_ratio"] for run in group]).mean(0)
        window = max(1, len(ratio) // 20)
        smooth = np.convolve(ratio, np.ones(window) / window, mode="valid")
        ratio_axis.plot(np.arange(smooth.size) + window, smooth, color=colours[allocator], label=allocator)
    accuracy_axis.set(xlabel="rollouts generated", ylabel=accuracy_label(eval_samples, temperature),
                      title="Accuracy")
    ratio_axis.set(xlabel="generation batch", ylabel="share of rollouts with non-zero advantage",
                   title="Effective gradient ratio")
    budgeted = next((run for run in runs if run["allocator"] != "uniform" and run["histograms"]), runs[0])
    for step, counts in budgeted["histograms"].items():
        if not counts:
            continue
        histogram_axis.hist(counts, bins=np.arange(0.5, max(counts) + 1.5), alpha=0.5, label=f"up to step {step}")
    histogram_axis.set(xlabel="rollouts per prompt", ylabel="prompts (batches up to that step)",
                       title=f"Rollouts per prompt ({budgeted['allocator']})")
    for axis in (accuracy_axis, ratio_axis, histogram_axis):
        axis.legend(fontsize="x-small")
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
