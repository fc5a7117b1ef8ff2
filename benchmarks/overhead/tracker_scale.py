"""Memory and checkpoint cost of the capability tracker at 10^6 prompts.

Fills a tracker with Knapsack RL's rule (the heaviest default: 16-rollout pools) from visits of 8 rollouts, then
measures its memory (tracemalloc, after a garbage collection), the time (untraced) and peak memory (traced, a second
time) of writing its state to a JSON file as the trainer does, the file's size, and the time to read it back. One process, this machine's disk.

    python benchmarks/overhead/tracker_scale.py                    # 10^6 prompts
    python benchmarks/overhead/tracker_scale.py --prompts 100000
Until the move to benchmarks/overhead/ this script was benchmarks/tracker_scale.py (the path the commands stored with
its results name).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from trl_budget import CapabilityTracker
from trl_budget.checkpoint import load_tracker_state, write_json_atomically


def filled_tracker(prompts: int, visits: int, rollouts: int, seed: int = 0) -> CapabilityTracker:
    tracker = CapabilityTracker(window=16, min_rollouts=8, rollout_pool=16)
    rng = np.random.default_rng(seed)
    keys = [f"{i:032x}" for i in range(prompts)]  # the shape of prompt_key's digests
    batch = 4096
    for _ in range(visits):
        for start in range(0, prompts, batch):
            chunk = keys[start : start + batch]
            tracker.update(np.repeat(chunk, rollouts), rng.random(len(chunk) * rollouts) < 0.4)
    return tracker


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=1_000_000)
    parser.add_argument("--visits", type=int, default=2, help="visits per prompt (default 2)")
    parser.add_argument("--output", type=Path, default=Path("benchmarks/overhead/results/tracker_scale.json"))
    args = parser.parse_args(argv)

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracker = filled_tracker(args.prompts, args.visits, rollouts=8)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "budget_tracker_state.json")
        start = time.perf_counter()
        write_json_atomically(path, tracker.state_dict())
        save_seconds = time.perf_counter() - start  # timed untraced: tracing slows json several times over
        tracemalloc.start()
        write_json_atomically(path, tracker.state_dict())
        save_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        size = os.path.getsize(path)
        restored = CapabilityTracker(window=16, min_rollouts=8, rollout_pool=16)
        start = time.perf_counter()
        load_tracker_state(restored, path)
        load_seconds = time.perf_counter() - start
    sample = [f"{i:032x}" for i in range(0, args.prompts, max(1, args.prompts // 1000))]
    assert np.array_equal(restored.pass_rates(sample), tracker.pass_rates(sample), equal_nan=True)

    result = {
        "command": "python benchmarks/overhead/tracker_scale.py" + ("" if args.prompts == 1_000_000 else
                                                           f" --prompts {args.prompts}"),
        "prompts": args.prompts,
        "visits_per_prompt": args.visits,
        "memory_bytes_per_prompt": held / args.prompts,
        "save_seconds": save_seconds,
        "save_peak_bytes": save_peak,
        "state_file_bytes": size,
        "load_seconds": load_seconds,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    print(f"{args.prompts} prompts: {held / args.prompts:.0f} bytes per prompt in memory; save {save_seconds:.2f} s "
          f"(peak {save_peak / 2**20:.0f} MiB), file {size / 2**20:.1f} MiB, load {load_seconds:.2f} s")
    return result


if __name__ == "__main__":
    main()
