"""`BudgetGRPOTrainer`: TRL's `GRPOTrainer` with per-prompt rollout budgets.

Per generation batch, TRL's sampler still brings `generation_batch_size` rollout slots (each prompt repeated
`num_generations` times). This trainer gathers the batch's distinct prompts from all processes, asks the batch's round
rule how many rollouts each prompt gets in each round (every decision made on the main process and broadcast, so every
rank uses the same one), deals each round's slots over the ranks, and lets TRL generate and score them. Then it lays
the rows out prompt by prompt, keeps the ones the rule trains, and recomputes the advantages over variable-size groups
from the rewards of all ranks. What it checks when built is in `setup_checks`, what it reads from the rewards in
`rewards`, what it logs in `metrics`, and how it saves and resumes the tracker in `checkpoint`.

Tested with TRL 1.16.0: the overrides below rely on internals of that release (`_generate_and_score_completions`,
`_calculate_rewards`, `_generate_single_turn`, `_get_per_token_logps_and_entropies`, `_save_checkpoint`,
`_load_optimizer_and_scheduler`).
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging
from trl import GRPOConfig, GRPOTrainer

from .advantages import advantages_against_baseline, grouped_advantages, groups_without_spread, prompt_loss_weights
from .allocators import Allocator
from .allocators.token_cap import TokenCappedAllocator
from .allocators.uniform import UniformAllocator
from .announcement import announcement
from .checkpoint import restore_budget_state, resume_point, save_budget_state
from .config import BudgetGRPOConfig
from .dynamic_sampling import STREAM_STATE_NAME, DynamicSampling, PromptStream
from .forward_passes import PolicyPasses
from .metrics import BudgetMetrics, batch_figures_logged, relog_advantages, relog_batch_figures
from .per_prompt_engine import generate_prompt_by_prompt
from .prior import BUDGET_COLUMN_SETTINGS, history_pass_rates
from .probe import fresh_pass_rates
from .prompt_sampling import SAMPLER_STATE_NAME, PromptSampler
from .prompts import check_repeated_layout, has_images, keys_of
from .rewards import RewardReader, reward_func_name, success_reader_effects, success_reward_index
from .rollout_plan import RolloutPlan, balanced_slot_order, checked_allocation, decided_on_main_process
from .round_rules import OneShot, ProbeThenAllocate, UntilMixed, top_up
from .rounds import GeneratedRounds
from .setup_checks import (check_before_building, check_prompt_id_column, check_trainer_objects,
                           refuse_images_in_rounds, refuse_images_under_kl_adaptive_rho)
from .spo_stage import SPO_STATE_NAME, SPOStage
from .tracker import CapabilityTracker
from .vip_stage import VIP_EMBEDDINGS_NAME, VIPStage, rates_with_rollouts, uses_vip

logger = logging.get_logger(__name__)

__all__ = ["BudgetGRPOTrainer", "TokenCappedAllocator", "check_prompt_id_column", "grouped_advantages",
           "reward_func_name", "success_reward_index"]


class BudgetGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` that shares each generation batch's rollouts unevenly among its prompts.

    Takes everything `GRPOTrainer` takes, plus:

    Args:
        allocator: any object or callable `(pass_rates, budget, failure_rate) -> counts`; defaults to the built-in
            allocator named by `args.budget_allocator`.
        tracker: a `CapabilityTracker` holding the prompts' pass rates; defaults to one built from `args`.

    After each training batch, `last_rollout_plan` (a `RolloutPlan`) holds its prompts, their pass rates and counts,
    where each row lies, and the rewards trained.
    """

    _tag_names = ["trl", "grpo", "trl_budget"]

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: GRPOConfig | None = None,
        *positional,
        allocator: Allocator | None = None,
        tracker: CapabilityTracker | None = None,
        **kwargs,
    ):
        args = BudgetGRPOConfig.for_trainer(args, model)
        check_trainer_objects(allocator, tracker)
        self.allocator = allocator if allocator is not None else args.make_allocator()
        self.tracker = tracker if tracker is not None else args.make_tracker()
        train_dataset = kwargs.get("train_dataset", positional[0] if positional else None)
        check_before_building(args, self.allocator, self.tracker, train_dataset, kwargs)
        self.spo = SPOStage.for_run(args, train_dataset, reward_funcs) if args.uses_spo_tracker(allocator) else None
        self.vip = VIPStage.for_run(args, train_dataset) if uses_vip(args, self.allocator) else None
        success_index = success_reward_index(args.success_reward_func, reward_funcs)
        self.last_rollout_plan: RolloutPlan | None = None
        self._last_token_cap: TokenCappedAllocator | None = None
        super().__init__(model, reward_funcs, args, *positional, **kwargs)
        # The slot layout must be the same on every process, whatever seed each was given: the main process's rules.
        seed = [args.seed]
        broadcast_object_list(seed, from_process=0)
        self._layout_seed = int(seed[0])
        self.advantage_baseline = args.resolved_advantage_baseline(allocator)
        self.rewards = RewardReader(self.reward_weights, self.reward_func_names, success_index,
                                    self.tracker.success_threshold, self.accelerator.is_main_process,
                                    success_reader_effects(args, self.allocator))
        self.budget_metrics = BudgetMetrics(self._metrics["train"], self.accelerator.is_main_process)
        self.prompt_stream = PromptStream.for_trainer(self) if args.dynamic_sampling else None
        self.prompt_sampler = PromptSampler.for_trainer(self)
        self.policy_passes = PolicyPasses(self)  # the forward passes the stages ask for besides TRL's
        self._replayed = None  # completions generated prompt by prompt, for TRL's generation step to return
        self._announced = False  # the rule in effect is announced once a run

    def _set_signature_columns_if_needed(self):
        # TRL keeps only the prompt and image columns when remove_unused_columns=True; the columns the budget settings
        # name are read from every row, so they are kept too (without them every prompt would lose its id or prior).
        super()._set_signature_columns_if_needed()
        named = [getattr(self.args, setting) for setting in BUDGET_COLUMN_SETTINGS]
        self._signature_columns = [*self._signature_columns,
                                   *(column for column in named if column and column not in self._signature_columns)]

    # ---------------------------------------------------------------------------------------------- the batch

    def _generate_and_score_completions(self, inputs):
        # TRL generates one group of num_generations per prompt; this generates the batch in rounds, each prompt's
        # rollouts as its round rule decides, then lays the rows out by prompt and redoes TRL's grouping over them.
        if not self.model.training:  # evaluation keeps TRL's uniform num_generations_eval
            output = super()._generate_and_score_completions(inputs)
            rows = len(inputs) * self.accelerator.num_processes  # the rows TRL logged, every one of a full group
            self._logs["extra"]["prompt_rollouts"].extend([self.num_generations_eval] * rows)
            return output
        started, self._allocation_seconds = time.perf_counter(), 0.0
        if self.spo is not None and self.spo.prior_to_sample:
            self.policy_passes.sample_spo_prior(self.spo)
        if self.spo is not None:  # the last batch's rows update SPO's tracker under the policy they trained
            self.spo.settle(self.policy_passes.log_probs, self._metrics["train"])
        prompts, keys = self._batch_prompts(inputs)
        history_rates, from_prior, groups = history_pass_rates(self.tracker, prompts, keys, self.args)
        # VIP allocates from its predictions, unseen prompts included (the plan keeps the tracker's rates beside them)
        rates = history_rates if self.vip is None else self._vip_predictions(keys)
        failure_rate = self.tracker.failure_rate
        rule = self._round_rule(prompts, keys, rates, len(inputs) * self.accelerator.num_processes, failure_rate)
        if any(has_images(row) for row in prompts):  # a streamed dataset's images
            if not rule.single_round:
                refuse_images_in_rounds(self.allocator, self.args)
            refuse_images_under_kl_adaptive_rho(self.args, self.allocator)
        zero_std_logged = len(self._metrics["train"]["frac_reward_zero_std"])
        figures_logged = batch_figures_logged(self._metrics["train"], self.reward_func_names)
        rounds, trl_rows = self._generate_rounds(rule, prompts)
        trl_advantages = trl_rows and self.advantage_baseline == "group"  # TRL's own advantages hold as they are
        if len(prompts) > len(history_rates):  # dynamic sampling drew more prompts: their history (not yet updated)
            history_rates, from_prior, groups = history_pass_rates(self.tracker, prompts, keys, self.args)
        generated_rewards, lengths = rounds.gathered_in_plan_order()
        if len(rounds) > 1 or rounds.logged_ahead is not None:  # TRL logged one figure per request: one for the batch
            relog_batch_figures(self._metrics["train"], figures_logged, generated_rewards, self.reward_weights,
                                self.reward_func_names, lengths)
        generated_weighted = self.rewards.weighted(generated_rewards)
        pad_token_id = getattr(self, "_tokenizer", self.processing_class).pad_token_id
        trained = (rounds.all_trained(pad_token_id, generated_rewards) if not hasattr(rule, "trained_slots") else
                   rounds.selected(*rule.trained_slots(rounds), pad_token_id, self.accelerator.gather,
                                   generated_rewards))
        rewards = self.rewards.weighted(trained.rewards)
        plan = self.last_rollout_plan = RolloutPlan(prompts, keys, rule.pass_rates, failure_rate, trained.counts,
                                                    trained.slot_order, history_rates, rule.history_counts,
                                                    self.args.probe_generations, rounds.counts_per_round(),
                                                    rewards.cpu().numpy())
        advantages = self._trained_advantages(keys, rounds, trained, rewards, generated_weighted, trl_rows,
                                              zero_std_logged)
        output = trained.output
        if not (trl_advantages and self.args.advantage_clip is None):  # else TRL's own, as they are
            output["advantages"] = advantages if trained.in_plan_order else advantages[
                torch.as_tensor(trained.my_slots, device=advantages.device)]

        if self.spo is not None:
            self.budget_metrics.record_spo_estimates(self.spo.tracker.p_hats(keys))
            self.spo.record(keys, trained.counts, rewards,
                            self.policy_passes.last_responses(keys, trained) if self.spo.tracker.kl_adaptive else {})
        # The tracker learns from every rollout generated, trained or not.
        batch_failure_rate = self.tracker.update(
            np.repeat(keys, rounds.counts), self.rewards.success_rewards(generated_rewards, generated_weighted),
            None if groups is None else np.repeat(groups, rounds.counts), lengths.cpu().numpy(),
            generated_weighted.cpu().numpy() if getattr(self.tracker, "reward_history_window", None) is not None
            else None)
        if self.vip is not None:
            self.vip.visited(keys, rounds.counts)
        self.rewards.warn_if_success_never_varies(batch_failure_rate)
        self.rewards.warn_if_spread_overflows(plan.counts, plan.rewards, advantages)
        self._metrics["train"]["budget/completion_tokens"].append(float(output["num_items_in_batch"]))
        self.budget_metrics.record_batch(plan, rewards, advantages, from_prior,
                                         self._last_token_cap if self.args.budget_token_cap is not None else None,
                                         self.allocator, plan.pass_rates if self.vip is not None
                                         else self.tracker.pass_rates(plan.keys))
        self.budget_metrics.record_rounds(rule, rounds, trained.counts, self.prompt_stream)
        self.budget_metrics.log_prompt_rollouts(self._logs["extra"], rounds.counts, rounds.logged_slot_order())
        self.budget_metrics.record_allocation_time(self._allocation_seconds, time.perf_counter() - started,
                                                   self.allocator)
        return output

    def _generate_rounds(self, rule, prompts: list[dict[str, Any]]) -> tuple[GeneratedRounds, bool]:
        """Every round the rule asks for, generated and scored; and whether the batch is TRL's own rows (one round
        of equal groups of `num_generations`: on one process, or under `uniform` on any number), whose rows, grouping
        and metrics hold as TRL has them (its advantages too, under GRPO's baseline). Other allocators deal a batch of equal counts over
        the processes as any other, so that no process waits for another's long rollouts. With
        `rounds_prompt_by_prompt`, the rounds each prompt may take alone go to the engine prompt by prompt first
        (`per_prompt_engine`); the rule's shared rounds after them are generated here, one request each."""
        if self.args.rounds_prompt_by_prompt and not rule.single_round:  # up to the rule's first shared round
            rounds = generate_prompt_by_prompt(self, rule, prompts)
        else:
            rounds = GeneratedRounds(len(prompts), self.accelerator.num_processes, self.accelerator.process_index)
        seed = self._layout_seed * 1_000_003 + self.state.global_step
        trl_rows = False
        while (round_counts := rule.next_round(rounds)) is not None:
            trl_rows = (rule.single_round and (round_counts == self.num_generations).all()
                        and (self.accelerator.num_processes == 1 or isinstance(self.allocator, UniformAllocator)))
            self._generate_round(rounds, prompts, round_counts, seed + len(rounds), trl_rows)
        return rounds, trl_rows

    def _trained_advantages(self, keys: list[str], rounds: GeneratedRounds, trained, rewards: torch.Tensor,
                            generated_rewards: torch.Tensor, trl_rows: bool, zero_std_logged: int) -> torch.Tensor:
        """The advantages of the trained rows in plan order, clipped and weighted as set; TRL's logs follow them.
        `rewards` and `generated_rewards` are the weighted rewards of the trained and of every generated row."""
        trl_advantages = trl_rows and self.advantage_baseline == "group"
        if trl_advantages and self.accelerator.num_processes == 1:
            advantages = trained.output["advantages"]  # TRL's, bit for bit: not computed twice
        else:  # on several processes TRL's advantages are this process's alone; the logs need all
            advantages = self._advantages(keys, rounds, trained, rewards, generated_rewards)[0]
        if not trl_rows:  # TRL grouped nothing: its zero-std share is restated over the prompts' trained groups
            self._relog_zero_std(rewards, trained.counts, zero_std_logged)
        if self.args.advantage_clip is not None:
            advantages = advantages.clamp(-self.args.advantage_clip, self.args.advantage_clip)
        if self.args.loss_weighting == "prompt":
            counts = torch.as_tensor(trained.counts, device=advantages.device)
            advantages = advantages * prompt_loss_weights(counts, self.num_generations)
        if not (trl_advantages and self.args.advantage_clip is None):  # TRL logged other advantages than these
            relog_advantages(self._logs["advantages"], rounds.counts, rounds.logged_slot_order(),
                             trained.generated_slots, advantages)
        return advantages

    def _relog_zero_std(self, rewards: torch.Tensor, counts: np.ndarray, logged_before: int) -> None:
        """TRL's `frac_reward_zero_std` with TRL's meaning, whatever the baseline: the share of trained rows whose
        prompt's rewards in the batch all agree, one figure for the batch (not one per round). Where every prompt
        trains a single rollout, a group has no spread to measure, so the figure is not logged at all
        (`budget/effective_ratio` is the share of rows with a gradient)."""
        zero_std = self._metrics["train"]["frac_reward_zero_std"]
        del zero_std[logged_before:]
        if counts.max() > 1:
            agree = groups_without_spread(rewards.detach().cpu().numpy(), counts)
            zero_std.append(float(np.repeat(agree, counts).mean()))
        elif not zero_std:
            del self._metrics["train"]["frac_reward_zero_std"]

    def _advantages(self, keys: list[str], rounds: GeneratedRounds, trained, rewards: torch.Tensor,
                    generated_rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The trained rows' advantages against the chosen baseline (`advantages_against_baseline`; SPO's stage)."""
        if self.advantage_baseline == "spo":
            return self.spo.advantages(keys, trained.counts, rewards, self._metrics["train"])
        return advantages_against_baseline(self.advantage_baseline, trained.rewards, trained.counts, rewards,
                                           generated_rewards, rounds.counts, keys, self.tracker, self.reward_weights,
                                           self.scale_rewards, self.multi_objective_aggregation,
                                           self.args.advantage_history_first_visit,
                                           self.args.advantage_history_includes_batch)

    def _round_rule(self, prompts: list[dict[str, Any]], keys: list[str], history_rates: np.ndarray, budget: int,
                    failure_rate):
        """The batch's round rule: dynamic sampling, rounds until mixed, a probe and then the rest, or one round
        (both releases)."""
        args = self.args
        if self.prompt_stream is not None:
            return DynamicSampling.for_batch(self.prompt_stream, prompts, keys, budget // self.num_generations, args,
                                             self.rewards.weighted)

        def fresh_rates(wins, trials):
            rates = fresh_pass_rates(*self.tracker.evidence(keys), wins, trials, args.probe_history_weight,
                                     args.probe_prior_strength)
            # under VIP, `history_rates` are its predictions, for the prompts without a scored rollout
            return rates if self.vip is None else rates_with_rollouts(rates, history_rates)

        if hasattr(self.allocator, "round_rule"):  # a rule of rounds chosen as an allocator: Reinforce-Ada
            return self.allocator.round_rule(self.accelerator.num_processes)
        if args.rounds_generations:
            most = args.generation_bounds()[1]

            def top_up_by_value(pass_rates, counts, spare):
                return self._on_main_process(
                    "Rollout allocation",
                    lambda: top_up(self.allocator, pass_rates, counts, spare, failure_rate, most))

            # budget_min_generations, not the plan's fewest: VIP's is 0, which only its rounding gives
            first = args.rounds_first_generations or args.budget_min_generations
            return UntilMixed(first, args.rounds_generations, most, budget,
                              self.accelerator.num_processes, args.rounds_max, fresh_rates, top_up_by_value)
        if args.probe_generations:
            return ProbeThenAllocate(args.probe_generations, history_rates,
                                     lambda rates: self._allocate(keys, rates, budget, failure_rate, history_rates),
                                     fresh_rates)
        return OneShot(history_rates, lambda rates: self._allocate(keys, rates, budget, failure_rate)[0])

    def _generate_round(self, rounds: GeneratedRounds, prompts: list[dict[str, Any]], counts: np.ndarray, seed: int,
                        trl_rows: bool) -> None:
        """TRL's generation and scoring of `counts[i]` rollouts of each prompt, dealt over the processes; recorded in
        `rounds` with the rewards and completion lengths of every process and the in-round successes.

        With `trl_rows` the rows are TRL's own (equal groups of `num_generations`, in order), so TRL's grouping and
        metrics hold; otherwise TRL groups nothing, and the advantages are computed afterwards over the plan's groups.
        """
        # TRL's own rows stay on each process as TRL's sampler dealt them: the plan's slots in order.
        order = (np.arange(int(counts.sum())) if trl_rows
                 else balanced_slot_order(counts, self.accelerator.num_processes, seed))
        prompt_of_slot = np.repeat(np.arange(len(prompts)), counts)
        local = len(order) // self.accelerator.num_processes
        rank = self.accelerator.process_index
        mine = [prompts[prompt_of_slot[slot]] for slot in order[rank * local : (rank + 1) * local]]
        output, gathered, lengths = self._scored_rows(mine, trl_rows)
        rounds.add(output, order, counts, gathered, lengths, self.rewards.outcomes(gathered))

    def _scored_rows(self, rows: list[dict[str, Any]], trl_rows: bool) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """TRL's generation and scoring of this process's `rows`; with every process's rewards and completion
        lengths (the tracker's expected lengths)."""
        if trl_rows:
            output = super()._generate_and_score_completions(rows)
        else:
            # TRL views a round's rewards as groups of num_generations (`rewards.view(-1, num_generations)`), which
            # fails when a round's row count is no multiple of it (a probe of 2 rollouts from 3 prompts: 6 rows, 4 per
            # group). Its groups are discarded anyway, so it groups each row alone while it scores the round.
            self.num_generations = 1
            try:
                output = super()._generate_and_score_completions(rows)
            finally:
                self.num_generations = self.args.num_generations
        return output, self._gathered_rewards, self.accelerator.gather(output["completion_mask"].sum(1))

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # Rows are already one rollout each, so vLLM server mode must not deduplicate them by a fixed group size:
        # it then sends every row in a single request with n=1 (the server's prefix cache shares the prompts).
        if self.model.training:
            num_generations = 1
            if self._replayed is not None:  # rows whose completions the engine generated prompt by prompt
                return self._replayed.take(prompt_ids)
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args,
                                           compute_entropy=False, compute_aux_loss=False, **kwargs):
        # While rows no loss trains are scored (SPO's prior), TRL's passes over them are never read: not made.
        if self.policy_passes.skips_trl_log_probs and not (compute_entropy or compute_aux_loss):
            return self.policy_passes.unread_log_probs(input_ids, logits_to_keep)
        return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *args,
                                                          compute_entropy=compute_entropy,
                                                          compute_aux_loss=compute_aux_loss, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Keeps the gathered rewards so that advantages can be recomputed over variable-size groups; a failure on one
        # process stops every process, and rewards it cannot train on are refused (`RewardReader.scored`).
        score = partial(super()._calculate_rewards, inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = self.rewards.scored(score, self.accelerator, prompts, len(self.reward_funcs))
        return self._gathered_rewards

    # ----------------------------------------------------------------------------------------- the allocation

    def _batch_prompts(self, inputs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        """The generation batch's prompts and keys: TRL's sampler's (gathered from every process), dynamic sampling's
        first generation batch, or the prompt sampler's draw."""
        if self.prompt_stream is not None:
            return self.prompt_stream.next_prompts(self.args.prompt_id_column)
        if self.prompt_sampler is not None:
            prompts, keys = self.prompt_sampler.next_prompts(self.args.prompt_id_column)
            for name, value in self.prompt_sampler.last_metrics.items():
                self._metrics["train"][name].append(value)
            return prompts, keys
        return self._gather_prompts(inputs)

    def _gather_prompts(self, inputs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        """The batch's distinct prompts, from all processes, and their keys."""
        all_rows = gather_object(inputs)
        check_repeated_layout(all_rows, self.num_generations, self.args.prompt_id_column or "prompt")
        prompts = all_rows[:: self.num_generations]
        return prompts, keys_of(prompts, self.args.prompt_id_column)

    def _prompt_key(self, row: dict[str, Any]) -> str:
        return keys_of([row], self.args.prompt_id_column)[0]

    def _allocate(self, keys: list[str], pass_rates: np.ndarray, budget: int, failure_rate, history_rates=None):
        """The main process's allocation, on every process; with `history_rates`, also the allocation they give."""
        bounds = self.args.generation_bounds(allocator=self.allocator)

        def decide():
            allocator = self.allocator
            if self.args.budget_token_cap is not None:  # kept for the batch's logs
                allocator = self._last_token_cap = TokenCappedAllocator.for_expected_lengths(
                    self.allocator, self.tracker.expected_lengths(keys), self.args.budget_token_cap)
            counts = checked_allocation(allocator, pass_rates, budget, failure_rate, bounds)
            if history_rates is None:
                return counts, None
            return counts, checked_allocation(allocator, history_rates, budget, failure_rate, bounds)  # for the logs

        return self._on_main_process("Rollout allocation", decide)

    def _vip_predictions(self, keys: list[str]) -> np.ndarray:
        """VIP's predicted success rates of the batch's prompts, decided on the main process (the embeddings made
        first, once, by every process's forward passes)."""
        self.vip.prepare(self)
        return self._on_main_process("VIP's prediction", lambda: self.vip.predicted_rates(keys, self.tracker))

    def _on_main_process(self, what: str, decide):
        """`decide()` on the main process, its result on every process, timed as allocation time."""
        result, seconds = decided_on_main_process(self.accelerator.is_main_process, what, decide)
        self._allocation_seconds += seconds
        return result

    # ------------------------------------------------------------------------------- logs and checkpoints

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training:  # an evaluation log in mid-training keeps the training history for the next one
            self.budget_metrics.log_histograms(self.args.report_to or [], self.callback_handler.callbacks,
                                               self.state.global_step)
        super().log(logs, start_time)

    def end(self):
        # A model wrapped for several processes (DDP) keeps the process group in its reducer. Freed after `end()` has
        # destroyed the group (when the trainer itself is freed), gloo's destructor can deadlock on a lock the
        # destroyed group held: the run's last line never returns. So the wrapper goes first, then the group.
        if self.accelerator.num_processes > 1:
            self.accelerator.wait_for_everyone()
            self.model_wrapped = self.model
            self.accelerator.free_memory()
        super().end()

    def train(self, resume_from_checkpoint=None, trial=None, **kwargs):
        if resume_from_checkpoint is True:  # the newest *complete* checkpoint, where the Trainer takes the newest
            resume_from_checkpoint = resume_point(self.args.output_dir)
        if self.accelerator.is_main_process and not self._announced:  # once a run, beside the Trainer's start-up
            logger.warning(announcement(self.args, self.allocator, self.advantage_baseline))
            self._announced = True
        return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)

    def _save_checkpoint(self, model, trial):
        if self.args.should_save:  # the budget's files first: no checkpoint is ever pushed or kept without them
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            save_budget_state(os.path.join(self._get_output_dir(trial=trial), folder), self.tracker,
                              self._stage_states())
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Restores the tracker with the optimizer, the hook TRL itself uses for its own controller state on resume.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            restore_budget_state(checkpoint, self.tracker, self._stage_states(), self.args.budget_allocator)

    def _stage_states(self) -> dict[str, Any]:
        """The stages whose state a checkpoint keeps, by file name (None: not in this run)."""
        return {STREAM_STATE_NAME: self.prompt_stream, SAMPLER_STATE_NAME: self.prompt_sampler,
                SPO_STATE_NAME: self.spo, VIP_EMBEDDINGS_NAME: self.vip}
