"""`BudgetGRPOConfig`: TRL's `GRPOConfig` plus the settings of rollout-budget allocation."""

from __future__ import annotations

import difflib
import inspect
import json
import math
import re
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

from trl import GRPOConfig

from .allocators import allocator_class, release_pass_rate_rule
from .checks import (check_finite, check_flag, check_optional_name, check_whole_number, is_finite_number,
                     is_whole_number, shown)
from .tracker import CapabilityTracker

# TRL 1.16's losses, each positively homogeneous in the advantage (checked against TRL's own loss in the tests).
PROMPT_WEIGHTED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")

# Tracker constructor argument -> the config field that sets it.
TRACKER_FIELDS = {
    "window": "pass_rate_window",
    "rollout_pool": "pass_rate_rollout_pool",
    "min_rollouts": "pass_rate_min_rollouts",
    "failure_rate_window": "failure_rate_window",
    "success_threshold": "success_threshold",
    "reward_history_window": "advantage_history_window",
}
ADVANTAGE_BASELINES = ("group", "all_rollouts", "history", "spo")
# Former name -> name. Settings are named after what they set: `budget_*` the allocation (its rule, options and token
# cap), `<rule>_*` a rule's options, `pass_rate_*`, `success_*` and `failure_rate_window` the tracker's estimates,
# `probe_*`, `rounds_*` and `dynamic_sampling*` how a batch is generated, `advantage_*` the baseline, `prompt_*` the
# prompts, `loss_weighting` the loss. The former names are accepted, with a FutureWarning, until trl_budget 0.3.
RENAMED_SETTINGS = {
    "budget_probe_generations": "probe_generations",
    "budget_probe_history_weight": "probe_history_weight",
    "budget_probe_prior_strength": "probe_prior_strength",
    "budget_round_generations": "rounds_generations",
    "budget_first_round_generations": "rounds_first_generations",
    "budget_max_rounds": "rounds_max",
    "budget_per_prompt_rounds": "rounds_prompt_by_prompt",
    "budget_dynamic_sampling_metric": "dynamic_sampling_metric",
    "budget_dynamic_sampling_oversample": "dynamic_sampling_oversample",
    "budget_dynamic_sampling_max_gen_batches": "dynamic_sampling_max_gen_batches",
    "budget_dynamic_sampling": "dynamic_sampling",
    "budget_loss_weighting": "loss_weighting",
}
DYNAMIC_SAMPLING_METRICS = ("reward", "success")


@dataclass
class BudgetGRPOConfig(GRPOConfig):
    r"""
    Configuration class for the [`BudgetGRPOTrainer`].

    Everything of [`~trl.GRPOConfig`] keeps its meaning. `num_generations` becomes the *average* number of rollouts per
    prompt: each generation batch still holds `generation_batch_size` rollouts, so a step costs what it costs with
    `GRPOTrainer`, but the allocator decides how they are shared among the batch's prompts.

    Parameters:
        > Parameters that control the allocation

        budget_allocator (`str`, *optional*, defaults to `"knapsack"`):
            Allocation rule: `"knapsack"` (Knapsack RL), `"coba"` (CoBA-RL), `"uniform"` (GRPO's equal split),
            `"reinforce_ada"` (Reinforce-Ada's rounds), another name registered with `register_allocator`, or a dotted
            path to an allocator class
            (`"my_package.my_module:MyAllocator"`). Fields named `<allocator>_<option>` (`knapsack_fallback`, say) are
            passed to its constructor as `<option>`. Ignored when an `allocator` object is passed to the trainer.
        budget_allocator_kwargs (`dict`, `str` or `None`, *optional*, defaults to `None`):
            Further constructor arguments of the allocator (a dict, or its JSON on the command line).
        budget_token_cap (`float` or `None`, *optional*, defaults to `None`):
            Cap on each generation batch's expected completion tokens, as a multiple of those of the uniform
            allocation of the same batch (each prompt's expected length: its mean over its latest visit; unmeasured:
            the batch's mean). The allocator then maximises its value minus a price per expected token, the price
            searched so that the cap holds. `None`: rollouts alone are the budget, as in both releases.
        min_generations (`int`, *optional*, defaults to `2`):
            Fewest rollouts a prompt of the batch can receive.
        max_generations (`int`, *optional*, defaults to `128`):
            Most rollouts a prompt of the batch can receive.

        > Parameters that control the capability tracker

        pass_rate_window (`int` or `None`, *optional*, defaults to `None`):
            Most recent visits of a prompt whose rollouts form its pass-rate estimate. `None`: the chosen allocator's
            release setting (knapsack 16, never binding; coba 1, the last visit).
        pass_rate_rollout_pool (`int` or `None`, *optional*, defaults to `None`):
            Most recent rollouts the estimate pools across visits, unless the last visit alone has that many (then it
            is used whole); 0 pools whole visits. `None`: the release setting (knapsack 16, coba 0).
        pass_rate_min_rollouts (`int` or `None`, *optional*, defaults to `None`):
            Scored rollouts a prompt needs in total before it has a pass rate; until then it is unseen. `None`: the
            release setting (knapsack 8, coba 1).
        failure_rate_window (`int` or `None`, *optional*, defaults to `None`):
            Number of recent generation batches over which the global failure rate is averaged. `None`: the release
            setting (1: CoBA-RL's run script; its class default is 3).
        success_threshold (`float`, *optional*, defaults to `1.0`):
            A rollout counts as a success when its reward is at least this value: the total (weighted) reward, or the
            reward of `success_reward_func` when set.
        success_reward_func (`str`, `int` or `None`, *optional*, defaults to `None`):
            The reward function (its name or index in `reward_funcs`) whose reward alone decides success, e.g. the
            accuracy reward when a format reward is added to it. `None`: the weighted sum of all reward functions.
        prompt_id_column (`str` or `None`, *optional*, defaults to `None`):
            Dataset column identifying a prompt. When `None`, a stable hash of the prompt content is used.

        > Parameters of the prior for unseen prompts

        pass_rate_prior_column (`str` or `None`, *optional*, defaults to `None`):
            Numeric dataset column in [0, 1] (a reference model's solve rate, a difficulty level mapped to a rate):
            a prompt the pass-rate rule still calls unseen takes it as its pass rate, weighed as
            `pass_rate_prior_strength` rollouts beside its own rollouts so far. Empty (None or NaN) cells: no prior.
        prompt_group_column (`str` or `None`, *optional*, defaults to `None`):
            Categorical dataset column (level, source, topic). The tracker pools the evidence of each group's
            prompts; an unseen prompt without a column prior takes its group's pooled rate (once the group has
            `pass_rate_min_rollouts` of evidence), weighed the same way. Empty (None or NaN) cells: no group.
        pass_rate_prior_strength (`float`, *optional*, defaults to `8.0`):
            Pseudo-rollouts the prior counts as, against the prompt's own rollouts while it is unseen.

        > Parameters of the Knapsack RL allocator

        knapsack_fallback (`bool`, *optional*, defaults to `True`):
            Published fallback: mixed prompts get only the rollouts they need to show a non-zero gradient, and the
            excess goes to prompts never solved.
        knapsack_fallback_confidence (`float`, *optional*, defaults to `0.9`):
            Probability of a non-zero gradient that the fallback's cost estimate aims for.
        knapsack_zero_pass_generations (`int`, *optional*, defaults to `2`):
            Rollouts for a prompt whose last visit had no success.
        knapsack_full_pass_generations (`int`, *optional*, defaults to `2`):
            Rollouts for a prompt whose last visit had only successes.

        > Parameters of the CoBA-RL allocator

        coba_kappa (`float`, *optional*, defaults to `11.0`):
            Concentration alpha + beta of the capability-oriented Beta density.
        coba_gamma (`float`, *optional*, defaults to `10.0`):
            Steepness of the sigmoid applied to failure rates below 0.5.
        coba_bucket_heuristic (`bool`, *optional*, defaults to `False`):
            The official CoBA-RL release's bucket rule (not in the paper): only `coba_exploration_share` of the spare
            budget is optimised, the rest goes to very hard prompts first.
        coba_exploration_share (`float`, *optional*, defaults to `0.7`):
            Share of the spare budget optimised over exploration prompts under the bucket rule.

        > Parameters of Reinforce-Ada (`budget_allocator="reinforce_ada"`)

        reinforce_ada_choice (`str`, *optional*, defaults to `"balanced"`):
            Exit rule of a prompt: `"balanced"` (its rollouts hold K/2 successes and K/2 failures, K =
            `num_generations`) or `"positive_focused"` (one success), as the release's `reinforce_ada_choice`.
        reinforce_ada_samples_per_round (`int`, *optional*, defaults to `8`):
            Rollouts of every prompt still active in each round (the release's `round_repeat`); at least
            `num_generations`.
        reinforce_ada_max_rounds (`int`, *optional*, defaults to `4`):
            Most rounds per generation batch (the release's `max_rounds`).
        reinforce_ada_global_statistics (`bool`, *optional*, defaults to `True`):
            The advantage baseline (mean and, with `scale_rewards="group"`, deviation) from the weighted rewards of all
            the prompt's rollouts of the batch, not only the K trained (the release's `global_stat_est`, which takes
            them over its 0/1 scores).
        reinforce_ada_max_generated (`int` or `None`, *optional*, defaults to `None`):
            Most rollouts generated per batch (its cost; the trained rollouts stay `generation_batch_size`). `None`:
            every round of every prompt.

        > Parameters of the probe stage

        probe_generations (`int`, *optional*, defaults to `0`):
            Rollouts of every prompt in a first (probe) stage of each generation batch, within the same budget: they
            are scored, each prompt's pass rate is re-estimated from them and its history, and the allocator spreads
            the rest of the budget. At most `min_generations`. 0: no probe stage.
        probe_history_weight (`float`, *optional*, defaults to `0.5`):
            Weight of one past rollout against one probe rollout in that estimate (the mean of a Beta posterior whose
            prior is the discounted history).
        probe_prior_strength (`float`, *optional*, defaults to `0.0`):
            Pseudo-rollouts at the batch's probe pass rate added to every prompt's estimate (empirical Bayes), so that
            a few probe rollouts cannot alone make a prompt look hopeless or solved. 0: none.

        > Parameters of rounds until mixed

        rounds_generations (`int`, *optional*, defaults to `0`):
            Generate each batch in rounds: a first round of every prompt, then rounds of this many more rollouts for
            each prompt whose rollouts so far are all successes or all failures, until every prompt is mixed or has
            `max_generations`, or the rounds run out; the allocator then spreads the budget left by its value (uniform:
            evenly), from pass rates that include the batch's rollouts. Every rollout is trained. 0: no rounds.
        rounds_first_generations (`int` or `None`, *optional*, defaults to `None`):
            Rollouts of every prompt in the first round, between `min_generations` and `num_generations`. `None`:
            `min_generations`.
        rounds_max (`int` or `None`, *optional*, defaults to `None`):
            Most rounds of sampling until mixed, the first included (each is one generation request); the allocator's
            top-up of the budget left is one more. `None`: until every prompt is mixed or capped, or the budget is
            spent.
        rounds_prompt_by_prompt (`bool`, *optional*, defaults to `False`):
            With rounds (Reinforce-Ada, or rounds until mixed), send each prompt's next round to the colocated vLLM
            engine as soon as its own round has finished and been scored, while the other prompts' rollouts keep
            decoding, instead of one blocking request a round. A prompt goes on alone only while the rule's decision
            for it is provably its own; the rest is decided round by round, so the batch gets exactly the rounds the
            round-synchronous path gives it. vLLM in either mode (colocate: the in-process engine's requests; server:
            a request a prompt's round), text prompts without tools; on several processes every amount of a round a
            multiple of the processes (each prompt's round is dealt evenly over them).

        > Parameters of dynamic sampling (DAPO)

        dynamic_sampling (`bool`, *optional*, defaults to `False`):
            DAPO's dynamic sampling, as verl's DAPO recipe releases it (`algorithm.filter_groups.enable`; NeMo RL's
            `use_dynamic_sampling`): each batch generates `num_generations` rollouts of every prompt of a generation
            batch drawn from the training data, drops the prompts whose rollouts all agree, and draws further
            generation batches until the training batch's `generation_batch_size / num_generations` prompts all
            carry a gradient; the first of them in the data's order are trained. Runs with
            `budget_allocator="uniform"`, without rounds or a probe.
        dynamic_sampling_metric (`str`, *optional*, defaults to `"reward"`):
            What must differ among a prompt's rollouts for it to be kept (verl's `filter_groups.metric`): `"reward"`,
            the weighted sum of the rewards (verl's `score`); `"success"`, the outcome the tracker counts
            (`success_reward_func`, `success_threshold`; verl's `acc`).
        dynamic_sampling_oversample (`int`, *optional*, defaults to `1`):
            Prompts of each generation batch, as a multiple of the training batch's prompts (verl's
            `data.gen_batch_size / data.train_batch_size`; its DAPO recipe uses 3).
        dynamic_sampling_max_gen_batches (`int`, *optional*, defaults to `10`):
            Most generation batches per training batch (verl's `filter_groups.max_num_gen_batches`, NeMo RL's
            `dynamic_sampling_max_gen_batches`). When they hold too few kept prompts, training stops with an error,
            as verl's recipe does. 0: no cap.

        > Parameters that control the advantages and the loss

        loss_weighting (`str`, *optional*, defaults to `"token"`):
            How a prompt's rollouts weigh in the loss. `"token"`: as TRL and both releases, every rollout (or token)
            alike, so a prompt with 128 rollouts weighs 16 times one with 8. `"prompt"`: each prompt's rollouts
            together weigh as `num_generations` rollouts (its advantages are scaled by `num_generations / N_i`), so
            the update does not lean on the prompts that received the most rollouts. The KL term (`beta > 0`) is not
            scaled: it stays a per-token regulariser.
        advantage_baseline (`str` or `None`, *optional*, defaults to `None`):
            What each rollout's reward is compared with. `"group"`: GRPO's, the mean (and, with
            `scale_rewards="group"`, the standard deviation) of the prompt's trained rollouts. `"all_rollouts"`: of
            all the prompt's rollouts generated in the batch, trained or not (Reinforce-Ada's global statistics; for
            rules that train every rollout the same as `"group"` up to its epsilon). `"history"`: of the prompt's
            rewards over its recent visits, this batch's included (the capability tracker's reward history,
            `advantage_history_window`), so that a group whose rollouts all agree still carries a gradient where its
            history differs. `"spo"`: SPO's, the prompt's success estimate alpha / (alpha + beta) from its SPO
            tracker *before* this batch, the batch's r - p then normalized over the whole batch (with
            `scale_rewards="none"`: not normalized); rewards must lie in [0, 1]. `None`: `"all_rollouts"` under
            Reinforce-Ada with `reinforce_ada_global_statistics`, `"spo"` under `budget_allocator="spo"`, else
            `"group"`.
        advantage_history_window (`float`, *optional*, defaults to `16.0`):
            With `advantage_baseline="history"`: each earlier visit of a prompt weighs `1 - 1/window` times the next,
            so that its history counts about as many visits (1: this batch alone).
        advantage_clip (`float` or `None`, *optional*, defaults to `None`):
            Clip the grouped advantages to [-advantage_clip, advantage_clip]. `None`: no clipping, as TRL. The
            Knapsack RL release clips at 5: a lone success among 128 rollouts would otherwise get an advantage of
            about 11 (2.5 among 8).

        > Parameters of SPO (`budget_allocator="spo"`, `advantage_baseline="spo"`, `prompt_sampling="spo"`)

        spo_rollouts_per_prompt (`int`, *optional*, defaults to `1`):
            Under `budget_allocator="spo"`: rollouts of every prompt (the release's `n = 1`); each generation batch
            draws `generation_batch_size / spo_rollouts_per_prompt` prompts.
        spo_rho (`str` or `float`, *optional*, defaults to `"kl"`):
            How fast a prompt's evidence fades: `"kl"` (KL-adaptive, the release's default: from the drift of the
            policy's log-probabilities on the prompt's last response, two extra forward passes over each batch's
            prompts) or a constant factor in (0, 1] (the release's `rho.value`, 0.875).
        spo_rho_clip_lower (`float`, *optional*, defaults to `0.875`):
            The lowest KL-adaptive factor (fastest forgetting), and the prior's weight `1 / (1 - spo_rho_clip_lower)`
            pseudo-rollouts (the release's `rho.clip_lower`).
        spo_offline_values (`str` or `None`, *optional*, defaults to `None`):
            A JSON file of each prompt's scores by the initial policy, `{"prompt text": [score, ...]}` (the release's
            `offline_values`; keyed by `prompt_id_column`'s value when it is set): each prompt's prior. Every prompt
            of the training data must be in it. `None` (and no `spo_offline_column`): every prompt starts at
            Beta(0.5, 0.5), as the release with `offline_N = 0`.
        spo_offline_column (`str` or `None`, *optional*, defaults to `None`):
            A dataset column holding each prompt's list of offline scores, instead of `spo_offline_values`.
        spo_offline_sampling (`bool`, *optional*, defaults to `False`):
            Sample SPO's prior in the run itself: before the first batch, `spo_offline_n` rollouts of every training
            prompt, generated and scored as the run's rollouts are (the release samples its offline values in a
            separate validation run). A reward above 0 counts as a success. Logged: `spo/prior_rollouts` and
            `spo/prior_seconds`.
        spo_offline_n (`int`, *optional*, defaults to `8`):
            Offline scores per prompt the prior counts (the release's `offline_N`): more are sub-sampled, fewer count
            the missing ones as failures (the release's formula). 0: Beta(0.5, 0.5) for every prompt.

        > Parameters of prompt selection

        prompt_sampling (`str` or `None`, *optional*, defaults to `None`):
            How each generation batch's prompts are chosen. `None`: TRL's sampler's order. `"spo"`: drawn by SPO's
            weights sqrt(p (1 - p)) + 0.05 from a pool of candidates (`prompt_sampling_pool`), before the allocator
            shares the batch's rollouts among them. `"value"`: the same draw weighed by the allocator's value of each
            prompt at `num_generations` rollouts (Knapsack RL's, CoBA-RL's, or a user allocator's `prompt_values`),
            scaled to SPO's range 0.05-0.55; an unseen prompt weighs the most. `None` resolves to `"spo"` under
            `budget_allocator="spo"`.
        prompt_sampling_pool (`int` or `None`, *optional*, defaults to `None`):
            Candidates per generation batch, in TRL's sampler's order, pool after pool (each prompt a candidate once a
            pass of the data). `None`: the whole training set every batch (the release's pool covers its data).
    """

    budget_allocator: str = field(
        default="knapsack",
        metadata={
            "help": "Allocation rule: 'knapsack' (Knapsack RL), 'coba' (CoBA-RL), 'uniform' (GRPO's equal split), "
            "'reinforce_ada' (Reinforce-Ada's rounds), a name registered with register_allocator, or a dotted path "
            "'my_package.my_module:MyAllocator'. Ignored when an `allocator` object is passed to the trainer.",
        },
    )
    budget_allocator_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "Further constructor arguments of the allocator (a dict, or its JSON)."},
    )
    budget_token_cap: float | None = field(
        default=None,
        metadata={"help": "Cap on a batch's expected completion tokens, as a multiple of the uniform allocation's. "
                  "None: no cap (rollouts alone are the budget)."},
    )
    min_generations: int = field(default=2, metadata={"help": "Fewest rollouts a prompt of the batch can receive."})
    max_generations: int = field(default=128, metadata={"help": "Most rollouts a prompt of the batch can receive."})
    pass_rate_window: int | None = field(
        default=None,
        metadata={"help": "Most recent visits of a prompt whose rollouts form its pass-rate estimate. None: the "
                  "chosen allocator's release setting (knapsack 16, coba 1)."},
    )
    pass_rate_rollout_pool: int | None = field(
        default=None,
        metadata={"help": "Most recent rollouts the estimate pools across visits, unless the last visit alone has "
                  "that many; 0 pools whole visits. None: the release setting (knapsack 16, coba 0)."},
    )
    pass_rate_min_rollouts: int | None = field(
        default=None,
        metadata={"help": "Scored rollouts a prompt needs in total before it has a pass rate. None: the release "
                  "setting (knapsack 8, coba 1)."},
    )
    failure_rate_window: int | None = field(
        default=None,
        metadata={"help": "Number of recent generation batches over which the global failure rate is averaged. "
                  "None: the release setting (1, CoBA-RL's run script)."},
    )
    success_threshold: float = field(
        default=1.0,
        metadata={"help": "A rollout counts as a success when its reward (the weighted total, or that of "
                  "`success_reward_func`) is at least this value."},
    )
    success_reward_func: int | str | None = field(
        default=None,
        metadata={"help": "Name or index of the reward function whose reward alone decides success (e.g. the "
                  "accuracy reward next to a format reward). None: the weighted sum of all reward functions."},
    )
    prompt_id_column: str | None = field(
        default=None,
        metadata={"help": "Dataset column identifying a prompt. When None, a stable hash of the prompt is used."},
    )
    pass_rate_prior_column: str | None = field(
        default=None,
        metadata={"help": "Numeric dataset column in [0, 1] whose value an unseen prompt takes as its pass rate, "
                  "weighed as pass_rate_prior_strength rollouts beside its own. None: no column prior."},
    )
    prompt_group_column: str | None = field(
        default=None,
        metadata={"help": "Categorical dataset column (level, source, topic): an unseen prompt without a column "
                  "prior takes its group's pooled pass rate. None: no groups."},
    )
    pass_rate_prior_strength: float = field(
        default=8.0,
        metadata={"help": "Pseudo-rollouts a prior counts as, against an unseen prompt's own rollouts so far."},
    )
    knapsack_fallback: bool = field(
        default=True,
        metadata={
            "help": "Knapsack RL's fallback: mixed prompts get only the rollouts they need to show a non-zero "
            "gradient, and the excess goes to prompts never solved."
        },
    )
    knapsack_fallback_confidence: float = field(
        default=0.9,
        metadata={"help": "Probability of a non-zero gradient that the fallback's cost estimate aims for."},
    )
    knapsack_zero_pass_generations: int = field(
        default=2, metadata={"help": "Rollouts for a prompt whose last visit had no success."}
    )
    knapsack_full_pass_generations: int = field(
        default=2, metadata={"help": "Rollouts for a prompt whose last visit had only successes."}
    )
    coba_kappa: float = field(
        default=11.0, metadata={"help": "Concentration alpha + beta of CoBA-RL's capability-oriented Beta density."}
    )
    coba_gamma: float = field(
        default=10.0, metadata={"help": "Steepness of CoBA-RL's sigmoid applied to failure rates below 0.5."}
    )
    coba_bucket_heuristic: bool = field(
        default=False,
        metadata={
            "help": "The official CoBA-RL release's bucket rule (not in the paper): only `coba_exploration_share` of "
            "the spare budget is optimised, the rest goes to very hard prompts first."
        },
    )
    coba_exploration_share: float = field(
        default=0.7,
        metadata={"help": "Share of the spare budget optimised over exploration prompts under the bucket rule."},
    )
    reinforce_ada_choice: str = field(
        default="balanced",
        metadata={"help": "Reinforce-Ada's exit rule: 'balanced' (K/2 successes and K/2 failures) or "
                  "'positive_focused' (one success).", "choices": ["balanced", "positive_focused"]},
    )
    reinforce_ada_samples_per_round: int = field(
        default=8, metadata={"help": "Reinforce-Ada: rollouts of every active prompt per round (at least "
                             "num_generations)."}
    )
    reinforce_ada_max_rounds: int = field(default=4, metadata={"help": "Reinforce-Ada: most rounds per batch."})
    reinforce_ada_global_statistics: bool = field(
        default=True,
        metadata={"help": "Reinforce-Ada: the advantage baseline (mean and deviation of the weighted rewards) from "
                  "all the prompt's rollouts of the batch, not only the trained ones."},
    )
    reinforce_ada_max_generated: int | None = field(
        default=None,
        metadata={"help": "Reinforce-Ada: most rollouts generated per batch (its cost). None: every round of every "
                  "prompt."},
    )

    probe_generations: int = field(
        default=0,
        metadata={"help": "Rollouts of every prompt in a first (probe) stage of each generation batch; the allocator "
                  "then spreads the rest of the budget from pass rates that include the probe. 0: no probe stage."},
    )
    probe_history_weight: float = field(
        default=0.5,
        metadata={"help": "With a probe stage, the weight of one past rollout against one probe rollout in the fresh "
                  "pass rate (past rollouts come from an older policy)."},
    )
    probe_prior_strength: float = field(
        default=0.0,
        metadata={"help": "With a probe stage, pseudo-rollouts at the batch's probe pass rate added to every prompt's "
                  "estimate (empirical Bayes), so that a few probe rollouts cannot alone make a prompt look "
                  "hopeless or solved. 0: none."},
    )
    rounds_generations: int = field(
        default=0,
        metadata={"help": "Generate each batch in rounds: after a first round, this many more rollouts per round for "
                  "every prompt whose rollouts are still all successes or all failures, until each is mixed or "
                  "capped; the allocator spreads the budget left by its value. 0: no rounds."},
    )
    rounds_first_generations: int | None = field(
        default=None,
        metadata={"help": "With rounds, rollouts of every prompt in the first round (min_generations to "
                  "num_generations). None: min_generations."},
    )
    rounds_max: int | None = field(
        default=None,
        metadata={"help": "With rounds, the most rounds of sampling until mixed, the first included. None: until every "
                  "prompt is mixed or capped, or the budget is spent."},
    )
    rounds_prompt_by_prompt: bool = field(
        default=False,
        metadata={"help": "With rounds (Reinforce-Ada, rounds until mixed): send each prompt's next round to the "
                  "vLLM engine (colocated or served) as soon as its own round is scored, deciding exactly as the "
                  "round-synchronous path does. On several processes, every amount of a round a multiple of the "
                  "processes."},
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={"help": "DAPO's dynamic sampling (verl's filter_groups): draw generation batches of new prompts "
                  "until the training batch's prompts all have rollouts that differ; prompts whose rollouts all "
                  "agree are dropped. With budget_allocator='uniform'."},
    )
    dynamic_sampling_metric: str = field(
        default="reward",
        metadata={"help": "Dynamic sampling: what must differ among a prompt's rollouts for it to be kept: 'reward' "
                  "(their weighted reward, verl's 'score') or 'success' (the tracker's outcome, verl's 'acc').",
                  "choices": ["reward", "success"]},
    )
    dynamic_sampling_oversample: int = field(
        default=1,
        metadata={"help": "Dynamic sampling: prompts per generation batch, as a multiple of the training batch's "
                  "(verl's gen_batch_size / train_batch_size; its DAPO recipe uses 3)."},
    )
    dynamic_sampling_max_gen_batches: int = field(
        default=10,
        metadata={"help": "Dynamic sampling: most generation batches per training batch (verl's "
                  "max_num_gen_batches); too few kept prompts by then stops training with an error. 0: no cap."},
    )
    loss_weighting: str = field(
        default="token",
        metadata={"help": "How a prompt's rollouts weigh in the loss: 'token' (every rollout alike, as TRL and both "
                  "releases) or 'prompt' (each prompt's rollouts together weigh as num_generations rollouts: "
                  "advantages scaled by num_generations / N_i).", "choices": ["token", "prompt"]},
    )
    advantage_baseline: str | None = field(
        default=None,
        metadata={"help": "What each reward is compared with: 'group' (GRPO's: the prompt's trained rollouts), "
                  "'all_rollouts' (all its rollouts of the batch, Reinforce-Ada's global statistics) or 'history' "
                  "(its rewards over recent visits, this batch's included) or 'spo' (SPO's: its success estimate from "
                  "before this batch, advantages normalized over the batch). None: 'all_rollouts' under "
                  "Reinforce-Ada with reinforce_ada_global_statistics, 'spo' under budget_allocator='spo', else "
                  "'group'.", "choices": ["group", "all_rollouts", "history", "spo"]},
    )
    advantage_history_window: float = field(
        default=16.0,
        metadata={"help": "With advantage_baseline='history': each earlier visit weighs 1 - 1/window times the next, "
                  "so the history counts about this many visits (1: this batch alone)."},
    )
    advantage_clip: float | None = field(
        default=None,
        metadata={"help": "Clip the grouped advantages to [-advantage_clip, advantage_clip]. None: no clipping, as "
                  "TRL. The Knapsack RL release clips at 5."},
    )
    spo_rollouts_per_prompt: int = field(
        default=1,
        metadata={"help": "Under budget_allocator='spo': rollouts of every prompt (the release's n = 1); each "
                  "generation batch draws generation_batch_size / spo_rollouts_per_prompt prompts."},
    )
    spo_rho: str = field(
        default="kl",
        metadata={"help": "SPO's forgetting: 'kl' (KL-adaptive, the release's default: two extra forward passes a "
                  "batch) or a constant factor in (0, 1] (the release's rho.value, 0.875)."},
    )
    spo_rho_clip_lower: float = field(
        default=0.875,
        metadata={"help": "SPO: the lowest KL-adaptive factor, and the prior's weight 1 / (1 - clip_lower) "
                  "pseudo-rollouts (the release's rho.clip_lower)."},
    )
    spo_offline_values: str | None = field(
        default=None,
        metadata={"help": "SPO's prior: a JSON file {prompt text (or prompt_id_column's value): [scores of the "
                  "initial policy]} naming every training prompt (the release's offline_values). None: Beta(0.5, "
                  "0.5) for every prompt."},
    )
    spo_offline_column: str | None = field(
        default=None,
        metadata={"help": "SPO's prior from a dataset column holding each prompt's list of offline scores, instead "
                  "of spo_offline_values."},
    )
    spo_offline_sampling: bool = field(
        default=False,
        metadata={"help": "SPO's prior sampled by the run itself: before the first batch, spo_offline_n rollouts of "
                  "every training prompt with the run's generation settings and rewards (a reward above 0 counts "
                  "as a success, as the release binarizes its offline scores); their cost is logged."},
    )
    spo_offline_n: int = field(
        default=8,
        metadata={"help": "Offline scores per prompt SPO's prior counts (the release's offline_N): more are "
                  "sub-sampled, fewer count the missing ones as failures. 0: Beta(0.5, 0.5)."},
    )
    prompt_sampling: str | None = field(
        default=None,
        metadata={"help": "How each generation batch's prompts are chosen: None (TRL's sampler's order), 'spo' "
                  "(drawn by SPO's weights sqrt(p (1 - p)) + 0.05 from a pool of candidates) or 'value' (drawn by the "
                  "allocator's value of each prompt at num_generations rollouts, scaled to 0.05-0.55; an unseen "
                  "prompt weighs the most). None resolves to 'spo' under budget_allocator='spo'.",
                  "choices": [None, "spo", "value"]},
    )
    prompt_sampling_pool: int | None = field(
        default=None,
        metadata={"help": "Candidates per generation batch under prompt_sampling, in TRL's sampler's order, pool "
                  "after pool. None: the whole training set every batch."},
    )

    # Deprecated parameters: the former names of settings now named after the stage they set (see RENAMED_SETTINGS).
    budget_probe_generations: int | None = field(
        default=None, metadata={"help": "Deprecated: use `probe_generations` instead (the same setting, renamed)."},
    )
    budget_probe_history_weight: float | None = field(
        default=None, metadata={"help": "Deprecated: use `probe_history_weight` instead (the same setting, renamed)."},
    )
    budget_probe_prior_strength: float | None = field(
        default=None, metadata={"help": "Deprecated: use `probe_prior_strength` instead (the same setting, renamed)."},
    )
    budget_round_generations: int | None = field(
        default=None, metadata={"help": "Deprecated: use `rounds_generations` instead (the same setting, renamed)."},
    )
    budget_first_round_generations: int | None = field(
        default=None, metadata={"help": "Deprecated: use `rounds_first_generations` instead (the same setting, renamed)."},
    )
    budget_max_rounds: int | None = field(
        default=None, metadata={"help": "Deprecated: use `rounds_max` instead (the same setting, renamed)."},
    )
    budget_per_prompt_rounds: bool | None = field(
        default=None, metadata={"help": "Deprecated: use `rounds_prompt_by_prompt` instead (the same setting, renamed)."},
    )
    budget_dynamic_sampling_metric: str | None = field(
        default=None, metadata={"help": "Deprecated: use `dynamic_sampling_metric` instead (the same setting, renamed)."},
    )
    budget_dynamic_sampling_oversample: int | None = field(
        default=None, metadata={"help": "Deprecated: use `dynamic_sampling_oversample` instead (the same setting, renamed)."},
    )
    budget_dynamic_sampling_max_gen_batches: int | None = field(
        default=None, metadata={"help": "Deprecated: use `dynamic_sampling_max_gen_batches` instead (the same setting, renamed)."},
    )
    budget_dynamic_sampling: bool | None = field(
        default=None, metadata={"help": "Deprecated: use `dynamic_sampling` instead (the same setting, renamed)."},
    )
    budget_loss_weighting: str | None = field(
        default=None, metadata={"help": "Deprecated: use `loss_weighting` instead (the same setting, renamed)."},
    )

    def __post_init__(self):
        self.apply_renamed_settings()
        super().__post_init__()
        self.check_budget_settings()

    def apply_renamed_settings(self) -> None:
        """A setting given under its former name (`RENAMED_SETTINGS`) sets the renamed one, with a FutureWarning; the
        former name is then cleared, so that the config holds each setting once."""
        for old, new in RENAMED_SETTINGS.items():
            value = getattr(self, old)
            if value is None:
                continue
            current = getattr(self, new)
            if not _same(current, self.__dataclass_fields__[new].default) and not _same(current, value):
                raise ValueError(f"{old}={value!r} and {new}={current!r} both set {new} ({old} is its former name). "
                                 f"Keep {new} only.")
            warnings.warn(f"{old} is deprecated and will be removed in trl_budget 0.3: use {new}={value!r} instead "
                          "(the same setting, renamed).", FutureWarning, stacklevel=4)
            setattr(self, new, value)
            setattr(self, old, None)

    def check_budget_settings(self) -> None:
        """Raise a `ValueError` naming the first budget setting that cannot work, or that the chosen rule never reads.

        Every setting's type is checked before its range. Builds the allocator and the tracker once, so that each of
        their settings is checked by its own constructor.
        """
        self.budget_allocator_kwargs = _parsed_allocator_kwargs(self.budget_allocator_kwargs)
        self.check_setting_types()
        for name in ("min_generations", "max_generations"):  # first: every later rule builds on them
            check_whole_number(name, getattr(self, name), 1)
        if not self.min_generations <= self.num_generations <= self.max_generations:
            raise ValueError(
                f"num_generations ({self.num_generations}) is the average number of rollouts per prompt, so it must "
                f"lie between min_generations ({self.min_generations}) and max_generations ({self.max_generations}); "
                "otherwise the batch's budget cannot be split within the bounds."
            )
        self.resolve_release_settings()
        self.check_loss_weighting()
        if self.advantage_clip is not None and not (is_finite_number(self.advantage_clip) and self.advantage_clip > 0):
            raise ValueError(
                f"advantage_clip must be a positive number or None (no clipping), got {shown(self.advantage_clip)}."
            )
        if isinstance(self.success_reward_func, int) and self.success_reward_func < 0:
            raise ValueError(
                f"success_reward_func={self.success_reward_func} is not a reward function index; give the index "
                "(from 0) or the name of one of the trainer's reward_funcs, or None for their weighted sum."
            )
        check_whole_number("probe_generations", self.probe_generations, 0)
        if self.probe_generations > self.min_generations:
            raise ValueError(
                f"probe_generations={self.probe_generations} must lie between 0 (no probe stage) and "
                f"min_generations={self.min_generations}: the probe's rollouts are part of every prompt's count. "
                "Lower it, or raise min_generations."
            )
        self.check_round_settings()
        self.check_dynamic_sampling()
        check_finite("pass_rate_prior_strength", self.pass_rate_prior_strength, 0.0, "above 0")
        if self.budget_token_cap is not None:
            check_finite("budget_token_cap", self.budget_token_cap, 0.0, "above 0 (a multiple of uniform's tokens)")
        for name in ("probe_history_weight", "probe_prior_strength"):
            if not (is_finite_number(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name} must be a finite number, 0 or more, got {shown(getattr(self, name))}.")
        self.check_advantage_baseline()
        self.check_spo_settings()
        self.check_prompt_sampling()
        self.refuse_unread_settings()
        self.make_allocator()
        self.make_tracker()
        self.warn_if_checkpoints_split_generation_batches()

    def check_setting_types(self) -> None:
        """The budget settings that are names or switches hold a name or a switch (numbers are checked with their
        ranges, type first)."""
        if not isinstance(self.budget_allocator, str):
            raise ValueError(
                f"budget_allocator must be the name of an allocator (a string such as 'knapsack', or a dotted path), "
                f"got {self.budget_allocator!r}; pass an allocator object to the trainer as `allocator=` instead."
            )
        if isinstance(self.success_reward_func, bool) or not isinstance(self.success_reward_func, (int, str,
                                                                                                   type(None))):
            raise ValueError(
                f"success_reward_func={self.success_reward_func!r} is not a reward function's index or name; give the "
                "index (from 0) or the name of one of the trainer's reward_funcs, or None for their weighted sum."
            )
        for name in ("prompt_id_column", "pass_rate_prior_column", "prompt_group_column"):
            check_optional_name(name, getattr(self, name), "a column of the training dataset")
        for budget_field in fields(self):
            if budget_field.name in _BUDGET_FIELDS and isinstance(budget_field.default, bool):
                check_flag(budget_field.name, getattr(self, budget_field.name))

    def refuse_unread_settings(self) -> None:
        """A setting that the chosen rule never reads is refused, naming the rule that would read it: a setting
        accepted and then ignored would make a run that is not the one asked for."""
        changed = {f.name: getattr(self, f.name) for f in fields(self)
                   if f.name in _BUDGET_FIELDS and not _same(getattr(self, f.name), f.default)}
        for allocator in _ALLOCATORS_WITH_FIELDS:
            own = [name for name in changed if name.startswith(f"{allocator}_")]
            if own and self.budget_allocator != allocator:
                raise ValueError(
                    f"{own[0]}={changed[own[0]]!r} is read only by budget_allocator={allocator!r}, but this run's "
                    f"allocator is {self.budget_allocator!r}, which would ignore it. Remove {own[0]}, or set "
                    f"budget_allocator={allocator!r}."
                )
        dynamic = [name for name in changed if name.startswith("dynamic_sampling_")]
        if dynamic and not self.dynamic_sampling:
            raise ValueError(
                f"{dynamic[0]}={changed[dynamic[0]]!r} is read only with dynamic_sampling=True, which this run "
                "does not set, so it would be ignored. Remove it, or set dynamic_sampling=True."
            )
        self.refuse_unread_spo_settings(changed)
        if "advantage_history_window" in changed and self.advantage_baseline != "history":
            raise ValueError(
                f"advantage_history_window={changed['advantage_history_window']!r} is read only with "
                f"advantage_baseline='history' (this run's: {self.advantage_baseline!r}), which would ignore it. "
                "Remove it, or set advantage_baseline='history'."
            )
        rule, unread = self._rule_and_unread_settings()
        ignored = [name for name in unread if name in changed]
        if ignored:
            name = ignored[0]
            raise ValueError(f"{name}={changed[name]!r} is never read {rule}. Remove it{unread[name]}.")

    def refuse_unread_spo_settings(self, changed: dict[str, Any]) -> None:
        """SPO's settings are read by its allocator (`spo_rollouts_per_prompt`), by its tracker (under its baseline
        or its prompt sampling) and by prompt sampling (`prompt_sampling_pool`)."""
        def refuse(name: str, reader: str) -> None:
            raise ValueError(f"{name}={changed[name]!r} is read only {reader}, which this run does not use, so it "
                             f"would be ignored. Remove {name}, or turn that on.")

        if "spo_rollouts_per_prompt" in changed and self.budget_allocator != "spo":
            refuse("spo_rollouts_per_prompt", "under budget_allocator='spo'")
        tracker_settings = ("spo_rho", "spo_rho_clip_lower", "spo_offline_values", "spo_offline_column",
                            "spo_offline_sampling", "spo_offline_n")
        for name in tracker_settings:
            if name in changed and not self.uses_spo_tracker():
                refuse(name, "by SPO's tracker (advantage_baseline='spo', prompt_sampling='spo' or "
                             "budget_allocator='spo')")
        if "spo_offline_n" in changed and not self.has_spo_offline_scores():
            refuse("spo_offline_n", "with offline scores (spo_offline_values, spo_offline_column or "
                                    "spo_offline_sampling)")
        if "spo_rho_clip_lower" in changed and _parsed_rho(self.spo_rho) != "kl" and not self.has_spo_offline_scores():
            refuse("spo_rho_clip_lower", "by KL-adaptive rho (spo_rho='kl') and by the prior from offline scores "
                                         "(spo_offline_values, spo_offline_column or spo_offline_sampling)")
        if "prompt_sampling_pool" in changed and self.resolved_prompt_sampling() is None:
            refuse("prompt_sampling_pool", "with prompt sampling (prompt_sampling='spo' or 'value')")

    def _rule_and_unread_settings(self) -> tuple[str, dict[str, str]]:
        """The batch's rule in words, and the settings it never reads, each with the rest of its fix."""
        if self.budget_allocator == "spo":
            return ("under budget_allocator='spo': every prompt gets spo_rollouts_per_prompt rollouts in one round, "
                    "its prompts drawn by prompt sampling"), dict.fromkeys(
                ("min_generations", "max_generations", "probe_generations", "rounds_generations",
                 "rounds_first_generations", "rounds_max", "budget_token_cap", "pass_rate_prior_column",
                 "prompt_group_column", "pass_rate_prior_strength", "probe_history_weight",
                 "probe_prior_strength", "rounds_prompt_by_prompt"),
                ", or choose another allocator for it")
        if self.budget_allocator == "reinforce_ada":
            fix = ", or choose a one-shot allocator ('knapsack', 'coba' or 'uniform') for it"
            return ("under budget_allocator='reinforce_ada': it generates each batch in rounds of its own "
                    "(reinforce_ada_samples_per_round, reinforce_ada_max_rounds, reinforce_ada_max_generated) and "
                    "decides from the batch's own rollouts alone"), dict.fromkeys(
                ("probe_generations", "rounds_generations", "rounds_first_generations",
                 "rounds_max", "budget_token_cap", "pass_rate_prior_column", "prompt_group_column",
                 "pass_rate_prior_strength", "probe_history_weight", "probe_prior_strength"), fix)
        if self.rounds_generations:
            return ("with rounds until mixed (rounds_generations): every prompt's first round is the same, and "
                    "the top-up spreads the budget left, not token-capped, from rates that include the batch's "
                    "rollouts (the tracker's history, probe_history_weight and probe_prior_strength; "
                    "no prior)"), dict.fromkeys(
                ("budget_token_cap", "pass_rate_prior_column", "prompt_group_column", "pass_rate_prior_strength"),
                ", or set rounds_generations=0 for a one-shot allocation that reads it")
        unread = dict.fromkeys(("rounds_first_generations", "rounds_max"),
                               ", or turn rounds until mixed on with rounds_generations")
        if not self.probe_generations:
            unread.update(dict.fromkeys(("probe_history_weight", "probe_prior_strength"),
                                        ", or turn a probe stage on (probe_generations) or rounds until mixed "
                                        "(rounds_generations), which read it"))
        if self.budget_allocator == "uniform":  # uniform never reads a pass rate
            unread.update(dict.fromkeys(("pass_rate_prior_column", "prompt_group_column", "pass_rate_prior_strength"),
                                        ", or choose an allocator that reads pass rates ('knapsack' or 'coba')"))
        elif self.pass_rate_prior_column is None and self.prompt_group_column is None:
            unread["pass_rate_prior_strength"] = ", or name a prior with pass_rate_prior_column or prompt_group_column"
        stage = "with a probe stage" if self.probe_generations else "in one shot (no probe, no rounds)"
        return f"by budget_allocator={self.budget_allocator!r} {stage}", unread

    def check_advantage_baseline(self) -> None:
        """The baseline is one of the three, its window a number of visits, and the rewards' scaling has a meaning
        for it; `reinforce_ada_global_statistics` is its older name under Reinforce-Ada, not a second setting."""
        baseline = self.advantage_baseline
        if baseline is not None and baseline not in ADVANTAGE_BASELINES:
            raise ValueError(
                f"advantage_baseline={baseline!r} is not a baseline: choose 'group' (GRPO's), 'all_rollouts' (all the "
                "prompt's rollouts of the batch), 'history' (its recent visits) or 'spo' (SPO's estimate), or None for the "
                "rule's own."
            )
        if not (is_finite_number(self.advantage_history_window) and self.advantage_history_window >= 1):
            raise ValueError(f"advantage_history_window must be a finite number of visits, at least 1, got "
                             f"{shown(self.advantage_history_window)}.")
        if baseline is not None and not self.reinforce_ada_global_statistics:
            raise ValueError(
                f"reinforce_ada_global_statistics=False and advantage_baseline={baseline!r} both choose the baseline; "
                "reinforce_ada_global_statistics=False is advantage_baseline='group'. Set advantage_baseline alone."
            )
        self.check_baseline_scaling(self.resolved_advantage_baseline())

    def check_baseline_scaling(self, baseline: str) -> None:
        """A baseline over more than the trained rows defines a group's scale, or none: `scale_rewards` 'group' or
        'none' of the summed rewards."""
        if baseline == "spo" and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "the advantage baseline 'spo' compares each rollout's summed reward with its prompt's success "
                f"estimate; multi_objective_aggregation={self.multi_objective_aggregation!r} normalizes each reward "
                "function apart first, which has no such meaning. Use multi_objective_aggregation="
                "'sum_then_normalize', or another advantage_baseline."
            )
        if baseline in ("all_rollouts", "history") and (self.scale_rewards == "batch" or
                                                          self.multi_objective_aggregation != "sum_then_normalize"):
            raise ValueError(
                f"the advantage baseline {baseline!r} (advantage_baseline; under Reinforce-Ada "
                f"reinforce_ada_global_statistics) takes each prompt's mean and deviation of the summed rewards over "
                f"more than its trained rows, which defines the scale of a group (scale_rewards='group') or none "
                f"(scale_rewards='none'); scale_rewards={self.scale_rewards!r} with multi_objective_aggregation="
                f"{self.multi_objective_aggregation!r} has no such meaning. Use scale_rewards='group' or 'none' with "
                "'sum_then_normalize', or advantage_baseline='group'."
            )

    def resolved_advantage_baseline(self, allocator=None) -> str:
        """The baseline a run uses: `advantage_baseline`, or the rule's own (Reinforce-Ada's global statistics, on
        its settings or on the allocator object given to the trainer; SPO's)."""
        if self.advantage_baseline is not None:
            return self.advantage_baseline
        if allocator is None and self.budget_allocator == "reinforce_ada":
            return "all_rollouts" if self.reinforce_ada_global_statistics else "group"
        if self.budget_allocator == "spo":  # an allocator object given with it replaces its allocation alone
            return "spo"
        return "all_rollouts" if getattr(allocator, "global_statistics", False) is True else "group"

    def resolved_prompt_sampling(self) -> str | None:
        """How the run chooses each generation batch's prompts: `prompt_sampling`, or SPO's under its allocator."""
        if self.prompt_sampling is None and self.budget_allocator == "spo":
            return "spo"
        return self.prompt_sampling

    def uses_spo_tracker(self, allocator=None) -> bool:
        """Whether the run keeps SPO's tracker: its baseline or its prompt sampling."""
        return self.resolved_advantage_baseline(allocator) == "spo" or self.resolved_prompt_sampling() == "spo"

    def check_spo_settings(self) -> None:
        """SPO's settings: whole counts, a forgetting factor, one source of offline scores, and (under its allocator)
        a generation batch that divides into its prompts."""
        check_whole_number("spo_rollouts_per_prompt", self.spo_rollouts_per_prompt, 1)
        check_whole_number("spo_offline_n", self.spo_offline_n, 0)
        # Whole numbers given as 2.0 or numpy integers count, slice and go into JSON checkpoints as ints.
        self.spo_rollouts_per_prompt, self.spo_offline_n = int(self.spo_rollouts_per_prompt), int(self.spo_offline_n)
        self.spo_rho = _parsed_rho(self.spo_rho)
        for name in ("spo_offline_values", "spo_offline_column"):
            check_optional_name(name, getattr(self, name), "a path" if name.endswith("values") else "a column")
        sources = [f"{name}={getattr(self, name)!r}" for name in ("spo_offline_values", "spo_offline_column",
                                                                  "spo_offline_sampling")
                   if getattr(self, name) not in (None, False)]
        if len(sources) > 1:
            raise ValueError(f"{' and '.join(sources)} all give SPO's offline scores; set one of them.")
        if self.spo_offline_sampling and self.spo_offline_n == 0:
            raise ValueError("spo_offline_sampling=True samples spo_offline_n rollouts of every prompt, but "
                             "spo_offline_n=0 asks for none (and a prior of Beta(0.5, 0.5)). Raise spo_offline_n, or "
                             "set spo_offline_sampling=False.")
        self.make_spo_tracker()
        baseline = self.resolved_advantage_baseline()
        if self.budget_allocator == "spo" and self.spo_rollouts_per_prompt == 1 and baseline in ("group",
                                                                                               "all_rollouts"):
            raise ValueError(
                f"budget_allocator='spo' with spo_rollouts_per_prompt=1 trains one rollout a prompt, and "
                f"advantage_baseline={baseline!r} compares each rollout with its prompt's other rollouts of the batch: "
                "there are none, so every advantage would be 0. Use advantage_baseline='spo' (SPO's) or 'history' "
                "(the prompt's earlier visits), or raise spo_rollouts_per_prompt."
            )
        if self.budget_allocator == "spo" and self.generation_batch_size % self.spo_rollouts_per_prompt:
            raise ValueError(
                f"budget_allocator='spo' gives every prompt spo_rollouts_per_prompt={self.spo_rollouts_per_prompt} "
                f"rollouts, which does not divide generation_batch_size={self.generation_batch_size}. Choose a "
                "divisor of it."
            )

    def has_spo_offline_scores(self) -> bool:
        """Whether SPO's prior comes from offline scores: a file, a column, or the run's own pre-pass."""
        return (self.spo_offline_values is not None or self.spo_offline_column is not None
                or bool(self.spo_offline_sampling))

    def make_spo_tracker(self):
        """SPO's tracker with this config's forgetting (its priors are set by the trainer, from the data)."""
        from .spo import SPOTracker

        try:
            return SPOTracker(rho=self.spo_rho, clip_lower=self.spo_rho_clip_lower)
        except ValueError as error:
            raise ValueError(_name_the_field(str(error), lambda name: {"rho": "spo_rho", "clip_lower":
                                                                       "spo_rho_clip_lower"}.get(name, name))) from error

    def check_prompt_sampling(self) -> None:
        """Prompt sampling: a rule by name, a pool of whole prompts, and not with dynamic sampling (which draws its
        prompts itself)."""
        if self.prompt_sampling is not None and self.prompt_sampling not in ("spo", "value"):
            raise ValueError(f"prompt_sampling={self.prompt_sampling!r} is not a rule: choose 'spo' (SPO's weights), "
                             "'value' (the allocator's value of each prompt), or None for TRL's sampler's order.")
        if self.prompt_sampling_pool is not None:
            check_whole_number("prompt_sampling_pool", self.prompt_sampling_pool, 1)
            self.prompt_sampling_pool = int(self.prompt_sampling_pool)
        if self.resolved_prompt_sampling() is not None and self.dynamic_sampling:
            raise ValueError(
                "dynamic_sampling=True draws its prompts itself, generation batch after generation batch, so "
                f"prompt_sampling={self.resolved_prompt_sampling()!r} cannot choose them too. Set one of them."
            )

    def generation_bounds(self) -> tuple[int, int]:
        """The fewest and most rollouts a prompt of a batch may get: SPO's rollouts a prompt under its allocator."""
        if self.budget_allocator == "spo":
            return self.spo_rollouts_per_prompt, self.spo_rollouts_per_prompt
        return self.min_generations, self.max_generations

    def prompts_per_generation_batch(self) -> int:
        """Distinct prompts a generation batch trains (its sampled prompts under prompt sampling)."""
        if self.budget_allocator == "spo":
            return self.generation_batch_size // self.spo_rollouts_per_prompt
        return self.generation_batch_size // self.num_generations

    def check_round_settings(self) -> None:
        """Rounds until mixed: whole counts within the bounds, and not together with a probe stage."""
        check_whole_number("rounds_generations", self.rounds_generations, 0)
        if self.rounds_max is not None:
            check_whole_number("rounds_max", self.rounds_max, 1)
        first = self.rounds_first_generations
        if first is not None and not (is_whole_number(first) and self.min_generations <= first <= self.num_generations):
            raise ValueError(
                f"rounds_first_generations must be a whole number from min_generations={self.min_generations} "
                f"(every prompt's fewest rollouts) to num_generations={self.num_generations} (a first round of more "
                f"would exceed the batch's budget), or None for min_generations; got {shown(first)}."
            )
        if self.rounds_generations and self.probe_generations:
            raise ValueError(
                f"rounds_generations={self.rounds_generations} and probe_generations="
                f"{self.probe_generations} are two ways of generating a batch in rounds; a probe is the "
                "two-round case. Set one of them to 0."
            )

    def check_dynamic_sampling(self) -> None:
        """Dynamic sampling: a metric, whole counts, and the one rule it runs with (uniform, one round per batch)."""
        if self.dynamic_sampling_metric not in DYNAMIC_SAMPLING_METRICS:
            raise ValueError(
                f"dynamic_sampling_metric={self.dynamic_sampling_metric!r} is not a metric: choose "
                "'reward' (the rollouts' weighted reward must differ) or 'success' (their outcomes must differ)."
            )
        check_whole_number("dynamic_sampling_oversample", self.dynamic_sampling_oversample, 1)
        check_whole_number("dynamic_sampling_max_gen_batches", self.dynamic_sampling_max_gen_batches, 0)
        if not self.dynamic_sampling:
            return
        if self.budget_allocator != "uniform":
            raise ValueError(
                f"dynamic_sampling=True trains num_generations rollouts of each kept prompt, as verl's DAPO "
                f"recipe does, so it runs with budget_allocator='uniform' only (got {self.budget_allocator!r}): its "
                "generation batches cannot yet be shared unevenly. Set budget_allocator='uniform', or "
                "dynamic_sampling=False to share the budget by the allocator."
            )
        for name in ("rounds_generations", "probe_generations"):
            if getattr(self, name):
                raise ValueError(
                    f"dynamic_sampling=True draws new prompts in rounds of its own, so {name}="
                    f"{getattr(self, name)} (more rollouts of the same prompts) cannot apply with it. Set {name}=0, "
                    "or dynamic_sampling=False."
                )
        if self.budget_token_cap is not None:
            raise ValueError(
                f"budget_token_cap={self.budget_token_cap!r} caps an uneven allocation's tokens, and dynamic sampling "
                "generates num_generations rollouts of every prompt. Remove budget_token_cap, or set "
                "dynamic_sampling=False."
            )

    def check_loss_weighting(self) -> None:
        if self.loss_weighting not in ("token", "prompt"):
            raise ValueError(
                f"loss_weighting={self.loss_weighting!r} is not a weighting: choose 'token' (every "
                "rollout alike, as TRL) or 'prompt' (each prompt's rollouts together weigh as num_generations)."
            )
        if self.loss_weighting == "prompt" and self.budget_allocator == "spo":
            raise ValueError(
                "loss_weighting='prompt' scales each prompt's rollouts to weigh as num_generations rollouts; "
                "budget_allocator='spo' gives every prompt the same spo_rollouts_per_prompt, so it would only scale "
                "every advantage by a constant. Remove it, or choose another allocator."
            )
        if self.loss_weighting == "prompt" and self.loss_type not in PROMPT_WEIGHTED_LOSSES:
            raise ValueError(
                f"loss_weighting='prompt' scales each prompt's advantages, which scales its loss terms exactly "
                f"only for losses positively homogeneous in the advantage; loss_type={self.loss_type!r} is not known "
                f"to be one. Use one of {', '.join(PROMPT_WEIGHTED_LOSSES)}, or loss_weighting='token'."
            )

    def allocator_options(self) -> dict[str, Any]:
        """Constructor arguments of the chosen allocator: bounds, `<allocator>_<option>` fields, and the kwargs."""
        cls = allocator_class(self.budget_allocator)
        prefix = f"{self.budget_allocator}_"
        accepted = _parameters(cls)
        # SPO's fields name its tracker's settings too: the allocator takes the options its constructor names.
        options = {f.name[len(prefix):]: getattr(self, f.name) for f in fields(self) if f.name.startswith(prefix)
                   and (accepted is None or f.name[len(prefix):] in accepted)}
        common = {"min_generations": self.min_generations, "max_generations": self.max_generations,
                  "default_generations": self.num_generations}
        options.update({name: value for name, value in common.items() if accepted is None or name in accepted})
        options.update(self.budget_allocator_kwargs or {})
        return options

    def make_allocator(self):
        """The allocator `budget_allocator` names, built with `allocator_options()`."""
        cls = allocator_class(self.budget_allocator)
        _check_allocator_kwargs(self.budget_allocator, cls, self.budget_allocator_kwargs)
        try:
            allocator = cls(**self.allocator_options())
        except ValueError as error:
            raise ValueError(_name_the_field(str(error), self._field_of_option)) from error
        except TypeError as error:  # a constructor that refuses an option in its own way
            raise ValueError(
                f"budget_allocator={self.budget_allocator!r} could not be built from its options "
                f"({type(error).__name__}: {error}); check budget_allocator_kwargs={self.budget_allocator_kwargs!r}."
            ) from error
        if not callable(allocator):  # e.g. a dotted path to a plain function such as "os:getcwd"
            raise ValueError(
                f"budget_allocator={self.budget_allocator!r} built {allocator!r} (a {type(allocator).__name__}), "
                "which is not an allocator: an allocator is called as allocator(pass_rates, budget, failure_rate) "
                "and returns a count per prompt. Name an allocator class, or a factory that returns one."
            )
        return allocator

    def _field_of_option(self, option: str) -> str:
        """Where an allocator's constructor option came from: the kwargs, an `<allocator>_<option>` field, or a
        common field (min_generations, ...)."""
        if option in (self.budget_allocator_kwargs or {}):
            return f"budget_allocator_kwargs[{option!r}]"
        prefixed = f"{self.budget_allocator}_{option}"
        return prefixed if hasattr(self, prefixed) else option

    def make_tracker(self) -> CapabilityTracker:
        """The capability tracker with the config's pass-rate rule (by default, the chosen allocator's release rule)."""
        try:
            return CapabilityTracker(**{argument: getattr(self, name) for argument, name in TRACKER_FIELDS.items()
                                        if argument != "reward_history_window"},
                                     reward_history_window=(self.advantage_history_window
                                                            if self.advantage_baseline == "history" else None))
        except ValueError as error:
            raise ValueError(_name_the_field(str(error), lambda name: TRACKER_FIELDS.get(name, name))) from error

    def warn_if_checkpoints_split_generation_batches(self) -> None:
        """A checkpoint between the steps of one generation batch cannot be resumed exactly: say so now."""
        generate_every = self.steps_per_generation * self.num_iterations  # in micro-steps, as TRL counts them
        if self.save_strategy != "steps" or self.save_steps < 1 or generate_every <= 1:
            return
        if int(self.save_steps) * self.gradient_accumulation_steps % generate_every:
            whole = generate_every // math.gcd(generate_every, self.gradient_accumulation_steps)
            warnings.warn(
                f"save_steps={self.save_steps} puts checkpoints inside generation batches: a batch is generated "
                f"every {generate_every} micro-steps (steps_per_generation={self.steps_per_generation} x "
                f"num_iterations={self.num_iterations}) and a checkpoint comes every {int(self.save_steps)} x "
                f"{self.gradient_accumulation_steps} micro-steps. A run resumed from such a checkpoint generates a "
                "fresh batch and counts its prompts in the pass rates again, so it no longer matches an "
                f"uninterrupted run. Use a save_steps that is a multiple of {whole} to resume exactly.",
                UserWarning,
                stacklevel=3,
            )

    def resolve_release_settings(self) -> None:
        """Give each pass-rate setting left at None the value of the chosen allocator's release."""
        from_release = self.__dict__.setdefault("_from_release", set())  # kept across checks: what the user left
        for argument, value in release_pass_rate_rule(self.budget_allocator).items():
            if getattr(self, TRACKER_FIELDS[argument]) is None:
                setattr(self, TRACKER_FIELDS[argument], value)
                from_release.add(TRACKER_FIELDS[argument])

    def stated_tracker_settings(self) -> dict[str, Any]:
        """The tracker's settings this config states itself (not left to the allocator's release, nor at the
        default): tracker argument -> value, as a tracker built from it would hold them."""
        from_release = self.__dict__.get("_from_release", set())
        stated = {}
        for argument, name in TRACKER_FIELDS.items():
            value = getattr(self, name)
            default = BudgetGRPOConfig.__dataclass_fields__[name].default
            if name in from_release or argument == "reward_history_window" or _same(value, default):
                continue
            stated[argument] = (value or None) if argument == "rollout_pool" else value  # 0: no pool
        return stated

    @classmethod
    def for_trainer(cls, args: GRPOConfig | None, model) -> "BudgetGRPOConfig":
        """The trainer's config: `args` as they are, a plain `GRPOConfig` with default budget settings, or (None)
        the defaults with an output folder named after the model, as TRL names it."""
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            return cls(f"{str(model_name).split('/')[-1]}-BudgetGRPO")
        return args if isinstance(args, cls) else cls.from_grpo_config(args)

    @classmethod
    def from_grpo_config(cls, args: GRPOConfig) -> "BudgetGRPOConfig":
        """Turn a plain `GRPOConfig` (already post-initialised) into a `BudgetGRPOConfig` with default budget settings."""
        config = cls.__new__(cls)
        config.__dict__.update(args.__dict__)
        for budget_field in fields(cls):
            if budget_field.name not in args.__dict__:
                setattr(config, budget_field.name, budget_field.default)
        config.check_budget_settings()
        return config


# The fields this config adds to TRL's, and the built-in allocators whose options are fields of their own.
_BUDGET_FIELDS = frozenset(name for name in BudgetGRPOConfig.__dataclass_fields__
                           if name not in GRPOConfig.__dataclass_fields__ and name not in RENAMED_SETTINGS)
_ALLOCATORS_WITH_FIELDS = ("knapsack", "coba", "reinforce_ada")


def _same(value, default) -> bool:
    """A setting left at its default: the same value (a NaN never is)."""
    try:
        return value is default or bool(value == default)
    except (TypeError, ValueError):  # an object that cannot be compared with the default: not the default
        return False


def _parameters(cls) -> set[str] | None:
    """Names the constructor accepts; None when it takes any keyword."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters}


def _parsed_rho(rho) -> str | float:
    """`spo_rho` as SPO's tracker takes it: "kl", or a number (given as one, or as text on the command line)."""
    if isinstance(rho, str) and rho != "kl":
        try:
            return float(rho)
        except ValueError:
            raise ValueError(f"spo_rho must be 'kl' (KL-adaptive) or a constant forgetting factor in (0, 1], got "
                             f"{rho!r}.") from None
    return rho


def _parsed_allocator_kwargs(kwargs) -> dict[str, Any] | None:
    """`budget_allocator_kwargs` as a dict: given as one, or as a JSON object on the command line."""
    example = """'{"fallback": false}'"""
    if isinstance(kwargs, str):
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"budget_allocator_kwargs={kwargs!r} is not valid JSON ({error}). Give a JSON object of constructor "
                f"options, e.g. --budget_allocator_kwargs {example}."
            ) from error
    if kwargs is not None and not (isinstance(kwargs, dict) and all(isinstance(key, str) for key in kwargs)):
        raise ValueError(
            f"budget_allocator_kwargs={kwargs!r} must be a mapping of option names to values (a dict, or a JSON "
            f"object such as {example}), not a {type(kwargs).__name__}."
        )
    return kwargs


def _check_allocator_kwargs(allocator: str, cls, kwargs: dict[str, Any] | None) -> None:
    """Every key of `budget_allocator_kwargs` must be an option of the allocator's constructor."""
    accepted = _parameters(cls)
    unknown = sorted(set(kwargs or {}) - (accepted or set())) if accepted is not None else []
    if unknown:
        options = sorted(accepted - {"self"})
        close = difflib.get_close_matches(unknown[0], options, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"budget_allocator_kwargs has {unknown[0]!r}, which the {allocator!r} allocator ({cls.__name__}) does not "
            f"take.{hint} Its options are: {', '.join(options)}."
        )


def _name_the_field(message: str, field_of) -> str:
    """A constructor's message, starting with its argument's name (`kappa must ...` or `kappa=3 is ...`), restated
    with the config field that sets it."""
    match = re.match(r"(\w+)(?=[ =])", message)
    return f"{field_of(match.group(1))}{message[match.end():]}" if match else message
