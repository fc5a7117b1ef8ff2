# /// script
# dependencies = [
#     "trl_budget[math,vllm,wandb]",
#     "trl>=1.16,<1.17",
#     "math-verify>=0.8",
# ]
# ///

"""`trl grpo` with per-prompt rollout budgets, for `accelerate launch` from a checkout.

The script itself is `trl_budget/scripts/grpo.py`: TRL's own GRPO script run with BudgetGRPOTrainer and
BudgetGRPOConfig, which `trl-budget grpo` launches under `accelerate` as `trl grpo` launches TRL's. This file runs the
same script, for those who launch it themselves; the math recipes of both releases read DAPO-Math-17k with the reward
of `examples/dapo_math.py`:

    CUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve --model Qwen/Qwen2.5-7B-Instruct --data_parallel_size 4
    CUDA_VISIBLE_DEVICES=4,5,6,7 accelerate launch --config_file accelerate_configs/zero3.yaml \\
        --num_processes 4 examples/budget_grpo.py --config examples/knapsack_rl.yaml --gradient_accumulation_steps 4 \\
        --model_name_or_path Qwen/Qwen2.5-7B-Instruct --use_vllm --vllm_mode server

Every flag and recipe of `trl grpo` works as there, plus every budget setting; `--config FILE.yaml` reads them from a
file. A flag or recipe key that no field takes stops the script before anything loads, naming the field that was
probably meant, as `trl-budget grpo` does; so does an option of `accelerate launch` given after the script's name,
where accelerate does not read it.
"""

from trl_budget.scripts.grpo import main, parse_recipe

if __name__ == "__main__":
    main(*parse_recipe())
