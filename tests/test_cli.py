"""`trl-budget grpo` and the example script: resuming by a word, the process count, unknown flags, `--help`."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ALPHABET, free_port, make_dataset

from trl_budget.cli import grpo_launch_command, process_count_arguments
from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model
from trl_budget.scripts import grpo as budget_grpo

ROOT = Path(__file__).resolve().parents[1]
TRL_CONFIGS = Path(budget_grpo.trl.__file__).with_name("accelerate_configs")
OUR_CONFIGS = ROOT / "accelerate_configs"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """The tiny model and its character tokenizer, saved where `--model_name_or_path` finds them."""
    folder = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_char_tokenizer(ALPHABET)
    build_tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory):
    """Eight `a+b=` prompts with their answers, as a dataset folder for `--dataset_name`."""
    folder = tmp_path_factory.mktemp("sums")
    make_dataset(8).to_json(folder / "train.jsonl")
    return folder


def recipe(model, data, output, *extra) -> list[str]:
    return ["--model_name_or_path", str(model), "--dataset_name", str(data), "--output_dir", str(output),
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--budget_allocator", "knapsack",
            "--budget_min_generations", "2", "--budget_max_generations", "8", "--max_completion_length", "4",
            "--use_cpu", "--bf16", "false",
            "--gradient_checkpointing", "false", "--report_to", "none", "--logging_steps", "1", "--seed", "0",
            "--reward_funcs", "helpers.parity_reward", *extra]


def run_script(arguments: list[str]) -> None:
    """The training script as `accelerate launch` runs it, in this process."""
    budget_grpo.main(*budget_grpo.parse_recipe(arguments))


def launch_options(command: list[str]):
    from accelerate.commands.launch import launch_command_parser

    return launch_command_parser().parse_args(command)


def step_logs(text: str) -> int:
    return sum("'budget/rollouts_mean'" in line for line in text.splitlines())


# --------------------------------------------------------------------------------- --resume_from_checkpoint by a word


@pytest.fixture(scope="module")
def two_saved_steps(model_folder, data_folder, tmp_path_factory):
    """A run of two steps that saved checkpoint-1 and checkpoint-2."""
    output = tmp_path_factory.mktemp("run") / "out"
    run_script(recipe(model_folder, data_folder, output, "--max_steps", "2", "--save_strategy", "steps",
                      "--save_steps", "1"))
    return output


@pytest.mark.parametrize("word", ["true", "True", "LATEST"])
def test_resume_by_a_word_takes_the_newest_complete_checkpoint(model_folder, data_folder, two_saved_steps, tmp_path,
                                                               capsys, word):
    output = tmp_path / "out"
    shutil.copytree(two_saved_steps, output)
    (output / "checkpoint-3").mkdir()  # a save killed half-way: the newest folder, but no trainer_state.json
    capsys.readouterr()
    run_script(recipe(model_folder, data_folder, output, "--max_steps", "4", "--save_strategy", "steps",
                      "--save_steps", "1", "--resume_from_checkpoint", word))
    assert step_logs(capsys.readouterr().out) == 2  # steps 3 and 4 only: resumed from checkpoint-2
    first = json.loads((two_saved_steps / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    resumed = json.loads((output / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    assert resumed[:len(first)] == first and len([entry for entry in resumed if "loss" in entry]) == 4
    assert (output / "checkpoint-3" / "trainer_state.json").exists()  # the incomplete save, overwritten by step 3


def test_resume_words_and_paths(tmp_path):
    assert budget_grpo.resume_choice(None, str(tmp_path)) is None
    assert budget_grpo.resume_choice("False", str(tmp_path)) is None
    assert budget_grpo.resume_choice("runs/checkpoint-7", str(tmp_path)) == "runs/checkpoint-7"  # a path is a path
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    assert budget_grpo.resume_choice("latest", str(tmp_path)) == str(tmp_path / "checkpoint-2")


def test_resume_by_a_word_without_a_checkpoint_stops_before_the_model_loads(data_folder, tmp_path):
    # The model's folder does not exist: an error about it would mean the model was being loaded.
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint true: .* holds no checkpoint to resume from"):
        run_script(recipe(tmp_path / "no-model", data_folder, tmp_path / "out", "--resume_from_checkpoint", "true"))


def test_trl_budget_grpo_passes_the_checkpoint_a_word_names_to_every_process(tmp_path):
    for step, state in ((1, "{}"), (2, "")):  # checkpoint-2's save was killed half-way
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    flags = ["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false", "--resume_from_checkpoint"]
    script_arguments = launch_options(grpo_launch_command([*flags, "latest"], None)).training_script_args
    assert script_arguments == [*flags, "latest", "--resume_from_checkpoint", str(tmp_path / "checkpoint-1")]
    script_arguments = launch_options(grpo_launch_command([*flags, "false"], None)).training_script_args
    assert script_arguments == [*flags, "false"]
    with pytest.raises(ValueError, match="holds no checkpoint to resume from"):  # before anything launches
        grpo_launch_command([*flags, "true", "--output_dir", str(tmp_path / "new")], None)


# ------------------------------------------------------------------------------------------ the report's W&B tables


def test_the_script_adds_the_report_callback_where_wandb_is_on_only(tmp_path, tokenizer):
    from helpers import config_kwargs, parity_reward

    from trl_budget import BudgetGRPOConfig
    from trl_budget.run_report import BudgetReportCallback

    for report_to, added in (([], False), (["tensorboard"], False), (["wandb"], True), (["wandb", "tensorboard"], True)):
        trainer = budget_grpo.budget_trainer(
            model=build_tiny_model(tokenizer), processing_class=tokenizer, reward_funcs=parity_reward,
            train_dataset=make_dataset(3),
            args=BudgetGRPOConfig(**config_kwargs(tmp_path, report_to=report_to, budget_allocator="knapsack")))
        callbacks = [c for c in trainer.callback_handler.callbacks if isinstance(c, BudgetReportCallback)]
        assert len(callbacks) == added, report_to
        assert not added or set(callbacks[0].texts.values()) == {row["prompt"] for row in make_dataset(3)}


@pytest.mark.slow
def test_trl_budget_grpo_sends_the_reports_tables_to_wandb(model_folder, data_folder, tmp_path):
    # W&B offline, the real launcher: a table of prompts and one of shares at each of the two saves, as the report
    # of the run's folder builds them, with the training prompts' texts.
    import os

    from trl_budget.run_report import build_report, prompt_table, prompt_texts, shares_table

    output = tmp_path / "out"
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
                   "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "trl_budget", "grpo", *recipe(
        model_folder, data_folder, output, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1",
        "--report_to", "wandb")], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=environment)
    assert result.returncode == 0, result.stderr[-5000:]
    (tables,) = tmp_path.glob("wandb/offline-run-*/files/media/table/budget_report")
    logged = {name: sorted(tables.glob(f"{name}_*.table.json"), key=lambda path: int(path.name.split("_")[1]))
              for name in ("prompts", "shares")}
    assert [len(files) for files in logged.values()] == [2, 2]
    report = build_report(output, prompt_texts(make_dataset(8), "the training rows"))
    for name, table in (("prompts", prompt_table), ("shares", shares_table)):
        last = json.loads(logged[name][-1].read_text())
        columns, rows = table(report)
        assert last["columns"] == columns and last["data"] == [list(row) for row in rows]
    assert {row[1] for row in prompt_table(report)[1]} <= {row["prompt"] for row in make_dataset(8)}


# ------------------------------------------------------------------------------------------------- --num_processes


def test_num_processes_without_a_config_starts_that_many(tmp_path):
    command = grpo_launch_command(["--num_processes", "2", "--output_dir", str(tmp_path), "--use_cpu"], None)
    options = launch_options(command)
    assert options.num_processes == 2 and options.multi_gpu  # torchrun starts two, where the plain launcher starts one
    assert options.training_script == budget_grpo.__file__
    assert options.training_script_args == ["--output_dir", str(tmp_path), "--use_cpu"]


@pytest.mark.parametrize("named, default", [([], None), (["--config_file", str(TRL_CONFIGS / "single_gpu.yaml")], None),
                                            ([], str(TRL_CONFIGS / "single_gpu.yaml"))],
                         ids=["no config", "a one-process config", "a one-process default config"])
def test_num_processes_overrides_a_one_process_launch(named, default):
    from accelerate.commands.launch import launch_command_parser

    arguments = process_count_arguments([*named, "--num_processes", "2"], launch_command_parser(), default)
    assert arguments == [*named, "--num_processes", "2", "--multi_gpu"]


@pytest.mark.parametrize("launch", [["--config_file", str(OUR_CONFIGS / "ddp.yaml"), "--num_processes", "2"],
                                    ["--config_file", str(OUR_CONFIGS / "zero3.yaml"), "--num_processes", "4"],
                                    ["--use_fsdp", "--num_processes", "2"], ["--num_processes", "1"], []],
                         ids=["ddp", "zero3", "fsdp", "one", "unset"])
def test_a_launch_that_starts_its_processes_is_left_as_it_is(launch):
    from accelerate.commands.launch import launch_command_parser

    assert process_count_arguments(launch, launch_command_parser(), None) == launch


def test_num_processes_with_accelerates_cpu_launcher_is_refused_with_the_fix():
    from accelerate.commands.launch import launch_command_parser

    with pytest.raises(SystemExit, match=r"--num_processes 2 with --cpu starts one process.*drop --cpu and pass "
                                         r"--use_cpu"):
        process_count_arguments(["--cpu", "--num_processes", "2"], launch_command_parser(), None)


RANK_REWARD = """import os


def rank_parity(completions, **kwargs):
    with open("ranks.txt", "a") as ranks:
        ranks.write(os.environ.get("RANK", "no rank") + "\\n")
    return [float(len(completion) % 2) for completion in completions]
"""


@pytest.mark.slow
def test_trl_budget_grpo_num_processes_without_a_config_trains_on_that_many(model_folder, data_folder, tmp_path):
    # What the fix in the error above says, run: --num_processes 2 --use_cpu, no config: two ranks score rollouts.
    (tmp_path / "rank_rewards.py").write_text(RANK_REWARD)
    arguments = [*recipe(model_folder, data_folder, tmp_path / "out", "--max_steps", "1", "--save_strategy", "no",
                         "--per_device_train_batch_size", "4"), "--reward_funcs", "rank_rewards.rank_parity"]
    result = subprocess.run([sys.executable, "-m", "trl_budget", "grpo", "--num_processes", "2", "--mixed_precision",
                             "no", "--main_process_port", str(free_port()), *arguments],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-5000:]
    assert sorted(set((tmp_path / "ranks.txt").read_text().split("\n")) - {""}) == ["0", "1"]


# ---------------------------------------------------------------------------------------------- unknown flags


def test_the_example_names_a_misspelled_flag_before_anything_loads(tmp_path):
    # Neither the model nor the data exists: an error about them would mean they were being loaded.
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "budget_grpo.py"), "--model_name_or_path",
                             str(tmp_path / "no-model"), "--dataset_name", str(tmp_path / "no-data"), "--output_dir",
                             str(tmp_path / "out"), "--use_cpu", "--bf16", "false", "--max_step", "3"],
                            capture_output=True, text=True, timeout=300,
                            cwd=ROOT)
    assert result.returncode != 0
    assert "budget_grpo.py: --max_step is not a field of the recipe" in result.stderr
    assert "Did you mean --max_steps?" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_misspelled_recipe_key_is_named(tmp_path):
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({"budget_alocator": "coba"}))
    with pytest.raises(SystemExit, match=r"--budget_alocator is neither a field .*Did you mean --budget_allocator\?"):
        budget_grpo.parse_recipe(["--config", str(tmp_path / "recipe.yaml"), "--output_dir", str(tmp_path),
                                  "--use_cpu", "--bf16", "false"])


def test_an_accelerate_option_after_the_scripts_name_is_refused(tmp_path):
    # `accelerate launch examples/budget_grpo.py --num_processes 2`: accelerate never sees it, so one process trains.
    with pytest.raises(SystemExit, match=r"--num_processes is an option of `accelerate launch`, which reads it only "
                                         r"before the script's name"):
        budget_grpo.parse_recipe(["--output_dir", str(tmp_path), "--num_processes", "2"], prog="budget_grpo.py")


def test_a_value_that_no_flag_takes_is_refused(tmp_path):
    with pytest.raises(SystemExit, match=r"stray: no flag takes this"):
        budget_grpo.parse_recipe(["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false", "stray"])


# ----------------------------------------------------------------------------------------------------- --help


def test_help_lists_every_flag_of_the_script_with_the_budget_settings_apart():
    # `--help` answers at once: it reads the dataclasses' sources, importing neither TRL, transformers nor torch.
    code = ("import contextlib, io, sys; from trl_budget.cli import main; out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out): main(['grpo', '--help'])\n"
            "print(sorted(name for name in ('torch', 'trl', 'transformers') if name in sys.modules)); "
            "print(out.getvalue())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    imported, text = result.stdout.split("\n", 1)
    assert imported == "[]" and text.startswith("usage: trl-budget grpo")

    sections = dict(re.findall(r"^(\S[^\n]*):\n((?:  [^\n]*\n?)+)", text, re.M))
    flags = {heading: re.findall(r"^  (--\w+) ", body, re.M) for heading, body in sections.items()}
    switches = set(re.findall(r"(--no_\w+) sets it false", text))
    budget, *trls = flags
    assert budget == "Budget settings (BudgetGRPOConfig)" and len(trls) == 4
    assert {"--output_dir", "--max_steps", "--per_device_train_batch_size", "--save_steps",
            "--resume_from_checkpoint"} <= set(flags[trls[1]])

    from dataclasses import fields

    from trl import GRPOConfig

    from trl_budget import BudgetGRPOConfig
    from trl_budget.settings.renamed import RENAMED_SETTINGS

    added = {f"--{field.name}" for field in fields(BudgetGRPOConfig)} - {f"--{field.name}" for field in
                                                                         fields(GRPOConfig)}
    renamed = {f"--{name}" for name in RENAMED_SETTINGS}
    assert set(flags[budget]) == added - renamed  # the budget's own settings, and only they, under their heading
    # The former names are taken (with a warning) but not offered: before, --help listed them under their own heading.
    listed = [flag for heading in trls for flag in flags[heading]]
    assert len(listed) == len(set(listed)) and not renamed & set(listed)
    # TRL's num_generations keeps TRL's text, with what it means under each rule.
    assert re.search(r"--num_generations .*\n(      .*\n)*      trl_budget: as TRL under the default budget_allocator="
                     r"'uniform'; the average a prompt under 'knapsack' or\n      'coba'; not read under 'spo'", text)
    parsed = {action.option_strings[0] for action in budget_grpo.make_parser()._actions} - {"-h"}
    assert set(listed) | set(flags[budget]) | renamed | switches == parsed  # every flag it takes, no other
