"""Math RLVR with per-prompt rollout budgets: TRL's `grpo.py`, with BudgetGRPOTrainer. `trl-budget grpo` runs it.

One node of 8 GPUs, vLLM server on 4 of them and training on the other 4:

    CUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve --model Qwen/Qwen2.5-7B-Instruct --data_parallel_size 4
    CUDA_VISIBLE_DEVICES=4,5,6,7 trl-budget grpo --accelerate_config zero3 --num_processes 4 \\
        --config examples/knapsack_rl.yaml --gradient_accumulation_steps 4 \\
        --model_name_or_path Qwen/Qwen2.5-7B-Instruct --use_vllm --vllm_mode server

Every `BudgetGRPOConfig` / `GRPOConfig` / `ModelConfig` flag works as in TRL; `--config FILE.yaml` reads them from a file.
Datasets: DAPO-Math-17k (default), GSM8K and MATH by name, or any dataset / local JSON, JSONL or Parquet file with
`--prompt_column` and `--solution_column`.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

from trl import ModelConfig, ScriptArguments, TrlParser

from trl_budget import BudgetGRPOConfig

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

# DAPO-Math-17k wraps each problem in its own answer-format instruction; it is replaced by `--instruction`.
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def _dapo(row):
    question = row["prompt"][0]["content"]
    question = question.removeprefix(DAPO_PREFIX).removesuffix(DAPO_SUFFIX)
    return question, row["reward_model"]["ground_truth"]


def _gsm8k(row):
    return row["question"], row["answer"].split("####")[-1].strip().replace(",", "")


def _math(row):
    return row["problem"], row["solution"]  # math-verify finds the \boxed{} answer in the reference solution


# Each format: (columns that identify it, function row -> (question, reference answer)).
DATASET_FORMATS = {
    "dapo": ({"prompt", "reward_model"}, _dapo),
    "gsm8k": ({"question", "answer"}, _gsm8k),
    "math": ({"problem", "solution"}, _math),
}
KNOWN_DATASETS = {
    "BytedTsinghua-SIA/DAPO-Math-17k": "dapo",
    "openai/gsm8k": "gsm8k",
    "gsm8k": "gsm8k",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "EleutherAI/hendrycks_math": "math",
}


@dataclass
class BudgetGRPOScriptArguments(ScriptArguments):
    """Script arguments: TRL's `ScriptArguments` plus reward functions and math dataset formatting."""

    dataset_name: str | None = field(
        default="BytedTsinghua-SIA/DAPO-Math-17k",
        metadata={"help": "Dataset name on the Hub, or a local .json / .jsonl / .parquet file."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["accuracy_reward"],
        metadata={
            "help": "Reward functions: `accuracy_reward` (math-verify), `think_format_reward`, "
            "`reasoning_accuracy_reward`, or any dotted import path (e.g. `my_lib.rewards.custom_reward`)."
        },
    )
    dataset_format: str = field(
        default="auto",
        metadata={
            "help": "How to read problems and answers: `dapo`, `gsm8k`, `math`, `columns` (use --prompt_column and "
            "--solution_column) or `auto` (by dataset name, else by its columns).",
            "choices": ["auto", "dapo", "gsm8k", "math", "columns"],
        },
    )
    prompt_column: str = field(default="problem", metadata={"help": "Question column for `--dataset_format columns`."})
    solution_column: str = field(
        default="solution", metadata={"help": "Reference-answer column for `--dataset_format columns`."}
    )
    instruction: str = field(default=INSTRUCTION, metadata={"help": "Appended to every question."})


def reward_functions(names: list[str]):
    """TRL's reward functions by name, or user functions by dotted import path."""
    from trl.rewards import accuracy_reward, reasoning_accuracy_reward, think_format_reward

    registry = {
        "accuracy_reward": accuracy_reward,
        "reasoning_accuracy_reward": reasoning_accuracy_reward,
        "think_format_reward": think_format_reward,
    }
    functions = []
    for name in names:
        if name in registry:
            functions.append(registry[name])
        elif "." in name:
            module_path, function_name = name.rsplit(".", 1)
            sys.path.insert(0, os.getcwd())
            functions.append(getattr(importlib.import_module(module_path), function_name))
        else:
            raise ValueError(f"Unknown reward function {name!r}: use one of {sorted(registry)} or a dotted path.")
    return functions


# Rewards that say whether the answer is right: when one is used, it alone decides a rollout's success for pass rates.
CORRECTNESS_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward")


def success_reward_choice(reward_names: list[str], chosen: int | str | None) -> int | str | None:
    """`--success_reward_func` if given, else the correctness reward among `reward_names` (None: the weighted sum)."""
    if chosen is not None:
        return chosen
    return next((name for name in reward_names if name in CORRECTNESS_REWARDS), None)


def load_math_dataset(script_args: BudgetGRPOScriptArguments):
    """The dataset as conversational `prompt` plus `solution` columns, as TRL's math rewards expect."""
    from datasets import load_dataset

    name = script_args.dataset_name
    extension = os.path.splitext(name)[1].lstrip(".")
    if os.path.isfile(name) and extension in ("json", "jsonl", "parquet"):
        dataset = load_dataset("parquet" if extension == "parquet" else "json", data_files=name)
    else:
        dataset = load_dataset(name, name=script_args.dataset_config, streaming=script_args.dataset_streaming)
    columns = set(next(iter(dataset.values())).column_names)

    if script_args.dataset_format == "columns":
        def extract(row):
            return row[script_args.prompt_column], row[script_args.solution_column]
        required = {script_args.prompt_column, script_args.solution_column}
    else:
        kind = script_args.dataset_format
        if kind == "auto":
            kind = KNOWN_DATASETS.get(name) or next(
                (fmt for fmt, (needed, _) in DATASET_FORMATS.items() if needed <= columns), None
            )
        if kind is None:
            raise ValueError(
                f"Cannot tell how to read {name!r} (columns: {sorted(columns)}). Pass --dataset_format columns with "
                "--prompt_column and --solution_column."
            )
        required, extract = DATASET_FORMATS[kind]
    missing = required - columns
    if missing:
        raise ValueError(f"Dataset {name!r} lacks the columns {sorted(missing)} (it has {sorted(columns)}).")

    def to_conversation(row):
        question, answer = extract(row)
        content = f"{question}\n\n{script_args.instruction}" if script_args.instruction else question
        return {"prompt": [{"role": "user", "content": content}], "solution": str(answer)}

    return dataset.map(to_conversation, remove_columns=sorted(columns))


def main(script_args, training_args, model_args):
    from trl import get_peft_config, get_quantization_config

    from trl_budget import BudgetGRPOTrainer

    model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    model_init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = model_init_kwargs

    rewards = reward_functions(script_args.reward_funcs)
    # A format reward added to the accuracy reward must not make well-formatted wrong answers count as solved.
    training_args.success_reward_func = success_reward_choice(script_args.reward_funcs,
                                                              training_args.success_reward_func)
    dataset = load_math_dataset(script_args)
    trainer = BudgetGRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=rewards,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=dataset[script_args.dataset_test_split] if training_args.eval_strategy != "no" else None,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )
    judge = training_args.success_reward_func
    judge = "the weighted sum of the rewards" if judge is None else f"the reward {judge!r}"
    trainer.accelerator.print(f"Pass rates: a rollout counts as solved when {judge} reaches "
                              f"{training_args.success_threshold}.")
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)


def make_parser(prog: str | None = None) -> TrlParser:
    """The script's parser: its own arguments, every `BudgetGRPOConfig` field, TRL's `ModelConfig`; `--config FILE`."""
    return TrlParser((BudgetGRPOScriptArguments, BudgetGRPOConfig, ModelConfig), prog=prog)


if __name__ == "__main__":
    main(*make_parser().parse_args_and_config())
