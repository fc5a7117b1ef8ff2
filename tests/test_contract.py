"""The drop-in contract, clause by clause (README, docs/trainer.md): after the import change alone, every explicit TRL
setting keeps its meaning, every reward TRL accepts trains, TRL's metrics mean what they meant, and the rule in effect
is announced at WARNING level; a rule that changes any of this is chosen by name, says what it changes, and checks
what it needs before any generation."""

import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ALPHABET, always_one, grpo_kwargs, make_dataset, parity_reward
from trl import GRPOConfig, GRPOTrainer

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model

ROOT = Path(__file__).resolve().parents[1]


def trl_user_kwargs(output_dir, **overrides):
    """A TRL user's settings, num_generations=8 and two prompts a step (nothing of the budget's), and `overrides`."""
    return {**grpo_kwargs(output_dir, num_generations=8, per_device_train_batch_size=16), **overrides}


def train(trainer_class, config_class, tokenizer, output_dir, reward_funcs=(parity_reward, always_one), dataset=None,
          **overrides):
    trainer = trainer_class(model=build_tiny_model(tokenizer), reward_funcs=list(reward_funcs),
                            args=config_class(**trl_user_kwargs(output_dir, **overrides)),
                            train_dataset=dataset if dataset is not None else make_dataset(), processing_class=tokenizer)
    trainer.train()
    return trainer


def trl_metrics(trainer) -> list[dict]:
    return [{key: value for key, value in entry.items() if not key.startswith(("budget/", "train_"))}
            for entry in trainer.state.log_history]


def test_a_trl_users_script_keeps_grpo_trainers_layout_and_metrics_and_announces_the_rule(tmp_path, tokenizer,
                                                                                           caplog):
    # Two 0/1 rewards summed, num_generations=8, a prompt column, three steps, each on prompts seen for the first time.
    grpo = train(GRPOTrainer, GRPOConfig, tokenizer, tmp_path / "grpo", max_steps=3)
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        budget = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path / "budget", max_steps=3)
    # The layout: the same prompts in the same order, num_generations rollouts each, the same rows a step.
    assert list(budget._logs["prompt"]) == list(grpo._logs["prompt"])
    assert Counter(budget._logs["prompt"]) == Counter({prompt: 8 for prompt in grpo._logs["prompt"]})
    # TRL's metrics: the same names at every step; on a prompt's first visit the history baseline is GRPO's group, so
    # the first step gives the same figures, and the batch TRL's completions log keeps (the third, still first
    # visits) the same rollouts and advantages.
    assert [set(entry) for entry in trl_metrics(budget)] == [set(entry) for entry in trl_metrics(grpo)]
    assert list(budget._logs["completion"])[:16] == list(grpo._logs["completion"])[:16]
    assert np.allclose(list(budget._logs["advantages"])[:16], list(grpo._logs["advantages"])[:16], atol=1e-5)
    for key in ("reward", "reward_std", "frac_reward_zero_std", "num_tokens"):
        assert trl_metrics(budget)[0][key] == pytest.approx(trl_metrics(grpo)[0][key], abs=1e-6), key
    lines = [record for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert [record.levelname for record in lines] == ["WARNING"]
    assert "(budget_allocator='uniform')" in lines[0].getMessage()
    assert lines[0].getMessage().endswith("To train exactly as GRPOTrainer, set advantage_baseline='group'.")


def test_the_one_setting_that_trains_exactly_as_grpo_trainer_says_so(tmp_path, tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, max_steps=1, advantage_baseline="group")
    [line] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert line.endswith("This run trains exactly as GRPOTrainer with the same settings.")


@pytest.mark.parametrize("overrides", [{"scale_rewards": "batch"}, {"multi_objective_aggregation": "normalize_then_sum"}],
                         ids=lambda overrides: ",".join(overrides.values()))
def test_trl_scalings_the_history_baseline_cannot_read_keep_grpo_trainers_run_bit_for_bit(tmp_path, tokenizer,
                                                                                         overrides):
    # The default baseline is the history only where TRL's scaling has a meaning for it; otherwise the user's setting
    # keeps its meaning, as GRPOTrainer's (before, the default refused these settings under the history baseline).
    grpo = train(GRPOTrainer, GRPOConfig, tokenizer, tmp_path / "grpo", max_steps=4, **overrides)
    budget = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path / "budget", max_steps=4, **overrides)
    assert budget.advantage_baseline == "group"
    assert list(budget._logs["advantages"]) == list(grpo._logs["advantages"])
    for ours, theirs in zip(budget.model.parameters(), grpo.model.parameters()):
        assert torch.equal(ours, theirs)


def test_an_epoch_visits_every_prompt_once_with_num_generations_rollouts_as_grpo_trainer(tmp_path, tokenizer):
    grpo = train(GRPOTrainer, GRPOConfig, tokenizer, tmp_path / "grpo", max_steps=-1, num_train_epochs=1)
    budget = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path / "budget", max_steps=-1,
                   num_train_epochs=1)
    assert budget.state.global_step == grpo.state.global_step == 3  # 6 prompts, 2 a step
    assert Counter(budget._logs["prompt"]) == Counter(grpo._logs["prompt"])
    assert set(Counter(budget._logs["prompt"]).values()) == {8}


def coarse(completions, **kwargs):
    """Agrees within many groups, and differs between a prompt's visits."""
    return [float(len(completion) > 3) for completion in completions]


@pytest.mark.parametrize("rule", [{}, {"budget_allocator": "knapsack", "advantage_baseline": "history"}],
                         ids=["default", "knapsack-history"])
def test_frac_reward_zero_std_keeps_trls_meaning_whatever_the_baseline(tmp_path, tokenizer, rule):
    # Before: under the history baseline it logged the share of rows whose prompt's *history* agreed, which reads 0
    # for a group of identical rewards whose history differs. TRL's meaning: the rows whose group in the batch agrees.
    from test_probe import RowRecorder

    trainer = BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=[coarse],
                                args=BudgetGRPOConfig(**trl_user_kwargs(tmp_path, max_steps=6, **rule)),
                                train_dataset=make_dataset(2), processing_class=tokenizer)
    recorder = RowRecorder(trainer)
    trainer.train()
    logged = [entry["frac_reward_zero_std"] for entry in trainer.state.log_history if "frac_reward_zero_std" in entry]
    expected = []
    for plan, _, _ in recorder.steps:
        groups = np.split(plan.rewards, np.cumsum(plan.counts)[:-1])
        expected.append(np.mean(np.repeat([group.min() == group.max() for group in groups], plan.counts)))
    assert logged == pytest.approx(expected) and 0 < np.mean(expected) < 1
    assert trainer.advantage_baseline == "history"


def negative(completions, **kwargs):
    return [-float(len(completion)) for completion in completions]


def continuous(completions, **kwargs):
    return [len(completion) / 7.0 for completion in completions]


def sometimes_none(completions, **kwargs):
    return [None if index % 3 == 0 else 1.0 for index, completion in enumerate(completions)]


def large(completions, **kwargs):
    return [10.0 * len(completion) for completion in completions]


@pytest.mark.parametrize("reward_funcs", [(negative,), (large,), (parity_reward, always_one), (sometimes_none,),
                                          (continuous,), (negative, large, continuous)],
                         ids=lambda funcs: "+".join(func.__name__ for func in funcs))
def test_every_reward_trl_accepts_trains_under_the_default(tmp_path, tokenizer, reward_funcs):
    trainer = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, reward_funcs=reward_funcs, max_steps=4)
    assert trainer.state.global_step == 4 and trainer.advantage_baseline == "history"
    assert all(np.isfinite(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry)


@pytest.mark.parametrize("reward_funcs, options", [
    ((parity_reward, always_one), {"spo_reward_range": [0, 2]}),
    ((negative,), {"spo_reward_range": [-7, 0]}),
    ((sometimes_none,), {}),
    ((continuous,), {}),
], ids=["accuracy+format", "negative", "none", "continuous"])
def test_spo_trains_any_bounded_reward_given_its_range(tmp_path, tokenizer, reward_funcs, options):
    trainer = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, reward_funcs=reward_funcs, max_steps=3,
                    budget_allocator="spo", **options)
    assert trainer.state.global_step == 3
    p_hats = trainer.spo.tracker.p_hats(list(trainer.spo.tracker.alpha))
    assert ((p_hats >= 0) & (p_hats <= 1)).all()


def test_spo_maps_the_declared_range_onto_its_shares_of_success(tmp_path, tokenizer):
    # The accuracy and format pair, summed: 2 is a whole success, 1 (format alone) half of one.
    trainer = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, max_steps=2, budget_allocator="spo",
                    spo_rho=1.0, spo_reward_range=[0, 2])
    rewards = np.asarray(trainer.last_rollout_plan.rewards)
    assert set(rewards.tolist()) <= {1.0, 2.0}
    assert trainer.spo.pending["rewards"] == pytest.approx((rewards / 2).tolist())


@pytest.mark.parametrize("reward_funcs, options, said", [
    ((parity_reward, always_one), {}, r"2 reward functions with rewards in \[0, 1\], weighted \[1.0, 1.0\], sum to "
                                      r"rewards in \[0, 2\]. Declare that range with spo_reward_range=\[0, 2\]"),
    ((parity_reward,), {"reward_weights": [-1.0]}, r"sum to rewards in \[-1, 0\]. Declare that range with "
                                                   r"spo_reward_range=\[-1, 0\]"),
], ids=["accuracy+format", "negative-weight"])
def test_spo_refuses_a_reward_scale_it_cannot_read_before_any_generation(tmp_path, tokenizer, reward_funcs, options,
                                                                          said):
    # Before: the accuracy and format pair trained 14 steps, then stopped at the first rollout that earned both.
    generated = []

    class Recording(BudgetGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            generated.append(len(inputs))
            return super()._generate_and_score_completions(inputs)

    with pytest.raises(ValueError, match=said):
        train(Recording, BudgetGRPOConfig, tokenizer, tmp_path, reward_funcs=reward_funcs, max_steps=2,
              budget_allocator="spo", **options)
    assert generated == []


def test_spo_refuses_a_reward_outside_its_range_on_the_first_batch(tmp_path, tokenizer):
    with pytest.raises(ValueError, match=r"spo_reward_range is not set, so rewards must lie in \[0, 1\], and a "
                                         r"rollout's weighted reward is -\d"):
        train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, reward_funcs=(negative,), max_steps=20,
              budget_allocator="spo")


def test_spo_reads_no_num_generations_so_none_is_refused(tmp_path, tokenizer, caplog):
    # Before: per_device_train_batch_size=4 with num_generations=8 was refused under SPO, which never reads it, with a
    # fix that asked to change num_generations.
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, reward_funcs=(parity_reward,),
                        max_steps=2, per_device_train_batch_size=4, budget_allocator="spo")
    assert [plan.counts.tolist() for plan in [trainer.last_rollout_plan]] == [[1, 1, 1, 1]]
    [line] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert line.count("num_generations=8 is not read") == 1  # said once, among the differences
    assert "trains 4 distinct prompts, 8 times GRPOTrainer's" in line


ANNOUNCED = """
import sys
sys.path.insert(0, {tests!r})
from helpers import ALPHABET, make_dataset, parity_reward
from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.demo.tiny import build_char_tokenizer, build_tiny_model
tokenizer = build_char_tokenizer(ALPHABET)
args = BudgetGRPOConfig(output_dir={output!r}, per_device_train_batch_size=8, num_generations=4, max_steps=1,
                        max_completion_length=4, report_to=[], use_cpu=True, save_strategy="no")
BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=parity_reward, args=args,
                  train_dataset=make_dataset(), processing_class=tokenizer).train()
"""


def test_the_rule_is_announced_in_a_plain_script(tmp_path):
    # Before: the line went to logger.info, which a plain script never shows.
    code = ANNOUNCED.format(tests=str(ROOT / "tests"), output=str(tmp_path / "out"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("Rollout budget:")]
    assert len(lines) == 1 and "advantage baseline 'history'" in lines[0]


def test_the_rule_is_announced_under_trl_budget_grpo(tmp_path):
    folder = tmp_path / "model"
    tokenizer = build_char_tokenizer(ALPHABET)
    build_tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    make_dataset(8).to_json(tmp_path / "data" / "train.jsonl")
    result = subprocess.run(
        [sys.executable, "-m", "trl_budget", "grpo", "--model_name_or_path", str(folder), "--dataset_name",
         str(tmp_path / "data"), "--output_dir", str(tmp_path / "out"), "--per_device_train_batch_size", "8",
         "--num_generations", "4", "--max_completion_length", "4", "--use_cpu", "--bf16", "false", "--max_steps", "1",
         "--report_to", "none", "--reward_funcs", "helpers.parity_reward", "--budget_allocator", "spo"],
        capture_output=True, text=True, timeout=600, cwd=ROOT / "tests")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "Rollout budget:" in line]
    assert len(lines) == 1 and "(budget_allocator='spo')" in lines[0] and "num_generations=4 is not read" in lines[0]


@pytest.mark.parametrize("scale", [1.0, -3.0, 250.0, 1e-3])
@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_the_history_baseline_on_a_first_visit_is_grpos_group_at_any_reward_scale(scale, scale_rewards):
    from trl_budget.advantages import advantages_against_baseline, grouped_advantages
    from trl_budget.tracker import CapabilityTracker

    rng = np.random.default_rng(0)
    counts = np.array([8, 8, 8, 8])
    rewards = rng.normal(size=(32, 2)) * scale
    rewards[[0, 9], 1] = np.nan  # a reward function that could not score a rollout
    rewards[16:24] = rewards[16]  # a group whose rewards all agree
    per_func = torch.as_tensor(rewards, dtype=torch.float32)
    weights = torch.tensor([1.0, 0.5])
    weighted = (per_func * weights).nansum(dim=1)
    keys = ["a", "b", "c", "d"]
    tracker = CapabilityTracker(reward_history_window=16.0)  # nothing seen: every prompt's first visit
    history, agree = advantages_against_baseline("history", per_func, counts, weighted, weighted, counts, keys,
                                                 tracker, weights, scale_rewards, "sum_then_normalize")
    group, group_agree = grouped_advantages(per_func, torch.as_tensor(counts), weights, scale_rewards,
                                            "sum_then_normalize")
    # The same baseline: GRPO's float32 arithmetic and the history's float64 agree to float32 rounding.
    mixed = torch.ones(32, dtype=torch.bool)
    mixed[16:24] = False
    tolerance = 1e-6 if scale_rewards == "group" else 1e-6 * abs(scale)
    assert torch.allclose(history[mixed], group[mixed], rtol=1e-5, atol=tolerance)
    assert torch.equal(agree[mixed], group_agree[mixed])
    # A group whose rewards all agree gets 0 and counts as agreeing; GRPO's float32 deviation can leave a rounding
    # residue there instead of 0 (at a scale of 250, advantages of about 0.04), which the history baseline does not.
    assert (history[16:24] == 0).all() and agree[16:24].all()


def test_two_groups_of_one_prompt_text_in_a_batch_keep_grpos_groups_on_a_first_visit(tmp_path, tokenizer):
    # Before: the history baseline pooled every row of a prompt text in the batch, so two rows of the same text with
    # different answers (a dataset that repeats its prompts) shared one baseline at their first visit, unlike GRPO.
    from datasets import Dataset

    rows = Dataset.from_list([{"prompt": "3+4=", "answer": "7"}, {"prompt": "3+4=", "answer": "8"}] * 3)
    runs = [train(trainer_class, config_class, tokenizer, tmp_path / trainer_class.__name__, dataset=rows,
                  reward_funcs=(parity_reward,), max_steps=1, shuffle_dataset=False)
            for trainer_class, config_class in ((GRPOTrainer, GRPOConfig), (BudgetGRPOTrainer, BudgetGRPOConfig))]
    grpo, budget = runs
    assert list(budget._logs["completion"]) == list(grpo._logs["completion"])
    assert np.allclose(list(budget._logs["advantages"]), list(grpo._logs["advantages"]), atol=1e-5)
    assert budget.advantage_baseline == "history"


class RecordedReward:
    """The parity reward, keeping every reward it gives by the step it is given at (a batch's every generated row)."""

    __name__ = "parity_reward"

    def __init__(self, base=parity_reward):
        self.by_step, self.base = {}, base

    def __call__(self, completions, answer, trainer_state, **kwargs):
        rewards = self.base(completions=completions, answer=answer)
        self.by_step.setdefault(trainer_state.global_step, []).extend(rewards)
        return rewards


@pytest.mark.parametrize("rule", [
    {"budget_allocator": "knapsack", "probe_generations": 2},
    {"rounds_generations": 2},
    {"budget_allocator": "reinforce_ada", "reinforce_ada_samples_per_round": 4, "num_generations": 4},
    {"dynamic_sampling": True, "dynamic_sampling_max_gen_batches": 0},
], ids=["probe", "rounds", "reinforce_ada", "dynamic_sampling"])
def test_trls_reward_figures_are_over_every_rollout_a_batch_generated(tmp_path, tokenizer, rule):
    # Before: TRL logged reward and reward_std once per generation request, and the step's figure was the mean of
    # those (requests of different sizes; under Reinforce-Ada a mean reward of 1.17 where the rows scored 0.63).
    reward = RecordedReward(coarse if "dynamic_sampling" in rule else parity_reward)  # groups that agree: more draws
    options = {"max_steps": 4, "per_device_train_batch_size": 16, "num_generations": 8, **rule}
    trainer = BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=[reward],
                                args=BudgetGRPOConfig(**{**trl_user_kwargs(tmp_path), **options,
                                                         "budget_min_generations": 2}),
                                train_dataset=make_dataset(12), processing_class=tokenizer)
    trainer.train()
    entries = [entry for entry in trainer.state.log_history if "reward" in entry and "loss" in entry]
    assert len(entries) == 4
    for step, entry in enumerate(entries):
        generated = np.asarray(reward.by_step[step], dtype=np.float32)
        assert entry["reward"] == pytest.approx(float(generated.mean()), abs=1e-6)
        assert entry["reward_std"] == pytest.approx(float(generated.std(ddof=1)), abs=1e-5)
        assert entry["rewards/parity_reward/mean"] == pytest.approx(float(generated.mean()), abs=1e-6)
    if "dynamic_sampling" not in rule:  # a rule of several requests a batch took more than one
        assert any(entry["budget/rounds"] > 1 for entry in trainer.state.log_history if "budget/rounds" in entry)


def test_spo_goes_on_past_a_reward_outside_its_range_after_the_first_batch(tmp_path, tokenizer):
    # Before: a 0/1 accuracy with a rare bonus (up to 1.25) passed the check before the first generation and stopped
    # training at the batch that first gave 1.25, after compute was spent.
    def with_a_late_bonus(completions, answer, trainer_state, **kwargs):
        bonus = 0.25 if trainer_state.global_step >= 2 else 0.0
        return [reward + bonus * reward for reward in parity_reward(completions, answer)]

    with pytest.warns(UserWarning, match=r"a rollout's weighted reward is 1.25, outside \[0, 1\] \(spo_reward_range is "
                                         r"not set\); SPO counts every such reward as the nearest end of the range"):
        trainer = train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, reward_funcs=(with_a_late_bonus,),
                        max_steps=4, budget_allocator="spo")
    assert trainer.state.global_step == 4
    shares = [entry["spo/rewards_outside_range"] for entry in trainer.state.log_history
              if "spo/rewards_outside_range" in entry]
    assert shares[:1] == [0.0] and max(shares) > 0


@pytest.mark.parametrize("rule, said", [
    ({"budget_allocator": "reinforce_ada", "reinforce_ada_samples_per_round": 4},
     r"\(budget_allocator='reinforce_ada'\), with its own rounds; .* each batch is generated in rounds and "
     r"down-sampled"),
    ({"rounds_generations": 2, "advantage_baseline": "group"},
     r"with rounds until mixed; .* so a prompt gets more or fewer rollouts than num_generations, their average\. To "
     r"train exactly as GRPOTrainer, set rounds_generations=0, and remove the settings only this rule reads\.$"),
], ids=["reinforce_ada", "rounds"])
def test_the_announcement_says_what_each_rule_changes(tmp_path, tokenizer, caplog, rule, said):
    # Before: Reinforce-Ada was announced "in one shot", rounds until mixed did not say that counts vary, and the fix
    # named only the settings to set, not the rule's own to remove.
    import re

    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        train(BudgetGRPOTrainer, BudgetGRPOConfig, tokenizer, tmp_path, reward_funcs=(parity_reward,), max_steps=1,
              num_generations=4, **rule)
    [line] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert re.search(said, line), line


def test_a_grpo_config_subclass_stays_one_in_the_trainer(tmp_path, tokenizer):
    # Before: a user's GRPOConfig subclass became a plain BudgetGRPOConfig: isinstance failed, its properties were gone.
    from dataclasses import dataclass, field

    @dataclass
    class MyGRPOConfig(GRPOConfig):
        my_flag: int = field(default=7)

        @property
        def doubled(self) -> int:
            return 2 * self.my_flag

    args = MyGRPOConfig(**trl_user_kwargs(tmp_path, max_steps=1), my_flag=3)
    trainer = BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=[parity_reward], args=args,
                                train_dataset=make_dataset(), processing_class=tokenizer)
    assert isinstance(trainer.args, MyGRPOConfig) and isinstance(trainer.args, BudgetGRPOConfig)
    assert trainer.args.doubled == 6 and trainer.args.budget_allocator == "uniform"
    trainer.train()
    assert trainer.state.global_step == 1


@pytest.mark.parametrize("history", [{"advantage_history_first_visit": "batch"},
                                     {"advantage_history_includes_batch": False, "scale_rewards": "batch"},
                                     {"advantage_history_window": 4.0}, {"advantage_baseline": "earlier_or_batch"}],
                         ids=["first_visit", "earlier_visits", "window", "shorthand"])
def test_the_announcements_fix_for_the_history_baseline_is_a_config_the_trainer_takes(tmp_path, history):
    # Before: under advantage_history_first_visit='batch' (or a window, or earlier visits alone) the announcement said
    # only "set advantage_baseline='group'", which the config refuses while a history setting stays.
    from trl_budget.announcement import announcement

    given = trl_user_kwargs(tmp_path, **{"advantage_baseline": "history", **history})
    args = BudgetGRPOConfig(**given)
    line = announcement(args, args.make_allocator(), args.resolved_advantage_baseline())
    fixed = {**given, "advantage_baseline": "group"}
    if line.endswith("and remove the settings only this rule reads."):
        fixed = {name: value for name, value in fixed.items() if not name.startswith("advantage_history_")}
    else:
        assert line.endswith("set advantage_baseline='group'."), line
    assert BudgetGRPOConfig(**fixed).resolved_advantage_baseline() == "group"
