"""SPO and prompt sampling against inputs found to break them: each test failed before its fix."""

import numpy as np
from helpers import make_dataset, make_trainer

SPO = dict(budget_allocator="spo", max_generations=128, per_device_train_batch_size=8)


def test_kl_adaptive_rho_scores_truncated_completions_that_keep_no_token(tmp_path, tokenizer):
    # mask_truncated_completions=True masks a truncated completion out entirely: its kept response has no token. The
    # forward pass of the drift must still take integer ids (an empty list would make the whole batch float) and give
    # such a response no log-probability, so its drift is 0.
    trainer = make_trainer(tmp_path, tokenizer, max_steps=3, mask_truncated_completions=True, max_completion_length=2,
                           dataset=make_dataset(6), **SPO)
    trainer.train()
    kept = trainer.spo.tracker.responses.values()
    assert any(not response["completion_ids"] for response in kept)  # the case under test happened
    assert all(len(response["log_probs"]) == len(response["completion_ids"]) for response in kept)
    assert [entry["spo/D"] for entry in trainer.state.log_history if "spo/D" in entry]  # settled twice


def test_the_drift_forward_pass_takes_completions_that_are_all_empty(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, max_steps=1, dataset=make_dataset(6), **SPO)
    log_probs = trainer._policy_log_probs([[1, 2, 3], [4, 5]], [[], []])
    assert [array.shape for array in log_probs] == [(0,), (0,)]
    mixed = trainer._policy_log_probs([[1, 2, 3], [4, 5]], [[], [6, 7]])
    assert [array.shape for array in mixed] == [(0,), (2,)] and np.all(mixed[1] < 0)


def test_clip_lower_is_refused_where_nothing_reads_it(tmp_path):
    # spo_rho_clip_lower is read by KL-adaptive rho (its lower clip) and by the prior from offline scores (its weight
    # 1 / (1 - clip_lower)); with a constant rho and no offline scores it would be ignored.
    import pytest

    from helpers import config_kwargs
    from trl_budget import BudgetGRPOConfig

    with pytest.raises(ValueError, match="^spo_rho_clip_lower=0.5 is read only by KL-adaptive rho"):
        BudgetGRPOConfig(**config_kwargs(tmp_path, advantage_baseline="spo", spo_rho=0.9, spo_rho_clip_lower=0.5))
    for readers in ({"spo_rho": "kl"}, {"spo_rho": 0.9, "spo_offline_sampling": True}):
        args = BudgetGRPOConfig(**config_kwargs(tmp_path, advantage_baseline="spo", spo_rho_clip_lower=0.5, **readers))
        assert args.make_spo_tracker().clip_lower == 0.5
