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
