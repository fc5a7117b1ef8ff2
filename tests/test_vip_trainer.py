"""VIP in the trainer (`budget_allocator="vip"`): predictions of every batch prompt, unseen ones included, are what
the allocator and the logs read; the embeddings are made once and resumed with the checkpoint; counts of 0; rounds
until mixed, whose budget left VIP's objective splits; refusals."""

import logging

import numpy as np
import pytest
import torch
from helpers import config_kwargs, make_dataset, make_trainer
from test_probe import RowRecorder, assert_advantages_over_whole_groups
from test_success_prediction import dense_carried_means, dense_prediction

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.allocators.solver import spread_evenly
from trl_budget.allocators.vip import VIPAllocator
from trl_budget.probe import fresh_pass_rates
from trl_budget.round_rules import UntilMixed
from trl_budget.rounds import GeneratedRounds
from trl_budget.vip_stage import rates_with_rollouts

VIP = dict(budget_allocator="vip", budget_max_generations=None)


class PredictionRecorder(BudgetGRPOTrainer):
    """Keeps, per batch, the tracker's rates of every embedded prompt before the prediction, and the plan."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.before, self.plans, self.histogram = [], [], []

    def _vip_predictions(self, keys):
        rates = super()._vip_predictions(keys)
        self.before.append(self.tracker.pass_rates(self.vip.keys))
        return rates

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.plans.append(self.last_rollout_plan)
        return output

    def log(self, logs, start_time=None):
        self.histogram.append(list(self.budget_metrics.history["pass_rates"]))  # what the histogram draws
        super().log(logs, start_time)


def test_a_vip_run_allocates_from_predictions_of_seen_and_unseen_prompts(tmp_path, tokenizer, caplog):
    trainer = make_trainer(tmp_path, tokenizer, max_steps=6, dataset=make_dataset(6), trainer_class=PredictionRecorder,
                           **VIP)
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer.train()
    assert "VIP's grpo objective, solver 'slsqp'" in caplog.text and "embeddings of the policy's hidden states" in caplog.text
    embeddings = trainer.vip.embeddings
    assert embeddings.shape == (6, 32) and np.allclose(np.linalg.norm(embeddings, axis=1), 1.0)
    predicted_unseen = 0
    for tracked, plan in zip(trainer.before, trainer.plans):
        rows = [trainer.vip.keys.index(key) for key in plan.keys]
        seen = np.flatnonzero(~np.isnan(tracked))
        expected = (dense_prediction(embeddings, seen, tracked[seen])[rows] if seen.size
                    else np.full(len(rows), 1 / (1 + np.e)))
        np.testing.assert_allclose(plan.pass_rates, expected, rtol=1e-9)  # what the allocator was given
        unseen = np.isnan(plan.history_rates)
        predicted_unseen += int((unseen & (np.abs(plan.pass_rates - 1 / (1 + np.e)) > 1e-3)).sum())
        assert plan.counts.sum() == 8
    assert predicted_unseen > 0  # an unseen prompt was allocated from a prediction off the prior
    logged = [entry for entry in trainer.state.log_history if "budget/unseen_prompts" in entry]
    assert len(logged) == 6 and logged[0]["budget/unseen_prompts"] == 1.0
    # Each batch SLSQP solved logs whether it converged; the first (equal rates under the prior) needed no solve.
    solved = [entry for entry in logged if "budget/vip_solver_converged" in entry]
    assert "budget/vip_solver_converged" not in logged[0]
    assert solved and all(entry["budget/vip_solver_converged"] in (0.0, 1.0) for entry in solved)
    assert trainer.histogram[:6] == [plan.pass_rates.tolist() for plan in trainer.plans]  # the predictions


@pytest.mark.parametrize("rounds", [{}, {"rounds_generations": 2}], ids=["one-shot", "rounds-until-mixed"])
def test_a_vip_run_resumes_exactly(tmp_path, tokenizer, rounds):
    options = dict(dataset=make_dataset(12), save_strategy="steps", save_steps=2, lr_scheduler_type="constant",
                   learning_rate=1e-2, trainer_class=PredictionRecorder, **VIP, **rounds)
    full = make_trainer(tmp_path / "full", tokenizer, max_steps=4, **options)
    full.train()
    make_trainer(tmp_path / "part", tokenizer, max_steps=2, **options).train()
    assert (tmp_path / "part" / "checkpoint-2" / "budget_vip_embeddings.npz").exists()
    resumed = make_trainer(tmp_path / "part", tokenizer, max_steps=4, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "part" / "checkpoint-2"))
    assert np.array_equal(resumed.vip.embeddings, full.vip.embeddings)  # restored, not made by the resumed policy
    assert np.array_equal(resumed.vip.last_visit, full.vip.last_visit)
    for mine, theirs in zip(resumed.plans, full.plans[2:]):
        assert mine.keys == theirs.keys and np.array_equal(mine.pass_rates, theirs.pass_rates)
        assert np.array_equal(mine.counts, theirs.counts)
        assert [counts.tolist() for counts in mine.round_counts] == [counts.tolist() for counts in theirs.round_counts]
    assert any(len(plan.round_counts) > 1 for plan in full.plans) == bool(rounds)
    assert resumed.tracker.state_dict() == full.tracker.state_dict()
    for (name, mine), theirs in zip(resumed.model.named_parameters(), full.model.parameters()):
        assert torch.equal(mine, theirs), name


def release_fit_predictions(trainer) -> list[np.ndarray]:
    """Each batch's predictions by the release's fit written out densely: the last batch's tracked rates fitted
    from the posterior mean that every earlier fit carried, the prior -5 before any."""
    embeddings, fits, predictions = trainer.vip.embeddings, [], []
    for batch, (tracked, plan) in enumerate(zip(trainer.before, trainer.plans)):
        if batch:
            last = trainer.plans[batch - 1]
            rows = np.array(sorted(trainer.vip.keys.index(key) for key, count in zip(last.keys, last.counts)
                                   if count > 0))
            fits.append((rows, tracked[rows]))
        means = dense_carried_means(embeddings, fits)[-1] if fits else np.full(embeddings.shape[0], -5.0)
        predictions.append(1 / (1 + np.exp(-means[[trainer.vip.keys.index(key) for key in plan.keys]])))
    return predictions


def test_the_release_fit_carries_its_mean_from_batch_to_batch_and_through_a_resume(tmp_path, tokenizer, caplog):
    options = dict(dataset=make_dataset(12), save_strategy="steps", save_steps=2, lr_scheduler_type="constant",
                   learning_rate=1e-2, trainer_class=PredictionRecorder, vip_fit="release", **VIP)
    full = make_trainer(tmp_path / "full", tokenizer, max_steps=4, **options)
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        full.train()
    assert "fitted to the last batch's rates, each fit's posterior mean carried" in caplog.text
    for plan, expected in zip(full.plans, release_fit_predictions(full), strict=True):
        np.testing.assert_allclose(plan.pass_rates, expected, rtol=1e-9)  # what the allocator was given
    assert np.all(full.plans[0].pass_rates == 1 / (1 + np.exp(5.0)))  # the release trainer's prior, -5
    make_trainer(tmp_path / "part", tokenizer, max_steps=2, **options).train()
    with np.load(tmp_path / "part" / "checkpoint-2" / "budget_vip_embeddings.npz") as saved:
        assert saved["carried_mean"].shape == (12,) and np.ptp(saved["carried_mean"]) > 0
    resumed = make_trainer(tmp_path / "part", tokenizer, max_steps=4, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "part" / "checkpoint-2"))
    for mine, theirs in zip(resumed.plans, full.plans[2:], strict=True):
        assert mine.keys == theirs.keys and np.array_equal(mine.pass_rates, theirs.pass_rates)
    assert np.array_equal(resumed.vip.carried_mean, full.vip.carried_mean)


@pytest.mark.parametrize("chosen", [dict(budget_allocator="vip"),  # by name, as an object beside another name, or
                                    dict(budget_allocator="knapsack", allocator=VIPAllocator(1, 8, rule="grpo")),
                                    # by its dotted path
                                    dict(budget_allocator="trl_budget.allocators.vip:VIPAllocator",
                                         budget_allocator_kwargs={"rule": "grpo"})],
                         ids=["by_name", "object", "dotted_path"])
def test_a_count_of_zero_leaves_its_prompt_out_of_the_batch(tmp_path, tokenizer, chosen):
    # Bounds 1 to 8, 2 rollouts a prompt on average: the release's rounding keeps no count below 4, so half the
    # prompts get none (the release drops them from the batch); they generate and train nothing.
    trainer = make_trainer(tmp_path, tokenizer, max_steps=3, num_generations=2, budget_min_generations=1,
                           budget_max_generations=8, dataset=make_dataset(12), trainer_class=PredictionRecorder,
                           **chosen)
    trainer.train()
    for plan in trainer.plans:
        assert plan.counts.sum() == 8 and (plan.counts == 0).any() and set(plan.counts.tolist()) <= {0, 4, 8}
        assert plan.rewards.size == 8
    dropped = [key for plan in trainer.plans for key, count in zip(plan.keys, plan.counts) if count == 0]
    visited = {key for plan in trainer.plans for key, count in zip(plan.keys, plan.counts) if count > 0}
    assert np.isnan(trainer.tracker.pass_rates([key for key in dropped if key not in visited])).all()


class RoundsRecorder(PredictionRecorder):
    """Also keeps, per batch, the tracker's evidence and VIP's predictions before it, and its generated rounds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def _round_rule(self, prompts, keys, history_rates, budget, failure_rate):
        self.batches.append({"evidence": self.tracker.evidence(keys), "predictions": history_rates})
        return super()._round_rule(prompts, keys, history_rates, budget, failure_rate)

    def _generate_rounds(self, rule, prompts):
        rounds, trl_rows = super()._generate_rounds(rule, prompts)
        self.batches[-1]["rounds"] = rounds
        return rounds, trl_rows


def replayed_rule(batch: dict, budget: int, rule: str) -> UntilMixed:
    """Rounds until mixed (2 first, then one round of 2 more for each prompt not mixed, at most 32 a prompt) rebuilt
    outside the trainer: fresh rates from the evidence before the batch (probe_history_weight 0.5), predictions where
    there is none, and the budget left split by VIP's top-up."""
    def fresh(wins, trials):
        return rates_with_rollouts(fresh_pass_rates(*batch["evidence"], wins, trials, 0.5), batch["predictions"])

    allocator = VIPAllocator(2, 32, rule=rule)
    return UntilMixed(2, 2, 32, budget, 1, 2, fresh, lambda rates, counts, spare: allocator.top_up(rates, counts, spare))


def test_vip_in_rounds_until_mixed_splits_the_budget_left_by_its_objective_from_fresh_rates(tmp_path, tokenizer,
                                                                                            caplog):
    trainer = make_trainer(tmp_path, tokenizer, max_steps=4, dataset=make_dataset(8), per_device_train_batch_size=32,
                           rounds_generations=2, rounds_max=2, trainer_class=RoundsRecorder, **VIP)
    recorder = RowRecorder(trainer)
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer.train()
    assert "VIP's grpo objective) over the budget the rounds leave" in caplog.text
    assert "left out of the batch" not in caplog.text  # nothing is dropped under rounds
    by_value = 0
    for batch, plan in zip(trainer.batches, trainer.plans):
        rule, evidence = replayed_rule(batch, 32, "grpo"), GeneratedRounds(8, 1, 0)
        for generated in batch["rounds"].rounds:  # every round the rule's, the top-up VIP's
            assert rule.next_round(evidence).tolist() == generated.counts.tolist()
            evidence.add_evidence(generated.counts, generated.outcomes)
            if rule._topped_up:
                before = evidence.counts - generated.counts
                even = spread_evenly(32, before, np.full(8, 32))
                by_value += not np.array_equal(evidence.counts, even)
        assert rule.next_round(evidence) is None and plan.round_counts[0].tolist() == [2] * 8
        np.testing.assert_array_equal(plan.pass_rates, rule.pass_rates)  # what the top-up read, logged
        assert plan.counts.sum() == plan.rewards.size == 32
    assert by_value > 0  # some top-up was VIP's, not an even spread
    assert_advantages_over_whole_groups(trainer, recorder)
    logged = [entry for entry in trainer.state.log_history if "budget/rounds" in entry]
    assert len(logged) == 4 and all("budget/active_after_round_1" in entry for entry in logged)
    assert trainer.histogram[:4] == [plan.pass_rates.tolist() for plan in trainer.plans]


def test_embeddings_from_a_file_are_read_by_dataset_row_once(tmp_path, tokenizer, monkeypatch):
    rows = np.random.default_rng(0).normal(size=(6, 5))
    path = tmp_path / "embeddings.npy"
    np.save(path, rows)
    reads, load = [], np.load

    def counted(file, *args, **kwargs):
        reads.extend([file] if str(file) == str(path) else [])
        return load(file, *args, **kwargs)

    monkeypatch.setattr(np, "load", counted)
    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, vip_embeddings=str(path), **VIP)
    trainer.train()
    assert np.array_equal(trainer.vip.embeddings, rows)
    # Checked when the trainer is built, and that array is the one the run uses: the file is read once
    assert len(reads) == 1


@pytest.mark.parametrize("overrides, message", [
    ({"vip_rule": "rloo"}, "^vip_rule='rloo' is read only by budget_allocator='vip'"),
    ({**VIP, "probe_generations": 2}, "^probe_generations=2 is never read under budget_allocator='vip' in one shot.* "
                                      "Remove it, or set rounds_generations for rounds until mixed"),
    ({**VIP, "budget_token_cap": 1.0}, "^budget_token_cap=1.0 is never read under budget_allocator='vip'.* or choose "
                                       "'knapsack' or 'coba' for it"),
    ({**VIP, "rounds_generations": 2, "pass_rate_prior_column": "p"},
     "^pass_rate_prior_column='p' is never read under budget_allocator='vip' with rounds until mixed"),
    ({**VIP, "rounds_max": 2}, "^rounds_max=2 is never read under budget_allocator='vip' in one shot.* turn rounds "
                               "until mixed on with rounds_generations"),
    ({**VIP, "dynamic_sampling": True}, "^dynamic_sampling=True .* runs with budget_allocator='uniform' only"),
    ({**VIP, "prompt_sampling": "value"}, "^prompt_sampling='value' chooses"),
    ({**VIP, "vip_length_scale": 0}, "^vip_length_scale must be a finite number above 0"),
    ({**VIP, "vip_fit": "last"}, "^vip_fit must be 'tracked' .* or 'release'"),
    ({"vip_fit": "release"}, "^vip_fit='release' is read only by budget_allocator='vip'"),
    ({**VIP, "vip_max_observed": 0}, "^vip_max_observed must be a whole number of at least 1"),
    ({**VIP, "vip_embeddings": "minilm"}, "^vip_embeddings must be 'policy'"),
    ({**VIP, "vip_embeddings": "missing.npy"}, "^vip_embeddings='missing.npy' is not a file"),
    ({**VIP, "vip_solver": "exact", "vip_rule": "grpo"}, "^budget_min_generations=2 is too low for the exact solver"),
    ({**VIP, "vip_solver": "newton"}, "^vip_solver must be one of slsqp, exact"),
    ({**VIP, "budget_max_generations": 3, "num_generations": 2}, "^budget_max_generations=3 is below 4: .* Raise "
                                                                 "budget_max_generations to 4 or more"),
    ({**VIP, "num_generations": 3, "per_device_train_batch_size": 6}, "^num_generations=3 gives .* 2 prompts fewer "
                                                                      "than 4 rollouts each, and its 6 rollouts"),
    ({**VIP, "num_generations": 2, "per_device_train_batch_size": 6}, "^num_generations=2 .* Raise num_generations to "
                                                                      "4 or more, or choose a generation batch size"),
    ({**VIP, "num_generations": 5, "per_device_train_batch_size": 10, "budget_max_generations": 8},
     "^the generation batch's 10 rollouts are 1 x budget_max_generations=8 plus 2"),
])
def test_bad_vip_settings_are_refused_with_the_fix(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(**config_kwargs(tmp_path, **overrides))


@pytest.mark.parametrize("embeddings, message", [
    (np.zeros((5, 3)), "holds an array of shape \\(5, 3\\); it needs a row per training dataset row \\(6\\)"),
    (np.zeros(6), "holds an array of shape \\(6,\\); it needs a row per training dataset row \\(6\\)"),
    (np.where(np.arange(18).reshape(6, 3) == 7, np.nan, 1.0), "holds NaN or infinity \\(row 2 first\\)"),
])
def test_a_bad_embeddings_file_is_refused_when_the_trainer_is_built(tmp_path, tokenizer, embeddings, message):
    np.save(tmp_path / "embeddings.npy", embeddings)
    with pytest.raises(ValueError, match=f"^vip_embeddings='.*embeddings.npy' {message}"):
        make_trainer(tmp_path, tokenizer, max_steps=1, vip_embeddings=str(tmp_path / "embeddings.npy"), **VIP)


def test_a_vip_allocator_object_is_checked_against_the_batch_when_the_trainer_is_built(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="^num_generations=3 gives the generation batch's 2 prompts fewer than 4"):
        make_trainer(tmp_path, tokenizer, num_generations=3, per_device_train_batch_size=6,
                     allocator=VIPAllocator(2, 8, rule="grpo"))
    with pytest.raises(ValueError, match="^the generation batch's 10 rollouts are 1 x the VIPAllocator's "
                                         "max_generations=8 plus 2"):
        make_trainer(tmp_path, tokenizer, num_generations=5, per_device_train_batch_size=10,
                     allocator=VIPAllocator(2, 8, rule="grpo"))


def test_the_release_fit_without_recorded_visits_fits_on_none(tmp_path):
    # A resume from a checkpoint without the stage's file: the tracker holds rates, the stage no visits. Its first fit
    # conditions on nothing (the prior), not on every tracked rate; the next one on the batch it then records.
    from trl_budget.tracker import CapabilityTracker
    from trl_budget.vip_stage import VIPStage

    embeddings, keys = np.random.default_rng(0).normal(size=(6, 3)), [f"p{index}" for index in range(6)]
    tracker = CapabilityTracker()
    tracker.update(np.repeat(keys, 2), np.tile([1.0, 0.0, 1.0, 1.0], 3))  # rates 1/2 and 1 by turns
    stage = VIPStage(dict(length_scale=0.4, prior_mean=-5.0, max_observed=4096, carry_mean=True))
    stage.keys, stage.embeddings, stage.last_visit = keys, embeddings, np.full(6, -1)  # as `prepare` leaves them
    assert np.allclose(stage.predicted_rates(keys, tracker), 1.0 / (1.0 + np.exp(5.0)))
    stage.visited(keys[:2], np.array([4, 4]))
    rates = tracker.pass_rates(keys[:2])
    expected = dense_carried_means(embeddings, [(np.arange(2), rates)])[0]
    assert np.allclose(stage.predicted_rates(keys, tracker), 1.0 / (1.0 + np.exp(-expected)))
