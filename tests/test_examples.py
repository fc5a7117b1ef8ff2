"""The real-scale recipe on CPU: the example script with the tiny model, the paper configs, the accelerate configs."""

import contextlib
import json
import os
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

from trl_budget.scripts import grpo as budget_grpo

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


def dapo_rows(count: int = 8) -> list[dict]:
    """Rows of DAPO-Math-17k's shape: a conversational prompt asking for an `Answer:` line, the truth in
    `reward_model`."""
    pairs = [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (9, 1), (4, 4), (6, 1)][:count]
    return [{"prompt": [{"role": "user", "content": f"What is {a}+{b}? End with a line Answer: $Answer"}],
             "reward_model": {"ground_truth": str(a + b), "style": "rule"}} for a, b in pairs]


@pytest.fixture(scope="module")
def dapo_folder(tmp_path_factory):
    """A dataset folder in DAPO-Math-17k's shape, as `--dataset_name` takes a folder."""
    folder = tmp_path_factory.mktemp("dapo")
    (folder / "train.jsonl").write_text("\n".join(json.dumps(row) for row in dapo_rows()))
    return folder


def run_script(arguments, launcher=(sys.executable,)):
    result = subprocess.run([*launcher, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=900,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-5000:]
    return result


def small_run(model, data, output, *extra, allocator: str | None = "knapsack"):
    """A few steps of a tiny model; `allocator=None` keeps the recipe's own."""
    return [
        "--model_name_or_path", str(model), "--dataset_name", str(data), "--output_dir", str(output),
        "--max_steps", "3", "--per_device_train_batch_size", "8", "--num_generations", "4",
        *(["--budget_allocator", allocator] if allocator else []), "--budget_min_generations", "2", "--budget_max_generations", "8",
        "--max_completion_length", "8", "--use_cpu",
        "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1", "--bf16", "false",
        "--gradient_checkpointing", "false", "--reward_funcs", "examples.dapo_math.accuracy_reward", *extra,
    ]


def test_the_dapo_reward_checks_the_answer_line():
    from dapo_math import accuracy_reward

    truths = [{"ground_truth": "4"}] * 4 + [{"ground_truth": "\\frac{1}{2}"}]
    completions = [[{"role": "assistant", "content": text}] for text in (
        "2+2 makes 4.\nAnswer: 4", "Answer: 5", "It is 4.", "Answer: 3\nno, Answer: 4", "Answer: 0.5")]
    assert accuracy_reward(completions, truths) == [1.0, 0.0, 0.0, 1.0, 1.0]


def test_the_math_recipe_trains_with_the_dapo_reward(tiny_chat_model, dapo_folder, tmp_path):
    result = run_script(["--config", str(ROOT / "examples" / "knapsack_rl.yaml"),
                         *small_run(tiny_chat_model, dapo_folder, tmp_path / "out", "--generation_batch_size", "8",
                                    "--gradient_accumulation_steps", "1", "--budget_allocator", "coba")])
    assert (tmp_path / "out" / "model.safetensors").exists()
    step_logs = [line for line in result.stdout.splitlines() if "'budget/rollouts_mean'" in line]
    assert len(step_logs) == 3 and "'rewards/accuracy_reward/mean'" in step_logs[0]
    assert "counts as solved when the reward 'accuracy_reward' reaches 1.0" in result.stdout


def test_success_follows_the_correctness_reward():
    assert budget_grpo.success_reward_choice(["think_format_reward", "accuracy_reward"], None) == "accuracy_reward"
    assert budget_grpo.success_reward_choice(["examples.dapo_math.accuracy_reward"], None) == "accuracy_reward"
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
        assert config["reward_funcs"] == ["examples.dapo_math.accuracy_reward"]
    assert knapsack["advantage_clip"] == 5.0 and "advantage_clip" not in coba


def test_example_reads_a_paper_config_with_overrides_and_lora(tiny_chat_model, dapo_folder, tmp_path):
    run_script(["--config", str(ROOT / "examples" / "knapsack_rl.yaml"),
                *small_run(tiny_chat_model, dapo_folder, tmp_path / "out", "--generation_batch_size", "8",
                           "--gradient_accumulation_steps", "1", "--use_peft", "--lora_r", "4",
                           "--lora_target_modules", "q_proj", "v_proj")])
    assert (tmp_path / "out" / "adapter_config.json").exists()


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


def test_two_process_launch_through_the_ddp_config(tiny_chat_model, dapo_folder, tmp_path):
    launcher = (sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                str(ROOT / "accelerate_configs" / "ddp.yaml"), "--num_processes", "2", "--mixed_precision", "no")
    result = run_script(small_run(tiny_chat_model, dapo_folder, tmp_path / "out", "--per_device_train_batch_size",
                                  "4"), launcher=launcher)
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert "Model saved" in result.stdout


def test_trl_budget_grpo_runs_a_recipe_on_two_processes(tiny_chat_model, dapo_folder, tmp_path):
    # The shape of `trl grpo`: the paper's recipe, this project's accelerate config by name, accelerate's own flags.
    result = subprocess.run(
        [sys.executable, "-m", "trl_budget", "grpo", "--config", str(ROOT / "examples" / "knapsack_rl.yaml"),
         "--accelerate_config", "ddp", "--num_processes", "2", "--mixed_precision", "no",
         *small_run(tiny_chat_model, dapo_folder, tmp_path / "out", "--per_device_train_batch_size", "4",
                    "--generation_batch_size", "8", "--gradient_accumulation_steps", "1")],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-5000:]
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert result.stdout.count("Pass rates:") == 1  # printed by the main process of the two


def test_the_dapo_recipe_runs_dynamic_sampling_on_two_processes(tiny_chat_model, dapo_folder, tmp_path):
    # The recipe's settings, sized down; a parity reward in place of accuracy, which a tiny model never earns (every
    # prompt would be dropped until the cap stops the run, as it should).
    (tmp_path / "tiny_rewards.py").write_text(PARITY_REWARD)
    result = subprocess.run(
        [sys.executable, "-m", "trl_budget", "grpo", "--config", str(ROOT / "examples" / "dapo.yaml"),
         "--accelerate_config", "ddp", "--num_processes", "2", "--mixed_precision", "no",
         *small_run(tiny_chat_model, dapo_folder, tmp_path / "out", "--per_device_train_batch_size", "4",
                    "--generation_batch_size", "8", "--gradient_accumulation_steps", "1", "--reward_funcs",
                    "tiny_rewards.parity", "examples.dapo_math.overlong_punishment", "--success_reward_func", "parity",
                    "--save_strategy", "steps", "--save_steps", "3", allocator=None)],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-5000:]
    state = json.loads((tmp_path / "out" / "checkpoint-3" / "trainer_state.json").read_text())
    logs = [entry for entry in state["log_history"] if "budget/varied_prompts" in entry]
    assert len(logs) == 3 and all(entry["budget/generated_prompts"] == 6 * entry["budget/rounds"] for entry in logs)
    assert all(entry["budget/trained_rollouts"] == 8 and entry["budget/zero_std_groups"] == 0 for entry in logs)
    assert (tmp_path / "out" / "checkpoint-3" / "budget_prompt_stream.json").exists()


PARITY_REWARD = """def parity(completions, **kwargs):
    return [float(len(completion[-1]["content"]) % 2) for completion in completions]
"""


def descendants(pid: int) -> list[int]:
    """Every process started by `pid`, however deep (accelerate's launcher starts the workers)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        started = children.get(pending.pop(), [])
        found += started
        pending += started
    return found


def first_losses(command: list[str], cwd: Path, output: Path, must_exit: bool) -> list[float]:
    """The losses a run logged in its checkpoint. `trl grpo` on CPU processes can hang after it has saved, freeing its
    DDP model after `trainer.end()` destroyed the gloo group (BudgetGRPOTrainer frees it first): its run is then
    stopped once the saved model is complete. `trl-budget grpo` must exit by itself."""
    import os
    import signal
    import time

    log = output.with_suffix(".log")
    with log.open("w") as sink:
        process = subprocess.Popen(command, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)
        saved, deadline = output / "model.safetensors", time.monotonic() + 900
        while process.poll() is None and time.monotonic() < deadline:
            if not must_exit and saved.exists():
                deadline = min(deadline, time.monotonic() + 30)  # saved: half a minute more to exit
            time.sleep(1)
        if process.poll() is None:
            for pid in [*descendants(process.pid), process.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()
    if must_exit:
        assert process.returncode == 0, log.read_text()[-5000:]
    state = json.loads((output / "checkpoint-2" / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


@pytest.mark.parametrize("recipe", ["folder", "mixture"])
def test_trl_budget_grpo_trains_what_trl_grpo_trains(tiny_chat_model, tmp_path, recipe):
    # A prompt-only conversational dataset (a folder, or a mixture in the recipe) and a dotted-path reward: `trl grpo`
    # and `trl-budget grpo --budget_allocator uniform`, same seed, two processes: the same losses.
    folder = tmp_path / "prompts"
    folder.mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"{a}+{b}="}]} for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    (tmp_path / "tiny_rewards.py").write_text(PARITY_REWARD)
    if recipe == "folder":
        data = ["--dataset_name", str(folder)]
    else:
        (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({"datasets": [{"path": "json", "data_files": str(
            folder / "train.jsonl")}]}))
        data = ["--config", str(tmp_path / "recipe.yaml")]
    common = [*data, "--reward_funcs", "tiny_rewards.parity", "--model_name_or_path", str(tiny_chat_model),
              "--num_processes", "2", "--mixed_precision", "no", "--max_steps", "2", "--per_device_train_batch_size",
              "4", "--num_generations", "4", "--max_completion_length", "6", "--use_cpu", "--report_to", "none",
              "--save_strategy", "steps", "--save_steps", "2", "--logging_steps", "1", "--bf16", "false"]
    ddp = str(ROOT / "accelerate_configs" / "ddp.yaml")
    theirs = first_losses([sys.executable, "-m", "trl.cli.main", "grpo", "--accelerate_config", ddp, *common, "--output_dir",
                           str(tmp_path / "trl")], tmp_path, tmp_path / "trl", must_exit=False)
    ours = first_losses([sys.executable, "-m", "trl_budget", "grpo", "--accelerate_config", "ddp", *common,
                         "--budget_allocator", "uniform", "--output_dir", str(tmp_path / "ours")], tmp_path,
                        tmp_path / "ours", must_exit=True)
    assert len(theirs) == 2 and ours == theirs


def test_a_misspelled_field_is_named_before_launching(tmp_path):
    result = subprocess.run([sys.executable, "-m", "trl_budget", "grpo", "--budget_alocator", "uniform",
                             "--output_dir", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert "--budget_alocator is neither a field of the recipe" in result.stderr
    assert "Did you mean --budget_allocator?" in result.stderr


def test_trl_budget_grpo_refuses_a_bad_recipe_before_launching(tmp_path):
    result = subprocess.run([sys.executable, "-m", "trl_budget", "grpo", "--budget_allocator", "greedy", "--use_cpu",
                             "--bf16", "false", "--output_dir", str(tmp_path)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode != 0 and "budget_allocator='greedy' is unknown" in result.stderr
