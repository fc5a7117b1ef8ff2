"""Each run's result stored under a key of everything that decides it, so that a study stopped half-way resumes.

The key covers the run's settings (warm start, RL settings, variant options, seed) and the source code of this
package: a changed setting or a changed line of `trl_budget` makes a new run, while a finished run with the same key
is read back instead of trained again. Results are written atomically (a stopped run leaves no partial file).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checkpoint import write_json_atomically

PACKAGE = Path(__file__).resolve().parents[1]


def code_digest() -> str:
    """A digest of every Python source file of `trl_budget` (paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def run_key(settings: dict[str, Any]) -> str:
    """The key of a run: its settings and the code that runs them."""
    text = json.dumps({"settings": settings, "code": code_digest()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_run(folder: Path, name: str, settings: dict[str, Any], compute: Callable[[], dict]) -> tuple[dict, bool]:
    """The stored result of the run with these settings, or `compute()`'s, stored; and whether it was stored before."""
    path = Path(folder) / f"{name}-{run_key(settings)}.json"
    if path.exists():
        return json.loads(path.read_text()), True
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, {"settings": settings, "result": result})
    return {"settings": settings, "result": result}, False
