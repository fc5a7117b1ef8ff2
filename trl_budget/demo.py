"""The built-in demo: a tiny model warm-started on arithmetic, then RL with each allocator at equal rollout budget.

Everything is built locally (tokenizer, model, data), so it runs on a laptop CPU without downloading anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from tqdm.auto import tqdm
from transformers import (
    AutoModelForCausalLM,
    PreTrainedTokenizerFast,
    PrinterCallback,
    ProgressCallback,
    TrainerCallback,
)
from transformers.utils import logging as hf_logging

from .config import BudgetGRPOConfig
from .task import ALPHABET, LEVELS, exact_match_reward, make_problems, split_problems
from .tiny import build_char_tokenizer, build_tiny_model
from .trainer import BudgetGRPOTrainer

MAX_ANSWER_TOKENS = 5  # the longest answer (3 + 3 digits: 4 digits) and the end-of-sequence token


def default_cache_dir() -> Path:
    """`$TRL_BUDGET_CACHE`, else `$XDG_CACHE_HOME/trl_budget`, else `~/.cache/trl_budget`."""
    if "TRL_BUDGET_CACHE" in os.environ:
        return Path(os.environ["TRL_BUDGET_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "trl_budget"


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


def warm_start(settings: WarmStartSettings = WarmStartSettings(), cache_dir: Path | None = None,
               rebuild: bool = False) -> Path:
    """Path of the warm-started model, trained once and cached under `cache_dir` (keyed by the settings).

    The model is written to a staging folder and renamed into place when complete, so an interrupted run never leaves a
    half-written cache behind.
    """
    path = Path(cache_dir or default_cache_dir()) / f"warm-start-{settings.fingerprint()}"
    if (path / "config.json").exists() and not rebuild:
        return path
    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_model(tokenizer, settings.hidden_size, settings.num_layers, seed=settings.seed)
    _train_supervised(model, tokenizer, settings)
    staging = path.with_name(path.name + ".tmp")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if path.exists():
        shutil.rmtree(path)
    staging.replace(path)
    return path


def _train_supervised(model, tokenizer, settings: WarmStartSettings) -> None:
    torch.manual_seed(settings.seed)
    problems = make_problems(20_000, seed=settings.seed + 1_000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / settings.steps)
    rng = np.random.default_rng(settings.seed)
    model.train()
    for _ in tqdm(range(settings.steps), desc="warm start (supervised)", unit="step"):
        batch = [problems[i] for i in rng.integers(0, len(problems), settings.batch_size)]
        input_ids, labels = _supervised_batch(tokenizer, batch)
        attention_mask = (input_ids != tokenizer.pad_token_id).long()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()


def _supervised_batch(tokenizer, problems: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt + answer + eos, with the loss on the answer and eos only."""
    rows, targets = [], []
    for problem in problems:
        prompt = tokenizer(problem["prompt"])["input_ids"]
        answer = tokenizer(problem["answer"])["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        targets.append([-100] * len(prompt) + answer)
    width = max(map(len, rows))
    input_ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])
    labels = torch.tensor([target + [-100] * (width - len(target)) for target in targets])
    return input_ids, labels


@torch.no_grad()
def exact_match_accuracy(model, tokenizer, problems: list[dict], samples: int = 0, temperature: float = 1.0,
                         batch_size: int = 256, seed: int = 0) -> dict[str, float]:
    """Exact-match accuracy, overall and per difficulty level: greedy, or mean over `samples` sampled answers."""
    was_training = model.training
    model.eval()
    sampling = {"do_sample": True, "temperature": temperature, "num_return_sequences": samples} if samples else {
        "do_sample": False}
    repeats = max(samples, 1)
    correct = []
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for start in range(0, len(problems), batch_size):
            batch = problems[start : start + batch_size]
            encoded = tokenizer([p["prompt"] for p in batch], return_tensors="pt", padding=True)
            output = model.generate(**encoded, max_new_tokens=MAX_ANSWER_TOKENS, pad_token_id=tokenizer.pad_token_id,
                                    eos_token_id=tokenizer.eos_token_id, **sampling)
            texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
            answers = [p["answer"] for p in batch for _ in range(repeats)]
            correct += np.reshape(exact_match_reward(texts, answers), (len(batch), repeats)).mean(1).tolist()
    model.train(was_training)
    levels = np.array([p["level"] for p in problems])
    correct = np.array(correct)
    result = {"accuracy": float(correct.mean())}
    for level in sorted(set(levels.tolist())):
        result[f"level_{level}"] = float(correct[levels == level].mean())
    return result


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


class _ProgressBarOnly(ProgressCallback):
    """TRL's progress bar without the metric dictionaries it prints at every logging step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass


class _Recorder(TrainerCallback):
    """Held-out accuracy every few steps and the allocation at a few steps."""

    def __init__(self, settings: RLSettings, tokenizer, train: list[dict], held_out: list[dict]):
        self.settings, self.tokenizer, self.train, self.held_out = settings, tokenizer, train, held_out
        self.trainer = None
        self.curve = []
        self.histograms = {}  # at each histogram step, the rollouts per prompt of every batch since the previous one
        self._since_last_mark, self._last_plan = [], None

    def _evaluate(self, state, model):
        rollouts = state.global_step * self.settings.rollouts_per_step
        samples, temperature = self.settings.eval_samples, self.settings.temperature
        train = exact_match_accuracy(model, self.tokenizer, self.train, samples, temperature)
        self.curve.append({"step": state.global_step, "rollouts": rollouts, "train_accuracy": train["accuracy"],
                           **exact_match_accuracy(model, self.tokenizer, self.held_out, samples, temperature)})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._evaluate(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.settings.eval_every == 0 or state.global_step == state.max_steps:
            self._evaluate(state, model)
        plan = self.trainer.last_rollout_plan
        if plan is not None and plan is not self._last_plan:  # a new generation batch
            self._since_last_mark += plan.counts.tolist()
            self._last_plan = plan
        if state.global_step in self.settings.histogram_steps:
            self.histograms[state.global_step] = self._since_last_mark
            self._since_last_mark = []


def run_rl(model_path: Path, allocator: str, seed: int, settings: RLSettings, output_dir: Path,
           show_progress: bool = True, label: str | None = None, **config_overrides) -> dict:
    """Train the warm-started model with `allocator` and return its curves, under `label` (default: the allocator).

    `config_overrides` are further `BudgetGRPOConfig` settings (e.g. `knapsack_fallback=False`).
    """
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    train, held_out = split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed)
    args = BudgetGRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=settings.rollouts_per_step,
        num_generations=settings.num_generations,
        min_generations=settings.min_generations,
        max_generations=settings.max_generations,
        budget_allocator=allocator,
        max_completion_length=MAX_ANSWER_TOKENS,
        temperature=settings.temperature,
        learning_rate=settings.learning_rate,
        max_steps=settings.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
        disable_tqdm=not show_progress,
        **config_overrides,
    )
    model = AutoModelForCausalLM.from_pretrained(model_path)
    recorder = _Recorder(settings, tokenizer, train, held_out)
    trainer = BudgetGRPOTrainer(
        model=model, reward_funcs=exact_match_reward, args=args,
        train_dataset=Dataset.from_list([{"prompt": p["prompt"], "answer": p["answer"]} for p in train]),
        processing_class=tokenizer, callbacks=[recorder],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if show_progress:
        trainer.add_callback(_ProgressBarOnly())
    recorder.trainer = trainer
    start = time.perf_counter()
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "budget/effective_ratio" in entry]
    return {
        "allocator": label or allocator,
        "seed": seed,
        "seconds": time.perf_counter() - start,
        "rollouts_per_step": settings.rollouts_per_step,
        "effective_ratio": [entry["budget/effective_ratio"] for entry in logs],
        "reward": [entry["reward"] for entry in logs],
        "curve": recorder.curve,
        "histograms": {str(step): counts for step, counts in recorder.histograms.items()},
    }


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
            "rollouts_spent": group[0]["curve"][-1]["rollouts"],
        }
        for metric, target in uniform_final.items():
            mean_curve = np.mean([[point[metric] for point in run["curve"]] for run in group], axis=0)
            # Only after training has started: a start above the target would say nothing about the allocator.
            reached = np.flatnonzero(mean_curve[1:] >= target) + 1
            rollouts = int(group[0]["curve"][reached[0]]["rollouts"]) if reached.size else None
            row[f"rollouts_to_uniform_final_{metric}"] = rollouts
        summary[allocator] = row
    return summary


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


def plot_report(runs: list[dict], path: Path, title: str = "trl_budget") -> Path:
    """PNG: held-out accuracy against rollouts, effective ratio over training, rollouts-per-prompt histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    allocators = list(dict.fromkeys(run["allocator"] for run in runs))
    colours = dict(zip(allocators, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    figure, (accuracy_axis, ratio_axis, histogram_axis) = plt.subplots(1, 3, figsize=(16, 4.5))
    for allocator in allocators:
        group = [run for run in runs if run["allocator"] == allocator]
        rollouts = [point["rollouts"] for point in group[0]["curve"]]
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
    accuracy_axis.set(xlabel="rollouts spent", ylabel="sampled exact-match accuracy", title="Accuracy")
    ratio_axis.set(xlabel="step", ylabel="share of rollouts with non-zero advantage", title="Effective gradient ratio")
    budgeted = next((run for run in runs if run["allocator"] != "uniform" and run["histograms"]), runs[0])
    for step, counts in budgeted["histograms"].items():
        histogram_axis.hist(counts, bins=np.arange(0.5, max(counts) + 1.5), alpha=0.5, label=f"up to step {step}")
    histogram_axis.set(xlabel="rollouts per prompt", ylabel="prompts (batches up to that step)",
                       title=f"Rollouts per prompt ({budgeted['allocator']})")
    for axis in (accuracy_axis, ratio_axis, histogram_axis):
        axis.legend()
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
