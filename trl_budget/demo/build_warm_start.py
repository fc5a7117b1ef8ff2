"""Build the warm start that ships with the package, and record what it is.

    python -m trl_budget.demo.build_warm_start

Trains the tiny model with the default `WarmStartSettings` (as `warm_start(rebuild=True)` does), copies it into
`trl_budget/demo/warm_start/`, and writes `warm_start.json` there: the settings' fingerprint, the weights' SHA-256 (the
demo refuses a shipped model that does not match it), and its greedy held-out accuracy on the allocation study's
held-out problems, overall and per level (a test checks the shipped model still scores exactly that).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from .run import SHIPPED_RECORD, SHIPPED_WARM_START, exact_match_accuracy, warm_start
from .settings import RLSettings, WarmStartSettings
from .task import split_problems

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json")


def greedy_held_out_accuracy(model_path: Path) -> dict[str, float]:
    """Greedy exact-match accuracy on the allocation study's held-out problems, overall and per level."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    settings = RLSettings.pool()
    _, held_out = split_problems(settings.train_prompts, settings.eval_prompts, settings.data_seed, settings.levels)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    return exact_match_accuracy(model, tokenizer, held_out)


def main() -> None:
    settings = WarmStartSettings()
    with tempfile.TemporaryDirectory() as cache:
        built = warm_start(settings, Path(cache), rebuild=True)
        SHIPPED_WARM_START.mkdir(exist_ok=True)
        for name in SHIPPED_FILES:
            shutil.copyfile(built / name, SHIPPED_WARM_START / name)
    record = {
        "settings": {name: getattr(settings, name) for name in settings.__dataclass_fields__},
        "settings_fingerprint": settings.fingerprint(),
        "weights_sha256": hashlib.sha256((SHIPPED_WARM_START / "model.safetensors").read_bytes()).hexdigest(),
        "greedy_held_out_accuracy": greedy_held_out_accuracy(SHIPPED_WARM_START),
        "rebuild": "python -m trl_budget.demo.build_warm_start",
    }
    (SHIPPED_WARM_START / SHIPPED_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
