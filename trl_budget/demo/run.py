"""The demo's runs: a cached supervised warm start of the tiny model, then RL with an allocator, with its curves."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
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

from ..config import BudgetGRPOConfig
from .machine import machine_record
from ..trainer import BudgetGRPOTrainer
from .settings import RLSettings, WarmStartSettings
from .task import ARITHMETIC, Task, exact_match_reward, split_problems
from .tiny import build_char_tokenizer, build_tiny_model



def default_cache_dir() -> Path:
    """`$TRL_BUDGET_CACHE`, else `$XDG_CACHE_HOME/trl_budget`, else `~/.cache/trl_budget`."""
    if "TRL_BUDGET_CACHE" in os.environ:
        return Path(os.environ["TRL_BUDGET_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "trl_budget"


# The warm start every machine starts from: built once by `python -m trl_budget.demo.build_warm_start` and shipped
# with the package, since a warm start trained on another CPU differs (float sums in another order) and so would every
# figure that starts from it.
SHIPPED_WARM_START = Path(__file__).with_name("warm_start")
SHIPPED_RECORD = "warm_start.json"


def shipped_folder(task: Task = ARITHMETIC) -> Path:
    """Where the task's warm start ships: `warm_start/` for arithmetic, `warm_start_<task>/` for the others."""
    return SHIPPED_WARM_START if task == ARITHMETIC else SHIPPED_WARM_START.with_name(f"warm_start_{task.name}")


def shipped_warm_start(task: Task = ARITHMETIC) -> Path | None:
    """The task's shipped warm start, if present and intact (its weights' digest as recorded when it was built)."""
    folder = shipped_folder(task)
    record_path = folder / SHIPPED_RECORD
    if not record_path.exists():
        return None
    record = json.loads(record_path.read_text())
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    if record["settings_fingerprint"] != WarmStartSettings().fingerprint() or record["weights_sha256"] != digest:
        raise RuntimeError(
            f"The shipped warm start in {folder} does not match its record ({record_path}): its weights or the default "
            "warm-start settings changed. Rebuild it with `python -m trl_budget.demo.build_warm_start"
            f"{'' if task == ARITHMETIC else ' --task ' + task.name}`."
        )
    return folder


def warm_start(settings: WarmStartSettings = WarmStartSettings(), cache_dir: Path | None = None,
               rebuild: bool = False, task: Task = ARITHMETIC) -> Path:
    """Path of the task's warm-started model: the shipped one for the default settings, else trained once and cached
    under `cache_dir` (keyed by the task and the settings); `rebuild` trains it again even then.

    The model is written to a staging folder and renamed into place when complete, so an interrupted run never leaves a
    half-written cache behind.
    """
    if settings == WarmStartSettings() and not rebuild and (shipped := shipped_warm_start(task)) is not None:
        return shipped
    named = "" if task == ARITHMETIC else f"{task.name}-"
    path = Path(cache_dir or default_cache_dir()) / f"warm-start-{named}{settings.fingerprint()}"
    if (path / "config.json").exists() and not rebuild:
        return path
    tokenizer = build_char_tokenizer(task.alphabet)
    model = build_tiny_model(tokenizer, settings.hidden_size, settings.num_layers, seed=settings.seed)
    _train_supervised(model, tokenizer, settings, task)
    staging = path.with_name(path.name + ".tmp")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if path.exists():
        shutil.rmtree(path)
    staging.replace(path)
    return path


def _train_supervised(model, tokenizer, settings: WarmStartSettings, task: Task) -> None:
    torch.manual_seed(settings.seed)
    problems = task.make_problems(20_000, settings.seed + 1_000, task.warm_start_levels)
    if settings.label_noise:
        problems = _with_wrong_answers(problems, settings.label_noise, np.random.default_rng(settings.seed + 2_000))
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


def _with_wrong_answers(problems: list[dict], share: float, rng: np.random.Generator) -> list[dict]:
    """The problems with `share` of their answers wrong by one digit: a noisy teacher."""
    noisy = []
    for problem in problems:
        answer = problem["answer"]
        if rng.random() < share:
            position = int(rng.integers(len(answer)))
            digit = str((int(answer[position]) + int(rng.integers(1, 10))) % 10)
            answer = answer[:position] + digit + answer[position + 1 :]
        noisy.append({**problem, "answer": answer})
    return noisy


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
                         batch_size: int = 256, seed: int = 0, task: Task = ARITHMETIC) -> dict[str, float]:
    """Exact-match accuracy, overall and per difficulty level: greedy, or mean over `samples` sampled answers."""
    correct = solve_rates(model, tokenizer, problems, samples, temperature, batch_size, seed, task)
    levels = np.array([p["level"] for p in problems])
    result = {"accuracy": float(correct.mean())}
    for level in sorted(set(levels.tolist())):
        result[f"level_{level}"] = float(correct[levels == level].mean())
    return result


def solve_rates(model, tokenizer, problems: list[dict], samples: int = 0, temperature: float = 1.0,
                batch_size: int = 256, seed: int = 0, task: Task = ARITHMETIC) -> np.ndarray:
    """Each problem's exact-match rate: greedy (0 or 1), or the mean over `samples` sampled answers."""
    return answer_outcomes(model, tokenizer, problems, samples, temperature, batch_size, seed, task).mean(axis=1)


def answer_outcomes(model, tokenizer, problems: list[dict], samples: int = 0, temperature: float = 1.0,
                    batch_size: int = 256, seed: int = 0, task: Task = ARITHMETIC) -> np.ndarray:
    """`(problems, max(samples, 1))` exact-match outcomes (0.0 or 1.0): the greedy answer, or `samples` sampled ones
    in the order drawn."""
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
            output = model.generate(**encoded, max_new_tokens=task.max_answer_tokens,
                                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                    **sampling)
            texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
            answers = [p["answer"] for p in batch for _ in range(repeats)]
            correct += np.reshape(exact_match_reward(texts, answers), (len(batch), repeats)).tolist()
    model.train(was_training)
    return np.array(correct, dtype=np.float64).reshape(len(problems), repeats)


class _ProgressBarOnly(ProgressCallback):
    """TRL's progress bar without the metric dictionaries it prints at every logging step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass


class _Recorder(TrainerCallback):
    """Held-out accuracy every few steps and the allocation at a few steps."""

    def __init__(self, settings: RLSettings, tokenizer, train: list[dict], held_out: list[dict], task: Task):
        self.settings, self.tokenizer, self.train, self.held_out, self.task = settings, tokenizer, train, held_out, task
        size = settings.train_eval_prompts or len(train)  # evenly spaced, so that every level is measured
        self.train_measured = train[:: max(1, len(train) // size)][:size]
        self.trainer = None
        self.curve = []
        self.histograms = {}  # at each histogram step, the rollouts per prompt of every batch since the previous one
        self._since_last_mark, self._last_plan = [], None
        self._generated = 0  # rollouts generated so far (with Reinforce-Ada more than are trained)
        self.visits = Counter()  # generation batches each prompt was in

    def _evaluate(self, state, model):
        rollouts = state.global_step * self.settings.rollouts_per_step
        samples, temperature = self.settings.eval_samples, self.settings.temperature
        train = exact_match_accuracy(model, self.tokenizer, self.train_measured, samples, temperature, task=self.task)
        self.curve.append({"step": state.global_step, "rollouts": rollouts, "generated": self._generated,
                           "train_accuracy": train["accuracy"], **exact_match_accuracy(
                               model, self.tokenizer, self.held_out, samples, temperature, task=self.task)})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._evaluate(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        plan = self.trainer.last_rollout_plan
        if plan is not None and plan is not self._last_plan:  # a new generation batch, generated for this step
            self._since_last_mark += plan.counts.tolist()
            self._generated += sum(plan.round_rows)
            self.visits.update(plan.keys)
            self._last_plan = plan
        if state.global_step % self.settings.eval_every == 0 or state.global_step == state.max_steps:
            self._evaluate(state, model)
        if state.global_step in self.settings.histogram_steps:
            self.histograms[state.global_step] = self._since_last_mark
            self._since_last_mark = []


def run_rl(model_path: Path, allocator: str, seed: int, settings: RLSettings, output_dir: Path,
           show_progress: bool = True, label: str | None = None, prompt_priors: dict[str, float] | None = None,
           task: Task = ARITHMETIC, observers: tuple = (), **config_overrides) -> dict:
    """Train the warm-started model with `allocator` on `task` and return its curves, under `label` (default: the
    allocator).

    `observers` are further callbacks, each told the trainer (its `trainer` attribute) before training, as the
    recorder is: e.g. a benchmark's record of every batch. `config_overrides` are further `BudgetGRPOConfig`
    settings (e.g. `knapsack_fallback=False`). `uniform` without
    an `advantage_baseline` is GRPO's group baseline, as every study's uniform arm ran it (the trainer's default
    baseline under `uniform` is the history baseline). Every training row
    has its `level`; with `prompt_priors` (prompt -> pass rate) also a `prior` column.
    """
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("trl_budget.trainer").setLevel(logging.ERROR)  # the demo says itself which rule each run trains
    if allocator == "uniform":
        config_overrides.setdefault("advantage_baseline", "group")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    train, held_out = split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed, settings.levels,
                                     task)
    args = BudgetGRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=settings.rollouts_per_step,
        num_generations=settings.num_generations,
        steps_per_generation=settings.updates_per_batch,
        budget_min_generations=settings.min_generations,
        budget_max_generations=settings.max_generations,
        budget_allocator=allocator,
        max_completion_length=task.max_answer_tokens,
        temperature=settings.temperature,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler_type,
        warmup_steps=settings.warmup_steps,
        max_steps=settings.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,  # TRL turns bf16 on by default, also on CPU; the warm start trained in float32, so does RL
        seed=seed,
        disable_tqdm=not show_progress,
        **config_overrides,
    )
    model = AutoModelForCausalLM.from_pretrained(model_path)
    recorder = _Recorder(settings, tokenizer, train, held_out, task)
    trainer = BudgetGRPOTrainer(
        model=model, reward_funcs=exact_match_reward, args=args,
        train_dataset=Dataset.from_list([
            {"prompt": p["prompt"], "answer": p["answer"], "level": p["level"],
             **({} if prompt_priors is None else {"prior": prompt_priors.get(p["prompt"])})} for p in train]),
        processing_class=tokenizer, callbacks=[recorder, *observers],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if show_progress:
        trainer.add_callback(_ProgressBarOnly())
    for observer in (recorder, *observers):
        observer.trainer = trainer
    start = time.perf_counter()
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "budget/effective_ratio" in entry]
    return {
        "allocator": label or allocator,
        "seed": seed,
        "seconds": time.perf_counter() - start,
        "rollouts_per_step": settings.rollouts_per_step,
        "effective_ratio": [entry["budget/effective_ratio"] for entry in logs],
        **{name.removeprefix("budget/"): [entry.get(name) for entry in logs] for name in (
            "budget/completion_tokens", "budget/prompts_with_gradient", "budget/top_prompt_loss_share",
            "budget/prior_share", "budget/expected_token_ratio", "budget/unseen_prompts", "budget/rounds",
            "budget/generated_rollouts", "budget/trained_rollouts")},
        "reward": [entry["reward"] for entry in logs],
        "entropy": [entry["entropy"] for entry in trainer.state.log_history if "entropy" in entry],  # every update
        "curve": recorder.curve,
        "histograms": {str(step): counts for step, counts in recorder.histograms.items()},
        "prompt_visits": visits_summary(recorder.visits, len(train)),
        "visits_per_prompt": visit_counts(recorder.visits, len(train)),
        "machine": machine_record(),
        **({} if trainer.spo is None else spo_costs(trainer.state.log_history)),
    }


def visit_counts(visits: Counter, prompts: int) -> list[int]:
    """How many generation batches each of the `prompts` training prompts was in, most first (never drawn: 0)."""
    return sorted(visits.values(), reverse=True) + [0] * (prompts - len(visits))


def visits_summary(visits: Counter, prompts: int) -> dict[str, float]:
    """`visit_counts`' mean, spread and share of never-drawn prompts."""
    counts = np.array(visit_counts(visits, prompts), dtype=np.float64)
    return {"mean": float(counts.mean()), "min": float(counts.min()), "p10": float(np.percentile(counts, 10)),
            "p50": float(np.median(counts)), "p90": float(np.percentile(counts, 90)), "max": float(counts.max()),
            "never": float((counts == 0).mean())}


def spo_costs(log_history: list[dict]) -> dict[str, float]:
    """What SPO's tracker cost beyond the batches: the offline prior's rollouts and seconds, and the rows of the
    KL-adaptive rho's extra forward passes."""
    def total(name: str) -> float:
        return float(sum(entry[name] for entry in log_history if name in entry))

    return {"spo_prior_rollouts": total("spo/prior_rollouts"), "spo_prior_seconds": total("spo/prior_seconds"),
            "spo_forward_passes_rows": total("spo/forward_passes_rows")}


