# /// script
# dependencies = [
#     "trl_budget[math,vllm,wandb]",
#     "trl>=1.16,<1.17",
#     "math-verify>=0.8",
# ]
# ///

"""Math RLVR with per-prompt rollout budgets: TRL's `grpo.py`, with BudgetGRPOTrainer.

The script itself is `trl_budget/scripts/grpo.py`, which `trl-budget grpo` launches under `accelerate` (as `trl grpo`
launches TRL's); this file runs the same script from a checkout, for `accelerate launch examples/budget_grpo.py`:

    CUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve --model Qwen/Qwen2.5-7B-Instruct --data_parallel_size 4
    CUDA_VISIBLE_DEVICES=4,5,6,7 accelerate launch --config_file accelerate_configs/zero3.yaml \\
        --num_processes 4 examples/budget_grpo.py --config examples/knapsack_rl.yaml --gradient_accumulation_steps 4 \\
        --model_name_or_path Qwen/Qwen2.5-7B-Instruct --use_vllm --vllm_mode server

Every `BudgetGRPOConfig` / `GRPOConfig` / `ModelConfig` flag works as in TRL; `--config FILE.yaml` reads them from a file.
Datasets: DAPO-Math-17k (default), GSM8K and MATH by name, or any dataset / local JSON, JSONL or Parquet file with
`--prompt_column` and `--solution_column`.
"""

from trl_budget.scripts.grpo import (  # noqa: F401 - the script's pieces, for whoever imports this example
    DAPO_PREFIX,
    DAPO_SUFFIX,
    BudgetGRPOScriptArguments,
    load_math_dataset,
    main,
    make_parser,
    reward_functions,
    success_reward_choice,
)

if __name__ == "__main__":
    main(*make_parser().parse_args_and_config())
