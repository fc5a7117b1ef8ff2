"""`trl-budget` command line: `trl-budget demo` runs the built-in demo; `trl-budget grpo` runs a training recipe under
`accelerate`, as `trl grpo` does."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

# Only light imports here, so that `trl-budget --help` answers at once; the demo's runs load torch and TRL when run.
from .allocators import allocator_names
from .demo.settings import REINFORCE_ADA_AT_EQUAL_COST, REINFORCE_ADA_TRAINED, RLSettings, WarmStartSettings


# The variant the allocation study's primary comparison is about (benchmarks/allocation_study.py).
DEMO_ALLOCATOR, DEMO_PROBE = "knapsack", 0
STUDY_ANSWER = Path(__file__).with_name("demo") / "study_answer.json"  # written by the study from its stored runs
WHAT_YOU_SEE = (
    "What you see: greedy held-out accuracy against rollouts spent for {variant} and for uniform GRPO at the same "
    "budget (left), the share of rollouts that carry a gradient (middle), and how many rollouts each prompt got "
    "(right). One seed moves a point either way; the allocation study of this regime answers with 20 paired seeds "
    "(docs/benchmarks.md): {answer}"
)


def study_answer() -> str:
    """The allocation study's answer as it recorded it, or why there is none."""
    if not STUDY_ANSWER.exists():
        return "not recorded in this copy (benchmarks/allocation_study.py writes it)."
    return json.loads(STUDY_ANSWER.read_text())["answer"]


MAX_SEED = 2**32 - 1  # numpy's legacy seeding, which transformers' set_seed calls, takes nothing larger


def _whole_number(text: str, low: int, high: int | None, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
    return value


def _positive(text: str) -> int:
    return _whole_number(text, 1, None, "a positive integer")


def _seed(text: str) -> int:
    return _whole_number(text, 0, MAX_SEED, f"an integer from 0 to {MAX_SEED}")


def _probe(text: str) -> int:
    most = RLSettings.study().min_generations  # the probe's rollouts are part of every prompt's count
    return _whole_number(text, 0, most, f"an integer from 0 (no probe) to {most} (the demo's min_generations)")


def _usable_folder(parser: argparse.ArgumentParser, option: str, folder: Path) -> None:
    """Stop with a one-line usage error, before any work, unless `folder` exists or can be made, and takes files."""
    if folder.exists() and not folder.is_dir():
        parser.error(f"argument {option}: {folder} is a file, not a folder; name a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        parser.error(f"argument {option}: cannot write into {folder} ({error.strerror or error}); name a folder "
                     "you can write to")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trl-budget", description="Rollout-budget allocation for GRPO in TRL.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="train a tiny model on built-in arithmetic with an allocator and with uniform GRPO, and compare",
        description="Warm-start a tiny model on built-in arithmetic (cached), then train it with BudgetGRPOTrainer "
        "and with the uniform GRPO baseline at the same rollout budget; print a table and write a PNG report.",
    )
    demo.add_argument("--allocator", choices=[name for name in allocator_names() if name != "uniform"],
                      default=DEMO_ALLOCATOR, help=f"allocator to compare with uniform GRPO (default: {DEMO_ALLOCATOR})")
    demo.add_argument("--probe", type=_probe, default=DEMO_PROBE,
                      help=f"rollouts of every prompt in a probe stage before allocating (default: {DEMO_PROBE}; 0: none)")
    demo.add_argument("--steps", type=_positive, default=RLSettings.study().steps,
                      help=f"optimizer updates per run, 8 per generation batch (default: {RLSettings.study().steps})")
    demo.add_argument("--seed", type=_seed, default=0, help=f"training seed, 0 to {MAX_SEED} (default: 0)")
    demo.add_argument("--output-dir", type=Path, default=Path("trl_budget_demo"),
                      help="where the report, figures and run files go (default: ./trl_budget_demo)")
    demo.add_argument("--cache-dir", type=Path, default=None,
                      help="where the warm-started model is cached (default: $TRL_BUDGET_CACHE or ~/.cache/trl_budget)")
    demo.add_argument("--warm-start-steps", type=_positive, default=WarmStartSettings.steps,
                      help=f"supervised steps of the warm start (default: {WarmStartSettings.steps})")
    demo.add_argument("--rebuild-cache", action="store_true", help="redo the warm start even if it is cached")
    demo.add_argument("--no-baseline", action="store_true", help="skip the uniform GRPO baseline run")
    demo.set_defaults(subparser=demo)  # whose usage line a usage error prints
    commands.add_parser("grpo", add_help=False, help="train with BudgetGRPOTrainer under accelerate, as `trl grpo`: "
                        "--config RECIPE.yaml, --accelerate_config NAME or PATH, --num_processes, every "
                        "BudgetGRPOConfig field as a flag")
    return parser


def demo_variant(allocator: str, probe: int, settings: RLSettings) -> tuple[RLSettings, dict]:
    """The RL settings and config options of the demo's allocator run. Reinforce-Ada trains K = 4 rollouts of each
    prompt and generates as many as uniform does (the third study's arm); the others train what they generate."""
    if allocator != "reinforce_ada":
        return settings, {"budget_probe_generations": probe}
    return replace(settings, num_generations=REINFORCE_ADA_TRAINED), dict(REINFORCE_ADA_AT_EQUAL_COST)


def run_demo(options: argparse.Namespace) -> dict:
    from .demo.report import format_table, plot_report, summarize
    from .demo.run import run_rl, warm_start

    output_dir = options.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    model_path = warm_start(WarmStartSettings(steps=options.warm_start_steps), options.cache_dir,
                            rebuild=options.rebuild_cache)
    print(f"warm-started model: {model_path}")
    settings = RLSettings.study(options.steps)
    label = options.allocator + (f"-probe{options.probe}" if options.probe else "")
    variants = [(label, options.allocator, *demo_variant(options.allocator, options.probe, settings))]
    if not options.no_baseline:
        variants.append(("uniform", "uniform", settings, {}))
    runs = []
    for name, allocator, run_settings, overrides in variants:
        print(f"RL with {name} ({options.steps} updates, {options.steps * settings.rollouts_per_step} rollouts "
              "generated)")
        runs.append(run_rl(model_path, allocator, options.seed, run_settings, output_dir / f"run-{name}", label=name,
                           **overrides))
    summary = summarize(runs)
    results_path = output_dir / "demo_results.json"
    results_path.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))
    report_path = plot_report(runs, output_dir / "demo_report.png",
                              title=f"trl-budget demo: {label} against uniform GRPO at the same rollout budget",
                              eval_samples=settings.eval_samples, temperature=settings.temperature)
    print()
    print(format_table(summary))
    print()
    print(WHAT_YOU_SEE.format(variant=label, answer=study_answer()))
    print()
    print(f"report:  {report_path}")
    print(f"results: {results_path}")
    return summary


def check_demo_folders(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    """The output folder, and the cache folder where a warm start will be trained, before anything is trained:
    a folder found unwritable after the warm start has trained would lose it."""
    from .demo.run import SHIPPED_RECORD, SHIPPED_WARM_START, default_cache_dir

    _usable_folder(parser, "--output-dir", options.output_dir)
    trains_a_warm_start = (options.rebuild_cache or options.warm_start_steps != WarmStartSettings.steps
                           or not (SHIPPED_WARM_START / SHIPPED_RECORD).exists())
    if options.cache_dir is not None or trains_a_warm_start:
        _usable_folder(parser, "--cache-dir", options.cache_dir or default_cache_dir())


GRPO_USAGE = """usage: trl-budget grpo [--config RECIPE.yaml] [--accelerate_config NAME|PATH] [--num_processes N]
                       [accelerate launch options] [--FIELD VALUE ...]

Runs trl_budget/scripts/grpo.py (math RLVR with BudgetGRPOTrainer: TRL's grpo.py with per-prompt budgets) under
`accelerate launch`, as `trl grpo` runs TRL's. Flags the script does not know (--num_processes, --mixed_precision, ...)
go to `accelerate launch`; --accelerate_config takes a file or the name of one of TRL's configs (zero3, ...). Every
GRPOConfig, ModelConfig and script field is a flag as in `trl grpo` (script: --dataset_name, --reward_funcs,
--dataset_format, --prompt_column, --solution_column, --instruction); the budget settings are:
"""


def grpo_help() -> str:
    """`trl-budget grpo --help`: the usage and every budget setting, read from the config's source without importing
    TRL or torch, so that it answers at once."""
    import ast
    import textwrap

    tree = ast.parse((Path(__file__).with_name("config.py")).read_text())
    config = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "BudgetGRPOConfig")
    lines = [GRPO_USAGE]
    for statement in config.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.value, ast.Call)):
            continue
        options = {keyword.arg: keyword.value for keyword in statement.value.keywords}
        default, metadata = ast.literal_eval(options["default"]), ast.literal_eval(options["metadata"])
        lines.append(f"  --{statement.target.id} {ast.unparse(statement.annotation)} (default: {default!r})")
        lines += textwrap.wrap(metadata["help"], 110, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def run_grpo(arguments: list[str]) -> int:
    """Parse the recipe as `trl grpo` does, and launch the training script under `accelerate`."""
    if "-h" in arguments or "--help" in arguments:
        print(grpo_help())
        return 0
    from accelerate.commands.launch import launch_command, launch_command_parser
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    from .scripts import grpo

    parser = grpo.make_parser(prog="trl-budget grpo")
    *_, config_remaining, cli_remaining = parser.parse_args_and_config(
        arguments, return_remaining_strings=True, separate_remaining_strings=True)  # the recipe is checked here
    launch_arguments = resolve_accelerate_config_argument(config_remaining + cli_remaining)
    script_arguments = _without(arguments, cli_remaining)
    launch_command(launch_command_parser().parse_args([*launch_arguments, grpo.__file__, *script_arguments]))
    return 0


def _without(arguments: list[str], taken: list[str]) -> list[str]:
    """`arguments` without `taken`, an ordered subsequence of it (the flags that went to `accelerate launch`)."""
    rest, pending = [], iter(taken)
    current = next(pending, None)
    for argument in arguments:
        if current is not None and argument == current:
            current = next(pending, None)
        else:
            rest.append(argument)
    return rest


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grpo"]:  # its flags are the recipe's and accelerate's: parsed by them, not here
        return run_grpo(argv[1:])
    parser = build_parser()
    options = parser.parse_args(argv)
    if options.command == "demo":
        if options.allocator == "reinforce_ada" and options.probe:
            options.subparser.error("argument --probe: Reinforce-Ada generates in rounds of its own; leave --probe at 0")
        check_demo_folders(options.subparser, options)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("trl-budget demo draws its report with matplotlib: pip install 'trl_budget[demo]'", file=sys.stderr)
            return 2
        run_demo(options)
    return 0
