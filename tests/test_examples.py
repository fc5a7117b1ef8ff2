"""The real-scale recipe on CPU: the example script with the tiny model, the paper configs, the accelerate configs."""

import json
import string
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "budget_grpo.py"
CONFIGS = sorted((ROOT / "accelerate_configs").glob("*.yaml"))
pytestmark = pytest.mark.slow

import budget_grpo

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-chat")
    tokenizer = build_char_tokenizer(string.printable)
    tokenizer.chat_template = CHAT_TEMPLATE
    build_tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def gsm8k_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "gsm8k.jsonl"
    rows = [{"question": f"Tom has {a} apples and buys {b} more. How many now?", "answer": f"...\n#### {a + b}"}
            for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (9, 1)]]
    path.write_text("\n".join(json.dumps(row) for row in rows))
    return path


def run_script(arguments, launcher=(sys.executable,)):
    result = subprocess.run([*launcher, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=900,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-5000:]
    return result


def small_run(model, data, output, *extra):
    return [
        "--model_name_or_path", str(model), "--dataset_name", str(data), "--output_dir", str(output),
        "--max_steps", "3", "--per_device_train_batch_size", "8", "--num_generations", "4",
        "--min_generations", "2", "--max_generations", "8", "--max_completion_length", "8", "--use_cpu",
        "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1", "--bf16", "false",
        "--gradient_checkpointing", "false", *extra,
    ]


def test_example_trains_with_math_verify_rewards(tiny_chat_model, gsm8k_file, tmp_path):
    result = run_script(small_run(tiny_chat_model, gsm8k_file, tmp_path / "out", "--reward_funcs",
                                  "accuracy_reward", "think_format_reward", "--budget_allocator", "coba"))
    assert (tmp_path / "out" / "model.safetensors").exists()
    step_logs = [line for line in result.stdout.splitlines() if "'budget/rollouts_mean'" in line]
    assert len(step_logs) == 3
    assert "'rewards/accuracy_reward/mean'" in step_logs[0] and "'rewards/think_format_reward/mean'" in step_logs[0]
    assert "counts as solved when the reward 'accuracy_reward' reaches 1.0" in result.stdout


def test_example_judges_success_by_correctness():
    assert budget_grpo.success_reward_choice(["think_format_reward", "accuracy_reward"], None) == "accuracy_reward"
    assert budget_grpo.success_reward_choice(["think_format_reward", "accuracy_reward"], 0) == 0  # explicit wins
    assert budget_grpo.success_reward_choice(["my_lib.rewards.custom"], None) is None  # weighted sum


def test_paper_configs_follow_the_releases():
    knapsack = yaml.safe_load((ROOT / "examples" / "knapsack_rl.yaml").read_text())
    coba = yaml.safe_load((ROOT / "examples" / "coba_rl.yaml").read_text())
    processes = 8  # the process count both files assume
    for config, prompts_per_update, updates in ((knapsack, 32, 8), (coba, 128, 2)):
        rollouts_per_update = config["per_device_train_batch_size"] * processes * config["gradient_accumulation_steps"]
        assert rollouts_per_update == prompts_per_update * config["num_generations"]
        assert config["generation_batch_size"] == updates * rollouts_per_update
        assert config["loss_type"] == "dapo" and config["beta"] == 0.0
    assert knapsack["advantage_clip"] == 5.0 and "advantage_clip" not in coba


def test_example_reads_a_paper_config_with_overrides_and_lora(tiny_chat_model, gsm8k_file, tmp_path):
    run_script(["--config", str(ROOT / "examples" / "knapsack_rl.yaml"),
                *small_run(tiny_chat_model, gsm8k_file, tmp_path / "out", "--generation_batch_size", "8",
                           "--gradient_accumulation_steps", "1", "--use_peft", "--lora_r", "4",
                           "--lora_target_modules", "q_proj", "v_proj")])
    assert (tmp_path / "out" / "adapter_config.json").exists()


def test_dataset_formats(gsm8k_file, tmp_path):
    args = budget_grpo.BudgetGRPOScriptArguments(dataset_name=str(gsm8k_file))
    dataset = budget_grpo.load_math_dataset(args)["train"]
    assert dataset.column_names == ["prompt", "solution"]
    assert dataset[0]["solution"] == "3" and dataset[0]["prompt"][0]["content"].endswith("\\boxed{}.")

    from trl.rewards import accuracy_reward

    completion = [[{"role": "assistant", "content": "1 + 2 = 3, so \\boxed{3}"}]]
    assert accuracy_reward(completion, [dataset[0]["solution"]]) == [1.0]

    dapo = tmp_path / "dapo.jsonl"
    dapo.write_text(json.dumps({
        "prompt": [{"role": "user", "content": budget_grpo.DAPO_PREFIX + "What is 2+2?" + budget_grpo.DAPO_SUFFIX}],
        "reward_model": {"ground_truth": "4", "style": "rule"},
    }))
    row = budget_grpo.load_math_dataset(budget_grpo.BudgetGRPOScriptArguments(dataset_name=str(dapo)))["train"][0]
    assert row["prompt"][0]["content"].startswith("What is 2+2?\n\n") and row["solution"] == "4"

    custom = tmp_path / "custom.jsonl"
    custom.write_text(json.dumps({"q": "1+1?", "a": "2"}))
    with pytest.raises(ValueError, match="Cannot tell how to read"):
        budget_grpo.load_math_dataset(budget_grpo.BudgetGRPOScriptArguments(dataset_name=str(custom)))
    row = budget_grpo.load_math_dataset(budget_grpo.BudgetGRPOScriptArguments(
        dataset_name=str(custom), dataset_format="columns", prompt_column="q", solution_column="a"))["train"][0]
    assert row["solution"] == "2"
    with pytest.raises(ValueError, match="Unknown reward function"):
        budget_grpo.reward_functions(["accuracy"])


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_accelerate_configs_load(config):
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(config))
    raw = yaml.safe_load(config.read_text())
    assert loaded.distributed_type.value == raw["distributed_type"]
    assert loaded.num_processes == raw["num_processes"] and loaded.num_machines == raw["num_machines"]
    assert loaded.mixed_precision == "bf16"
    if raw["distributed_type"] == "DEEPSPEED":
        assert loaded.deepspeed_config["zero_stage"] in (2, 3)
    if raw["distributed_type"] == "FSDP":
        assert loaded.fsdp_config["fsdp_version"] == 2
    if raw["num_machines"] > 1:
        assert loaded.main_process_ip and loaded.main_process_port


def test_two_process_launch_through_the_ddp_config(tiny_chat_model, gsm8k_file, tmp_path):
    launcher = (sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                str(ROOT / "accelerate_configs" / "ddp.yaml"), "--num_processes", "2", "--mixed_precision", "no")
    result = run_script(small_run(tiny_chat_model, gsm8k_file, tmp_path / "out", "--per_device_train_batch_size",
                                  "4"), launcher=launcher)
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert "Model saved" in result.stdout


def test_trl_budget_grpo_runs_a_recipe_on_two_processes(tiny_chat_model, gsm8k_file, tmp_path):
    # The shape of `trl grpo`: the paper's recipe, an accelerate config by path, accelerate's own flags, overrides.
    result = subprocess.run(
        [sys.executable, "-m", "trl_budget", "grpo", "--config", str(ROOT / "examples" / "knapsack_rl.yaml"),
         "--accelerate_config", str(ROOT / "accelerate_configs" / "ddp.yaml"), "--num_processes", "2",
         "--mixed_precision", "no",
         *small_run(tiny_chat_model, gsm8k_file, tmp_path / "out", "--per_device_train_batch_size", "4",
                    "--generation_batch_size", "8", "--gradient_accumulation_steps", "1")],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-5000:]
    assert (tmp_path / "out" / "model.safetensors").exists() and "Model saved" in result.stdout
    assert result.stdout.count("Pass rates:") == 1  # printed by the main process of the two


def test_trl_budget_grpo_help_lists_the_budget_settings_without_importing_trl():
    # `--help` answers at once: it reads the settings from the config's source, importing neither TRL nor torch.
    code = ("import contextlib, io, sys; from trl_budget.cli import main; out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out): main(['grpo', '--help'])\n"
            "print(sorted(name for name in ('torch', 'trl', 'transformers') if name in sys.modules)); "
            "print(out.getvalue())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    imported, text = result.stdout.split("\n", 1)
    assert imported == "[]" and text.startswith("usage: trl-budget grpo")
    from dataclasses import fields

    from trl import GRPOConfig

    from trl_budget import BudgetGRPOConfig

    budget = {f.name for f in fields(BudgetGRPOConfig)} - {f.name for f in fields(GRPOConfig)}
    assert budget and all(f"  --{name} " in text for name in budget)


def test_trl_budget_grpo_refuses_a_bad_recipe_before_launching(tmp_path):
    result = subprocess.run([sys.executable, "-m", "trl_budget", "grpo", "--budget_allocator", "greedy", "--use_cpu",
                             "--bf16", "false", "--output_dir", str(tmp_path)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode != 0 and "budget_allocator='greedy' is unknown" in result.stderr
