"""`trl-budget` command line: `trl-budget demo` runs the built-in demo; `trl-budget grpo` runs a training recipe under
`accelerate`, as `trl grpo` does; `trl-budget report` says where a run's rollouts went, prompt by prompt."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

# Only light imports here, so that `trl-budget --help` answers at once; the demo's runs load torch and TRL when run.
from .allocators import allocator_names
from .demo.settings import REINFORCE_ADA_AT_EQUAL_COST, REINFORCE_ADA_TRAINED, RLSettings, WarmStartSettings

# The demo's default pair shows the most: SPO without its offline prior (the fifth study's spo-no-prior arm, switched
# on in the trainer by budget_allocator='spo'), against uniform GRPO at the same rollouts: 512 prompts x 1 rollout a
# generation batch against 64 x 8. `--allocator uniform` compares the trainer's default rule, uniform GRPO with the
# history baseline, with GRPO's group baseline instead (the fourth study's first primary).
DEMO_ALLOCATOR, DEMO_PROBE, UNIFORM_BASELINE = "spo", 0, "history"
# Paired seeds: four pairs of this regime's runs train in about four minutes on 2 cores, two at once (the fifth
# study's stored arithmetic runs took a median 69 s under SPO without its prior and 55 s under uniform GRPO, one thread
# each). A run trains on one thread whatever the processes, so more cores finish sooner with the same figures.
DEMO_SEEDS = 4
# The cores this process may run on (a container or taskset can allow fewer than the machine has).
DEMO_PROCESSES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
DEMO_BASELINES = ("group", "history")  # the two the fourth study compares; the allocator's own is the default
# Each written by its study from its stored runs: the allocation study's (an allocator against uniform GRPO), the
# fourth study's (the history baseline against GRPO's group baseline, uniform GRPO both) and the fifth study's (the
# SPO against uniform GRPO).
STUDY_ANSWER = Path(__file__).with_name("demo") / "study_answer.json"
BASELINE_ANSWER = Path(__file__).with_name("demo") / "baseline_answer.json"
SPO_ANSWER = Path(__file__).with_name("demo") / "spo_answer.json"
WHAT_YOU_SEE = (
    "What you see: greedy held-out accuracy against rollouts spent for {variant} and for uniform GRPO at the same "
    "budget (left), the share of rollouts that carry a gradient (middle), and how many rollouts each prompt got "
    "(right), each the mean over the seeds. One seed's accuracy moves about a point either way, so a few paired seeds "
    "tell apart only what their interval above keeps away from 0; "
)
DEFAULT_RULE_SAYS = ("The trainer's default rule is uniform GRPO with the history baseline (`--allocator uniform` "
                     "shows it), which keeps every GRPOTrainer setting's meaning; SPO is switched on with "
                     "budget_allocator='spo', and changes what num_generations, a step and an epoch mean.")
STUDY_SAYS = "{study} of this regime answers with 20 paired seeds (docs/choosing.md): {answer}"
NO_ANSWER_SAYS = ("the demo carries no study's answer for {variant} (docs/studies/ gives every arm the studies ran). "
                  "The fifth study answers for the default pair, SPO against uniform GRPO (docs/choosing.md): {answer}")
# The pairs whose answer a study of the demo's regime recorded, by the compared run's allocator, probe and baseline
# (None: the allocator's own), and the study.
ANSWERED_PAIRS = {("spo", 0, None): ("the fifth study", SPO_ANSWER),
                  ("uniform", 0, UNIFORM_BASELINE): ("the fourth study", BASELINE_ANSWER),
                  ("knapsack", 0, None): ("the allocation study", STUDY_ANSWER)}


def study_answer(answer: Path = STUDY_ANSWER) -> str:
    """A study's answer as it recorded it (default: the allocation study's), or why there is none."""
    if not answer.exists():
        return f"not recorded in this copy (its study writes {answer.name})."
    return json.loads(answer.read_text())["answer"]


def what_you_see(variant: str, allocator: str, baseline: str | None, probe: int = 0) -> str:
    """The closing sentence: the answer of the study that ran the compared pair, or, for a pair no shipped answer
    covers, that it has none (not another pair's answer)."""
    seen = WHAT_YOU_SEE.format(variant=variant)
    if (allocator, probe, baseline) not in ANSWERED_PAIRS:
        return f"{seen}{NO_ANSWER_SAYS.format(variant=variant, answer=study_answer(SPO_ANSWER))} {DEFAULT_RULE_SAYS}"
    study, answer = ANSWERED_PAIRS[allocator, probe, baseline]
    return f"{seen}{STUDY_SAYS.format(study=study, answer=study_answer(answer))} {DEFAULT_RULE_SAYS}"


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
        help="train a tiny model on built-in arithmetic with an allocator or advantage baseline and with uniform "
        "GRPO, and compare",
        description="Warm-start a tiny model on built-in arithmetic (cached), then train it with BudgetGRPOTrainer "
        "(by default with SPO, budget_allocator='spo': one rollout for each of 8 times the prompts, drawn by SPO's "
        "weights; the trainer's default rule, uniform GRPO with the history baseline, is --allocator uniform) and "
        "with uniform GRPO at the same rollout budget, on paired seeds; print a table and the paired "
        "differences, and write a PNG report.",
    )
    demo.add_argument("--allocator", choices=allocator_names(), default=DEMO_ALLOCATOR,
                      help=f"allocator of the run compared with uniform GRPO (default: {DEMO_ALLOCATOR})")
    demo.add_argument("--advantage-baseline", choices=DEMO_BASELINES, default=None,
                      help=f"what each reward is compared with in that run: BudgetGRPOConfig's advantage_baseline "
                      f"(default: {UNIFORM_BASELINE} with the uniform allocator, else the allocator's own: SPO's, "
                      "GRPO's group, Reinforce-Ada's all rollouts)")
    demo.add_argument("--probe", type=_probe, default=DEMO_PROBE,
                      help=f"rollouts of every prompt in a probe stage before allocating (default: {DEMO_PROBE}; 0: none)")
    demo.add_argument("--steps", type=_positive, default=RLSettings.study().steps,
                      help=f"optimizer updates per run, 8 per generation batch (default: {RLSettings.study().steps})")
    demo.add_argument("--seeds", type=_positive, default=DEMO_SEEDS,
                      help=f"paired seeds: each trains the compared run and uniform GRPO (default: {DEMO_SEEDS})")
    demo.add_argument("--seed", type=_seed, default=0,
                      help=f"the first training seed, 0 to {MAX_SEED}: the seeds are SEED to SEED + SEEDS - 1 "
                      "(default: 0)")
    demo.add_argument("--processes", type=_positive, default=DEMO_PROCESSES,
                      help="runs trained at once, each in a process of its own on one thread, so that a seed's figures "
                      f"do not depend on it (default: {DEMO_PROCESSES}, this machine's cores)")
    demo.add_argument("--output-dir", type=Path, default=Path("trl_budget_demo"),
                      help="where the report, figures and run files go (default: ./trl_budget_demo)")
    demo.add_argument("--cache-dir", type=Path, default=None,
                      help="where the warm-started model is cached (default: $TRL_BUDGET_CACHE or ~/.cache/trl_budget)")
    demo.add_argument("--warm-start-steps", type=_positive, default=WarmStartSettings.steps,
                      help=f"supervised steps of the warm start (default: {WarmStartSettings.steps})")
    demo.add_argument("--rebuild-cache", action="store_true", help="redo the warm start even if it is cached")
    demo.add_argument("--no-baseline", action="store_true", help="skip the uniform GRPO run it is compared with")
    demo.set_defaults(subparser=demo)  # whose usage line a usage error prints
    commands.add_parser("grpo", add_help=False, help="TRL's own GRPO script with BudgetGRPOTrainer, under accelerate, "
                        "as `trl grpo`: every recipe and flag of `trl grpo`, plus the budget settings")
    add_report_parser(commands)
    return parser


def add_report_parser(commands) -> None:
    report = commands.add_parser(
        "report",
        help="where a run's rollouts went: each prompt's pass rate and rollouts over its checkpoints",
        description="Read the tracker state saved in every checkpoint-N of a training run's output folder (and SPO's "
        "state, and the logged budget/* figures) and report each prompt's pass rate and rollouts over time and the "
        "shares of solved (pass rate 1 at its latest visits), hopeless (0), learning (in between) and unseen (no "
        "estimate yet) prompts; in a run that kept SPO's tracker, by SPO's estimate p (solved p >= 0.9, hopeless "
        "p <= 0.1, unseen: not visited yet) with each prompt's visits; in a run whose tracker kept a reward history "
        "(the history advantage baseline, the default rule's), by that history (learning: its rewards differ; "
        "else solved, hopeless or stalled as its mean is the highest, the lowest or in between of the run's). The "
        "prompts counted are those the run's saved "
        "states hold, with or without --prompts. Prints the table and writes OUTPUT_DIR/report/: shares.csv, "
        "prompts.csv, prompts_by_checkpoint.csv, report.json and report.png. Works on a finished or a running run.",
    )
    report.add_argument("output_dir", type=Path, metavar="OUTPUT_DIR", help="the run's output_dir (its checkpoints)")
    report.add_argument("--prompts", type=Path, default=None, metavar="FILE",
                        help="a JSON list or JSONL file of the training prompts (or rows holding them under "
                        "'prompt'), to show prompt texts in place of their keys, which are digests of the content; "
                        "it names prompts and adds none to the counts")
    report.add_argument("--top", type=_positive, default=20, metavar="N",
                        help="prompts printed, those with the most rollouts (default: 20; the files hold all)")
    report.add_argument("--no-plot", action="store_true", help="write the tables without report.png (no matplotlib)")
    report.set_defaults(subparser=report)


def make_report(options: argparse.Namespace) -> int:
    """Build the report (a usage error names what is wrong with the folder or the prompts file), print it, write its
    files."""
    from .run_report import MATPLOTLIB_MISSING, build_report, format_report, read_prompts_file, write_report

    error = options.subparser.error
    if not options.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            error(MATPLOTLIB_MISSING)
    try:
        texts = read_prompts_file(options.prompts) if options.prompts is not None else None
        report = build_report(options.output_dir, texts)
    except ValueError as problem:
        error(str(problem))
    _usable_folder(options.subparser, "OUTPUT_DIR", options.output_dir / "report")
    paths = write_report(report, options.output_dir / "report", plot=not options.no_plot)
    print(format_report(report, options.top))
    print()
    print(f"files:   {', '.join(str(path) for path in paths.values())}")
    return 0


def demo_baseline(options: argparse.Namespace) -> str | None:
    """The compared run's advantage baseline: the one asked for; else the history with the uniform allocator (the
    fourth study's pair), the allocator's own otherwise (None; SPO's under the default allocator)."""
    if options.advantage_baseline is not None:
        return options.advantage_baseline
    return UNIFORM_BASELINE if options.allocator == "uniform" else None


def demo_variant(allocator: str, probe: int, baseline: str | None,
                 settings: RLSettings) -> tuple[str, RLSettings, dict]:
    """The label, RL settings and config options of the demo's compared run. Reinforce-Ada trains K = 4 rollouts of
    each prompt and generates as many as uniform does (the third study's arm); the others train what they generate."""
    label = allocator + (f"-probe{probe}" if probe else "") + (f"-{baseline}" if baseline else "")
    options = {} if baseline is None else {"advantage_baseline": baseline}
    if allocator != "reinforce_ada":
        return label, settings, {**options, **({"probe_generations": probe} if probe else {})}
    return label, replace(settings, num_generations=REINFORCE_ADA_TRAINED), {**options, **REINFORCE_ADA_AT_EQUAL_COST}


def run_demo(options: argparse.Namespace) -> dict:
    import warnings

    from .demo.machine import machine_record
    from .demo.paired import CHECKPOINTING_RENAMES, RUN_THREADS, paired_runs, train_runs
    from .demo.report import format_paired, format_table, plot_report, summarize
    from .demo.run import warm_start
    from .demo.study_stats import study_metric

    warnings.filterwarnings("ignore", message=CHECKPOINTING_RENAMES, category=FutureWarning)

    output_dir = options.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    model_path = warm_start(WarmStartSettings(steps=options.warm_start_steps), options.cache_dir,
                            rebuild=options.rebuild_cache)
    print(f"warm-started model: {model_path}")
    settings = RLSettings.study(options.steps)
    baseline = demo_baseline(options)
    label, variant_settings, overrides = demo_variant(options.allocator, options.probe, baseline, settings)
    arms = [(label, options.allocator, variant_settings, overrides)]
    if not options.no_baseline:
        arms.append(("uniform", "uniform", settings, {}))
    seeds = list(range(options.seed, options.seed + options.seeds))
    jobs = paired_runs(arms, seeds)
    processes = min(options.processes, len(jobs))
    print(f"RL with {' and '.join(arm[0] for arm in arms)} on {len(seeds)} seed{'s' if len(seeds) > 1 else ''} "
          f"({seeds[0]}{f'-{seeds[-1]}' if len(seeds) > 1 else ''}): {len(jobs)} runs of {options.steps} updates and "
          f"{options.steps * settings.rollouts_per_step} rollouts generated, {processes} at a time on "
          f"{RUN_THREADS} thread each")

    def done(run: dict) -> None:
        print(f"  {run['allocator']}, seed {run['seed']}: held-out accuracy {study_metric(run):.3f} (mean of the last "
              f"three evaluations), {run['seconds']:.0f} s", flush=True)

    runs = train_runs(model_path, jobs, output_dir, processes, done)
    summary = summarize(runs)
    results_path = output_dir / "demo_results.json"
    results_path.write_text(json.dumps({"summary": summary, "seeds": seeds, "processes": processes,
                                        "machine": machine_record(), "runs": runs}, indent=2))
    report_path = plot_report(runs, output_dir / "demo_report.png",
                              title=f"trl-budget demo: {label} against uniform GRPO at the same rollout budget, "
                              f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}",
                              eval_samples=settings.eval_samples, temperature=settings.temperature)
    print()
    print(format_table(summary, held_out="metric"))
    if "paired" in summary[label]:
        print()
        print(format_paired(label, summary[label]))
    print()
    print(what_you_see(label, options.allocator, baseline, options.probe))
    print()
    print(f"report:  {report_path}")
    print(f"results: {results_path}")
    return summary


def refuse_demo_options(options: argparse.Namespace) -> None:
    """Stop with a usage error, before any work, on a pair the demo cannot run or that compares nothing."""
    error = options.subparser.error
    if options.allocator == "reinforce_ada" and options.probe:
        error("argument --probe: Reinforce-Ada generates in rounds of its own; leave --probe at 0")
    if options.allocator == "spo" and options.probe:
        error("argument --probe: SPO gives every prompt one rollout, drawn by its weights, without a probe stage; leave "
              "--probe at 0 or choose another --allocator")
    if options.allocator == "spo" and options.advantage_baseline == "group":
        error("argument --advantage-baseline: SPO trains one rollout a prompt, so GRPO's group baseline has no other "
              "rollout to compare it with; choose --advantage-baseline history, or leave it to SPO's own")
    if options.allocator == "uniform" and options.probe:
        error("argument --probe: the uniform allocator gives every prompt the same rollouts, so a probe stage changes "
              "nothing; leave --probe at 0 or choose another --allocator")
    if options.seed + options.seeds - 1 > MAX_SEED:
        error(f"argument --seeds: the seeds {options.seed} to {options.seed + options.seeds - 1} go past {MAX_SEED}, "
              "the largest seed; lower --seed or --seeds")
    if options.allocator == "uniform" and demo_baseline(options) == "group" and not options.no_baseline:
        error("argument --advantage-baseline: uniform with the group baseline is the uniform GRPO run the demo "
              "compares with; choose --advantage-baseline history, or another --allocator")


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

Runs TRL's own GRPO script (trl/scripts/grpo.py) with BudgetGRPOTrainer and BudgetGRPOConfig in place of GRPOTrainer
and GRPOConfig, under `accelerate launch`, as `trl grpo` runs it: every recipe and flag of `trl grpo` works as there
(a dataset by name or folder, a mixture under `datasets:`, --reward_funcs by name or dotted path,
--reward_model_name_or_path), plus the budget settings. Flags the script does not know (--num_processes,
--mixed_precision, ...) go to `accelerate launch`; --accelerate_config takes a file, the name of one of this project's
configs or of TRL's (zero1, multi_gpu, ...); this project's: {ours}.
--num_processes N starts N processes, with a config or without one (on the CPU with --use_cpu).

Below, the budget settings, then every flag of `trl grpo`, with its type and default. Each --FIELD_NAME is also
--FIELD-NAME; a true/false field takes `--FIELD false`. --resume_from_checkpoint true (or latest) resumes from the
newest complete checkpoint of --output_dir."""


def _accelerate_configs() -> Path:
    """This project's accelerate configs, one copy at the repository's top level (accelerate_configs/): in a built wheel
    they sit beside this module (pyproject.toml maps the folder to `trl_budget.accelerate_configs`), in a checkout or an
    editable install the repository's own folder is read."""
    packaged = Path(__file__).with_name("accelerate_configs")
    return packaged if any(packaged.glob("*.yaml")) else Path(__file__).resolve().parents[1] / "accelerate_configs"


ACCELERATE_CONFIGS = _accelerate_configs()
# Where --help reads each dataclass the script parses, and each one they extend: class name -> (package, file).
HELP_SOURCES = {
    "BudgetGRPOConfig": ("trl_budget", "config.py"),
    "GRPOScriptArguments": ("trl", "scripts/grpo.py"),
    "ScriptArguments": ("trl", "scripts/utils.py"),
    "GRPOConfig": ("trl", "trainer/grpo_config.py"),
    "_BaseConfig": ("trl", "trainer/base_config.py"),
    "TrainingArguments": ("transformers", "training_args.py"),
    "ModelConfig": ("trl", "trainer/model_config.py"),
    "DatasetMixtureConfig": ("trl", "scripts/utils.py"),
}
# TRL's part of --help, in the order `trl grpo --help` lists it: (heading, dataclass).
TRL_HELP_GROUPS = (("TRL's GRPO script (GRPOScriptArguments)", "GRPOScriptArguments"),
                   ("Training (TRL's GRPOConfig, with transformers' TrainingArguments)", "GRPOConfig"),
                   ("Model (TRL's ModelConfig)", "ModelConfig"),
                   ("Dataset mixture (TRL's DatasetMixtureConfig)", "DatasetMixtureConfig"))
BUDGET_HEADING = "Budget settings (BudgetGRPOConfig)"


@functools.cache
def _classes_in(path: Path) -> dict:
    """The classes defined at the top of the Python file `path`, by name, parsed with `ast`: nothing is imported."""
    import ast

    return {node.name: node for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)}


def _source_of(name: str) -> Path | None:
    """The file that defines the class `name` (HELP_SOURCES), found without running its package's code."""
    import importlib.util

    package, file = HELP_SOURCES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / file
    return path if path.is_file() else None


def _literal(node, fallback=None):
    import ast

    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):  # a value computed when the module runs
        return fallback


EMPTY_FACTORIES = {"list": "[]", "dict": "{}", "set": "set()"}


def _default_text(default, factory) -> str:
    """A field's default as its source writes it; a factory's value (list: [], a lambda: its body); or `required`."""
    import ast

    if default is not None:
        return f"default: {ast.unparse(default)}"
    if factory is not None:
        return f"default: {EMPTY_FACTORIES.get(ast.unparse(factory)) or ast.unparse(getattr(factory, 'body', factory))}"
    return "required"


def _field_entry(statement) -> tuple[str, str | None] | None:
    """One statement of a dataclass's body as (field name, its --help entry), the entry None for a field that is no
    flag (init=False); None for a statement that is no field."""
    import ast
    import textwrap

    if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
        return None
    name, annotation = statement.target.id, ast.unparse(statement.annotation)
    if "ClassVar" in annotation:
        return None
    value = statement.value
    is_field = isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field")
    options = {keyword.arg: keyword.value for keyword in value.keywords} if is_field else {"default": value}
    if _literal(options.get("init"), True) is False:
        return name, None
    shown = _default_text(options.get("default"), options.get("default_factory"))
    if _literal(options.get("default")) is True and annotation in ("bool", "bool | None", "Optional[bool]"):
        shown += f"; --no_{name} sets it false"  # the switch HfArgumentParser adds to a field that defaults to true
    entry = [f"  --{name} {annotation} ({shown})"]
    metadata = options.get("metadata")
    if isinstance(metadata, ast.Dict):
        texts = [_literal(value) for key, value in zip(metadata.keys, metadata.values) if _literal(key) == "help"]
        if texts and isinstance(texts[0], str):  # argparse's help text, where `%%` is a percent sign
            entry += textwrap.wrap(" ".join(texts[0].replace("%%", "%").split()), 110, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6)
    return name, "\n".join(entry)


def dataclass_help(name: str) -> dict[str, str]:
    """The --help entry of every flag of the dataclass `name`, by field, in the dataclass's order: the fields of its
    bases first, each that it redefines in its place, then its own. Empty when its source is not found."""
    source = _source_of(name)
    node = _classes_in(source).get(name) if source is not None else None
    if node is None:
        return {}
    entries = {}
    for base in node.bases:
        base_name = getattr(base, "id", getattr(base, "attr", None))
        if base_name in HELP_SOURCES:
            entries.update(dataclass_help(base_name))
    for statement in node.body:
        field_name, entry = _field_entry(statement) or (None, None)
        if entry is not None:
            entries[field_name] = entry
        elif field_name is not None:
            entries.pop(field_name, None)
    return entries


# What a TRL flag means under the budget's rules, added to TRL's own text.
TRL_FIELD_NOTES = {
    "num_generations": "\n      trl_budget: as TRL under the default budget_allocator='uniform'; the average a prompt under "
                       "'knapsack' or\n      'coba'; not read under 'spo' (one rollout a prompt).",
}


def grpo_help() -> str:
    """`trl-budget grpo --help`: the usage, the budget settings under their own heading, then every flag of `trl grpo`
    under TRL's, read from the sources without importing TRL, transformers or torch, so that it answers at once."""
    ours = ", ".join(sorted(path.stem for path in ACCELERATE_CONFIGS.glob("*.yaml")))
    budget, training = dataclass_help("BudgetGRPOConfig"), dataclass_help("GRPOConfig")
    from .settings.renamed import RENAMED_SETTINGS  # plain Python: --help stays fast

    own = {name: entry for name, entry in budget.items() if name not in training}
    # Former names stay accepted (with a warning) but are not offered.
    lines = [GRPO_USAGE.format(ours=ours), "", f"{BUDGET_HEADING}:",
             *(entry for name, entry in own.items() if name not in RENAMED_SETTINGS)]
    for heading, name in TRL_HELP_GROUPS:
        entries = dataclass_help(name)
        if name == "GRPOConfig":  # with the budget's default where it changes one of TRL's, and its notes
            entries = {field: budget.get(field, entry) + TRL_FIELD_NOTES.get(field, "")
                       for field, entry in entries.items()}
        lines += ["", f"{heading}:", *entries.values()] if entries else [
            "", f"{heading}: not found in the installed TRL; `trl grpo --help` lists it"]
    return "\n".join(lines)


def accelerate_config_arguments(launch_arguments: list[str]) -> list[str]:
    """`--accelerate_config NAME` as `accelerate launch --config_file PATH`: a file, one of this project's configs by
    name, or one of TRL's by name (TRL's resolver, which also says what is wrong)."""
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    if "--accelerate_config" in launch_arguments:
        index = launch_arguments.index("--accelerate_config")
        name = launch_arguments[index + 1] if index + 1 < len(launch_arguments) else None
        ours = ACCELERATE_CONFIGS / f"{name}.yaml"
        if name is not None and not Path(name).is_file() and ours.is_file():
            launch_arguments = [*launch_arguments[:index], "--accelerate_config", str(ours),
                                *launch_arguments[index + 2:]]
    return resolve_accelerate_config_argument(launch_arguments)


# The modes of `accelerate launch` that start several processes themselves. Without one, and without a config that
# names a distributed type, accelerate runs its plain launcher: one process, whatever --num_processes says (several
# only through MPI), unless it sees two GPUs or more.
PROCESS_STARTERS = ("multi_gpu", "use_deepspeed", "use_fsdp", "use_megatron_lm", "tpu")


def process_count_arguments(launch_arguments: list[str], launcher, default_config: str | None) -> list[str]:
    """`launch_arguments` such that `--num_processes N` (N > 1) starts N processes: `--multi_gpu` is added where no
    mode and no config (`--config_file`, else accelerate's default config, `default_config`) says how to start them;
    torchrun then starts N, each on its GPU, or all on the CPU with the recipe's --use_cpu."""
    from accelerate.commands.config import load_config_from_file
    from accelerate.utils import DistributedType

    options = launcher.parse_args([*launch_arguments, "script"])
    processes = options.num_processes
    if processes is None or processes < 2 or options.mpirun_hostfile is not None:
        return launch_arguments
    if options.cpu:
        raise SystemExit(f"trl-budget grpo: --num_processes {processes} with --cpu starts one process: accelerate's "
                         "--cpu launcher starts several only through MPI (--mpirun_hostfile). To train on the CPU in "
                         f"{processes} processes, drop --cpu and pass --use_cpu, the recipe's setting.")
    if any(getattr(options, mode) for mode in PROCESS_STARTERS):
        return launch_arguments
    config = options.config_file or default_config
    if config is not None and load_config_from_file(config).distributed_type != DistributedType.NO:
        return launch_arguments
    return [*launch_arguments, "--multi_gpu"]


def grpo_launch_command(arguments: list[str], default_config: str | None) -> list[str]:
    """The arguments of `accelerate launch` that run the recipe of `arguments`: its options (a config by name as its
    file, the process count made to hold), the training script, the script's flags (with the checkpoint that
    `--resume_from_checkpoint true` names). The recipe is parsed and checked, and a flag that neither takes is refused,
    before anything launches. `default_config`: accelerate's default config
    file, where there is one."""
    from accelerate.commands.launch import launch_command_parser

    from .scripts import grpo

    parser, launcher = grpo.make_parser(prog="trl-budget grpo"), launch_command_parser()
    grpo.refuse_unknown_flags(arguments, parser, launcher)
    _, training, *_, config_remaining, cli_remaining = parser.parse_args_and_config(
        arguments, return_remaining_strings=True, separate_remaining_strings=True)  # the recipe is checked here
    grpo.refuse_unknown_flags(config_remaining, parser, launcher)  # a recipe's own keys
    launch_arguments = accelerate_config_arguments(config_remaining + cli_remaining)
    launch_arguments = process_count_arguments(launch_arguments, launcher, default_config)
    script_arguments = _without(arguments, cli_remaining)
    # `true` or `latest` becomes the checkpoint here, once for every process, or stops before anything launches.
    resume = grpo.resume_choice(training.resume_from_checkpoint, training.output_dir)
    if resume not in (None, training.resume_from_checkpoint):
        script_arguments += ["--resume_from_checkpoint", resume]
    return [*launch_arguments, grpo.__file__, *script_arguments]


def run_grpo(arguments: list[str]) -> int:
    """Parse the recipe as `trl grpo` does, and launch the training script under `accelerate`."""
    if "-h" in arguments or "--help" in arguments:
        print(grpo_help())
        return 0
    import os

    from accelerate.commands.config import default_config_file
    from accelerate.commands.launch import launch_command, launch_command_parser

    command = grpo_launch_command(arguments, default_config_file if os.path.isfile(default_config_file) else None)
    launch_command(launch_command_parser().parse_args(command))
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
        refuse_demo_options(options)
        check_demo_folders(options.subparser, options)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("trl-budget demo draws its report with matplotlib: pip install 'trl_budget[demo]'", file=sys.stderr)
            return 2
        run_demo(options)
    if options.command == "report":
        return make_report(options)
    return 0
