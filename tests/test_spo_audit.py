"""SPO and prompt sampling against inputs found to break them: each test failed before its fix."""

import numpy as np
from helpers import make_dataset, make_trainer

SPO = dict(budget_allocator="spo", budget_max_generations=128, per_device_train_batch_size=8)


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
    log_probs = trainer.policy_passes.log_probs([[1, 2, 3], [4, 5]], [[], []])
    assert [array.shape for array in log_probs] == [(0,), (0,)]
    mixed = trainer.policy_passes.log_probs([[1, 2, 3], [4, 5]], [[], [6, 7]])
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


def test_kl_adaptive_rho_is_refused_for_prompts_with_images_and_a_constant_rho_trains_them(tmp_path):
    # The drift's forward pass scores a kept response from its token ids alone: before, a vision prompt's drift was
    # measured without its image, silently.
    import pytest
    from datasets import Dataset
    from helpers import config_kwargs
    from PIL import Image
    from test_vision import build_tiny_llava, first_token_parity
    from transformers import LlavaForConditionalGeneration, LlavaProcessor

    from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer

    folder = build_tiny_llava(tmp_path / "llava")
    rng = np.random.default_rng(0)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "3+4="}],
                               "image": Image.fromarray((rng.random((28, 28, 3)) * 255).astype("uint8"))}
                              for _ in range(2)])

    def trainer(**options):
        kwargs = config_kwargs(tmp_path / "out", max_steps=2, bf16=False, budget_allocator="spo", budget_max_generations=128,
                               **options)
        kwargs.pop("budget_min_generations")
        return BudgetGRPOTrainer(model=LlavaForConditionalGeneration.from_pretrained(folder),
                                 reward_funcs=first_token_parity, args=BudgetGRPOConfig(**kwargs), train_dataset=data,
                                 processing_class=LlavaProcessor.from_pretrained(folder))

    with pytest.raises(ValueError, match="spo_rho='kl' .* would leave its images out"):
        trainer()
    constant = trainer(spo_rho=0.875)
    constant.train()
    assert constant.state.global_step == 2 and sum(constant.spo.tracker.visits.values()) == 8
