"""Run by test_vllm_engine.py in a process of its own: BudgetGRPOTrainer against a real vLLM engine on CPU.

    engine_run.py MODEL_DIR OUTPUT_DIR                           # colocate mode; writes OUTPUT_DIR/report.json
    engine_run.py MODEL_DIR OUTPUT_DIR spo                       # SPO as released (n = 1, its sampling), colocate
    engine_run.py MODEL_DIR OUTPUT_DIR per-prompt                # Reinforce-Ada's rounds prompt by prompt, colocate
    engine_run.py MODEL_DIR OUTPUT_DIR per-prompt HOST:PORT      # the same, sent to `trl vllm-serve` at HOST:PORT
    engine_run.py MODEL_DIR OUTPUT_DIR vip-per-prompt            # VIP's rounds until mixed prompt by prompt, colocate
    accelerate launch --num_processes 2 engine_run.py MODEL_DIR OUTPUT_DIR per-prompt [HOST:PORT]
                                                                 # the same on 2 processes; writes report-RANK.json

The replacements (see test_vllm_engine.py): in colocate mode the weight sync reloads the parameters in place with
vLLM's `model_runner.reload_weights`, since TRL's per-parameter `model.load_weights` fails on vLLM's CPU linear
layers; in server mode the NCCL weight sync (CUDA only) becomes a counter.
"""

import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parents[1])]  # the tests folder: helpers and this package

import torch  # noqa: E402
import trl.generation.vllm_client as vllm_client  # noqa: E402
import trl.generation.vllm_generation as vllm_generation  # noqa: E402
from helpers import config_kwargs, leave_without_teardown  # noqa: E402
from vllm_engine.copy_task import belongs_to_its_prompt, copy_dataset, misplaced_rows  # noqa: E402

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer  # noqa: E402

SYNCS = []


def server_sync_replacements(syncs: list) -> dict:
    """Server mode's NCCL weight sync (CUDA only) replaced by a counter: `VLLMClient` attribute -> replacement."""
    return {"init_communicator": lambda self, device=None: None,
            "update_named_params": lambda self, metadata, params: syncs.append(sum(1 for _ in params)),
            "close_communicator": lambda self: None}


def recording_requests(sent: list):
    """TRL's `VLLMClient.generate`, recording every request it sends to the server in `sent` as (prompts, n)."""
    generate = vllm_client.VLLMClient.generate

    def recording(self, prompts, *args, **kwargs):
        sent.append((len(prompts), kwargs.get("n", 1)))
        return generate(self, prompts, *args, **kwargs)

    return recording


def reload_in_place(self):
    """TRL's colocate sync, with vLLM's in-place reload for the per-parameter `load_weights` (CPU only)."""
    runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=self._iter_named_params(), is_checkpoint_format=True)
    self.llm.reset_prefix_cache()
    SYNCS.append(1)


class Recorder(BudgetGRPOTrainer):
    plans, misplaced = [], []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            Recorder.plans.append(self.last_rollout_plan)
            Recorder.misplaced.extend(misplaced_rows(self.last_rollout_plan, output, self.processing_class))
        return output


def recording_parity_reward(batches: list):
    """The parity reward, keeping each scored batch's (prompt, completion) pairs in `batches`."""
    def parity_reward(prompts, completions, answer, **kwargs):
        batches.append(list(zip(prompts, completions)))
        return [float(len(completion) % 2 == int(a) % 2) for completion, a in zip(completions, answer)]

    return parity_reward


def colocate_config(output_dir: str, **options) -> BudgetGRPOConfig:
    """The colocated engine's config (with TRL's sync replaced by the in-place reload) and `options`."""
    vllm_generation.VLLMGeneration.sync_weights = reload_in_place
    return BudgetGRPOConfig(**config_kwargs(
        output_dir, use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.1, vllm_max_model_length=64,
        max_completion_length=6, temperature=0.7, learning_rate=1e-4, **options))


def main(model_dir: str, output_dir: str) -> None:
    batches = []
    parity_reward = recording_parity_reward(batches)
    args = colocate_config(output_dir, max_steps=6, per_device_train_batch_size=16, knapsack_fallback=False,
                           pass_rate_min_rollouts=1)
    trainer = Recorder(model=model_dir, reward_funcs=parity_reward, args=args, train_dataset=copy_dataset(),
                       processing_class=None)
    trainer.train()

    plans = Recorder.plans
    follows = all(Counter(p for p, _ in batch) == {row["prompt"]: int(n) for row, n in zip(plan.prompts, plan.counts)}
                  for batch, plan in zip(batches, plans))
    strays = [(p, c) for batch in batches for p, c in batch if not belongs_to_its_prompt(p, c)]
    trainer.vllm_generation.sync_weights()
    report = {
        "steps": trainer.state.global_step, "batches": len(plans), "weight_syncs": len(SYNCS),
        "counts_varied": any(len(set(plan.counts.tolist())) > 1 for plan in plans),
        "rows_follow_plan": follows and len(batches) == len(plans), "strays": strays[:10],
        "misplaced": Recorder.misplaced[:10],
        **greedy_answers(trainer, ["3+4=", "7+1=", "0+9="]),
    }
    Path(output_dir, "report.json").write_text(json.dumps(report))


class PerPromptRecorder(BudgetGRPOTrainer):
    """Each training batch's rounds, how many times TRL scored rows while generating it, and the trained rows whose
    completion is not their credited prompt's."""

    batches, scorings, misplaced, plans = [], [], [], []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:  # Reinforce-Ada's trained rows: each process holds an equal contiguous share of them
            plan = self.last_rollout_plan
            PerPromptRecorder.plans.append(plan)
            mine = plan.slot_order.reshape(self.accelerator.num_processes, -1)[self.accelerator.process_index]
            PerPromptRecorder.misplaced.extend(misplaced_rows(plan, output, self.processing_class, mine))
        return output

    def _generate_rounds(self, rule, prompts):
        PerPromptRecorder.scorings.append(0)
        rounds, trl_rows = super()._generate_rounds(rule, prompts)
        PerPromptRecorder.batches.append(rounds)
        return rounds, trl_rows

    def _scored_rows(self, rows, trl_rows):
        PerPromptRecorder.scorings[-1] += 1
        return super()._scored_rows(rows, trl_rows)


def rounds_the_rule_decides(rounds, settings: dict) -> bool:
    """Whether a fresh Reinforce-Ada rule, deciding round by round on the batch's outcomes, gives every round exactly
    the rollouts the batch got."""
    from trl_budget.allocators.reinforce_ada import ReinforceAda
    from trl_budget.rounds import GeneratedRounds

    rule = ReinforceAda(**settings).round_rule(rounds.processes)
    evidence = GeneratedRounds(rounds.num_prompts, rounds.processes, rounds.rank)
    for generated in rounds.rounds:
        decided = rule.next_round(evidence)
        if decided is None or decided.tolist() != generated.counts.tolist():
            return False
        evidence.add({}, generated.order, generated.counts, generated.rewards, generated.lengths, generated.outcomes)
    return rule.next_round(evidence) is None


def main_per_prompt(model_dir: str, output_dir: str, server: str | None = None) -> None:
    """Reinforce-Ada positive-focused (4 rollouts a round, exit on a success) on all 10 copy prompts a batch, whose
    rewards are scripted by prompt: the rollouts of prompt `a+b=` fail in its first a mod 3 rounds and succeed after
    (each process fails the first (a mod 3) x its share of a round it scores), so it needs a mod 3 + 1 rounds (40,
    then 24, then 12 rollouts). Under a cap of 70 a batch, rounds 0 and 1 are provably each prompt's own (once the four
    prompts done in round 0 have stopped, round 1 fits: 40 + 6 x 4 = 64), round 2 is not (64 + 3 x 4 > 70): the rule
    cuts it on every prompt to the 6 left, 2 for each of the three prompts still failing. With `server` (HOST:PORT),
    the rounds go to `trl vllm-serve` there; the report also lists every request sent, as (prompts, n)."""
    if server is None:
        vllm_generation.VLLMGeneration.sync_weights = reload_in_place
    else:
        for name, replacement in server_sync_replacements([]).items():
            setattr(vllm_client.VLLMClient, name, replacement)
    requests_sent = []
    vllm_client.VLLMClient.generate = recording_requests(requests_sent)
    host, port = server.split(":") if server else (None, None)
    mode = {"vllm_mode": "server", "vllm_server_host": host, "vllm_server_port": int(port)} if server else {
        "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.1, "vllm_max_model_length": 64}
    rewarded, seen = [], Counter()
    processes = int(os.environ.get("WORLD_SIZE", 1))
    share = 4 // processes  # of a round of 4, on this process

    def scripted_reward(prompts, completions, trainer_state, **kwargs):
        rewards = []
        for prompt, completion in zip(prompts, completions):
            rewarded.append((prompt, completion))
            key = (trainer_state.global_step, prompt)
            seen[key] += 1
            rewards.append(float(seen[key] > share * (int(prompt[0]) % 3)))
        return rewards

    args = BudgetGRPOConfig(**config_kwargs(
        output_dir, use_vllm=True, **mode,
        max_completion_length=6, temperature=0.7, max_steps=3, per_device_train_batch_size=40 // processes,
        budget_allocator="reinforce_ada", reinforce_ada_choice="positive_focused", reinforce_ada_samples_per_round=4,
        reinforce_ada_max_rounds=4, reinforce_ada_max_generated=70, rounds_prompt_by_prompt=True,
        learning_rate=1e-4))
    trainer = PerPromptRecorder(model=model_dir, reward_funcs=scripted_reward, args=args, train_dataset=copy_dataset(),
                                processing_class=None)
    trainer.train()
    batches = PerPromptRecorder.batches
    settings = {"choice": "positive_focused", "samples_per_round": 4, "max_rounds": 4, "max_generated": 70,
                "default_generations": 4}
    report = {
        "steps": trainer.state.global_step, "batches": len(batches),
        "rounds": [[int(counts.sum()) for counts in rounds.counts_per_round()] for rounds in batches],
        "rounds_ahead": [rounds.rounds_ahead for rounds in batches], "scorings": PerPromptRecorder.scorings,
        "logged_prompt_by_prompt": [entry["budget/rounds_prompt_by_prompt"] for entry in trainer.state.log_history
                                    if "budget/rounds_prompt_by_prompt" in entry],
        "rounds_as_the_rule_decides": all(rounds_the_rule_decides(rounds, settings) for rounds in batches),
        "strays": [(p, c) for p, c in rewarded if not belongs_to_its_prompt(p, c)][:10],
        "rewarded_rows": len(rewarded), "misplaced": PerPromptRecorder.misplaced[:10],
        "outcomes": [rounds.outcomes_in_plan_order().tolist() for rounds in batches], "requests": requests_sent,
    }
    name = "report.json" if processes == 1 else f"report-{trainer.accelerator.process_index}.json"
    Path(output_dir, name).write_text(json.dumps(report))
    if processes > 1:
        leave_without_teardown(trainer.accelerator)


def main_vip_per_prompt(model_dir: str, output_dir: str) -> None:
    """VIP under rounds until mixed, prompt by prompt, in colocate mode: all 10 copy prompts a batch, 4 rollouts each
    on average (40), 2 in the first round; a prompt's second round (2 more while it is not mixed) is provably its own
    (20 + 10 x 2 <= 40), so it goes to the engine as soon as the prompt's first round is scored; the budget left is
    then split by VIP's objective over every prompt, in one request."""
    vllm_generation.VLLMGeneration.sync_weights = reload_in_place
    rewarded = []

    def parity_reward(prompts, completions, answer, trainer_state, **kwargs):
        rewarded.extend((trainer_state.global_step, prompt, completion) for prompt, completion in zip(prompts,
                                                                                                        completions))
        return [float(len(completion) % 2 == int(a) % 2) for completion, a in zip(completions, answer)]

    args = colocate_config(output_dir, max_steps=3, per_device_train_batch_size=40, budget_allocator="vip",
                           budget_max_generations=None, rounds_generations=2, rounds_prompt_by_prompt=True)
    trainer = PerPromptRecorder(model=model_dir, reward_funcs=parity_reward, args=args, train_dataset=copy_dataset(),
                                processing_class=None)
    trainer.train()
    batches = PerPromptRecorder.batches
    scored = [Counter(prompt for step, prompt, _ in rewarded if step == index) for index in range(len(batches))]
    report = {
        "steps": trainer.state.global_step, "batches": len(batches),
        "rounds": [[counts.tolist() for counts in rounds.counts_per_round()] for rounds in batches],
        "rounds_ahead": [rounds.rounds_ahead for rounds in batches], "scorings": PerPromptRecorder.scorings,
        "logged_prompt_by_prompt": [entry["budget/rounds_prompt_by_prompt"] for entry in trainer.state.log_history
                                    if "budget/rounds_prompt_by_prompt" in entry],
        # each prompt scored exactly its count of rollouts, in the order of the batch's prompts
        "scored_counts": [[counts[row["prompt"]] for row in plan.prompts] for counts, plan in
                          zip(scored, PerPromptRecorder.plans)],
        "counts": [plan.counts.tolist() for plan in PerPromptRecorder.plans],
        "strays": [(p, c) for _, p, c in rewarded if not belongs_to_its_prompt(p, c)][:10],
        "misplaced": PerPromptRecorder.misplaced[:10], "weight_syncs": len(SYNCS),
        "embeddings": list(trainer.vip.embeddings.shape),
    }
    Path(output_dir, "report.json").write_text(json.dumps(report))


def main_spo(model_dir: str, output_dir: str) -> None:
    """SPO as released in colocate mode: 8 prompts a batch drawn by its weights from 10, one rollout each, KL-adaptive
    rho from forward passes over the engine's completions under the trained policy."""
    batches = []
    parity_reward = recording_parity_reward(batches)
    args = colocate_config(output_dir, max_steps=4, per_device_train_batch_size=8, budget_allocator="spo",
                           budget_max_generations=128)
    trainer = Recorder(model=model_dir, reward_funcs=parity_reward, args=args, train_dataset=copy_dataset(10),
                       processing_class=None)
    trainer.train()
    plans, tokenizer = Recorder.plans, trainer.processing_class
    kept = [(tokenizer.decode(response["prompt_ids"], skip_special_tokens=True),
             tokenizer.decode(response["completion_ids"], skip_special_tokens=True),
             len(response["log_probs"]) == len(response["completion_ids"]))
            for response in trainer.spo.tracker.responses.values()]
    report = {
        "steps": trainer.state.global_step, "counts": [plan.counts.tolist() for plan in plans],
        "rows_follow_plan": len(batches) == len(plans) and all(
            Counter(p for p, _ in batch) == Counter(row["prompt"] for row in plan.prompts)
            for batch, plan in zip(batches, plans)),
        "drawn_from": len({key for plan in plans for key in plan.keys}),
        "repeats": any(len(set(plan.keys)) < len(plan.keys) for plan in plans),
        "strays": [(p, c) for batch in batches for p, c in batch if not belongs_to_its_prompt(p, c)][:10],
        "misplaced": Recorder.misplaced[:10], "visits": sum(trainer.spo.tracker.visits.values()),
        "kept_strays": [(p, c) for p, c, whole in kept if not (belongs_to_its_prompt(p, c) and whole)][:10],
        "kept": len(kept), "weight_syncs": len(SYNCS),
        "drift_logged": [entry["spo/D"] for entry in trainer.state.log_history if "spo/D" in entry],
    }
    Path(output_dir, "report.json").write_text(json.dumps(report))


def greedy_answers(trainer, prompts: list[str]) -> dict[str, list[list[int]]]:
    """Greedy completions of `prompts` from the engine and from the trained model, as token ids."""
    from vllm import SamplingParams

    tokenizer = trainer.processing_class
    ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]
    outputs = trainer.vllm_generation.llm.generate([{"prompt_token_ids": i} for i in ids],
                                                   SamplingParams(temperature=0.0, max_tokens=6), use_tqdm=False)
    model = trainer.model.eval()
    with torch.no_grad():
        model_answers = []
        for i in ids:
            generated = model.generate(torch.tensor([i]), max_new_tokens=6, do_sample=False,
                                       pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            model_answers.append(generated[0, len(i):].tolist())
    return {"engine_greedy": [list(output.outputs[0].token_ids) for output in outputs], "model_greedy": model_answers}


if __name__ == "__main__":
    if sys.argv[3:4] == ["per-prompt"]:
        main_per_prompt(*sys.argv[1:3], *sys.argv[4:5])
    elif sys.argv[3:4] == ["vip-per-prompt"]:
        main_vip_per_prompt(*sys.argv[1:3])
    elif sys.argv[3:4] == ["spo"]:
        main_spo(*sys.argv[1:3])
    else:
        main(*sys.argv[1:])
