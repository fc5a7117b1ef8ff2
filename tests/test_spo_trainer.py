"""SPO in the trainer: one rollout a prompt drawn by SPO's weights, advantages against each prompt's estimate from
before the batch normalized over the batch, the tracker updated under the policy that trained on the batch (constant
rho replayed by hand, KL-adaptive rho from the drift the trainer measured), its prior from offline scores, resume,
and the settings and inputs it refuses."""

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers import grpo_kwargs, make_dataset, make_trainer, parity_reward
from test_probe import RowRecorder

from trl_budget import BudgetGRPOConfig, SPOTracker, prompt_key
from trl_budget.demo.tiny import build_tiny_model
from trl_budget.spo import forgetting_factor, response_drift, spo_advantages, spo_prior

SPO = dict(budget_allocator="spo", budget_max_generations=128, per_device_train_batch_size=8)


def replayed_advantages(recorder, rho: float, rows: str = "last"):
    """Every step's advantages by hand: each row's reward against its prompt's p before the step, replayed on a fresh
    tracker with the same constant rho (and rule for a prompt's rows); normalized over the step's rows."""
    tracker = SPOTracker(rho=rho, rows=rows)
    expected = []
    for plan, _, _ in recorder.steps:
        rows = np.repeat(plan.keys, plan.counts)
        expected.append(spo_advantages(plan.rewards, tracker.p_hats(rows))[plan.slot_order])
        tracker.update(rows, plan.rewards, rho)
    return expected, tracker


def test_an_spo_run_trains_one_rollout_a_prompt_against_each_prompts_estimate_before_the_batch(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, max_steps=6, spo_rho=0.875, dataset=make_dataset(6), **SPO)
    recorder = RowRecorder(trainer)
    trainer.train()
    assert trainer.advantage_baseline == "spo" and trainer.args.resolved_prompt_sampling() == "spo"
    expected, replayed = replayed_advantages(recorder, 0.875)
    revisited = 0
    for step, (plan, advantages, rows) in enumerate(recorder.steps):
        assert rows == 8 and (plan.counts == 1).all() and len(plan.keys) == 8  # 8 draws from 6 prompts: repeats
        np.testing.assert_allclose(advantages.numpy(), expected[step], rtol=1e-5, atol=1e-6)
        revisited += sum(key in set().union(*(set(p.keys) for p, _, _ in recorder.steps[:step])) for key in plan.keys)
    assert revisited > 0  # the estimates moved between visits: the test compares more than Beta(0.5, 0.5)
    trainer.spo.settle(trainer.policy_passes.log_probs, trainer._metrics["train"])  # the last batch's rows
    assert trainer.spo.tracker.alpha == pytest.approx(replayed.alpha) and trainer.spo.tracker.beta == pytest.approx(
        replayed.beta)
    logged = [entry for entry in trainer.state.log_history if "spo/p_hats" in entry]
    assert len(logged) == 6 and all("spo/adv_after_norm/p50" in entry for entry in logged)


def test_a_trainer_given_budget_allocator_spo_trains_spo_and_says_what_it_changes(tmp_path, tokenizer, caplog):
    import logging

    from trl_budget import BudgetGRPOTrainer

    trainer = BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=parity_reward,
                                args=BudgetGRPOConfig(**grpo_kwargs(tmp_path, max_steps=2), budget_allocator="spo"),
                                train_dataset=make_dataset(), processing_class=tokenizer)
    recorder = RowRecorder(trainer)
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer.train()
    lines = [record for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert len(lines) == 1 and lines[0].levelname == "WARNING"
    line = lines[0].getMessage()
    assert "(budget_allocator='spo')" in line and "drawn by SPO's weights" in line and "baseline 'spo'." in line
    assert "1 rollout for each of the generation batch's 8 prompts, in one shot;" in line
    assert line.count("num_generations=4 is not read") == 1
    assert ("each generation batch trains 8 distinct prompts, 4 times GRPOTrainer's, one rollout each, so an epoch "
            "(num_train_epochs) visits every prompt about 4 times") in line
    assert "TRL's frac_reward_zero_std is not logged" in line
    assert line.endswith("To train exactly as GRPOTrainer, set budget_allocator='uniform', "
                         "advantage_baseline='group', and remove the settings only this rule reads.")
    assert not any("frac_reward_zero_std" in entry for entry in trainer.state.log_history)
    for plan, _, _ in recorder.steps:  # 8 rollouts a step, as GRPO's batch: one for each of 8 prompts
        assert plan.counts.tolist() == [1] * 8
    assert trainer.spo is not None and len(trainer.spo.tracker) > 0


def test_kl_adaptive_rho_comes_from_the_drift_of_each_prompts_last_response(tmp_path, tokenizer):
    # Two prompts, four rollouts each, every batch: each visit after the first measures the drift of the prompt's last
    # response between the policy that last trained on it and the policy now.
    trainer = make_trainer(tmp_path, tokenizer, max_steps=4, advantage_baseline="spo", budget_allocator="uniform",
                           dataset=make_dataset(2), learning_rate=1e-2)
    calls, original = [], trainer.policy_passes.log_probs

    def recording(prompts, completions):
        log_probs = original(prompts, completions)
        calls.append((prompts, completions, log_probs))
        return log_probs

    trainer.policy_passes.log_probs = recording
    before = {}
    original_update = trainer.spo.tracker.update

    def update(keys, rewards, rhos):
        before.setdefault(len(before), (list(keys), np.array(rewards), np.array(rhos),
                                        dict(trainer.spo.tracker.responses)))
        original_update(keys, rewards, rhos)

    trainer.spo.tracker.update = update
    trainer.train()
    assert len(calls) == 3  # settled before batches 2, 3 and 4
    for call, (keys, _, rhos, kept) in zip(calls, before.values()):
        prompts, completions, log_probs = call
        seen = [key for key in dict.fromkeys(keys) if key in kept]
        drift = {key: 0.0 for key in dict.fromkeys(keys)}
        for key, now in zip(seen, log_probs[: len(seen)]):  # the kept responses scored again come first
            assert completions[seen.index(key)] == kept[key]["completion_ids"]
            drift[key] = response_drift(np.array([kept[key]["log_probs"]]), now[None], np.ones((1, now.size)))[0]
        expected, _ = forgetting_factor(np.array([drift[key] for key in keys]), 0.875)
        np.testing.assert_allclose(rhos, expected, rtol=1e-12)
    assert any(d > 0 for d in (response_drift(np.array([k["log_probs"]]), n[None], np.ones((1, n.size)))[0]
                               for (_, _, ls), (_, _, _, kp) in zip(calls, before.values())
                               for k, n in zip(kp.values(), ls)))


def test_the_prior_comes_from_an_offline_values_file(tmp_path, tokenizer):
    dataset = make_dataset(4)
    scores = {row["prompt"]: [1, 0, 1, 1, 0, 0, 0, 1][: 2 + i] for i, row in enumerate(dataset)}
    path = tmp_path / "offline.json"
    path.write_text(json.dumps(scores))
    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, spo_offline_values=str(path), spo_offline_n=4,
                           dataset=dataset, **SPO)
    tracker = trainer.spo.tracker
    for row in dataset:  # the tracker keys a prompt by its content's digest; the file by its text
        expected = spo_prior(scores[row["prompt"]], 4, 0.875, np.random.default_rng(0))
        key = prompt_key(row["prompt"])
        assert (tracker.alpha[key], tracker.beta[key]) == pytest.approx(expected)
    trainer.train()


def test_the_prior_comes_from_a_dataset_column(tmp_path, tokenizer):
    dataset = make_dataset(4).add_column("scores", [[1, 1], [0, 0], [1, 0], []])
    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, spo_offline_column="scores", spo_offline_n=2,
                           dataset=dataset, **SPO)
    p_hats = trainer.spo.tracker.p_hats([prompt_key(row["prompt"]) for row in dataset])
    np.testing.assert_allclose(p_hats, [2.5 / 3, 0.5 / 3, 1.5 / 3, 0.5 / 3])
    trainer.train()


@pytest.mark.parametrize(
    "content, message",
    [(None, "spo_offline_values=.* cannot be read \\(FileNotFoundError"),
     ("{not json", "cannot be read \\(JSONDecodeError"),
     ("[1, 2]", "holds a list; it must be a JSON object"),
     ("missing", "1 of the 4 training prompts have no offline scores in .*, the first: "),
     ("bad", "are 'x'; they must be a list of finite numbers")],
)
def test_offline_values_that_cannot_give_every_prompt_a_prior_are_refused_before_the_model_loads(
        tmp_path, tokenizer, content, message):
    dataset = make_dataset(4)
    path = tmp_path / "offline.json"
    scores = {row["prompt"]: [1, 0] for row in dataset}
    if content == "missing":
        del scores[dataset[2]["prompt"]]
        content = json.dumps(scores)
    elif content == "bad":
        scores[dataset[1]["prompt"]] = "x"
        content = json.dumps(scores)
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        make_trainer(tmp_path, tokenizer, spo_offline_values=str(path), dataset=dataset, model="not-loaded", **SPO)


def test_rewards_outside_the_unit_interval_are_refused(tmp_path, tokenizer):
    def doubled(completions, answer, **kwargs):
        return [2.0 * reward for reward in parity_reward(completions, answer)]

    trainer = make_trainer(tmp_path, tokenizer, max_steps=2, reward_funcs=doubled, **SPO)
    with pytest.raises(ValueError, match="advantage_baseline='spo' counts each weighted reward as a share of a success "
                                         ".* rewards must lie in \\[0, 1\\], and a rollout's weighted reward is 2.0"):
        trainer.train()
    # Under SPO's allocator the fix names the setting that leaves it; the name chosen is not called the default.
    from trl_budget import BudgetGRPOTrainer

    spo = BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=doubled, train_dataset=make_dataset(),
                            args=BudgetGRPOConfig(**grpo_kwargs(tmp_path / "spo", max_steps=1), budget_allocator="spo"),
                            processing_class=tokenizer)
    with pytest.raises(ValueError, match=r"with spo_reward_range=\[low, high\], or train GRPO's groups, which take "
                                         r"rewards on any scale: remove budget_allocator='spo' \(the default is "
                                         r"'uniform'\)\.$") as refused:
        spo.train()
    assert "(the default)" not in str(refused.value)


def test_spos_baseline_inside_groups_and_its_sampling_under_another_allocator(tmp_path, tokenizer):
    # The ablations: SPO's baseline with GRPO's groups of 4 (no prompt sampling), and SPO's sampling under Knapsack RL
    # with GRPO's baseline.
    trainer = make_trainer(tmp_path / "baseline", tokenizer, max_steps=3, advantage_baseline="spo",
                           budget_allocator="uniform", spo_rho=0.5)
    recorder = RowRecorder(trainer)
    trainer.train()
    assert trainer.prompt_sampler is None
    expected, _ = replayed_advantages(recorder, 0.5)
    for (plan, advantages, _), hand in zip(recorder.steps, expected):
        assert (plan.counts == 4).all()
        np.testing.assert_allclose(advantages.numpy(), hand, rtol=1e-5, atol=1e-6)
    # Every row of a group updating the estimate: the replay with rows="all" gives the same advantages and estimates.
    every_row = make_trainer(tmp_path / "every_row", tokenizer, max_steps=3, advantage_baseline="spo",
                             budget_allocator="uniform", spo_rho=0.5, spo_update_rows="all",
                             dataset=make_dataset(2))  # both prompts in every batch: estimates from earlier visits
    recorder = RowRecorder(every_row)
    every_row.train()
    expected, replayed = replayed_advantages(recorder, 0.5, rows="all")
    last_row_only, _ = replayed_advantages(recorder, 0.5)
    assert not all(np.allclose(a, b) for a, b in zip(expected, last_row_only))  # the two rules differ here
    for (_, advantages, _), hand in zip(recorder.steps, expected):
        np.testing.assert_allclose(advantages.numpy(), hand, rtol=1e-5, atol=1e-6)
    every_row.spo.settle(every_row.policy_passes.log_probs, every_row._metrics["train"])
    assert every_row.spo.tracker.alpha == pytest.approx(replayed.alpha)
    assert sum(every_row.spo.tracker.visits.values()) == 3 * 8  # 3 batches of 8 rows, every one counted
    sampled = make_trainer(tmp_path / "sampled", tokenizer, max_steps=3, prompt_sampling="spo",
                           prompt_sampling_pool=4, dataset=make_dataset(8))
    sampled.train()
    assert sampled.advantage_baseline == "group" and sampled.prompt_sampler.stream.drawn == 3


def test_an_spo_run_resumes_exactly(tmp_path, tokenizer):
    from datasets import concatenate_datasets

    # A constant learning rate: the part run's schedule (built for 2 steps) then matches the full run's, so the resumed
    # policy is the uninterrupted one bit for bit, and so are the KL-adaptive log-probabilities it keeps.
    options = dict(dataset=concatenate_datasets([make_dataset(3)] * 2), save_strategy="steps", save_steps=2,
                   prompt_sampling_pool=4, lr_scheduler_type="constant", learning_rate=1e-2, **SPO)
    full = make_trainer(tmp_path / "full", tokenizer, max_steps=4, **options)
    full.train()
    make_trainer(tmp_path / "part", tokenizer, max_steps=2, **options).train()
    assert {"budget_spo_state.json", "budget_prompt_sampler.json"} <= {p.name for p in
                                                                       (tmp_path / "part" / "checkpoint-2").iterdir()}
    resumed = make_trainer(tmp_path / "part", tokenizer, max_steps=4, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "part" / "checkpoint-2"))
    assert resumed.spo.state_dict() == full.spo.state_dict()
    assert resumed.prompt_sampler.state_dict() == full.prompt_sampler.state_dict()
    assert resumed.tracker.state_dict() == full.tracker.state_dict()


@pytest.mark.parametrize(
    "overrides, message",
    [({"spo_rho": "0.9"}, "^spo_rho=0.9 is read only by SPO's tracker"),
     ({"spo_rollouts_per_prompt": 2}, "^spo_rollouts_per_prompt=2 is read only under budget_allocator='spo'"),
     ({"budget_allocator": "spo", "budget_min_generations": 1}, "^budget_min_generations=1 is never read under "
                                                          "budget_allocator='spo'"),
     ({"budget_allocator": "spo", "spo_offline_n": 4}, "^spo_offline_n=4 is read only with offline scores"),
     ({"prompt_sampling_pool": 4}, "^prompt_sampling_pool=4 is read only with prompt sampling"),
     ({"prompt_sampling": "thompson"}, "^prompt_sampling='thompson' is not a rule"),
     ({"budget_allocator": "spo", "spo_rho": "fast"}, "^spo_rho must be 'kl'"),
     ({"budget_allocator": "spo", "spo_rho_clip_lower": 1.0}, "^spo_rho_clip_lower must be a number in"),
     ({"budget_allocator": "spo", "spo_offline_values": "a.json", "spo_offline_column": "s"},
      "spo_offline_values='a.json' and spo_offline_column='s' all give SPO's offline scores; set one of them"),
     ({"budget_allocator": "spo", "spo_offline_sampling": True, "spo_offline_n": 0},
      "^spo_offline_sampling=True samples spo_offline_n rollouts of every prompt, but spo_offline_n=0"),
     ({"spo_offline_sampling": True}, "^spo_offline_sampling=True is read only by SPO's tracker"),
     ({"spo_update_rows": "all"}, "^spo_update_rows='all' is read only by SPO's tracker"),
     ({"budget_allocator": "spo", "spo_update_rows": "mean"}, "^spo_update_rows must be 'last'"),
     ({"budget_allocator": "spo", "advantage_baseline": "group"}, "with spo_rollouts_per_prompt=1 trains one "
                                                                  "rollout a prompt, and advantage_baseline='group'"),
     ({"budget_allocator": "spo", "advantage_baseline": "all_rollouts"}, "every advantage would be 0"),
     ({"budget_allocator": "spo", "loss_weighting": "prompt"}, "would only scale every advantage by a "
                                                                       "constant"),
     ({"budget_allocator": "spo", "spo_rollouts_per_prompt": 3}, "does not divide generation_batch_size=8"),
     ({"advantage_baseline": "spo", "multi_objective_aggregation": "normalize_then_sum"}, "'spo' compares each"),
     ({"budget_allocator": "uniform", "dynamic_sampling": True, "prompt_sampling": "spo"},
      "cannot choose them too")],
)
def test_spo_settings_that_cannot_work_are_refused(tmp_path, overrides, message):
    from helpers import config_kwargs

    kwargs = config_kwargs(tmp_path, **{"budget_max_generations": 128, **overrides})
    with pytest.raises(ValueError, match=message):
        BudgetGRPOConfig(**kwargs)


def test_a_pool_larger_than_the_data_is_refused(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="prompt_sampling_pool=9 candidates per generation batch, but the training "
                                         "dataset has 6 prompts"):
        make_trainer(tmp_path, tokenizer, prompt_sampling_pool=9, model="not-loaded", **SPO)


def test_prompts_keyed_by_text_need_text_or_an_id(tmp_path, tokenizer):
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": [{"type": "text", "text": "1+1="}]}],
                                  "answer": "2"}] * 4)
    path = tmp_path / "offline.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="keys prompts by their text, but a training prompt is"):
        make_trainer(tmp_path, tokenizer, spo_offline_values=str(path), dataset=dataset, model="not-loaded", **SPO)


class RecordedReward:
    """The parity reward, keeping every (prompt, reward) it scored, in order."""

    __name__ = "parity_reward"

    def __init__(self):
        self.scored = []

    def __call__(self, prompts, completions, answer, **kwargs):
        rewards = parity_reward(completions, answer)
        self.scored += list(zip(prompts, rewards))
        return rewards


def test_the_prior_sampled_by_the_run_itself_before_its_first_batch(tmp_path, tokenizer):
    # 6 prompts x 4 rollouts before the first batch (3 generation batches of 8), each prompt's prior from its own 4
    # rewards; TRL's logs of them are taken back out, so the first step logs its own batch alone.
    reward, dataset = RecordedReward(), make_dataset(6)
    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, reward_funcs=reward, spo_offline_sampling=True,
                           spo_offline_n=4, dataset=dataset, **SPO)
    trainer.train()
    prior, batch = reward.scored[:24], reward.scored[24:]
    assert len(batch) == 8
    tracker = trainer.spo.tracker
    assert tracker.default_prior is None and len(tracker.alpha) == len(set(dataset["prompt"]))
    for text in dataset["prompt"]:
        successes = sum(r > 0 for p, r in prior if p == text)
        assert sum(p == text for p, _ in prior) == 4 * dataset["prompt"].count(text)
        expected = spo_prior([1] * successes + [0] * (4 - successes), 4, 0.875, np.random.default_rng(0))
        assert (tracker.alpha[prompt_key(text)], tracker.beta[prompt_key(text)]) == pytest.approx(expected) or \
            dataset["prompt"].count(text) > 1
    first = trainer.state.log_history[0]
    assert first["spo/prior_rollouts"] == 24 and first["reward"] == pytest.approx(np.mean([r for _, r in batch]))


def test_the_prior_counts_every_rollout_it_generated_the_last_batchs_fill_included(tmp_path, tokenizer):
    # 5 prompts x 4 rollouts: 20 scored for the prior, generated in 3 generation batches of 8, the last filled up.
    reward = RecordedReward()
    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, reward_funcs=reward, spo_offline_sampling=True,
                           spo_offline_n=4, dataset=make_dataset(5), **SPO)
    trainer.train()
    assert len(reward.scored) == 24 + 8  # the prior's 3 batches, then the first step's
    assert trainer.state.log_history[0]["spo/prior_rollouts"] == 24


class LogProbPasses:
    """Counts the model's forward passes that score given tokens (TRL hands them labels; generation's steps have
    none): the training loss's, TRL's own passes over a batch and SPO's. The model runs as it is, only counted."""

    def __init__(self, model):
        self.count, self.forward = 0, model.forward
        model.forward = self

    def __call__(self, *args, **kwargs):
        self.count += "labels" in kwargs
        return self.forward(*args, **kwargs)


def test_kl_adaptive_rho_adds_one_forward_pass_a_chunk_of_its_rows_and_a_constant_rho_none(tmp_path, tokenizer):
    # Four steps of 8 prompts drawn from 6, one rollout each: every step trains in one forward pass; KL-adaptive rho
    # scores the kept and the new responses before batches 2, 3 and 4, in chunks of per_device_train_batch_size.
    passes, logs = {}, {}
    for rho in ("kl", 0.875):
        trainer = make_trainer(tmp_path / str(rho), tokenizer, max_steps=4, spo_rho=rho, dataset=make_dataset(6), **SPO)
        passes[rho] = LogProbPasses(trainer.model)
        trainer.train()
        logs[rho] = [entry for entry in trainer.state.log_history if "spo/rho" in entry]
    assert passes[0.875].count == 4 and not any("spo/forward_passes_rows" in entry for entry in logs[0.875])
    rows = [int(entry["spo/forward_passes_rows"]) for entry in logs["kl"]]
    assert len(rows) == 3 and max(rows) > 8  # the revisited prompts' kept responses beside the new ones
    assert passes["kl"].count == 4 + sum(-(-count // 8) for count in rows)


def test_the_prior_pre_pass_skips_trls_passes_over_its_rollouts_and_trains_the_same(tmp_path, tokenizer, monkeypatch):
    # With num_iterations=2 TRL scores every request's rows under the old policy; the prior's 3 generation batches of
    # 8 train no loss, so those 3 passes are skipped: the prior, the tracker after KL-adaptive rho's settle (its
    # estimates and each kept response's log-probs) and the trained weights stay bit for bit those of a run that
    # makes them.
    from contextlib import nullcontext

    from trl_budget import forward_passes

    runs = {}
    for skipped in (True, False):
        if not skipped:
            monkeypatch.setattr(forward_passes, "trl_log_probs_skipped", lambda passes: nullcontext())
        trainer = make_trainer(tmp_path / str(skipped), tokenizer, max_steps=4, num_iterations=2,
                               spo_offline_sampling=True, spo_offline_n=4, dataset=make_dataset(6), **SPO)
        passes = LogProbPasses(trainer.model)
        trainer.train()
        settled = [int(entry["spo/forward_passes_rows"]) for entry in trainer.state.log_history
                   if "spo/forward_passes_rows" in entry]
        runs[skipped] = (passes.count, settled, trainer.spo.tracker.state_dict(), trainer.model.state_dict())
    (kept_count, settled, kept_tracker, kept_weights), (made_count, _, made_tracker, made_weights) = runs.values()
    assert len(settled) == 1  # two generation batches, each trained twice: one settle between them
    assert kept_count == 2 + 4 + -(-settled[0] // 8)  # each batch's old-policy pass, four updates, SPO's pass
    assert made_count == kept_count + 3
    assert json.dumps(kept_tracker, sort_keys=True) == json.dumps(made_tracker, sort_keys=True)
    assert all(torch.equal(kept_weights[name], made_weights[name]) for name in kept_weights)


def test_spo_with_a_rollout_func_credits_every_row_to_its_prompt(tmp_path, tokenizer):
    # The rollout_func writes each completion from its own prompt's digits: a row credited to another prompt, or a
    # kept response of another prompt (KL-adaptive rho scores them again), shows in its first two characters.
    from test_agent import CopyingRollouts, last_digit_parity, misplaced, recording_outputs

    trainer = make_trainer(tmp_path, tokenizer, reward_funcs=last_digit_parity, rollout_func=CopyingRollouts(),
                           max_steps=4, **SPO)
    kept = recording_outputs(trainer)
    trainer.train()
    assert len(kept) == 4 and all((plan.counts == 1).all() for plan, _ in kept)
    assert not misplaced(kept, tokenizer, lambda row: row["prompt"])
    for response in trainer.spo.tracker.responses.values():
        prompt = tokenizer.decode(response["prompt_ids"], skip_special_tokens=True)
        completion = tokenizer.decode(response["completion_ids"], skip_special_tokens=True)
        assert completion[:2] == prompt[0] + prompt[2]


def test_one_rollout_a_prompt_trains_against_the_history_baseline_too(tmp_path, tokenizer):
    # The fix the refusal of a group baseline names: the prompt's earlier visits give the lone rollout its baseline.
    trainer = make_trainer(tmp_path, tokenizer, max_steps=4, advantage_baseline="history", dataset=make_dataset(4),
                           **SPO)
    recorder = RowRecorder(trainer)
    trainer.train()
    assert all((plan.counts == 1).all() for plan, _, _ in recorder.steps)
    assert any((advantages != 0).any() for _, advantages, _ in recorder.steps[1:])


def test_rewards_outside_the_unit_interval_are_refused_wherever_spos_tracker_learns(tmp_path, tokenizer):
    # Before: under SPO's prompt sampling with GRPO's baseline a reward of -1 reached the tracker unchecked: alpha or
    # beta went negative, the sampling weights NaN, the draws silently uniform, and the checkpoint unresumable.
    def penalty(completions, answer, **kwargs):
        return [reward - 1.0 for reward in parity_reward(completions, answer)]

    trainer = make_trainer(tmp_path, tokenizer, max_steps=2, reward_funcs=penalty, prompt_sampling="spo")
    with pytest.raises(ValueError, match="^SPO's tracker counts each weighted reward as a share of a success .* a "
                                         "rollout's weighted reward is -1.0.* or set advantage_baseline and "
                                         "prompt_sampling to rules without SPO's tracker"):
        trainer.train()


@pytest.mark.parametrize("file, edit, message", [
    ("budget_spo_state.json", lambda s: s["pending"]["rewards"].__setitem__(0, 7.0), "'pending' rows must hold"),
    ("budget_spo_state.json", lambda s: s["pending"]["responses"].update(x={"prompt_ids": ["a"],
                                                                            "completion_ids": []}),
     "'pending' rows must hold"),
    ("budget_prompt_sampler.json", lambda s: s["stream"].update(passes=10**30), "holds no stream position"),
    ("budget_prompt_sampler.json", lambda s: s.update(generator={"bit_generator": "PCG64"}),
     "holds a generator state this run cannot use"),
])
def test_a_checkpoint_whose_spo_files_are_broken_is_refused_naming_the_file(tmp_path, tokenizer, file, edit, message):
    # Before: pending rewards outside [0, 1] or malformed ids loaded silently, and a stream position of 10**30 passes
    # was replayed pass by pass for ever.
    options = dict(dataset=make_dataset(6), save_strategy="steps", save_steps=2, **SPO)
    make_trainer(tmp_path, tokenizer, max_steps=2, **options).train()
    path = tmp_path / "checkpoint-2" / file
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=f"{path}.*{message}"):
        make_trainer(tmp_path, tokenizer, max_steps=4, **options).train(resume_from_checkpoint=str(path.parent))


def test_whole_numbers_given_as_floats_or_numpy_integers_train_and_checkpoint(tmp_path, tokenizer):
    # Before: 2.0 failed when the trainer was built, numpy's int64 when the checkpoint's JSON was written.
    for value in (2.0, np.int64(2)):
        trainer = make_trainer(tmp_path / type(value).__name__, tokenizer, max_steps=2, spo_rollouts_per_prompt=value,
                               prompt_sampling_pool=np.int64(4), save_strategy="steps", save_steps=2, **SPO)
        trainer.train()
        assert (trainer.last_rollout_plan.counts == 2).all() and (tmp_path / type(value).__name__ / "checkpoint-2" /
                                                                   "budget_prompt_sampler.json").exists()


def test_an_allocator_object_under_spo_keeps_spos_baseline(tmp_path, tokenizer):
    # Before: the object made the baseline resolve to GRPO's group, and one rollout a prompt trained nothing.
    def one_each(pass_rates, budget, failure_rate=None):
        return np.full(len(pass_rates), budget // len(pass_rates))

    trainer = make_trainer(tmp_path, tokenizer, max_steps=2, allocator=one_each, **SPO)
    recorder = RowRecorder(trainer)
    trainer.train()
    assert trainer.advantage_baseline == "spo" and all((a != 0).any() for _, a, _ in recorder.steps)


def test_every_fix_a_pass_rate_mismatch_names_resumes(tmp_path, tokenizer):
    # An SPO run's checkpoint resumed under Knapsack RL: its tracker was kept with the plain rule. Before, the message
    # named pass_rate_rollout_pool=None, which follows the allocator (16 under Knapsack RL): refused again.
    import re

    options = dict(dataset=make_dataset(6), save_strategy="steps", save_steps=2)
    make_trainer(tmp_path, tokenizer, max_steps=2, **options, **SPO).train()
    with pytest.raises(ValueError, match="other pass-rate settings") as refused:
        make_trainer(tmp_path, tokenizer, max_steps=4, **options).train(
            resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    fixes = dict(re.findall(r"(pass_rate_\w+|failure_rate_window)=(\d+) \(this run", str(refused.value)))
    assert fixes.get("pass_rate_rollout_pool") == "0"
    resumed = make_trainer(tmp_path, tokenizer, max_steps=4, **options, **{k: int(v) for k, v in fixes.items()})
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.state.global_step == 4


def test_offline_values_key_a_conversation_by_its_first_user_message_and_refuse_shared_texts(tmp_path, tokenizer):
    # Before: with a system message every prompt was looked up under the system's text, and all shared one prior.
    from helpers import build_chat_tokenizer

    chat = build_chat_tokenizer()
    rows = [{"prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": q}], "answer": "1"}
            for q in ("1+0=", "2+2=", "3+1=", "4+4=")]
    path = tmp_path / "offline.json"
    path.write_text(json.dumps({"1+0=": [1] * 8, "2+2=": [0] * 8, "3+1=": [1] * 4 + [0] * 4, "4+4=": [0] * 8}))
    from trl_budget.demo.tiny import build_tiny_model

    trainer = make_trainer(tmp_path, chat, model=build_tiny_model(chat), spo_offline_values=str(path),
                           dataset=Dataset.from_list(rows), **SPO)
    p_hats = trainer.spo.tracker.p_hats([prompt_key(row["prompt"]) for row in rows])
    np.testing.assert_allclose(p_hats, [8.5 / 9, 0.5 / 9, 4.5 / 9, 0.5 / 9])
    rows.append({"prompt": [{"role": "system", "content": "be long"}, {"role": "user", "content": "1+0="}],
                 "answer": "1"})
    with pytest.raises(ValueError, match="two different training prompts are both named '1\\+0='"):
        make_trainer(tmp_path, chat, model="not-loaded", spo_offline_values=str(path),
                     dataset=Dataset.from_list(rows), **SPO)


def test_the_pre_pass_leaves_unscored_rollouts_out_of_the_prior(tmp_path, tokenizer):
    # Before: a rollout its reward function could not score (None) counted as a failure.
    def half_unscored(completions, answer, **kwargs):
        return [1.0 if i % 2 else None for i in range(len(completions))]

    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, reward_funcs=half_unscored, spo_offline_sampling=True,
                           spo_offline_n=4, dataset=make_dataset(4), **SPO)
    trainer.train()
    state = trainer.spo.tracker
    for row in make_dataset(4):
        key = prompt_key(row["prompt"])
        scored = 2 * make_dataset(4)["prompt"].count(row["prompt"])  # every other rollout of its 4 (or 8)
        n = min(4, scored)
        assert state.alpha[key] / (state.alpha[key] + state.beta[key]) == pytest.approx((n + 0.5) / (n + 1))


def test_offline_scores_named_on_resume_leave_the_saved_estimates_with_a_warning(tmp_path, tokenizer):
    # Before: spo_offline_sampling=True on resume sampled every prior again over the restored estimates.
    options = dict(dataset=make_dataset(6), save_strategy="steps", save_steps=2, **SPO)
    make_trainer(tmp_path, tokenizer, max_steps=2, **options).train()
    saved = json.loads((tmp_path / "checkpoint-2" / "budget_spo_state.json").read_text())["tracker"]
    resumed = make_trainer(tmp_path, tokenizer, max_steps=3, spo_offline_sampling=True, **options)
    restored = []
    original = resumed.spo.settle
    resumed.spo.settle = lambda *a: (restored.append(dict(resumed.spo.tracker.alpha)), original(*a))
    with pytest.warns(UserWarning, match="carries every prompt.s SPO estimate.* are not used"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert restored[0] == dict(zip(saved["keys"], saved["alpha"]))
    assert not any("spo/prior_rollouts" in entry for entry in resumed.state.log_history)


@pytest.mark.parametrize("options, message", [
    ({"allocator": "knapsack"}, "allocator= takes an allocator object.* set budget_allocator=.knapsack."),
    ({"tracker": object()}, "tracker= takes a CapabilityTracker; got a object"),
])
def test_trainer_objects_of_the_wrong_kind_are_refused(tmp_path, tokenizer, options, message):
    with pytest.raises(ValueError, match=message):
        make_trainer(tmp_path, tokenizer, model="not-loaded", **options)


class PromptsByStep:
    """The parity reward, keeping the prompts each step scored."""

    __name__ = "parity_reward"

    def __init__(self):
        self.steps: dict[int, list[str]] = {}

    def __call__(self, prompts, completions, answer, trainer_state, **kwargs):
        self.steps.setdefault(trainer_state.global_step, []).extend(prompts)
        return parity_reward(completions, answer)


def test_spo_with_a_pool_of_one_batch_trains_trl_samplers_prompts(tmp_path, tokenizer, caplog):
    # SPO's layout and baseline in TRL's sampler's order: a pool of one generation batch's prompts draws every
    # candidate, so each batch holds the prompts GRPOTrainer's sampler brings (two of its batches of 4 prompts here,
    # over two passes of the data), each prompt once a pass, whatever SPO's weights.
    import logging

    from trl import GRPOConfig, GRPOTrainer

    grpo_prompts, spo_prompts = PromptsByStep(), PromptsByStep()
    GRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=[grpo_prompts],
                args=GRPOConfig(**grpo_kwargs(tmp_path / "grpo", num_generations=2, max_steps=8)),
                train_dataset=make_dataset(16), processing_class=tokenizer).train()
    with caplog.at_level(logging.WARNING, logger="trl_budget.trainer"):
        trainer = make_trainer(tmp_path / "spo", tokenizer, reward_funcs=spo_prompts, max_steps=4,
                               prompt_sampling_pool=8, dataset=make_dataset(16), **SPO)
        trainer.train()
    assert trainer.advantage_baseline == "spo" and trainer.args.resolved_prompt_sampling() == "spo"
    for step in range(4):
        trl_batches = grpo_prompts.steps[2 * step] + grpo_prompts.steps[2 * step + 1]
        assert sorted(spo_prompts.steps[step] * 2) == sorted(trl_batches)  # GRPO's: 2 rollouts of each prompt
    passes = [spo_prompts.steps[0] + spo_prompts.steps[1], spo_prompts.steps[2] + spo_prompts.steps[3]]
    assert all(sorted(prompts) == sorted(make_dataset(16)["prompt"]) for prompts in passes)
    [line] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Rollout budget:")]
    assert "; prompts in TRL's sampler's order; advantage baseline 'spo'." in line
