"""The options beyond both papers, each measured on the built-in task against the run without it.

    python benchmarks/beyond_options/beyond_options.py   # 8 runs of the allocation study's regime, seed 0, 4 minutes

One figure per option, from the mechanism it acts on (single runs: mechanism figures, not accuracy claims; the
allocation study runs accuracy comparisons with paired seeds):
- `prompt_group_column="level"` (a group prior) and `pass_rate_prior_column` (each prompt's solve rate by the warm
  start, 8 samples: what a dataset's reference-model column would hold): the effective ratio over the first epoch
  (the generation batches in which most prompts are new), against Knapsack RL without a prior, which allocates that
  epoch as uniform does.
- `budget_token_cap=1.0`: completion tokens per generation batch, against the uncapped run and uniform's.
- `budget_loss_weighting="prompt"`: the largest single prompt's share of the batch's |advantage| mass, against token
  weighting, for CoBA-RL (which piles rollouts on few prompts) and Knapsack RL.
Writes benchmarks/beyond_options/results/beyond_options.json and prints the table.
Until the move to benchmarks/beyond_options/ this script was benchmarks/beyond_options.py.
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from trl_budget.demo.run import run_rl, solve_rates, warm_start
from trl_budget.demo.settings import RLSettings, WarmStartSettings
from trl_budget.demo.task import split_problems

VARIANTS = {
    "uniform": {"budget_allocator": "uniform"},
    "knapsack": {"budget_allocator": "knapsack"},
    "knapsack-group-prior": {"budget_allocator": "knapsack", "prompt_group_column": "level"},
    # The warm start's own solve rate of each training prompt (8 samples): what a dataset's reference-model column is.
    "knapsack-column-prior": {"budget_allocator": "knapsack", "pass_rate_prior_column": "prior"},
    "knapsack-token-cap-1.0": {"budget_allocator": "knapsack", "budget_token_cap": 1.0},
    "knapsack-prompt-weighted": {"budget_allocator": "knapsack", "budget_loss_weighting": "prompt"},
    "coba": {"budget_allocator": "coba"},
    "coba-prompt-weighted": {"budget_allocator": "coba", "budget_loss_weighting": "prompt"},
}
FIRST_EPOCH_BATCHES = 23  # 1 500 prompts / 64 per batch: the batches before prompts start coming back


def run_variant(label: str, model_path: str, seed: int, steps: int, output_dir: str, priors: dict) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    options = {k: v for k, v in VARIANTS[label].items() if k != "budget_allocator"}
    return run_rl(Path(model_path), VARIANTS[label]["budget_allocator"], seed, RLSettings.pool(steps),
                  Path(output_dir) / label, show_progress=False, label=label,
                  prompt_priors=priors if "pass_rate_prior_column" in options else None, **options)


def warm_start_solve_rates(model_path: Path, settings: RLSettings, samples: int = 8) -> dict[str, float]:
    """Each training prompt's solve rate by the warm-started model, from `samples` answers at temperature 1."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    train, _ = split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed, settings.levels)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    rates = solve_rates(model, tokenizer, train, samples=samples, seed=12345)
    return {problem["prompt"]: float(rate) for problem, rate in zip(train, rates)}


def mean_of(run: dict, name: str, batches: slice = slice(None)) -> float:
    values = [value for value in run[name][batches] if value is not None]
    return float(np.mean(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=480)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--output", default="benchmarks/beyond_options/results/beyond_options.json")
    args = parser.parse_args()
    model_path = warm_start(WarmStartSettings())
    priors = warm_start_solve_rates(model_path, RLSettings.pool(args.steps))
    with ProcessPoolExecutor(args.processes) as pool:
        futures = {label: pool.submit(run_variant, label, str(model_path), args.seed, args.steps, "beyond_runs",
                                      priors) for label in VARIANTS}
        runs = {label: future.result() for label, future in futures.items()}
    first = slice(0, FIRST_EPOCH_BATCHES)
    rows = {}
    for label, run in runs.items():
        rows[label] = {
            "effective_ratio_first_epoch": mean_of(run, "effective_ratio", first),
            "effective_ratio": mean_of(run, "effective_ratio"),
            "prior_share_first_epoch": mean_of(run, "prior_share", first),
            "completion_tokens_per_batch": mean_of(run, "completion_tokens"),
            "top_prompt_loss_share": mean_of(run, "top_prompt_loss_share"),
            "prompts_with_gradient": mean_of(run, "prompts_with_gradient"),
            "final_held_out_accuracy": run["curve"][-1]["accuracy"],
        }
    uniform_tokens = rows["uniform"]["completion_tokens_per_batch"]
    Path(args.output).write_text(json.dumps({"seed": args.seed, "steps": args.steps, "variants": VARIANTS,
                                             "rows": rows, "runs": runs}, indent=1))
    print("| variant | effective ratio, first epoch | prior share, first epoch | completion tokens per batch "
          "(vs uniform) | largest prompt's loss share | prompts with a gradient | final held-out accuracy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, row in rows.items():
        print(f"| {label} | {row['effective_ratio_first_epoch']:.3f} | {row['prior_share_first_epoch']:.2f} | "
              f"{row['completion_tokens_per_batch']:.0f} ({row['completion_tokens_per_batch'] / uniform_tokens:.2f}×) "
              f"| {row['top_prompt_loss_share']:.3f} | {row['prompts_with_gradient']:.3f} | "
              f"{row['final_held_out_accuracy']:.3f} |")


if __name__ == "__main__":
    main()
