"""Coverage replay: what each rule of sampling would train from the shipped warm start's own answers, before any RL.

    python benchmarks/third_study/coverage_replay.py   # samples (cached in results/), replays, the settings chosen

The third allocation study (rounds_study.py, beside this script) chooses its rounds settings here, on the warm start
alone, before any RL run of a rule of rounds:

1. Samples: 64 answers at temperature 1 to every prompt of the study's 1 500-prompt training pool
   (`RLSettings.study()`), from the shipped warm start (seed 2026), kept as 0/1 outcomes in
   results/coverage_samples.npz.
2. Exact replays, batch by batch, of each rule's own code (`round_rules.UntilMixed`, `ReinforceAda`'s rounds and
   down-sampling) on those answers: 5 shuffles of the pool into batches of 64 prompts (23 per shuffle, as TRL's
   sampler fills them), each prompt's answers consumed in the order drawn from a shuffle-specific start. Every batch is
   a prompt's first visit (no history), as in the study's first epoch.
3. Per rule: coverage (share of prompts whose *trained* rollouts hold a success and a failure), trained rollouts with a
   gradient per batch (rows whose advantage baseline — the trained group, or all the prompt's rollouts under
   Reinforce-Ada's global statistics — is mixed), rollouts generated and trained per batch, rounds per batch.
4. The choice, stated before the replay ran: among rounds-until-mixed settings at 512 generated rollouts per batch
   (first round 2 or 4, 1, 2 or 4 more per round, at most 16 or 32 per prompt), the highest coverage; among settings
   within 0.005 of it, the fewest rounds per batch (each is an engine request); then the smaller cap.

Writes results/coverage_replay.json (every rule's figures and the chosen setting).
Until the move to benchmarks/third_study/ this script was benchmarks/coverage_replay.py (the path the commands stored
with its results name).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from trl_budget import KnapsackAllocator, ReinforceAda, UniformAllocator
from trl_budget.round_rules import OneShot, UntilMixed, top_up
from trl_budget.rounds import GeneratedRounds

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLES, TEMPERATURE, SAMPLE_SEED = 64, 1.0, 2026
PROMPTS_PER_BATCH, BUDGET, SHUFFLES = 64, 512, 5
ROUND_GRID = {"first": (2, 4), "per_round": (1, 2, 4), "most": (16, 32)}
TIE = 0.005


def sampled_outcomes(path: Path) -> np.ndarray:
    """The warm start's 0/1 outcomes, `(prompts, SAMPLES)`, sampled once and kept in `path`."""
    if path.exists():
        return np.unpackbits(np.load(path)["outcomes"], axis=1)[:, :SAMPLES].astype(np.float64)
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from trl_budget.demo.run import answer_outcomes, warm_start
    from trl_budget.demo.settings import RLSettings, WarmStartSettings
    from trl_budget.demo.task import split_problems

    torch.set_num_threads(2)
    settings = RLSettings.study()
    train, _ = split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed, settings.levels)
    model_path = warm_start(WarmStartSettings())
    model = AutoModelForCausalLM.from_pretrained(model_path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    outcomes = answer_outcomes(model, tokenizer, train, SAMPLES, TEMPERATURE, batch_size=64, seed=SAMPLE_SEED)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, outcomes=np.packbits(outcomes.astype(bool), axis=1),
                        levels=np.array([problem["level"] for problem in train]))
    return outcomes


def batches(outcomes: np.ndarray):
    """Each replayed batch: its prompts' answers, each prompt's row starting at a shuffle-specific column."""
    for shuffle in range(SHUFFLES):
        rng = np.random.default_rng(shuffle)
        order = rng.permutation(len(outcomes))
        starts = rng.integers(0, SAMPLES, len(outcomes))
        rolled = np.array([np.roll(outcomes[i], -start) for i, start in zip(order, starts)])
        for first in range(0, len(order) - PROMPTS_PER_BATCH + 1, PROMPTS_PER_BATCH):
            yield rolled[first : first + PROMPTS_PER_BATCH]


def replay(rule, answers: np.ndarray) -> tuple[GeneratedRounds, list]:
    """Run a round rule on scripted answers; returns the rounds and, under down-sampling, the trained slots."""

    rounds = GeneratedRounds(len(answers), 1, 0)
    while (counts := rule.next_round(rounds)) is not None:
        taken = [answers[i, int(rounds.counts[i]) : int(rounds.counts[i] + counts[i])] for i in range(len(answers))]
        if any(len(row) < count for row, count in zip(taken, counts)):
            raise RuntimeError(f"a rule asked for more than the {SAMPLES} answers sampled per prompt")
        rounds.add_evidence(counts, np.concatenate(taken))
    return rounds, (rule.trained_slots(rounds) if hasattr(rule, "trained_slots") else None)


def figures(rounds: GeneratedRounds, trained, global_baseline: bool) -> dict:
    outcomes = rounds.outcomes_in_plan_order()
    if trained is None:
        chosen, counts = np.arange(outcomes.size), rounds.counts
    else:
        chosen, counts = trained
    groups = np.split(outcomes[chosen], np.cumsum(counts)[:-1])
    mixed_trained = np.array([0 < group.sum() < group.size for group in groups])
    baseline_mixed = rounds.mixed() if global_baseline else mixed_trained
    return {"coverage": float(mixed_trained.mean()), "gradient_rollouts": float(counts[baseline_mixed].sum()),
            "generated": float(rounds.counts.sum()), "trained": float(counts.sum()), "rounds": float(len(rounds))}


def mean_over_batches(make_rule, outcomes: np.ndarray, global_baseline: bool = False) -> dict:
    rows = [figures(*replay(make_rule(), answers), global_baseline) for answers in batches(outcomes)]
    return {name: float(np.mean([row[name] for row in rows])) for name in rows[0]}


def uniform(n: int):
    return lambda: OneShot(np.full(PROMPTS_PER_BATCH, np.nan), lambda rates: np.full(rates.size, n))


def until_mixed(first: int, per_round: int, most: int, allocator=None):
    allocator = allocator or UniformAllocator(first, most)

    def fresh(wins, trials):
        return np.divide(wins, trials, out=np.full(wins.size, np.nan), where=trials > 0)

    return lambda: UntilMixed(first, per_round, most, BUDGET, 1, None, fresh,
                              lambda rates, counts, spare: top_up(allocator, rates, counts, spare, None, most))


def reinforce_ada(choice: str):
    return lambda: ReinforceAda(choice, samples_per_round=4, max_rounds=16, max_generated=BUDGET,
                                default_generations=4).round_rule(1)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    outcomes = sampled_outcomes(args.output_dir / "coverage_samples.npz")
    rules = {f"uniform n={n}": mean_over_batches(uniform(n), outcomes) for n in (4, 8, 12, 16)}
    grid = {}
    for first, per_round, most in itertools.product(*ROUND_GRID.values()):
        grid[(first, per_round, most)] = mean_over_batches(until_mixed(first, per_round, most), outcomes)
        rules[f"until mixed: first {first}, +{per_round} a round, <= {most}"] = grid[(first, per_round, most)]
    best = max(row["coverage"] for row in grid.values())
    chosen = min((key for key, row in grid.items() if row["coverage"] >= best - TIE),
                 key=lambda key: (grid[key]["rounds"], key[2]))
    first, per_round, most = chosen
    rules["until mixed (chosen), knapsack top-up"] = mean_over_batches(
        until_mixed(first, per_round, most, KnapsackAllocator(first, most)), outcomes)
    for choice in ("balanced", "positive_focused"):
        rules[f"reinforce_ada {choice}, 4 a round, K=4"] = mean_over_batches(reinforce_ada(choice), outcomes,
                                                                             global_baseline=True)
    levels = np.load(args.output_dir / "coverage_samples.npz")["levels"]
    start = {"share_all_fail_of_8": float((outcomes[:, :8].sum(1) == 0).mean()),
             "share_all_success_of_8": float((outcomes[:, :8].sum(1) == 8).mean()),
             "share_never_solved_in_64": float((outcomes.sum(1) == 0).mean()),
             "mean_pass_rate": float(outcomes.mean()),
             "per_level_pass_rate": {int(level): float(outcomes[levels == level].mean()) for level in set(levels)}}
    result = {"samples": SAMPLES, "temperature": TEMPERATURE, "seed": SAMPLE_SEED, "shuffles": SHUFFLES,
              "prompts_per_batch": PROMPTS_PER_BATCH, "budget": BUDGET, "start": start, "rules": rules,
              "chosen": {"budget_first_round_generations": first, "budget_round_generations": per_round,
                         "max_generations": most, **grid[chosen]},
              "command": "python benchmarks/third_study/coverage_replay.py"}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "coverage_replay.json").write_text(json.dumps(result, indent=2) + "\n")
    print("| rule | coverage | trained rollouts with a gradient per batch | generated | trained | rounds |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in rules.items():
        print(f"| {name} | {row['coverage']:.3f} | {row['gradient_rollouts']:.0f} | {row['generated']:.0f} | "
              f"{row['trained']:.0f} | {row['rounds']:.2f} |")
    print(f"chosen: first {first}, +{per_round} a round, at most {most} per prompt")
    return result


if __name__ == "__main__":
    main()
