"""`BudgetGRPOTrainer`: TRL's `GRPOTrainer` with per-prompt rollout budgets.

Per generation batch, TRL's sampler still brings `generation_batch_size` rollout slots (each prompt repeated
`num_generations` times). This trainer gathers the batch's distinct prompts from all processes, asks the allocator how
many of the slots each prompt gets (one decision, broadcast from the main process so every rank uses the same one),
re-lays the slots prompt by prompt and gives each rank its contiguous share. TRL then generates one completion per slot
and scores it as usual; advantages are recomputed over the variable-size groups from the rewards of all ranks.

Tested with TRL 1.16.0: the overrides below rely on internals of that release (`_generate_and_score_completions`,
`_calculate_rewards`, `_generate_single_turn`, `_save_checkpoint`, `_load_optimizer_and_scheduler`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_callable_name, get_config_model_id

from .advantages import advantages_against_all_rollouts, grouped_advantages, prompt_loss_weights
from .allocators import Allocator
from .allocators.token_cap import allocate_under_token_cap, check_token_cap_allocator
from .checkpoint import TRACKER_STATE_NAME, latest_complete_checkpoint, load_tracker_state, write_json_atomically
from .checks import is_missing
from .config import TRACKER_FIELDS, BudgetGRPOConfig
from .prior import (BUDGET_COLUMN_SETTINGS, arrow_missing, check_prior_columns, column_of_rows, first_row_where,
                    prior_inputs)
from .probe import fresh_pass_rates
from .rollout_plan import RolloutPlan, balanced_slot_order, checked_allocation
from .round_rules import OneShot, ProbeThenAllocate, UntilMixed, top_up
from .rounds import GeneratedRounds
from .tracker import CapabilityTracker, SettingsMismatch, prompt_key

logger = logging.get_logger(__name__)

IMAGE_COLUMNS = ("images", "image")  # where TRL reads a prompt's images from
EXTREME_BATCHES_BEFORE_WARNING = 10
SLOW_ALLOCATION_SHARE = 0.2  # of a generation batch's wall time (gather, allocation, generation, scoring)


def reward_func_name(reward_func) -> str:
    """The name TRL gives a reward function in `reward_func_names` and in its logs."""
    if isinstance(reward_func, str):
        return reward_func.split("/")[-1]
    if isinstance(reward_func, torch.nn.Module):
        return get_config_model_id(reward_func.config).split("/")[-1]
    return get_callable_name(reward_func)


def success_reward_index(choice: int | str | None, reward_funcs) -> int | None:
    """Index of the reward function that `success_reward_func` names (by index or name); None for the weighted sum."""
    if choice is None:
        return None
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    names = [reward_func_name(func) for func in funcs]
    if isinstance(choice, str) and choice.isdigit():
        choice = int(choice)
    if isinstance(choice, int) and 0 <= choice < len(names):
        return choice
    if choice in names:
        if names.count(choice) > 1:
            raise ValueError(
                f"success_reward_func={choice!r} names {names.count(choice)} reward functions ({names}); give its "
                "index instead."
            )
        return names.index(choice)
    raise ValueError(
        f"success_reward_func={choice!r} is neither the name nor the index of a reward function; the trainer's "
        f"reward functions are {dict(enumerate(names))}. Name one of them, or set None to judge success by the "
        "weighted sum of all rewards."
    )


class BudgetGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` that shares each generation batch's rollouts unevenly among its prompts.

    Takes everything `GRPOTrainer` takes, plus:

    Args:
        allocator: any object or callable `(pass_rates, budget, failure_rate) -> counts`; defaults to the built-in
            allocator named by `args.budget_allocator`.
        tracker: a `CapabilityTracker` holding the prompts' pass rates; defaults to one built from `args`.
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
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = BudgetGRPOConfig(f"{str(model_name).split('/')[-1]}-BudgetGRPO")
        elif not isinstance(args, BudgetGRPOConfig):
            args = BudgetGRPOConfig.from_grpo_config(args)
        refuse_seeded_vllm_generation(args)
        train_dataset = kwargs.get("train_dataset", positional[0] if positional else None)
        check_agent_options(kwargs.get("environment_factory"), train_dataset, args)
        check_prompt_id_column(args.prompt_id_column, train_dataset)
        check_prior_columns(args, train_dataset)
        self.allocator = allocator if allocator is not None else args.make_allocator()
        self.tracker = tracker if tracker is not None else args.make_tracker()
        self._success_reward_index = success_reward_index(args.success_reward_func, reward_funcs)
        self._extreme_batches = 0  # consecutive batches whose rollouts were all solved, or all failed
        self._warned_slow_allocation = self._warned_overflow = False
        prompts_per_batch = args.generation_batch_size // args.num_generations
        if (prompts_per_batch * args.budget_probe_generations) % args.world_size:
            raise ValueError(
                f"budget_probe_generations={args.budget_probe_generations} gives {prompts_per_batch} prompts x "
                f"{args.budget_probe_generations} = {prompts_per_batch * args.budget_probe_generations} probe rollouts "
                f"per generation batch, which {args.world_size} processes cannot share evenly. Choose a probe size "
                "that makes that product a multiple of the number of processes."
            )
        checked_allocation(  # a broken allocator fails here, before any model is loaded
            self.allocator, np.full(prompts_per_batch, np.nan), args.generation_batch_size, None,
            (args.min_generations, args.max_generations),
        )
        check_dataset_fills_a_generation_batch(train_dataset, prompts_per_batch, args)
        if args.budget_token_cap is not None:
            check_token_cap_allocator(self.allocator, args.budget_token_cap)
        if hasattr(self.allocator, "round_rule"):
            check_rounds_allocator(self.allocator, args, prompts_per_batch)
        if dataset_shows_images(train_dataset):
            refuse_images_in_rounds(self.allocator, args)
        warn_if_rounds_cannot_follow_the_first(self.allocator, args, prompts_per_batch)
        self._budget_history = {"rollouts_per_prompt": [], "pass_rates": []}
        self.last_rollout_plan: RolloutPlan | None = None  # the latest training batch's allocation, for inspection
        super().__init__(model, reward_funcs, args, *positional, **kwargs)
        # The slot layout must be the same on every process, whatever seed each was given: the main process's rules.
        seed = [args.seed]
        broadcast_object_list(seed, from_process=0)
        self._layout_seed = int(seed[0])

    def _set_signature_columns_if_needed(self):
        # TRL keeps only the prompt and image columns when remove_unused_columns=True; the columns the budget settings
        # name are read from every row, so they are kept too (without them every prompt would lose its id or prior).
        super()._set_signature_columns_if_needed()
        named = [getattr(self.args, setting) for setting in BUDGET_COLUMN_SETTINGS]
        self._signature_columns = [*self._signature_columns,
                                   *(column for column in named if column and column not in self._signature_columns)]

    # ----------------------------------------------------------------------------------------------- allocation

    def _prompt_identity(self, row: dict[str, Any]) -> Any:
        column = self.args.prompt_id_column
        if column is None and "prompt" not in row:
            raise KeyError(
                f"A training row has no `prompt` (its columns: {sorted(row)}), as rows routed to environments may "
                "not; per-prompt budgets need to key it. Set prompt_id_column to a column that identifies the prompt."
            )
        if column is None:
            images = next((row[name] for name in IMAGE_COLUMNS if row.get(name) is not None), None)
            # Images in their own column are part of the prompt: the same text with another image is another prompt.
            return row["prompt"] if images is None else {"prompt": row["prompt"], "images": images}
        (identity,) = column_of_rows([row], "prompt_id_column", column)
        if is_missing(identity):
            raise _missing_id_error(column, identity, f"for the prompt {row.get('prompt')!r}")
        return identity

    def _prompt_key(self, row: dict[str, Any]) -> str:
        return self._key_of(self._prompt_identity(row))

    def _key_of(self, identity: Any) -> str:
        return prompt_key(identity) if self.args.prompt_id_column is None else str(identity)

    def _gather_prompts(self, inputs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        """The batch's distinct prompts, from all processes, and their keys."""
        all_rows = gather_object(inputs)
        group = self.num_generations
        prompts = all_rows[::group]
        identities = [self._prompt_identity(row) for row in prompts]
        # The layout check compares the prompt (or its id) of every row with its group's first row: the sampler
        # repeats whole dataset rows, so the rest of a row follows.
        field = self.args.prompt_id_column or "prompt"
        if any(row.get(field) != prompts[i // group].get(field) for i, row in enumerate(all_rows)):
            raise RuntimeError(
                "BudgetGRPOTrainer expects each prompt to arrive num_generations times in a row, as TRL's "
                "RepeatSampler lays them out; a custom sampler or data collator broke that layout."
            )
        return prompts, [self._key_of(identity) for identity in identities]

    def _token_capped(self, keys: list[str]) -> "TokenCappedAllocator":
        """The allocator under `budget_token_cap`, with each prompt's expected completion length from the tracker
        (never measured: the batch's mean of the measured ones; none measured: all alike)."""
        lengths = self.tracker.expected_lengths(keys)
        known = np.isfinite(lengths)
        lengths[~known] = lengths[known].mean() if known.any() else 1.0
        self._last_token_cap = TokenCappedAllocator(self.allocator, lengths, self.args.budget_token_cap)
        return self._last_token_cap

    def _allocate(self, keys: list[str], pass_rates: np.ndarray, budget: int, failure_rate, history_rates=None):
        """The main process's allocation, on every process; with `history_rates`, also the allocation they give."""
        bounds = (self.args.min_generations, self.args.max_generations)

        def decide():
            allocator = self.allocator if self.args.budget_token_cap is None else self._token_capped(keys)
            counts = checked_allocation(allocator, pass_rates, budget, failure_rate, bounds)
            if history_rates is None:
                return counts, None
            return counts, checked_allocation(allocator, history_rates, budget, failure_rate, bounds)  # for the logs

        return self._on_main_process("Rollout allocation", decide)

    def _on_main_process(self, what: str, decide):
        """`decide()` run on the main process, timed as allocation time, its result on every process; a failure there
        stops every process at once with the same error."""
        decision = [None, None, 0.0]  # (result, error, seconds)
        if self.accelerator.is_main_process:
            started = time.perf_counter()
            try:
                decision[0] = decide()
            except Exception as error:  # noqa: BLE001 - re-raised below, on every rank
                decision[1] = f"{type(error).__name__}: {error}"
            decision[2] = time.perf_counter() - started
        broadcast_object_list(decision, from_process=0)  # every rank follows the main process's decision
        result, error, seconds = decision
        self._allocation_seconds += seconds
        if error is not None:
            raise RuntimeError(f"{what} failed on the main process, so every process stops: {error}")
        return result

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Keeps the gathered rewards so that advantages can be recomputed over variable-size groups. A reward function
        # that raises on one process only would leave the others waiting in TRL's gather (its last statement), and an
        # exception handler reaching another collective would hang the run: the failing process meets that gather
        # with unscorable rows instead, and then every process raises the same error.
        failure = None
        try:
            self._gathered_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        except Exception as error:  # noqa: BLE001 - re-raised below, on every rank
            if self.accelerator.num_processes == 1:
                raise
            failure = f"{type(error).__name__}: {error}"
            unscorable = torch.full((len(prompts), len(self.reward_funcs)), torch.nan, device=self.accelerator.device)
            self._gathered_rewards = self.accelerator.gather(unscorable)
        if self.accelerator.num_processes > 1:
            failed = [(rank, message) for rank, message in enumerate(gather_object([failure])) if message is not None]
            if failed:
                rank, message = failed[0]
                raise RuntimeError(f"A reward function failed on process {rank}, so every process stops: {message}")
        self._refuse_infinite_rewards(self._gathered_rewards, prompts)
        return self._gathered_rewards

    def _refuse_infinite_rewards(self, rewards: torch.Tensor, prompts: list) -> None:
        """Stop at the batch where a reward is infinite, naming the function, the prompt and the value, on every
        process alike (all hold the same gathered rewards). TRL would turn that rollout's group into NaN and then zero
        advantages, the tracker would count +inf as a success, and Reinforce-Ada's baseline would train NaN weights.
        NaN stays what it is in TRL: a rollout that a function could not score (it returned None)."""
        infinite = torch.isinf(rewards)
        if not infinite.any():
            return
        row, column = (int(index) for index in infinite.nonzero()[0])
        every_prompt = gather_object(list(prompts)) if self.accelerator.num_processes > 1 else list(prompts)
        shown = repr(every_prompt[row])
        raise ValueError(
            f"The reward function {self.reward_func_names[column]!r} gave {float(rewards[row, column])} to a "
            f"completion of the prompt {shown[:200] + ('...' if len(shown) > 200 else '')} (generated on process "
            f"{row // len(prompts)}): a reward must be finite, and TRL keeps rewards in float32, where anything beyond "
            "±3.4e38 is infinite. An infinite reward would zero its group's advantages (NaN weights under "
            "Reinforce-Ada's baseline) and count as a success. Return a finite reward (clip or rescale it), or None "
            "for a rollout that cannot be scored, which TRL leaves out of the baseline."
        )

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # Rows are already one rollout each, so vLLM server mode must not deduplicate them by a fixed group size:
        # it then sends every row in a single request with n=1 (the server's prefix cache shares the prompts).
        if self.model.training:
            num_generations = 1
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _generate_and_score_completions(self, inputs):
        # TRL generates one group of num_generations per prompt; this generates the batch in rounds, each prompt's
        # rollouts as its round rule decides, then lays the rows out by prompt and redoes TRL's grouping over them.
        if not self.model.training:  # evaluation keeps TRL's uniform num_generations_eval
            return super()._generate_and_score_completions(inputs)
        started, self._allocation_seconds = time.perf_counter(), 0.0
        prompts, keys = self._gather_prompts(inputs)
        budget = len(inputs) * self.accelerator.num_processes
        history_rates, from_prior, groups = self._history_rates(prompts, keys)
        failure_rate = self.tracker.failure_rate
        rule = self._round_rule(keys, history_rates, budget, failure_rate)
        if not rule.single_round and any(_has_images(row) for row in prompts):  # a streamed dataset's images
            refuse_images_in_rounds(self.allocator, self.args)
        rounds = GeneratedRounds(len(prompts), self.accelerator.num_processes, self.accelerator.process_index)
        seed = self._layout_seed * 1_000_003 + self.state.global_step
        zero_std_logged = len(self._metrics["train"]["frac_reward_zero_std"])
        trl_layout = False
        while (round_counts := rule.next_round(rounds)) is not None:
            # TRL's own layout (one round of equal groups on one process): TRL's grouping and advantages hold as they are.
            trl_layout = (rule.single_round and self.accelerator.num_processes == 1
                          and (round_counts == self.num_generations).all())
            self._generate_round(rounds, prompts, round_counts, seed + len(rounds), trl_layout)
        pad_token_id = getattr(self, "_tokenizer", self.processing_class).pad_token_id
        trained = (rounds.all_trained(pad_token_id) if not hasattr(rule, "trained_slots")
                   else rounds.selected(*rule.trained_slots(rounds), pad_token_id, self.accelerator.gather))
        rewards = self._weighted_rewards(trained.rewards)
        plan = self.last_rollout_plan = RolloutPlan(prompts, keys, rule.pass_rates, failure_rate, trained.counts,
                                                    trained.slot_order, history_rates, rule.history_counts,
                                                    self.args.budget_probe_generations, rounds.counts_per_round(),
                                                    rewards.cpu().numpy())
        counts, output, device = trained.counts, trained.output, trained.rewards.device
        generated_rewards, lengths = rounds.gathered_in_plan_order()
        if trl_layout:
            advantages = output["advantages"]  # TRL's, and its zero-std share, bit for bit: not computed twice
        else:
            advantages, is_std_zero = self._advantages(rule, rounds, trained, generated_rewards)
            zero_std = self._metrics["train"]["frac_reward_zero_std"]
            del zero_std[zero_std_logged:]  # one figure for the batch, not one per round
            zero_std.append(is_std_zero.float().mean().item())
        if self.args.advantage_clip is not None:
            advantages = advantages.clamp(-self.args.advantage_clip, self.args.advantage_clip)
        if self.args.budget_loss_weighting == "prompt":
            advantages = advantages * prompt_loss_weights(torch.as_tensor(counts, device=device), self.num_generations)
        output["advantages"] = advantages if trained.in_plan_order else advantages[torch.as_tensor(trained.my_slots,
                                                                                                   device=device)]
        if not (trl_layout and self.args.advantage_clip is None):  # TRL logged other advantages than these
            self._relog_advantages(rounds, trained, advantages)

        # The tracker learns from every rollout generated, trained or not.
        batch_failure_rate = self.tracker.update(
            np.repeat(keys, rounds.counts),
            self._success_rewards(generated_rewards, self._weighted_rewards(generated_rewards)),
            None if groups is None else np.repeat(groups, rounds.counts), lengths.cpu().numpy())
        self._warn_if_success_never_varies(batch_failure_rate)
        self._metrics["train"]["budget/completion_tokens"].append(float(output["num_items_in_batch"]))
        self._record_budget_metrics(plan, rewards, advantages, from_prior)
        self._warn_if_spread_overflows(plan.counts, plan.rewards, advantages)
        self._record_round_metrics(rule, rounds, trained)
        self._record_allocation_time(time.perf_counter() - started)
        return output

    def _advantages(self, rule, rounds: GeneratedRounds, trained, generated_rewards: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """GRPO's advantages over each prompt's trained rows or, under Reinforce-Ada's global statistics, against the
        weighted rewards of all its rollouts of the batch (`generated_rewards`, per function, in plan order)."""
        settings = getattr(rule, "settings", None)
        if settings is not None and settings.global_statistics:
            return advantages_against_all_rollouts(
                self._weighted_rewards(trained.rewards), trained.counts, self._weighted_rewards(generated_rewards),
                rounds.counts, scale=self.scale_rewards != "none")
        return grouped_advantages(trained.rewards, torch.as_tensor(trained.counts, device=trained.rewards.device),
                                  self.reward_weights, self.scale_rewards, self.multi_objective_aggregation)

    def _round_rule(self, keys: list[str], history_rates: np.ndarray, budget: int, failure_rate):
        """The batch's round rule: rounds until mixed, a probe and then the rest, or one round (both releases)."""
        args = self.args

        def allocate(pass_rates):
            return self._allocate(keys, pass_rates, budget, failure_rate)[0]

        def fresh_rates(wins, trials):
            return fresh_pass_rates(*self.tracker.evidence(keys), wins, trials, args.budget_probe_history_weight,
                                    args.budget_probe_prior_strength)

        if hasattr(self.allocator, "round_rule"):  # a rule of rounds chosen as an allocator: Reinforce-Ada
            return self.allocator.round_rule(self.accelerator.num_processes)
        if args.budget_round_generations:
            def top_up_by_value(pass_rates, counts, spare):
                return self._on_main_process(
                    "Rollout allocation",
                    lambda: top_up(self.allocator, pass_rates, counts, spare, failure_rate, args.max_generations))

            first = args.budget_first_round_generations or args.min_generations
            return UntilMixed(first, args.budget_round_generations, args.max_generations, budget,
                              self.accelerator.num_processes, args.budget_max_rounds, fresh_rates, top_up_by_value)
        if args.budget_probe_generations:
            return ProbeThenAllocate(args.budget_probe_generations, history_rates,
                                     lambda rates: self._allocate(keys, rates, budget, failure_rate, history_rates),
                                     fresh_rates)
        return OneShot(history_rates, allocate)

    def _generate_round(self, rounds: GeneratedRounds, prompts: list[dict[str, Any]], counts: np.ndarray, seed: int,
                        trl_layout: bool) -> None:
        """TRL's generation and scoring of `counts[i]` rollouts of each prompt, dealt over the processes; recorded in
        `rounds` with the rewards and completion lengths of every process and the in-round successes.

        With `trl_layout` the rows are TRL's own (equal groups of `num_generations`, in order), so TRL's advantages
        are kept; otherwise TRL groups nothing, and the advantages are computed afterwards over the plan's groups.
        """
        order = balanced_slot_order(counts, self.accelerator.num_processes, seed)
        prompt_of_slot = np.repeat(np.arange(len(prompts)), counts)
        local = len(order) // self.accelerator.num_processes
        rank = self.accelerator.process_index
        mine = [prompts[prompt_of_slot[slot]] for slot in order[rank * local : (rank + 1) * local]]
        if trl_layout:
            output = super()._generate_and_score_completions(mine)
        else:
            # TRL views a round's rewards as groups of num_generations (`rewards.view(-1, num_generations)`), which
            # fails when a round's row count is no multiple of it (a probe of 2 rollouts from 3 prompts: 6 rows, 4 per
            # group). Its groups are discarded anyway, so it groups each row alone while it scores the round.
            self.num_generations = 1
            try:
                output = super()._generate_and_score_completions(mine)
            finally:
                self.num_generations = self.args.num_generations
        gathered = self._gathered_rewards
        lengths = self.accelerator.gather(output["completion_mask"].sum(1))  # the tracker's expected lengths
        rounds.add(output, order, counts, gathered, lengths, self._outcomes(gathered))

    def _relog_advantages(self, rounds: GeneratedRounds, trained, advantages: torch.Tensor) -> None:
        """Replace the advantages TRL logged for this batch's generated rows (for `log_completions`) with the ones
        trained; a row generated but not trained logs NaN."""
        by_slot = torch.full((int(rounds.counts.sum()),), float("nan"), device=advantages.device)
        by_slot[torch.as_tensor(trained.generated_slots, device=advantages.device)] = advantages
        by_row = by_slot[torch.as_tensor(rounds.slot_order(), device=advantages.device)]
        logged_advantages = self._logs["advantages"]
        for _ in range(min(by_row.numel(), len(logged_advantages))):
            logged_advantages.pop()
        logged_advantages.extend(by_row.tolist())

    def _record_round_metrics(self, rule, rounds: GeneratedRounds, trained) -> None:
        """With rounds: how many the batch took, the share of prompts still active after each, rollouts generated and
        trained."""
        if rule.single_round or isinstance(rule, ProbeThenAllocate):
            return
        metrics = self._metrics["train"]
        metrics["budget/rounds"].append(float(len(rounds)))
        for index, share in enumerate(rule.active_after_round, start=1):
            metrics[f"budget/active_after_round_{index}"].append(share)
        metrics["budget/generated_rollouts"].append(float(rounds.counts.sum()))
        metrics["budget/trained_rollouts"].append(float(trained.counts.sum()))

    def _record_allocation_time(self, batch_seconds: float) -> None:
        """Log the batch's allocation time; warn once when it takes a large share of generating the batch."""
        self._metrics["train"]["budget/allocation_seconds"].append(self._allocation_seconds)
        share = self._allocation_seconds / batch_seconds if batch_seconds > 0 else 0.0
        if share > SLOW_ALLOCATION_SHARE and not self._warned_slow_allocation and self.accelerator.is_main_process:
            self._warned_slow_allocation = True
            logger.warning(
                f"Allocation took {self._allocation_seconds:.2f} s of this generation batch's {batch_seconds:.2f} s "
                f"({share:.0%}; warned above {SLOW_ALLOCATION_SHARE:.0%}), while every process waits for the main "
                f"process's decision. The built-in allocators take milliseconds per batch; a slow custom allocator "
                f"({self.allocator!r}) is the usual cause. budget/allocation_seconds logs every batch's time; this "
                "warning is not repeated."
            )

    def _history_rates(self, prompts, keys):
        """Pass rates from the tracker, with the prior for unseen prompts when one is set; which used it; groups."""
        priors, groups = prior_inputs(prompts, self.args)
        if priors is None and groups is None:
            return self.tracker.pass_rates(keys), None, None
        rates, from_prior = self.tracker.prior_pass_rates(keys, priors, groups, self.args.pass_rate_prior_strength)
        return rates, from_prior, groups

    def _weighted_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Each rollout's weighted sum of rewards; NaN where no reward function could score it."""
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return rewards

    def _success_rewards(self, rewards_per_func: torch.Tensor, weighted: torch.Tensor) -> np.ndarray:
        """The reward that decides success: `weighted` (the weighted sum), or that of `success_reward_func`."""
        column = self._success_reward_index
        return (weighted if column is None else rewards_per_func[:, column]).cpu().numpy()

    def _outcomes(self, rewards_per_func: torch.Tensor) -> np.ndarray:
        """Each row's outcome for the tracker and the round rules: 1.0 a success, 0.0 a failure, NaN unscored."""
        rewards = self._success_rewards(rewards_per_func, self._weighted_rewards(rewards_per_func))
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(rewards), np.nan, (rewards >= self.tracker.success_threshold).astype(np.float64))

    def _warn_if_spread_overflows(self, counts: np.ndarray, rewards: np.ndarray, advantages: torch.Tensor) -> None:
        """Warn once when a group's rewards differ yet all its advantages are 0: their spread overflowed float32,
        where TRL computes a group's standard deviation (`GRPOTrainer` zeroes such a group too)."""
        if self._warned_overflow:
            return
        starts = np.cumsum(counts) - counts
        with np.errstate(invalid="ignore"):
            spread = np.fmax.reduceat(rewards, starts) > np.fmin.reduceat(rewards, starts)
        silent = ~np.logical_or.reduceat(advantages.detach().cpu().numpy() != 0, starts)
        if (spread & silent).any() and self.accelerator.is_main_process:
            self._warned_overflow = True
            largest = float(np.nanmax(np.abs(rewards)))
            logger.warning(
                f"{int((spread & silent).sum())} group(s) of this batch have rewards that differ (up to {largest:.3g} "
                "in size) and yet advantage 0 on every rollout: the squared spread of their rewards overflows float32 "
                "(beyond about 1.8e19), in which TRL computes a group's standard deviation, so GRPOTrainer zeroes "
                "them too and they train nothing. Rescale the rewards (to within about ±1e9) to train on them. This "
                "warning is not repeated."
            )

    def _warn_if_success_never_varies(self, batch_failure_rate: float | None) -> None:
        """Warn once when every rollout of many batches in a row was judged solved, or every one failed."""
        if batch_failure_rate not in (0.0, 1.0):
            self._extreme_batches = 0
            return
        self._extreme_batches += 1
        if self._extreme_batches == EXTREME_BATCHES_BEFORE_WARNING and self.accelerator.is_main_process:
            judged = "solved" if batch_failure_rate == 0.0 else "failed"
            judge = (
                "the weighted sum of the rewards" if self._success_reward_index is None
                else f"the reward {self.reward_func_names[self._success_reward_index]!r}"
            )
            logger.warning(
                f"Every rollout of the last {EXTREME_BATCHES_BEFORE_WARNING} generation batches was judged {judged}: a "
                f"rollout is a success when {judge} reaches success_threshold={self.args.success_threshold}. Every "
                "pass rate is then 0 or 1, and the allocator hands out fixed counts as if nothing were known. If the "
                "rewards do vary, set success_threshold to the reward that means 'solved' (and success_reward_func "
                "to the correctness reward)."
            )

    # -------------------------------------------------------------------------------------------------- metrics

    def _record_budget_metrics(self, plan: RolloutPlan, rewards: torch.Tensor, advantages: torch.Tensor,
                               from_prior: np.ndarray | None) -> None:
        metrics = self._metrics["train"]
        counts = plan.counts.astype(np.float64)
        metrics["budget/rollouts_mean"].append(float(counts.mean()))
        metrics["budget/rollouts_std"].append(float(counts.std()))
        metrics["budget/rollouts_min"].append(float(counts.min()))
        metrics["budget/rollouts_max"].append(float(counts.max()))
        metrics["budget/effective_ratio"].append((advantages != 0).float().mean().item())
        weight = np.bincount(np.repeat(np.arange(len(plan.counts)), plan.counts), advantages.abs().cpu().numpy(),
                             minlength=len(plan.counts))  # each prompt's share of the loss's |advantage| mass
        metrics["budget/prompts_with_gradient"].append(float(np.mean(weight > 0)))
        metrics["budget/top_prompt_loss_share"].append(float(weight.max() / weight.sum()) if weight.sum() else 0.0)
        starts = np.cumsum(plan.counts) - plan.counts
        rewards = rewards.cpu().numpy()
        group_max = np.fmax.reduceat(rewards, starts)  # NaN rewards ignored
        group_min = np.fmin.reduceat(rewards, starts)
        metrics["budget/zero_std_groups"].append(float(np.mean(~(group_max > group_min))))
        metrics["budget/unseen_prompts"].append(float(np.isnan(plan.pass_rates).mean()))
        capped = getattr(self, "_last_token_cap", None)
        if self.args.budget_token_cap is not None and capped is not None and capped.last is not None:
            metrics["budget/expected_token_ratio"].append(capped.last.token_ratio)  # against uniform's, estimated
            metrics["budget/token_cap_multiplier"].append(capped.last.multiplier)
            metrics["budget/token_cap_fits"].append(float(capped.last.fits))  # 0: even the cheapest split is above
        if from_prior is not None:  # share of the batch's prompts allocated from a prior
            metrics["budget/prior_share"].append(float(from_prior.mean()))
        if plan.failure_rate is not None:
            metrics["budget/failure_rate"].append(plan.failure_rate)
        allocator_metrics = getattr(self.allocator, "metrics", None)
        if callable(allocator_metrics):  # the allocator's own view of the batch, e.g. CoBA-RL's alpha
            for name, value in allocator_metrics(plan.pass_rates, plan.failure_rate).items():
                metrics[f"budget/{name}"].append(float(value))
        if plan.probe_generations:
            metrics["budget/probe_share"].append(plan.probe_generations * len(plan.counts) / float(plan.counts.sum()))
            if plan.history_counts is not None:  # share of the budget the probe moved to other prompts
                moved = np.abs(plan.counts - plan.history_counts).sum() / (2.0 * plan.counts.sum())
                metrics["budget/probe_moved_share"].append(float(moved))
        self._budget_history["rollouts_per_prompt"].extend(plan.counts.tolist())
        self._budget_history["pass_rates"].extend(plan.pass_rates[~np.isnan(plan.pass_rates)].tolist())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training:  # an evaluation log in mid-training keeps the training history for the next one
            if self.accelerator.is_main_process:
                self._log_budget_histograms()
            self._budget_history = {"rollouts_per_prompt": [], "pass_rates": []}
        super().log(logs, start_time)

    def _log_budget_histograms(self) -> None:
        report_to = self.args.report_to or []
        if "wandb" not in report_to and "tensorboard" not in report_to:
            return
        histories = {
            f"train/budget/{name}": np.asarray(values) for name, values in self._budget_history.items() if values
        }
        if not histories:
            return
        if "wandb" in report_to:
            import wandb

            if wandb.run is not None:
                histograms = {tag: wandb.Histogram(values) for tag, values in histories.items()}
                wandb.log({**histograms, "train/global_step": self.state.global_step})
        if "tensorboard" in report_to:
            from transformers.integrations import TensorBoardCallback

            for callback in self.callback_handler.callbacks:
                if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
                    for tag, values in histories.items():
                        callback.tb_writer.add_histogram(tag, values, self.state.global_step)

    # ---------------------------------------------------------------------------------------------- checkpoints

    def train(self, resume_from_checkpoint=None, trial=None, **kwargs):
        # With resume_from_checkpoint=True the Trainer takes the highest-numbered checkpoint folder, even one whose
        # save was killed half-way (then it fails: "Can't find a valid checkpoint"). This resumes from the newest
        # complete one instead; an explicit path is used as given.
        if resume_from_checkpoint is True:
            resume_from_checkpoint = self._latest_complete_checkpoint()
        return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)

    def _latest_complete_checkpoint(self) -> str | bool:
        checkpoint, incomplete = latest_complete_checkpoint(self.args.output_dir)
        if incomplete and checkpoint is None:
            raise ValueError(
                f"resume_from_checkpoint=True found only checkpoints whose save did not finish (no readable "
                f"trainer_state.json): {', '.join(incomplete)}. Nothing can be resumed from them; remove them to "
                "start afresh, or pass the path of a complete checkpoint kept elsewhere."
            )
        if incomplete:
            logger.warning(
                f"Skipping {', '.join(incomplete)}: its save did not finish (no readable trainer_state.json), so the "
                f"run resumes from {checkpoint}, the newest complete checkpoint. The incomplete folder is left as it "
                "is; a later save of the same step overwrites it."
            )
        return True if checkpoint is None else checkpoint  # none at all: the Trainer's own error

    def _save_checkpoint(self, model, trial):
        # The tracker's file goes into the checkpoint folder first, written atomically, so that TRL never pushes the
        # checkpoint or rotates older ones away while this checkpoint lacks it.
        if self.args.should_save:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            checkpoint = os.path.join(self._get_output_dir(trial=trial), folder)
            created = not os.path.isdir(checkpoint)
            os.makedirs(checkpoint, exist_ok=True)
            try:
                write_json_atomically(os.path.join(checkpoint, TRACKER_STATE_NAME), self.tracker.state_dict())
            except OSError:
                if created and not os.listdir(checkpoint):  # leave no empty folder that looks like a checkpoint
                    os.rmdir(checkpoint)
                raise
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Restores the tracker with the optimizer, the hook TRL itself uses for its own controller state on resume.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, TRACKER_STATE_NAME)
        if os.path.exists(path):
            try:
                load_tracker_state(self.tracker, path)
            except SettingsMismatch as error:
                raise ValueError(self._settings_mismatch_message(path, error)) from error
        else:
            logger.warning(
                f"{path} is missing: the checkpoint was written by GRPOTrainer or by an older trl_budget, or its save "
                "was interrupted. The run resumes with every prompt unseen, so allocation starts over from the "
                "default counts and learns the pass rates again as prompts come back."
            )


    def _settings_mismatch_message(self, path: str, error: SettingsMismatch) -> str:
        """Which config fields to set, and to what, to resume from a tracker file made with other settings."""
        fields_to_set = ", ".join(f"{TRACKER_FIELDS.get(name, name)}={saved!r} (this run: {current!r})"
                                  for name, (saved, current) in error.differences.items())
        return (
            f"{path} was written with other pass-rate settings than this run's, so its pass rates cannot be carried "
            f"over. To resume it, set {fields_to_set}; fields left at None follow budget_allocator (now "
            f"{self.args.budget_allocator!r}), so a changed allocator changes them too. To keep this run's settings, "
            "start from this checkpoint's model without resume_from_checkpoint, or delete the file to resume with "
            "every prompt unseen."
        )


class TokenCappedAllocator:
    """`allocator` under a cap on expected completion tokens (`allocators.token_cap`), as one allocation call."""

    def __init__(self, allocator, lengths: np.ndarray, cap: float):
        self.allocator, self.lengths, self.cap, self.last = allocator, lengths, cap, None

    def __call__(self, pass_rates, budget, failure_rate=None):
        self.last = allocate_under_token_cap(self.allocator, pass_rates, budget, failure_rate, self.lengths, self.cap)
        return self.last.counts

    def __repr__(self) -> str:
        return f"{self.allocator!r} under budget_token_cap={self.cap}"


def refuse_seeded_vllm_generation(args: BudgetGRPOConfig) -> None:
    """A vLLM `seed` would make every rollout of a prompt the same: each slot is its own request with n=1."""
    seed = (args.generation_kwargs or {}).get("seed")
    if args.use_vllm and seed is not None:
        raise ValueError(
            f"generation_kwargs['seed']={seed!r} with use_vllm=True would give every rollout of a prompt the same "
            "completion: BudgetGRPOTrainer sends each rollout slot to vLLM as its own prompt with n=1, and vLLM seeds "
            "each such prompt alike, so every group would have zero advantage. Remove 'seed' from "
            "generation_kwargs; `seed` in the config still fixes the data order and initialisation."
        )


def check_agent_options(environment_factory, dataset, args: BudgetGRPOConfig) -> None:
    """Environments key their rollouts by their dataset rows: a row needs a prompt, or an id column."""
    if environment_factory is not None and dataset is None:
        raise ValueError(
            "environment_factory without a train_dataset: TRL then feeds identical placeholder prompts, so per-prompt "
            "budgets cannot tell the prompts apart. Pass a train_dataset whose rows identify their prompt (a `prompt` "
            "column, or an id column named by prompt_id_column)."
        )
    names = getattr(dataset, "column_names", None)
    if environment_factory is not None and names is not None and "prompt" not in names and (
            args.prompt_id_column is None):
        raise ValueError(
            f"The training dataset's rows have no `prompt` (columns: {sorted(names)}): each environment supplies its "
            "prompt at reset, so per-prompt budgets need another way to key a row. Set prompt_id_column to a column "
            "that identifies the prompt each row stands for."
        )


def check_prompt_id_column(column: str | None, dataset) -> None:
    """Fail at construction when `prompt_id_column` is not a dataset column or leaves a prompt without an id."""
    names = getattr(dataset, "column_names", None)
    if column is None or names is None:
        return
    if column not in names:
        raise ValueError(
            f"prompt_id_column={column!r} is not a column of the training dataset (columns: {sorted(names)}). Name "
            "one of them, or set prompt_id_column=None to key prompts by their content."
        )
    if hasattr(dataset, "__len__"):  # a map-style dataset can be checked whole; a streamed one is checked per batch
        missing = first_row_where(dataset, column, is_missing, arrow_missing)
        if missing is not None:
            raise _missing_id_error(column, dataset[missing][column], f"in row {missing} of the training dataset")


def check_rounds_allocator(allocator, args: BudgetGRPOConfig, prompts_per_batch: int) -> None:
    """An allocator that brings its own rounds (Reinforce-Ada) trains `num_generations` of each prompt, alone."""
    if args.budget_probe_generations or args.budget_round_generations:
        raise ValueError(
            f"{allocator!r} generates each batch in rounds of its own, so budget_probe_generations="
            f"{args.budget_probe_generations} and budget_round_generations={args.budget_round_generations} cannot "
            "apply; set both to 0."
        )
    if allocator.keep != args.num_generations:
        raise ValueError(f"{allocator!r} trains K={allocator.keep} rollouts of each prompt, but TRL's batch holds "
                         f"num_generations={args.num_generations} of each; build it with default_generations="
                         f"{args.num_generations}.")
    allocator.check_batch(prompts_per_batch, args.world_size)
    if allocator.global_statistics and (args.scale_rewards == "batch"
                                        or args.multi_objective_aggregation != "sum_then_normalize"):
        raise ValueError(
            f"reinforce_ada_global_statistics=True sets each prompt's baseline from all its rollouts of the batch, "
            f"which defines the scale of a group (scale_rewards='group') or none (scale_rewards='none'), for the "
            f"summed rewards; scale_rewards={args.scale_rewards!r} with multi_objective_aggregation="
            f"{args.multi_objective_aggregation!r} has no such meaning. Use scale_rewards='group' or 'none' with "
            "'sum_then_normalize', or set reinforce_ada_global_statistics=False."
        )


def _has_images(row: dict[str, Any]) -> bool:
    """A row whose prompt shows images: in TRL's `image`/`images` column, or as image parts of its messages."""
    if any(row.get(name) is not None for name in IMAGE_COLUMNS):
        return True
    prompt = row.get("prompt")
    return isinstance(prompt, list) and any(
        isinstance(message, dict) and isinstance(message.get("content"), list)
        and any(isinstance(part, dict) and part.get("type") == "image" for part in message["content"])
        for message in prompt)


def dataset_shows_images(dataset) -> bool:
    """The training dataset has an image column, or its first row's prompt holds an image (map-style datasets)."""
    names = getattr(dataset, "column_names", None)
    if isinstance(names, list) and any(name in names for name in IMAGE_COLUMNS):
        return True
    if dataset is None or isinstance(dataset, dict) or not hasattr(dataset, "__len__") or len(dataset) == 0:
        return False
    first = dataset[0]
    return isinstance(first, dict) and _has_images(first)


def refuse_images_in_rounds(allocator, args: BudgetGRPOConfig) -> None:
    """Rounds merge, gather and down-sample TRL's generation outputs, which cannot carry multimodal fields yet: say so
    before anything is generated, with the fix for the rule in use."""
    if hasattr(allocator, "round_rule"):
        rule, fix = (f"{allocator!r} generates each batch in rounds and trains a subset of the rows",
                     "train vision prompts with a one-shot allocator (budget_allocator='knapsack', 'coba' or "
                     "'uniform')")
    elif args.budget_round_generations:
        rule, fix = (f"budget_round_generations={args.budget_round_generations} generates each batch in rounds",
                     "set budget_round_generations=0 (the allocator then decides in one shot)")
    elif args.budget_probe_generations:
        rule, fix = (f"budget_probe_generations={args.budget_probe_generations} generates each batch in two stages",
                     "set budget_probe_generations=0 (the allocator then decides in one shot, from history)")
    else:
        return
    raise ValueError(
        f"The training prompts show images, and {rule}, which cannot merge multimodal generation outputs yet. To "
        f"{fix}."
    )


def warn_if_rounds_cannot_follow_the_first(allocator, args: BudgetGRPOConfig, prompts_per_batch: int) -> None:
    """Warn once, at construction, when the first round of every batch spends the whole generation budget: the rule
    then never takes a second round and trains as uniform GRPO does, silently."""
    if args.process_index != 0:
        return
    if hasattr(allocator, "round_rule") and hasattr(allocator, "generation_cap"):
        first = prompts_per_batch * allocator.samples_per_round
        cap = allocator.generation_cap(prompts_per_batch)
        if first < cap and allocator.max_rounds > 1:
            return
        why = (f"reinforce_ada_max_rounds={allocator.max_rounds}" if allocator.max_rounds == 1 else
               f"its first round takes {prompts_per_batch} prompts x reinforce_ada_samples_per_round="
               f"{allocator.samples_per_round} = {first} rollouts, the whole reinforce_ada_max_generated={cap}")
        one_round = ("uniform GRPO" if allocator.samples_per_round == allocator.keep
                     else f"one round of {allocator.samples_per_round} per prompt, down-sampled to K")
        logger.warning(
            f"Reinforce-Ada can never take a second round here: {why}. Every batch is then {one_round}, with "
            f"K={args.num_generations} rollouts trained per prompt. A batch holds generation_batch_size / num_generations = "
            f"{args.generation_batch_size} / {args.num_generations} = {prompts_per_batch} prompts, since "
            "num_generations is K, the rollouts trained of each: to keep P prompts per batch at K, set "
            "per_device_train_batch_size so that generation_batch_size = P x K, and leave the later rounds room "
            "under reinforce_ada_max_generated."
        )
    elif args.budget_round_generations:
        first = args.budget_first_round_generations or args.min_generations
        if first < args.num_generations:
            return
        logger.warning(
            f"Rounds until mixed can never take a second round here: budget_first_round_generations={first} equals "
            f"num_generations, so the first round ({prompts_per_batch} prompts x {first} = "
            f"{prompts_per_batch * first} rollouts) spends the batch's whole budget, and every batch is uniform "
            "GRPO. Lower budget_first_round_generations (it defaults to min_generations)."
        )


def check_dataset_fills_a_generation_batch(dataset, prompts_per_batch: int, args: BudgetGRPOConfig) -> None:
    """TRL's sampler drops a generation batch it cannot fill: a smaller dataset would train no step, silently."""
    if dataset is None or isinstance(dataset, dict) or not hasattr(dataset, "__len__"):
        return
    if len(dataset) < prompts_per_batch:
        raise ValueError(
            f"The training dataset has {len(dataset)} prompts, but one generation batch needs {prompts_per_batch} "
            f"distinct prompts (generation_batch_size={args.generation_batch_size} / num_generations="
            f"{args.num_generations}); TRL's sampler drops a batch it cannot fill, so this run would train no step. "
            "Add prompts, or lower per_device_train_batch_size, steps_per_generation or generation_batch_size "
            f"(at most {len(dataset) * args.num_generations} rollouts per generation batch with this dataset)."
        )


def _missing_id_error(column: str, value: Any, where: str) -> ValueError:
    return ValueError(
        f"prompt_id_column={column!r} is {value!r} {where}: every prompt needs an id of its own, or all such prompts "
        "would share one pass rate. Fill in the ids, or set prompt_id_column=None to key prompts by their content."
    )
