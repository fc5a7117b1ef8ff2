"""The package's shape: a numpy core that needs no TRL, the allocator registry, dotted paths, a light CLI."""

import subprocess
import sys

import numpy as np
import pytest
from helpers import make_trainer

from trl_budget import BudgetGRPOConfig, UniformAllocator, allocator_names, register_allocator

# Makes any import of the heavy frameworks fail, as on a machine without them.
BLOCK_FRAMEWORKS = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "transformers", "trl", "accelerate", "datasets", "peft"}:
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Blocked())
"""


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_FRAMEWORKS + code], capture_output=True, text=True,
                          timeout=120)


def test_allocators_and_tracker_work_without_trl_torch_or_transformers():
    result = run_python("""
import numpy as np
from trl_budget import CapabilityTracker, KnapsackAllocator, register_allocator
tracker = CapabilityTracker(min_rollouts=2)
tracker.update(["a"] * 4 + ["b"] * 4, [1, 0, 0, 0, 1, 1, 1, 0])
rates = tracker.pass_rates(["a", "b", "c"])
print(KnapsackAllocator(2, 16, default_generations=4).allocate(rates, 12).tolist())
try:
    from trl_budget import BudgetGRPOConfig
except ImportError as error:
    print("the trainer needs TRL:", error)
""")
    assert result.returncode == 0, result.stderr
    counts, refusal = result.stdout.splitlines()
    assert sum(eval(counts)) == 12
    assert refusal.startswith("the trainer needs TRL")


def test_the_command_line_help_loads_no_framework():
    result = run_python("""
from trl_budget.cli import main
try:
    main(["demo", "--help"])
except SystemExit as done:
    assert done.code == 0
""")
    assert result.returncode == 0, result.stderr
    assert "--allocator" in result.stdout


class EveryOtherPrompt:
    """A user's allocator: more rollouts for every other prompt."""

    def __init__(self, min_generations, max_generations, extra=2):
        self.min_generations, self.max_generations, self.extra = min_generations, max_generations, extra

    def __call__(self, pass_rates, budget, failure_rate=None):
        counts = UniformAllocator(self.min_generations, self.max_generations).allocate(pass_rates, budget)
        shift = min(self.extra, int(counts.min()) - self.min_generations)
        counts[0::2] += shift
        counts[1::2] -= shift
        return counts

    def metrics(self, pass_rates, failure_rate=None):
        return {"extra": float(self.extra)}


def test_a_registered_allocator_is_chosen_by_name_with_its_options(tmp_path, tokenizer):
    register_allocator("every_other")(EveryOtherPrompt)
    assert "every_other" in allocator_names()
    trainer = make_trainer(tmp_path, tokenizer, budget_allocator="every_other", budget_allocator_kwargs='{"extra": 1}',
                           max_steps=2)
    assert isinstance(trainer.allocator, EveryOtherPrompt) and trainer.allocator.extra == 1
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "budget/extra" in entry]
    assert len(logs) == 2 and all(entry["budget/rollouts_min"] == 3 for entry in logs)


def test_an_allocator_by_dotted_path(tmp_path):
    config = BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], per_device_train_batch_size=8,
                              num_generations=4, budget_allocator="test_package:EveryOtherPrompt")
    allocator = config.make_allocator()
    assert isinstance(allocator, EveryOtherPrompt) and allocator.max_generations == 128
    assert config.pass_rate_min_rollouts == 1  # a user's allocator gets the plain pass-rate rule


@pytest.mark.parametrize(
    "name, message",
    [("no_such_allocator", "is unknown: choose one of"), ("no_such_module:Thing", "cannot be imported")],
)
def test_an_unknown_allocator_says_what_to_write(tmp_path, name, message):
    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], budget_allocator=name)


def test_allocator_settings_are_reported_with_the_config_field(tmp_path):
    with pytest.raises(ValueError, match="^knapsack_fallback_confidence must lie in"):
        BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], budget_allocator="knapsack",
                         knapsack_fallback_confidence=1.5)
    with pytest.raises(ValueError, match="^coba_kappa must be a finite number above 2"):
        BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], budget_allocator="coba", coba_kappa=2.0)


def test_a_registered_name_is_not_taken_twice():
    with pytest.raises(ValueError, match="registered already"):
        register_allocator("knapsack")(EveryOtherPrompt)
    np.testing.assert_array_equal(UniformAllocator(1, 8).allocate(np.full(3, np.nan), 9), [3, 3, 3])


@pytest.mark.parametrize(
    "name, rule, message",
    [
        ("misspelt_rule", {"windw": 4}, r"has 'windw', which is not a pass-rate setting; the settings are window, "),
        ("zero_window", {"window": 0}, r"register_allocator\('zero_window', .*window must be a whole number"),
        ("", None, "needs a non-empty string"),
        (7, None, "needs a non-empty string as the allocator's name, got 7"),
    ],
)
def test_registration_checks_the_name_and_the_pass_rate_rule(name, rule, message):
    # Before: accepted, and a config choosing the name then raised a raw KeyError: 'windw'.
    with pytest.raises(ValueError, match=message):
        register_allocator(name, rule)(EveryOtherPrompt)
    assert name not in allocator_names()


@pytest.mark.parametrize(
    "module_text, path, message",
    [
        ("raise RuntimeError('no GPU found')\n", "broken_at_import:Thing",
         r"importing 'broken_at_import' raised RuntimeError: no GPU found\. The module itself is broken"),
        ("def f(:\n", "broken_syntax:Thing", r"importing 'broken_syntax' raised SyntaxError"),
        (None, ".relative:Thing", "is a relative module path; give the absolute one"),
        (None, "os:getcwd", r"budget_allocator='os:getcwd' built '.*' \(a str\), which is not an allocator"),
        (None, "builtins:print", r"budget_allocator='builtins:print' built None \(a NoneType\), which is not"),
        (None, "os:no_such_thing", "module 'os' has no attribute 'no_such_thing'"),
    ],
)
def test_a_dotted_path_that_cannot_give_an_allocator_is_refused_by_the_config(tmp_path, monkeypatch, module_text,
                                                                              path, message):
    if module_text is not None:
        (tmp_path / f"{path.split(':')[0]}.py").write_text(module_text)
        monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=message) as error:
        BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], budget_allocator=path)
    assert str(error.value).startswith(f"budget_allocator={path!r}")


def test_a_bad_value_in_the_kwargs_is_blamed_on_the_kwargs(tmp_path):
    # Before: blamed on knapsack_fallback_confidence, a field the user never set (it still held 0.9).
    with pytest.raises(ValueError, match=r"^budget_allocator_kwargs\['fallback_confidence'\] must lie in"):
        BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], budget_allocator="knapsack",
                         budget_allocator_kwargs={"fallback_confidence": 2.0})


class PricedWithoutBounds:
    """An allocator that takes prices but keeps no min_generations / max_generations."""

    def __init__(self, **options):
        pass

    def allocate(self, pass_rates, budget, failure_rate=None, prices=None):
        return UniformAllocator(1, budget).allocate(pass_rates, budget)

    __call__ = allocate


def test_a_token_cap_needs_the_allocators_bounds_at_construction(tmp_path, tokenizer):
    # Before: construction passed and the first step failed with an AttributeError.
    with pytest.raises(ValueError, match="budget_token_cap=1.2 compares .* has no min_generations or max_generations"):
        make_trainer(tmp_path, tokenizer, budget_token_cap=1.2, allocator=PricedWithoutBounds(),
                     model="no-such-org/no-such-model")


def test_the_wheel_lists_every_subpackage():
    # pyproject.toml lists the packages (to map accelerate_configs/ into the wheel): a subpackage left out of the list
    # would be missing from the wheel, silently.
    import tomllib
    from pathlib import Path

    from setuptools import find_packages

    root = Path(__file__).resolve().parents[1]
    listed = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert set(listed) == set(find_packages(str(root), include=["trl_budget*"])) | {"trl_budget.accelerate_configs"}


def test_trls_group_size_check_is_trls_where_num_generations_is_read_and_spo_takes_any(tmp_path):
    # Under the default rule num_generations keeps TRL's meaning, so TRL's own check stands as TRL words it.
    with pytest.raises(ValueError, match=r"^generation_batch_size \(8\) must be divisible by num_generations \(16\)\.$"):
        BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], num_generations=16)
    # Before: refused under SPO, which never reads num_generations, with a fix that asked to change it.
    config = BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], budget_allocator="spo", num_generations=16)
    assert config.generation_batch_size % config.num_generations == 0 and config.num_generations_eval == 16


@pytest.mark.parametrize("setting, message", [
    # Before (under SPO as the default): "this run's allocator is 'spo'", "(this run's: None)".
    ({"knapsack_fallback": False}, "but this run's is budget_allocator='uniform' (the default), which would ignore it"),
    ({"budget_allocator": "spo", "knapsack_fallback": False}, "but this run's is budget_allocator='spo', which"),
    ({"budget_allocator": "spo", "advantage_history_window": 8.0},
     "advantage_baseline='history' (this run's: 'spo'), which would ignore it"),
])
def test_a_setting_another_rule_reads_names_the_rule_in_effect(tmp_path, setting, message):
    with pytest.raises(ValueError) as refused:
        BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], **setting)
    assert message in str(refused.value)


def test_the_defaults_read_the_history_window_and_take_grpos_baseline(tmp_path):
    config = BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], advantage_history_window=8.0)
    assert config.resolved_advantage_baseline() == "history" and config.make_tracker().reward_history_window == 8.0
    config = BudgetGRPOConfig(str(tmp_path), use_cpu=True, report_to=[], advantage_baseline="group")
    assert config.resolved_advantage_baseline() == "group" and config.make_tracker().reward_history_window is None
