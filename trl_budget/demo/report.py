"""What the demo and the benchmark print and draw: summaries over seeds, a table, a PNG report."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from .study_stats import first_reach, paired_interval, study_metric


def spent(point: dict) -> float:
    """Rollouts generated up to a curve's point (runs recorded before rounds existed: the rollouts trained, the same)."""
    return point.get("generated", point["rollouts"])


def mean_curve(runs: list[dict], metric: str) -> np.ndarray:
    """One metric of the runs' curves (`"accuracy"` or `"train_accuracy"`), averaged over the runs point by point."""
    return np.mean([[point[metric] for point in run["curve"]] for run in runs], axis=0)


# The figures the demo pairs seed by seed against uniform GRPO: name -> (what it is, a run's figure).
PAIRED_FIGURES = {
    "held_out": ("held-out accuracy, mean of the last three evaluations (the studies' metric)", study_metric),
    "effective_ratio": ("share of rollouts with a gradient, mean over batches",
                        lambda run: float(np.mean(run["effective_ratio"]))),
}


def paired_figure(differences: list[float]) -> dict:
    """Paired differences (a variant minus uniform, seed by seed): their mean and, from 2 seeds, its 95% t interval."""
    mean, ci = paired_interval(differences) if len(differences) > 1 else (float(np.mean(differences)), None)
    return {"seeds": len(differences), "diff": mean, "ci95": ci, "differences": [float(d) for d in differences]}


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
            "metric_mean": float(np.mean([study_metric(run) for run in group])),
            "metric_std": float(np.std([study_metric(run) for run in group])),
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
        figure = paired_figure(differences)
        suffix = "" if metric == "accuracy" else "_train"
        row[f"final{suffix}_accuracy_diff"], row[f"final{suffix}_accuracy_ci95"] = figure["diff"], figure["ci95"]
    row["paired"] = {name: paired_figure([figure(mine) - figure(theirs) for mine, theirs in paired])
                     for name, (_, figure) in PAIRED_FIGURES.items()}
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


def _spread(row: dict, name: str) -> str:
    """A figure of `summarize`'s row: its mean ± std over the seeds, or the single value of one seed."""
    text = f"{row[name + '_mean']:.3f}"
    return text + f"±{row[name + '_std']:.3f}" if row["seeds"] > 1 else text


def format_table(summary: dict[str, dict], held_out: str = "final_accuracy") -> str:
    """A plain-text table of `summarize`'s figures; `held_out` is the held-out figure shown after the start: the last
    evaluation (`"final_accuracy"`) or the mean of the last three (`"metric"`, the studies' metric)."""
    header = ("allocator", "held-out accuracy" + (" (last 3)" if held_out == "metric" else ""),
              "training-set accuracy", "effective ratio", "rollouts")
    lines = ["{:<20} {:>26} {:>26} {:>16} {:>9}".format(*header)]
    for allocator, row in summary.items():
        accuracy = f"{row['start_accuracy']:.3f} -> {_spread(row, held_out)}"
        train = f"{row['start_train_accuracy']:.3f} -> {_spread(row, 'final_train_accuracy')}"
        effective = _spread(row, "effective_ratio")
        lines.append(f"{allocator:<20} {accuracy:>26} {train:>26} {effective:>16} {row['rollouts_spent']:>9}")
    return "\n".join(lines)


def format_difference(name: str, value: float) -> str:
    """A paired difference of figure `name` as the demo prints it: accuracy in points (hundredths), as the studies
    state it; the share of rollouts as a share."""
    return f"{value * 100:+.2f}" if name == "held_out" else f"{value:+.3f}"


def format_paired(label: str, row: dict) -> str:
    """`summarize`'s paired figures of one variant against uniform GRPO: each mean difference with its 95% interval,
    and what it tells (an interval that holds 0 does not tell the variant from uniform on these seeds)."""
    paired = row["paired"]
    seeds = paired["held_out"]["seeds"]
    lines = [f"{label} minus uniform, paired over {seeds} seed{'s' if seeds > 1 else ''}:"]
    for name, (what, _) in PAIRED_FIGURES.items():
        figure = paired[name]
        show = functools.partial(format_difference, name)
        by_seed = ", ".join(show(difference) for difference in figure["differences"])
        if figure["ci95"] is None:
            told = "one seed, no interval"
        else:
            low, high = figure["ci95"]
            told = (f"95% interval [{show(low)}, {show(high)}]: "
                    + ("higher on these seeds" if low > 0 else "lower on these seeds" if high < 0 else
                       "not told apart from uniform by these seeds"))
        unit = " points" if name == "held_out" else ""
        lines.append(f"  {what}: {show(figure['diff'])}{unit}, {told} (each seed: {by_seed})")
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
    """PNG: held-out accuracy against rollouts, effective ratio over training, and what the budgeted rule spent: the
    rollouts per prompt of its batches, or, where every prompt of every batch got the same (SPO's one rollout a
    prompt), each arm's visits per training prompt over its run.

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
    if _one_count_per_batch(budgeted) and all("visits_per_prompt" in run for run in runs):
        _plot_visits(histogram_axis, runs, colours)
    else:
        _plot_rollouts_per_prompt(histogram_axis, budgeted)
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


def _one_count_per_batch(run: dict) -> bool:
    """Whether every prompt of every batch got the same rollouts (SPO's one, or uniform's num_generations): then the
    rollouts per prompt are one bar, and what the rule spends shows in how often each prompt was drawn."""
    return len({count for counts in run["histograms"].values() for count in counts}) <= 1


def _plot_rollouts_per_prompt(axis, run: dict) -> None:
    """The rollouts each prompt got in its batch, over the batches up to each histogram step."""
    for step, counts in run["histograms"].items():
        if counts:
            axis.hist(counts, bins=np.arange(0.5, max(counts) + 1.5), alpha=0.5, label=f"up to step {step}")
    axis.set(xlabel="rollouts per prompt", ylabel="prompts (batches up to that step)",
             title=f"Rollouts per prompt ({run['allocator']})")


def _plot_visits(axis, runs: list[dict], colours: dict) -> None:
    """Each arm's visits per training prompt over its run (its first seed): the generation batches a prompt was in,
    0 for one never drawn."""
    arms: dict[str, dict] = {}
    for run in runs:
        arms.setdefault(run["allocator"], run)
    most = max(max(run["visits_per_prompt"], default=0) for run in arms.values())
    for allocator, run in arms.items():
        axis.hist(run["visits_per_prompt"], bins=np.arange(-0.5, most + 1.5), histtype="step", linewidth=1.5,
                  color=colours[allocator], label=f"{allocator} (seed {run['seed']})")
    from matplotlib.ticker import MaxNLocator

    axis.set(xlabel="generation batches a prompt was in (0: never drawn)", ylabel="training prompts",
             title="Visits per prompt over the run")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # visits are whole
