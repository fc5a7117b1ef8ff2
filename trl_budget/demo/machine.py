"""What a run's floats depend on, recorded with every stored run: a trajectory re-trains bit for bit only within one
instruction-set class, so a figure is reproducible only with the machine it came from."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_record() -> dict:
    """The CPU: its model line, family and model numbers, its SIMD flags (avx*, amx*, fma*), its cores."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        key, _, value = (part.strip() for part in line.partition(":"))
        fields.setdefault(key, value)  # the first processor's
    return {"cpu": fields.get("model name", platform.processor()), "cpu_family": fields.get("cpu family"),
            "cpu_model": fields.get("model"),
            "simd_flags": sorted(flag for flag in fields.get("flags", "").split()
                                 if flag.startswith(("avx", "amx", "fma"))),
            "cores": os.cpu_count()}


def machine_record() -> dict:
    """The CPU, torch's CPU kernels and threads, the packages' versions and the package code's digest."""
    import accelerate
    import torch
    import transformers
    import trl

    from .run_cache import code_digest

    return {**cpu_record(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "torch": torch.__version__, "trl": trl.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "code": code_digest()}
