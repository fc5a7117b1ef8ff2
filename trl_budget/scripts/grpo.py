"""`trl grpo` with per-prompt rollout budgets: TRL's own GRPO script (`trl/scripts/grpo.py`), run with
`BudgetGRPOTrainer` and `BudgetGRPOConfig` in place of `GRPOTrainer` and `GRPOConfig`. `trl-budget grpo` launches it
under `accelerate`, as `trl grpo` launches TRL's.

Every recipe and flag that `trl grpo` takes works as it does there (a dataset by name or folder, a mixture under
`datasets:`, `--reward_funcs` by name or dotted path, `--reward_model_name_or_path`, every `GRPOConfig` and
`ModelConfig` field), plus every budget setting; since the script is TRL's, it follows TRL when TRL changes. One
budget default is added: when a correctness reward (`accuracy_reward`, `reasoning_accuracy_reward`, or a dotted path
ending in one of these names) is among the rewards, it alone decides a rollout's success for the pass rates, unless
`--success_reward_func` says otherwise, so that a format reward added to it cannot make wrong answers count as solved.

The math recipes of both releases (DAPO-Math-17k, their configs) are `examples/knapsack_rl.yaml` and
`examples/coba_rl.yaml`, run through the same command with the DAPO reward of `examples/dapo_math.py`.
"""

from __future__ import annotations

import contextlib

import trl
from trl import DatasetMixtureConfig, ModelConfig, TrlParser
from trl.scripts import grpo as trl_grpo

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer

# Rewards that say whether an answer is right: when one is used, it alone decides success for the pass rates.
CORRECTNESS_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward")


def make_parser(prog: str | None = None) -> TrlParser:
    """TRL's GRPO parser with `BudgetGRPOConfig` in place of `GRPOConfig`: every field a flag, `--config FILE`."""
    return TrlParser((trl_grpo.GRPOScriptArguments, BudgetGRPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def success_reward_choice(reward_names: list[str], chosen: int | str | None) -> int | str | None:
    """`--success_reward_func` if given, else the correctness reward among `reward_names` (None: the weighted sum)."""
    if chosen is not None:
        return chosen
    return next((name.rsplit(".", 1)[-1] for name in reward_names
                 if name.rsplit(".", 1)[-1] in CORRECTNESS_REWARDS), None)


@contextlib.contextmanager
def budget_trainer_in_trl():
    """TRL's script takes `GRPOTrainer` from `trl` when it runs; within this block that name is `BudgetGRPOTrainer`."""
    original = trl.GRPOTrainer
    trl.GRPOTrainer = BudgetGRPOTrainer
    try:
        yield
    finally:
        trl.GRPOTrainer = original


def main(script_args, training_args, model_args, dataset_args) -> None:
    from accelerate import PartialState

    training_args.success_reward_func = success_reward_choice(script_args.reward_funcs or [],
                                                              training_args.success_reward_func)
    judge = training_args.success_reward_func
    judge = "the weighted sum of the rewards" if judge is None else f"the reward {judge!r}"
    if PartialState().is_main_process:
        print(f"Pass rates: a rollout counts as solved when {judge} reaches {training_args.success_threshold}.")
    with budget_trainer_in_trl():
        trl_grpo.main(script_args, training_args, model_args, dataset_args)


if __name__ == "__main__":
    main(*make_parser().parse_args_and_config(fail_with_unknown_args=False))
