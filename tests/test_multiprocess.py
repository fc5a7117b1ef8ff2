import json
import subprocess
import sys
from pathlib import Path

import pytest

from trl_budget.trainer import TRACKER_STATE_NAME

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("allocator", ["knapsack", "coba"])
def test_two_processes_make_identical_allocations(tmp_path, allocator):
    script = Path(__file__).with_name("multiprocess_run.py")
    # accelerate 1.15's `--cpu` launcher starts a single process unless MPI is set up; torchrun (`--multi_gpu`) starts
    # two, and `use_cpu=True` in the config makes them a gloo-backed MULTI_CPU group.
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               str(script), str(tmp_path), allocator]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]

    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert all(report["world_size"] == 2 for report in ranks)
    first, second = ranks
    assert first["batches"] == second["batches"]
    for batch in first["batches"]:
        assert batch["local_rows"] == 4  # every rank keeps the same number of rows
        assert sum(batch["counts"]) == 8 and len(batch["counts"]) == 2
    assert any(batch["counts"] != [4, 4] for batch in first["batches"])  # budgets really moved
    assert first["tracker"] == second["tracker"]
    assert first["losses"] and len(first["losses"]) == 9  # 9 steps: each prompt comes back a third time
    saved = json.loads((tmp_path / "checkpoint-9" / TRACKER_STATE_NAME).read_text())
    assert saved == first["tracker"]
