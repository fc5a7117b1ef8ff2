"""Memory and time of VIP's success-rate predictor at a 17 000-prompt dataset (DAPO-Math-17k's size).

    python benchmarks/overhead/vip_prediction_scale.py          # 17 000 prompts, 384 dimensions (all-MiniLM-L6-v2's)
    python benchmarks/overhead/vip_prediction_scale.py --quick  # 2 000 prompts

Every prompt has been observed (the end of the first epoch: the largest fit there is); the fit keeps the
`max_observed` most recent, then a batch of 512 prompts is predicted. Peak memory is what numpy allocates during the
fit and the prediction (tracemalloc), beside the embeddings themselves. The release's dense route is stated, not run:
its distance matrix and kernel over the whole dataset. Writes results/vip_prediction_scale.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common

from benchmark_record import write_record  # noqa: E402
from trl_budget.success_prediction import SuccessRatePredictor  # noqa: E402


def measure(embeddings, rates, max_observed: int, batch: np.ndarray) -> dict:
    predictor = SuccessRatePredictor(embeddings, max_observed=max_observed)
    prompts = np.arange(embeddings.shape[0])
    tracemalloc.start()
    start = time.perf_counter()
    predictor.fit(prompts, rates, last_seen=prompts)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    predicted = predictor.predict(batch)
    predict_s = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    unseen = batch[~np.isin(batch, predictor.observed)]
    return {"max_observed": max_observed, "fit_s": fit_s, "predict_s": predict_s, "peak_mb": peak / 2**20,
            "batch": int(batch.size), "batch_unseen_by_the_fit": int(unseen.size),
            "mean_abs_error_unseen": float(np.abs(predicted[np.isin(batch, unseen)] - rates[unseen]).mean())
            if unseen.size else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS / "vip_prediction_scale.json")
    args = parser.parse_args(argv)
    prompts, dimensions = (2000, 384) if args.quick else (17_000, 384)
    rng = np.random.default_rng(0)
    # Clustered unit vectors (topics), rates that follow the clusters: what makes a neighbour informative.
    centres = rng.normal(size=(50, dimensions))
    topic = rng.integers(0, 50, prompts)
    embeddings = centres[topic] + 0.6 * rng.normal(size=(prompts, dimensions))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    rates = np.clip(rng.beta(2, 2, 50)[topic] + 0.1 * rng.normal(size=prompts), 0, 1)
    batch = rng.choice(prompts, 512, replace=False)
    measure(embeddings, rates, 256, batch)  # not kept: the first fit of a process pays BLAS's and numpy's start-up
    rows = [measure(embeddings, rates, m, batch) for m in (1024, 2048, 4096)]
    for row in rows:
        print(json.dumps(row), flush=True)
    dense_mb = {"distances_float32": prompts**2 * 4 / 2**20, "kernel_float64": prompts**2 * 8 / 2**20}
    return write_record(args.output, "benchmarks/overhead/vip_prediction_scale.py", argv, prompts=prompts,
                        dimensions=dimensions, embeddings_mb=embeddings.nbytes / 2**20, release_dense_mb=dense_mb,
                        rows=rows)


def markdown_table(record) -> str:
    """The table docs/vip.md states (tests/test_success_prediction.py checks it against the stored result)."""
    lines = [f"{record['prompts']:,} prompts, {record['dimensions']} dimensions: the release's dense route holds "
             f"{record['release_dense_mb']['distances_float32']:,.0f} MB of distances and "
             f"{record['release_dense_mb']['kernel_float64']:,.0f} MB of kernel.", "",
             "| max_observed | fit | predict 512 | peak memory |", "|---:|---:|---:|---:|"]
    for row in record["rows"]:
        lines.append(f"| {row['max_observed']:,} | {row['fit_s']:.1f} s | {row['predict_s'] * 1e3:.0f} ms | "
                     f"{row['peak_mb']:.0f} MB |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
