"""`trl grpo` with per-prompt rollout budgets: TRL's own GRPO script (`trl/scripts/grpo.py`), run with
`BudgetGRPOTrainer` and `BudgetGRPOConfig` in place of `GRPOTrainer` and `GRPOConfig`. `trl-budget grpo` launches it
under `accelerate`, as `trl grpo` launches TRL's.

Every recipe and flag that `trl grpo` takes works as it does there (a dataset by name or folder, a mixture under
`datasets:`, `--reward_funcs` by name or dotted path, `--reward_model_name_or_path`, every `GRPOConfig` and
`ModelConfig` field), plus every budget setting; since the script is TRL's, it follows TRL when TRL changes. One
budget default is added: when a correctness reward (`accuracy_reward`, `reasoning_accuracy_reward`, or a dotted path
ending in one of these names) is among the rewards, it alone decides a rollout's success for the pass rates, unless
`--success_reward_func` says otherwise, so that a format reward added to it cannot make wrong answers count as solved.
`--resume_from_checkpoint` takes `true` or `latest` (any case) for the newest complete checkpoint of `--output_dir`, as
`resume_from_checkpoint=True` does in Python, and `false` for none; anything else is a checkpoint's path. With W&B on
(`--report_to wandb`), the report's tables (`trl_budget.run_report.BudgetReportCallback`) go to W&B at each save.

The math recipes of both releases (DAPO-Math-17k, their configs) are `examples/knapsack_rl.yaml` and
`examples/coba_rl.yaml`, run through the same command with the DAPO reward of `examples/dapo_math.py`.
"""

from __future__ import annotations

import contextlib
import sys

import trl
from datasets import Dataset
from trl import DatasetMixtureConfig, ModelConfig, TrlParser
from trl.scripts import grpo as trl_grpo

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.checkpoint import resume_point
from trl_budget.run_report import BudgetReportCallback

# Rewards that say whether an answer is right: when one is used, it alone decides success for the pass rates.
CORRECTNESS_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward")


def make_parser(prog: str | None = None) -> TrlParser:
    """TRL's GRPO parser with `BudgetGRPOConfig` in place of `GRPOConfig`: every field a flag, `--config FILE`."""
    return TrlParser((trl_grpo.GRPOScriptArguments, BudgetGRPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def refuse_unknown_flags(arguments: list[str], script_parser, launch_parser, launched: bool = False) -> None:
    """A flag that neither the script nor `accelerate launch` takes stops here, before the recipe is checked or anything
    launched, naming the field that was probably meant. In the script that `accelerate launch` has started
    (`launched`), an option of `accelerate launch` stops too: accelerate reads its options before the script's name
    only, so there nothing would read it."""
    import difflib

    fields = {option for action in script_parser._actions for option in action.option_strings} | {"--config"}
    launchers = {option for action in launch_parser._actions for option in action.option_strings}
    known = fields if launched else fields | launchers | {"--accelerate_config"}
    program = script_parser.prog
    for argument in arguments:
        flag = argument.split("=", 1)[0]
        if not flag.startswith("--") or flag in known:
            continue
        if flag in launchers:
            raise SystemExit(f"{program}: {flag} is an option of `accelerate launch`, which reads it only before the "
                             f"script's name: `accelerate launch {flag} ... {program} ...`.")
        close = difflib.get_close_matches(flag[2:], [option[2:] for option in sorted(known)], n=1)
        hint = f" Did you mean --{close[0]}?" if close else ""
        launch = "" if launched else " nor an option of `accelerate launch`"
        raise SystemExit(f"{program}: {flag} is {'not' if launched else 'neither'} a field of the recipe "
                         f"(BudgetGRPOConfig, TRL's GRPO script arguments, ModelConfig){launch}.{hint} "
                         f"`{program} --help` lists them.")


def parse_recipe(arguments: list[str] | None = None, prog: str | None = None) -> tuple:
    """The script's dataclasses from `arguments` (default: the command line) and `--config`, as TRL's script parses
    them, once every flag and recipe key has been checked: one that no field takes is refused, naming the field that
    was probably meant. A recipe may hold options of `accelerate launch`, for `trl-budget grpo` (and `trl grpo`) to
    pass to it."""
    from accelerate.commands.launch import launch_command_parser

    arguments = sys.argv[1:] if arguments is None else list(arguments)
    parser, launcher = make_parser(prog), launch_command_parser()
    refuse_unknown_flags(arguments, parser, launcher, launched=True)
    *recipe, config_remaining, cli_remaining = parser.parse_args_and_config(
        arguments, return_remaining_strings=True, separate_remaining_strings=True)
    refuse_unknown_flags(config_remaining, parser, launcher)
    if cli_remaining:  # values that no flag took
        raise SystemExit(f"{parser.prog}: {' '.join(cli_remaining)}: no flag takes this; every value follows its "
                         "--FIELD.")
    return tuple(recipe)


# What `--resume_from_checkpoint` takes for the newest complete checkpoint and for none: a command line cannot pass
# Python's True or False.
RESUME_LATEST, RESUME_NONE = ("true", "latest"), ("false",)


def resume_choice(value: str | None, output_dir: str) -> str | None:
    """`--resume_from_checkpoint` as the checkpoint to resume from: `true` or `latest` (any case) the newest complete
    checkpoint of `output_dir` (what `train(resume_from_checkpoint=True)` takes), `false` or nothing none, anything
    else a path. Raises ValueError, before the model loads, when `output_dir` holds no checkpoint at all."""
    if value is None or value.lower() in RESUME_NONE:
        return None
    if value.lower() not in RESUME_LATEST:
        return value
    checkpoint = resume_point(output_dir)  # raises when every checkpoint there is incomplete
    if checkpoint is True:
        raise ValueError(f"--resume_from_checkpoint {value}: {output_dir} holds no checkpoint to resume from. Leave "
                         "out --resume_from_checkpoint to start afresh, or pass a checkpoint's path (./"
                         f"{value} for a folder so named).")
    return checkpoint


def success_reward_choice(reward_names: list[str], chosen: int | str | None) -> int | str | None:
    """`--success_reward_func` if given, else the correctness reward among `reward_names` (None: the weighted sum)."""
    if chosen is not None:
        return chosen
    return next((name.rsplit(".", 1)[-1] for name in reward_names
                 if name.rsplit(".", 1)[-1] in CORRECTNESS_REWARDS), None)


def budget_trainer(*args, **kwargs) -> BudgetGRPOTrainer:
    """`BudgetGRPOTrainer`, built as TRL's script builds `GRPOTrainer`; where W&B is on (`report_to` names it), with
    `BudgetReportCallback`, so that the report's tables reach W&B at each save, named by the training prompts' texts
    (a streamed dataset's prompts are not read ahead: its tables show the keys)."""
    trainer = BudgetGRPOTrainer(*args, **kwargs)
    if "wandb" in (trainer.args.report_to or []):
        dataset = trainer.train_dataset
        trainer.add_callback(BudgetReportCallback(prompts=dataset if isinstance(dataset, Dataset) else None))
    return trainer


@contextlib.contextmanager
def budget_trainer_in_trl():
    """TRL's script takes `GRPOTrainer` from `trl` when it runs; within this block that name builds a
    `BudgetGRPOTrainer` (`budget_trainer`)."""
    original = trl.GRPOTrainer
    trl.GRPOTrainer = budget_trainer
    try:
        yield
    finally:
        trl.GRPOTrainer = original


def main(script_args, training_args, model_args, dataset_args) -> None:
    from accelerate import PartialState

    training_args.resume_from_checkpoint = resume_choice(training_args.resume_from_checkpoint,
                                                         training_args.output_dir)
    training_args.success_reward_func = success_reward_choice(script_args.reward_funcs or [],
                                                              training_args.success_reward_func)
    judge = training_args.success_reward_func
    judge = "the weighted sum of the rewards" if judge is None else f"the reward {judge!r}"
    if PartialState().is_main_process:
        print(f"Pass rates: a rollout counts as solved when {judge} reaches {training_args.success_threshold}.")
    with budget_trainer_in_trl():
        trl_grpo.main(script_args, training_args, model_args, dataset_args)


if __name__ == "__main__":
    main(*parse_recipe())
