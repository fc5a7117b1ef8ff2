"""vLLM generation paths.

vLLM needs a GPU, so on CPU the server path is exercised at TRL's client boundary: `VLLMClient` (the HTTP client that
talks to `trl vllm-serve`) is replaced by a stand-in that records each request and returns completions in the client's
format; everything above it — TRL's `VLLMGeneration.generate`, the trainer, weight syncs — is the real code. The
GPU-only tests run where CUDA and vLLM exist.
"""

import importlib.util

import numpy as np
import pytest
import torch
from helpers import assert_parameters_changed, config_kwargs, make_dataset, parameters_of, parity_reward

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer
from trl_budget.demo.tiny import build_tiny_model


class RecordingVLLMClient:
    """Stands in for trl.generation.vllm_client.VLLMClient; keeps the requests, answers like the real server."""

    requests = []
    weight_syncs = 0

    def __init__(self, base_url=None, group_port=None, connection_timeout=None, **kwargs):
        self.rng = np.random.default_rng(0)

    def init_communicator(self, device=None):
        pass

    def update_named_params(self, metadata, params):
        RecordingVLLMClient.weight_syncs += 1
        for _ in params:
            pass

    def reset_prefix_cache(self):
        pass

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def close_communicator(self):
        pass

    def generate(self, prompts, features=None, n=1, max_tokens=16, **sampling):
        RecordingVLLMClient.requests.append({"prompts": [tuple(p) for p in prompts], "n": n, "max_tokens": max_tokens})
        # Half the prompts always get 2-token answers (pass rate 0 or 1 under the parity reward), half random lengths.
        lengths = [2 if sum(ids) % 2 else int(self.rng.integers(1, max_tokens + 1)) for ids in prompts for _ in range(n)]
        completions = [self.rng.integers(3, 10, length).tolist() for length in lengths]
        return {
            "prompt_ids": prompts,
            "completion_ids": completions,
            "logprobs": [[[-1.0] for _ in ids] for ids in completions],
            "logprob_token_ids": [[[t] for t in ids] for ids in completions],
        }


class PlanRecordingTrainer(BudgetGRPOTrainer):
    plans = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.plans.append(self.last_rollout_plan)
        return output


@pytest.fixture
def server_trainer(tmp_path, tokenizer, monkeypatch):
    """Builds a trainer in vLLM server mode whose client is the recording stand-in."""
    import trl.generation.vllm_generation as vllm_generation

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    monkeypatch.setattr(vllm_generation, "VLLMClient", RecordingVLLMClient)
    RecordingVLLMClient.requests.clear()
    PlanRecordingTrainer.plans.clear()

    def build(**options):
        args = BudgetGRPOConfig(**config_kwargs(tmp_path, use_vllm=True, vllm_mode="server", **options))
        return PlanRecordingTrainer(model=build_tiny_model(tokenizer), reward_funcs=parity_reward, args=args,
                                    train_dataset=make_dataset(), processing_class=tokenizer)

    return build


def test_server_mode_asks_for_each_prompts_own_count(server_trainer, tokenizer):
    # pass_rate_min_rollouts=1: prompts are trusted after one visit, so that budgets vary within these few steps.
    trainer = server_trainer(max_steps=6, knapsack_fallback=False, pass_rate_min_rollouts=1)
    before = parameters_of(trainer)
    trainer.train()

    requests, plans = RecordingVLLMClient.requests, PlanRecordingTrainer.plans
    assert len(requests) == len(plans) == 6  # one server request per generation batch
    for request, plan in zip(requests, plans):
        assert request["n"] == 1 and request["max_tokens"] == 4
        prompt_ids = [tuple(tokenizer(row["prompt"])["input_ids"]) for row in plan.prompts]
        expected = [ids for ids, count in zip(prompt_ids, plan.counts) for _ in range(count)]
        assert request["prompts"] == expected  # each prompt exactly its allocated number of times
    assert any(len(set(plan.counts.tolist())) > 1 for plan in plans)
    assert RecordingVLLMClient.weight_syncs >= 1
    assert all(np.isfinite(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry)
    assert_parameters_changed(before, trainer)


@pytest.mark.parametrize("mode", ["server", "colocate"])
def test_a_vllm_seed_is_refused_before_it_makes_every_rollout_the_same(tmp_path, tokenizer, monkeypatch, mode):
    import trl.generation.vllm_generation as vllm_generation

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    args = BudgetGRPOConfig(**config_kwargs(tmp_path, use_vllm=True, vllm_mode=mode, generation_kwargs={"seed": 7}))
    with pytest.raises(ValueError, match=r"generation_kwargs\['seed'\]=7 .* same completion"):
        BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=parity_reward, args=args,
                          train_dataset=make_dataset(), processing_class=tokenizer)


REINFORCE_ADA = {"budget_allocator": "reinforce_ada", "reinforce_ada_samples_per_round": 4}


@pytest.mark.parametrize(
    "overrides, trainer_options, message",
    [
        ({"budget_allocator": "knapsack"}, {}, r"^rounds_prompt_by_prompt=True is read only by a rule that generates "
                                               r"each batch in rounds decided prompt by prompt: .*this run's allocator "
                                               r"is KnapsackAllocator.* Set rounds_prompt_by_prompt=False"),
        ({"budget_allocator": "uniform", "dynamic_sampling": True}, {}, r"^rounds_prompt_by_prompt=True is "
                                                                               r"read only .* and dynamic sampling"),
        ({**REINFORCE_ADA, "use_vllm": False}, {}, r"needs use_vllm=True; this run has use_vllm=False"),
        ({"rounds_generations": 2, "vllm_enable_sleep_mode": True}, {},
         r"in vllm_mode='colocate' .* stays awake between them, so it needs vllm_enable_sleep_mode=False"),
        ({"rounds_generations": 2, "vllm_tensor_parallel_size": 2}, {}, r"needs vllm_tensor_parallel_size=1"),
        (REINFORCE_ADA, {"tools": [lambda x: x]}, r"single-turn completions .* was given tools"),
    ],
)
def test_rounds_prompt_by_prompt_are_refused_where_they_cannot_run(tmp_path, tokenizer, monkeypatch, overrides,
                                                                    trainer_options, message):
    import trl.generation.vllm_generation as vllm_generation

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    settings = {"use_vllm": True, "vllm_mode": "colocate", "rounds_prompt_by_prompt": True, **overrides}
    args = BudgetGRPOConfig(**config_kwargs(tmp_path, **settings))
    with pytest.raises(ValueError, match=message):
        BudgetGRPOTrainer(model=build_tiny_model(tokenizer), reward_funcs=parity_reward, args=args,
                          train_dataset=make_dataset(), processing_class=tokenizer, **trainer_options)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({**REINFORCE_ADA, "reinforce_ada_samples_per_round": 5},
         r"this run has reinforce_ada_samples_per_round=5\. Choose multiples"),
        ({"rounds_generations": 3}, r"this run has rounds_generations=3\."),
        ({"rounds_generations": 2, "rounds_first_generations": 3, "budget_max_generations": 7},
         r"this run has rounds_first_generations=3, budget_max_generations=7\."),
        ({"rounds_generations": 2, "budget_min_generations": 3, "budget_max_generations": 9},
         r"this run has budget_min_generations=3, budget_max_generations=9\."),
    ],
)
def test_rounds_prompt_by_prompt_on_several_processes_are_refused_where_a_round_cannot_deal_evenly(
        tmp_path, monkeypatch, overrides, message):
    from trl_budget.setup_checks import check_per_prompt_rounds

    args = BudgetGRPOConfig(**config_kwargs(tmp_path, use_vllm=True, vllm_mode="colocate",
                                            rounds_prompt_by_prompt=True, **overrides))
    monkeypatch.setattr(BudgetGRPOConfig, "world_size", property(lambda self: 2))  # as under a 2-process launch
    with pytest.raises(ValueError, match=r"^rounds_prompt_by_prompt=True on 2 processes deals each prompt's round "
                                         r"evenly .*multiple of 2; " + message):
        check_per_prompt_rounds(args, args.make_allocator(), {})
    even = {**overrides, **{name: value + value % 2 for name, value in overrides.items() if isinstance(value, int)}}
    args = BudgetGRPOConfig(**config_kwargs(tmp_path, use_vllm=True, vllm_mode="colocate",
                                            rounds_prompt_by_prompt=True, **even))
    check_per_prompt_rounds(args, args.make_allocator(), {})  # every amount even: accepted


gpu_and_vllm = pytest.mark.skipif(
    not (torch.cuda.is_available() and importlib.util.find_spec("vllm")), reason="needs a CUDA GPU and vLLM"
)


@pytest.mark.gpu
@pytest.mark.vllm
@gpu_and_vllm
def test_colocate_mode_on_gpu(tmp_path, tokenizer):
    build_tiny_model(tokenizer).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    args = BudgetGRPOConfig(
        **config_kwargs(tmp_path / "out", max_steps=4, use_cpu=False, bf16=True, use_vllm=True,
                        vllm_mode="colocate", vllm_gpu_memory_utilization=0.2, pass_rate_min_rollouts=1)
    )
    trainer = BudgetGRPOTrainer(
        model=str(tmp_path / "model"), reward_funcs=parity_reward, args=args, train_dataset=make_dataset(),
        processing_class=tokenizer,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "budget/rollouts_mean" in entry]
    assert len(logs) == 4 and any(entry["budget/rollouts_std"] > 0 for entry in logs)


def test_server_mode_with_a_probe_stage_sends_two_requests_per_batch(server_trainer, tokenizer):
    trainer = server_trainer(max_steps=4, probe_generations=2)
    trainer.train()
    requests, plans = RecordingVLLMClient.requests, PlanRecordingTrainer.plans
    assert len(plans) == 4 and len(requests) == 2 * 4  # the probe, then the rest, for every generation batch
    for (probe, rest), plan in zip(zip(requests[::2], requests[1::2]), plans):
        prompt_ids = [tuple(tokenizer(row["prompt"])["input_ids"]) for row in plan.prompts]
        assert probe["n"] == rest["n"] == 1
        assert probe["prompts"] == [ids for ids in prompt_ids for _ in range(2)]
        assert rest["prompts"] == [ids for ids, count in zip(prompt_ids, plan.counts) for _ in range(count - 2)]
