"""Settings refused before any compute: a wrong type before a range, counts beyond any batch, and every setting that
the chosen rule would never read, each named with the rule that reads it and the fix."""

import logging
from dataclasses import fields

import pytest
from helpers import config_kwargs, make_trainer
from trl import GRPOConfig

from trl_budget import BudgetGRPOConfig
from trl_budget.settings.renamed import RENAMED_SETTINGS

BUDGET_FIELDS = [f for f in fields(BudgetGRPOConfig) if f.name not in GRPOConfig.__dataclass_fields__
                 and f.name not in RENAMED_SETTINGS]
NUMBERS = [f.name for f in BUDGET_FIELDS if isinstance(f.default, (int, float)) and not isinstance(f.default, bool)
           or f.name in ("budget_token_cap", "advantage_clip", "rounds_first_generations", "rounds_max",
                         "reinforce_ada_max_generated", "pass_rate_window", "pass_rate_rollout_pool",
                         "pass_rate_min_rollouts", "failure_rate_window", "vip_prior_mean")]
SWITCHES = [f.name for f in BUDGET_FIELDS if isinstance(f.default, bool)]


def rule_reading(name: str) -> dict:
    """Settings under which `name` is read, so that only its own value can be refused."""
    if name.startswith(("reinforce_ada_", "coba_")):
        return {"budget_allocator": name.split("_")[0] if name.startswith("coba_") else "reinforce_ada"}
    if name.startswith("vip_"):
        return {"budget_allocator": "vip"}
    if name in ("rounds_first_generations", "rounds_max"):
        return {"rounds_generations": 2}
    if name in ("probe_history_weight", "probe_prior_strength"):
        return {"probe_generations": 2}
    if name == "pass_rate_prior_strength":
        return {"prompt_group_column": "level"}
    return {}


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("value", ["2", [2]])
def test_a_number_of_the_wrong_type_is_named_before_any_range_check(tmp_path, name, value):
    # Before: probe_generations="2" raised TypeError: '<=' not supported between 'int' and 'str'.
    with pytest.raises(ValueError, match=f"^{name}(=\\S+)? must (be|lie)"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **rule_reading(name), **{name: value}))


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_a_number_beyond_the_range_of_a_float_is_named_with_its_bound(tmp_path, name, value):
    # Before: 10**400 raised OverflowError ("int too large to convert to float") from inside a range check.
    with pytest.raises(ValueError, match=f"^{name}(=\\S+)? must (be|lie)") as refused:
        BudgetGRPOConfig(**config_kwargs(tmp_path, **rule_reading(name), **{name: value}))
    assert "0000000000" not in str(refused.value)  # not 401 digits: their count


@pytest.mark.parametrize("make", [lambda: __import__("trl_budget").KnapsackAllocator(fallback=1),
                                  lambda: __import__("trl_budget").CoBAAllocator(bucket_heuristic="yes")])
def test_an_allocators_switch_must_be_true_or_false(make):
    # Before: an allocator built directly took any value as its switch, read as true or false.
    with pytest.raises(ValueError, match="^(fallback|bucket_heuristic) must be True or False"):
        make()


@pytest.mark.parametrize("name", SWITCHES)
def test_a_switch_must_be_true_or_false(tmp_path, name):
    with pytest.raises(ValueError, match=f"^{name} must be True or False, got 'no'"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **rule_reading(name), **{name: "no"}))


@pytest.mark.parametrize("name", ["prompt_id_column", "pass_rate_prior_column", "prompt_group_column"])
def test_a_column_setting_must_name_a_column(tmp_path, name):
    with pytest.raises(ValueError, match=f"^{name} must be a column of the training dataset"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **{name: ["level"]}))


@pytest.mark.parametrize(
    "overrides, name",
    [
        ({"budget_max_generations": 10**40}, "budget_max_generations"),
        ({"budget_min_generations": 10**40}, "budget_min_generations"),
        ({"rounds_generations": 10**40}, "rounds_generations"),
        ({"budget_allocator": "reinforce_ada", "reinforce_ada_samples_per_round": 10**40},
         "reinforce_ada_samples_per_round"),
        ({"budget_allocator": "reinforce_ada", "reinforce_ada_max_generated": 10**40}, "reinforce_ada_max_generated"),
        ({"pass_rate_window": 10**40}, "pass_rate_window"),
    ],
)
def test_a_count_beyond_any_batch_is_refused_at_construction(tmp_path, overrides, name):
    # Before: budget_max_generations=10**40 passed and rounds failed at the first batch with an OverflowError.
    with pytest.raises(ValueError, match=f"^{name} must be a whole number of at most 2147483647, got 10000"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **overrides))


@pytest.mark.parametrize(
    "overrides, message",
    [
        # Another allocator's options.
        ({"budget_allocator": "knapsack", "reinforce_ada_choice": "bogus"},
         r"^reinforce_ada_choice='bogus' is read only by budget_allocator='reinforce_ada', but this run's is "
         r"budget_allocator='knapsack', which would ignore it\. Remove reinforce_ada_choice, or set "
         r"budget_allocator='reinforce_ada'"),
        ({"budget_allocator": "uniform", "reinforce_ada_max_generated": 512}, "^reinforce_ada_max_generated=512 is "),
        ({"budget_allocator": "coba", "knapsack_fallback": False}, "^knapsack_fallback=False is read only by "
                                                                   "budget_allocator='knapsack'"),
        ({"budget_allocator": "knapsack", "coba_kappa": 20.0}, "^coba_kappa=20.0 is read only by "),
        # Rounds settings without rounds.
        ({"rounds_first_generations": 2}, r"^rounds_first_generations=2 is never read by "
                                                r"budget_allocator='knapsack' in one shot .* or turn rounds until "
                                                "mixed on with rounds_generations"),
        ({"rounds_max": 3}, "^rounds_max=3 is never read by budget_allocator='knapsack' in one shot"),
        ({"probe_prior_strength": 2.0}, "^probe_prior_strength=2.0 is never read .* turn a probe stage "
                                               "on"),
        # Reinforce-Ada decides from the batch alone.
        ({"budget_allocator": "reinforce_ada", "rounds_generations": 2},
         "^rounds_generations=2 is never read under budget_allocator='reinforce_ada': it generates each batch "
         "in rounds of its own"),
        ({"budget_allocator": "reinforce_ada", "rounds_max": 2}, "^rounds_max=2 is never read under "),
        ({"budget_allocator": "reinforce_ada", "pass_rate_prior_column": "prior"},
         "^pass_rate_prior_column='prior' is never read under budget_allocator='reinforce_ada'.* or choose a one-shot "
         "allocator"),
        ({"budget_allocator": "reinforce_ada", "prompt_group_column": "level"}, "^prompt_group_column='level' is "),
        # Rounds until mixed: the top-up is neither token-capped nor informed by a prior.
        ({"rounds_generations": 2, "budget_token_cap": 1.0},
         r"^budget_token_cap=1.0 is never read with rounds until mixed \(rounds_generations\).* set "
         "rounds_generations=0 for a one-shot allocation that reads it"),
        ({"rounds_generations": 2, "pass_rate_prior_column": "prior"}, "^pass_rate_prior_column='prior' is "
                                                                             "never read with rounds until mixed"),
        ({"rounds_generations": 2, "prompt_group_column": "level"}, "^prompt_group_column='level' is never "),
        # Uniform reads no pass rate.
        ({"budget_allocator": "uniform", "prompt_group_column": "level"},
         "^prompt_group_column='level' is never read by budget_allocator='uniform' .* choose an allocator that reads "
         "pass rates"),
        ({"pass_rate_prior_strength": 4.0}, "^pass_rate_prior_strength=4.0 is never read .* name a prior"),
    ],
)
def test_a_setting_the_rule_never_reads_is_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **overrides))


@pytest.mark.parametrize(
    "overrides",
    [
        {"budget_allocator": "knapsack", "knapsack_fallback": False, "pass_rate_prior_column": "prior",
         "pass_rate_prior_strength": 4.0},
        {"budget_allocator": "coba", "coba_kappa": 20.0, "probe_generations": 2,
         "probe_prior_strength": 2.0},
        {"budget_allocator": "uniform", "rounds_generations": 2, "rounds_first_generations": 2,
         "rounds_max": 3, "probe_history_weight": 0.25},
        {"budget_allocator": "reinforce_ada", "reinforce_ada_choice": "positive_focused",
         "reinforce_ada_max_generated": 64},
    ],
)
def test_settings_the_rule_reads_are_accepted(tmp_path, overrides):
    BudgetGRPOConfig(**config_kwargs(tmp_path, **overrides))


def test_a_reinforce_ada_run_whose_first_round_spends_the_cap_is_warned_about(tmp_path, tokenizer, caplog):
    # 8 rows per batch at K = 4: 2 prompts; 4 a round: the first round is 8 rollouts, the whole cap of 8.
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        make_trainer(tmp_path, tokenizer, budget_allocator="reinforce_ada", reinforce_ada_samples_per_round=4,
                     reinforce_ada_max_generated=8)
    assert caplog.text.count("Reinforce-Ada can never take a second round here") == 1
    assert ("its first round takes 2 prompts x reinforce_ada_samples_per_round=4 = 8 rollouts, the whole "
            "reinforce_ada_max_generated=8. Every batch is then uniform GRPO") in caplog.text
    assert "generation_batch_size / num_generations = 8 / 4 = 2 prompts" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        make_trainer(tmp_path, tokenizer, budget_allocator="reinforce_ada", reinforce_ada_samples_per_round=4,
                     reinforce_ada_max_generated=16)
        make_trainer(tmp_path, tokenizer, rounds_generations=2, rounds_first_generations=2)
    assert "can never take a second round" not in caplog.text


def test_rounds_whose_first_round_spends_the_budget_are_warned_about(tmp_path, tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        make_trainer(tmp_path, tokenizer, rounds_generations=2, rounds_first_generations=4)
    assert ("Rounds until mixed can never take a second round here: rounds_first_generations=4 equals "
            "num_generations, so the first round (2 prompts x 4 = 8 rollouts)") in caplog.text


# A value each renamed setting can take, with the settings under which it is read.
FORMER_NAMES = {
    "budget_probe_generations": (2, {}), "budget_probe_history_weight": (0.25, {"probe_generations": 2}),
    "budget_probe_prior_strength": (4.0, {"probe_generations": 2}), "budget_round_generations": (2, {}),
    "budget_first_round_generations": (3, {"rounds_generations": 2}), "budget_max_rounds": (3, {"rounds_generations": 2}),
    "budget_per_prompt_rounds": (True, {"rounds_generations": 2}),
    "budget_dynamic_sampling": (True, {"budget_allocator": "uniform"}),
    "budget_dynamic_sampling_metric": ("success", {"budget_allocator": "uniform", "dynamic_sampling": True}),
    "budget_dynamic_sampling_oversample": (2, {"budget_allocator": "uniform", "dynamic_sampling": True}),
    "budget_dynamic_sampling_max_gen_batches": (4, {"budget_allocator": "uniform", "dynamic_sampling": True}),
    "budget_loss_weighting": ("prompt", {}),
    "min_generations": (3, {}), "max_generations": (8, {}),
}


def test_every_renamed_setting_is_covered():
    assert set(FORMER_NAMES) == set(RENAMED_SETTINGS)


@pytest.mark.parametrize("former", sorted(FORMER_NAMES))
def test_a_former_name_sets_the_renamed_setting_with_a_warning(tmp_path, former):
    value, context = FORMER_NAMES[former]
    new = RENAMED_SETTINGS[former]
    with pytest.warns(FutureWarning, match=f"^{former} is deprecated .*: use {new}={value!r} instead"):
        config = BudgetGRPOConfig(**config_kwargs(tmp_path, **context, **{former: value}))
    assert getattr(config, new) == value and getattr(config, former) is None
    assert getattr(config, new) == getattr(BudgetGRPOConfig(**config_kwargs(tmp_path, **context, **{new: value})), new)


def test_a_former_name_and_its_new_name_set_apart_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^budget_probe_generations=2 and probe_generations=1 both set "
                                         r"probe_generations \(budget_probe_generations is its former name\)"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, budget_probe_generations=2, probe_generations=1))


@pytest.mark.parametrize("given, said", [
    ({"budget_probe_generations": "2"}, r"^budget_probe_generations must be a whole number of at least 0, got '2'\. "
                                        r"\(budget_probe_generations is the former name of probe_generations\.\)$"),
    ({"budget_max_rounds": 0, "rounds_generations": 2}, r"^budget_max_rounds must be a whole number of at least 1, got "
                                                        r"0\. \(budget_max_rounds is the former name of rounds_max\.\)$"),
    ({"min_generations": 5}, r"lie between min_generations \(5\) and budget_max_generations \(8\); .* "
                             r"\(min_generations is the former name of budget_min_generations\.\)$"),
])
def test_a_refusal_of_a_setting_given_by_its_former_name_names_the_name_given(tmp_path, given, said):
    # Before: budget_probe_generations='2' was refused as probe_generations, a name the user never typed.
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match=said):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **given))


@pytest.mark.parametrize("typed, meant", [("budget_alocator", "budget_allocator"),
                                          ("advantage_baselin", "advantage_baseline"),
                                          ("num_generation", "num_generations")])
def test_an_unknown_keyword_names_the_setting_probably_meant(tmp_path, typed, meant):
    # Before: a bare TypeError, where `trl-budget grpo` names the flag that was meant.
    kwargs = config_kwargs(tmp_path)
    kwargs[typed] = kwargs.pop(meant, "knapsack")
    with pytest.raises(TypeError, match=f"^BudgetGRPOConfig got an unexpected keyword argument '{typed}'. Did you mean "
                                        f"'{meant}'\\?$"):
        BudgetGRPOConfig(**kwargs)


def test_one_prefix_names_the_allocation_bounds(tmp_path):
    # budget_min_generations and budget_max_generations, as every other setting of the allocation; before, they were
    # min_generations and max_generations, and the budget_ names were refused as unknown.
    config = BudgetGRPOConfig(**config_kwargs(tmp_path, budget_min_generations=3, budget_max_generations=16))
    assert config.generation_bounds() == (3, 16) and config.make_allocator().max_generations == 16


def test_a_num_generations_trl_takes_is_taken_under_the_default_bounds(tmp_path):
    # Before: num_generations=256, which GRPOConfig takes, was refused for exceeding max_generations=128.
    kwargs = config_kwargs(tmp_path, num_generations=256, per_device_train_batch_size=256)
    for name in ("budget_allocator", "budget_min_generations", "budget_max_generations"):
        kwargs.pop(name)
    config = BudgetGRPOConfig(**kwargs)
    assert config.generation_bounds() == (2, 256)
    with pytest.raises(ValueError, match="must lie between budget_min_generations"):  # a bound stated is kept
        BudgetGRPOConfig(**kwargs, budget_max_generations=128)


def test_a_recipe_and_the_command_line_take_the_former_names(tmp_path):
    from trl_budget.scripts.grpo import make_parser

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("budget_allocator: uniform\nbudget_dynamic_sampling: true\n")
    parser = make_parser()
    with pytest.warns(FutureWarning, match="budget_dynamic_sampling_oversample is deprecated"):
        _, config, *_ = parser.parse_args_and_config(
            ["--config", str(recipe), "--output_dir", str(tmp_path), "--budget_dynamic_sampling_oversample", "3",
             "--model_name_or_path", "m", "--dataset_name", "d", "--report_to", "none", "--use_cpu", "true"])
    assert config.dynamic_sampling and config.dynamic_sampling_oversample == 3
