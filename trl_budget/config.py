"""`BudgetGRPOConfig`: TRL's `GRPOConfig` plus the settings of rollout-budget allocation."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields

from trl import GRPOConfig

from .checks import (
    check_finite,
    check_whole_number,
    is_finite_number,
    shown,
)
from .settings.allocation import AllocationSettings, parsed_allocator_kwargs
from .settings.baselines import BaselineSettings
from .settings.batches import BatchSettings, is_trl_group_check, sampler_group_size, trl_generation_batch
from .settings.renamed import RenamedSettings, refusing_unknown_names
from .settings.spo import SPOSettings
from .settings.vip import VIPSettings
from .settings.tracker import TrackerSettings
from .settings.unread import UnreadSettings


@dataclass
class BudgetGRPOConfig(GRPOConfig, AllocationSettings, TrackerSettings, BatchSettings, BaselineSettings, SPOSettings,
                       VIPSettings, UnreadSettings, RenamedSettings):
    r"""
    Configuration class for the [`BudgetGRPOTrainer`].

    Everything of [`~trl.GRPOConfig`] keeps its meaning under the default rule: GRPO's split, `num_generations`
    rollouts of every prompt in TRL's sampler's order (`budget_allocator="uniform"`), each reward compared with its
    prompt's reward history (`advantage_baseline=None` resolves to `"history"`, which is GRPO's group on a prompt's
    first visit; `advantage_baseline="group"` trains exactly as `GRPOTrainer`). Every other rule is chosen by name and
    says, in the WARNING line that opens training, what it changes. Under an allocator (`"knapsack"`, `"coba"`), each
    generation batch still holds `generation_batch_size` rollouts, so a step costs what it costs with
    `GRPOTrainer`, but `num_generations` is the *average* number of rollouts per prompt. Under SPO
    (`budget_allocator="spo"`) every prompt gets one rollout, so a batch trains `generation_batch_size` prompts, an
    epoch visits each prompt about `num_generations` times, and `num_generations` is not read.

    Parameters:
        > Parameters that control the allocation

        budget_allocator (`str`, *optional*, defaults to `"uniform"`):
            Allocation rule: `"uniform"` (GRPO's equal split, `num_generations` rollouts of every prompt; the default),
            `"spo"` (SPO: one rollout a prompt, its prompts drawn by SPO's weights, SPO's baseline; ahead of uniform
            GRPO on the fifth study's three task families, where every prompt came back about 41 times a run; it
            changes what `num_generations`, a step and an epoch mean), `"knapsack"` (Knapsack RL), `"coba"`
            (CoBA-RL), `"reinforce_ada"` (Reinforce-Ada's rounds), `"vip"` (VIP: success rates predicted by a
            Gaussian process over prompt embeddings, rollouts split to minimise the gradient's variance), another name registered with `register_allocator`, or a dotted path to an allocator class
            (`"my_package.my_module:MyAllocator"`). Fields named `<allocator>_<option>` (`knapsack_fallback`, say) are
            passed to its constructor as `<option>`. Ignored when an `allocator` object is passed to the trainer.
        budget_allocator_kwargs (`dict`, `str` or `None`, *optional*, defaults to `None`):
            Further constructor arguments of the allocator (a dict, or its JSON on the command line).
        budget_token_cap (`float` or `None`, *optional*, defaults to `None`):
            Cap on each generation batch's expected completion tokens, as a multiple of those of the uniform
            allocation of the same batch (each prompt's expected length: its mean over its latest visit; unmeasured:
            the batch's mean). The allocator then maximises its value minus a price per expected token, the price
            searched so that the cap holds. `None`: rollouts alone are the budget, as in both releases.
        budget_min_generations (`int`, *optional*, defaults to `2`):
            Fewest rollouts a prompt of the batch can receive (formerly `min_generations`).
        budget_max_generations (`int` or `None`, *optional*, defaults to `None`):
            Most rollouts a prompt of the batch can receive (formerly `max_generations`). `None`: 128, or
            `num_generations` where that is more, so that every `num_generations` TRL takes trains as it does there.

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

        > Parameters of VIP (`budget_allocator="vip"`; its bounds are `budget_min_generations` and
        > `budget_max_generations`, which defaults to 32 under VIP, the release's)

        vip_rule (`str`, *optional*, defaults to `"grpo"`):
            The release's objective: `"grpo"` (the variance of GRPO's advantages, which this trainer trains) or
            `"rloo"`.
        vip_solver (`str`, *optional*, defaults to `"slsqp"`):
            `"slsqp"` (the release's: SLSQP from the even split, slow beyond a few hundred prompts) or `"exact"`
            (water-filling on the same objective; needs `budget_min_generations` above 1 for rloo, 3 for grpo).
        vip_length_scale (`float`, *optional*, defaults to `0.4`):
            The predictor's RBF length scale on the distance between prompt embeddings.
        vip_fit (`str`, *optional*, defaults to `"tracked"`):
            What each fit of the predictor sees: `"tracked"` (the tracker's rates of every prompt seen so far, each
            fit from the prior) or `"release"` (as the release's trainer: the last batch's rates only, each fit's
            posterior mean carried over the whole dataset as the next fit's prior, and kept with each checkpoint).
        vip_prior_mean (`float` or `None`, *optional*, defaults to `None`):
            The predictor's prior mean in logit space. None: -1 (sigmoid(-1) = 0.27, the release's `GPR` default)
            under `vip_fit="tracked"`, -5 (sigmoid(-5) = 0.0067, the release's trainer) under `vip_fit="release"`.
        vip_max_observed (`int`, *optional*, defaults to `4096`):
            Most tracked prompts a fit conditions on (the most recently visited).
        vip_embeddings (`str`, *optional*, defaults to `"policy"`):
            `"policy"`: each training prompt's last hidden layer under the policy, mean-pooled over its tokens,
            computed once before the first batch and kept with each checkpoint; or the path of a `.npy` file with a
            row per training dataset row (the release embeds question texts with all-MiniLM-L6-v2).

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
            the rest of the budget. At most `budget_min_generations`. 0: no probe stage.
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
            `budget_max_generations`, or the rounds run out; the allocator then spreads the budget left by its value (uniform:
            evenly; VIP: by its objective), from pass rates that include the batch's rollouts. Every rollout is trained. 0: no rounds.
        rounds_first_generations (`int` or `None`, *optional*, defaults to `None`):
            Rollouts of every prompt in the first round, between `budget_min_generations` and `num_generations`.
            `None`: `budget_min_generations`.
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
            rules that train every rollout the same as `"group"` up to its epsilon). `"batch"`: one baseline for the
            whole generation batch, its mean reward (what SPO's normalization gives a prompt on its first visit),
            with `scale_rewards="batch"` divided by the batch's standard deviation as TRL divides (`"none"`: not
            divided; `"group"` is refused: it pairs each prompt's deviation with its own mean). `"history"`: of the
            prompt's rewards over its recent visits, this batch's included (the capability tracker's reward history,
            `advantage_history_window`, `advantage_history_includes_batch`), so that a group whose rollouts all agree
            still carries a gradient where its history differs; on a first visit its group's, or the batch's
            (`advantage_history_first_visit`). `"spo"`: SPO's, the prompt's success estimate alpha / (alpha + beta)
            from its SPO tracker *before* this batch, the batch's r - p then normalized over the whole batch (with
            `scale_rewards="none"`: not normalized); rewards must lie in [0, 1], or in `spo_reward_range`.
            `"earlier_or_batch"`: shorthand for `"history"` with `advantage_history_includes_batch=False`,
            `advantage_history_first_visit="batch"` and `scale_rewards="batch"`: each reward against its prompt's
            mean reward from earlier visits or, on a first visit, the batch's mean, one deviation for the batch; it
            keeps the user's `num_generations`, batch sizes and TRL's rows. `None`: `"history"` under
            `budget_allocator="uniform"` (the default) where `scale_rewards` is `"group"` or `"none"` and
            `multi_objective_aggregation="sum_then_normalize"`, `"all_rollouts"` under Reinforce-Ada with
            `reinforce_ada_global_statistics`, `"spo"` under `budget_allocator="spo"`, else `"group"`. In the sixth
            study (docs/choosing.md), with `num_generations=2` at the same updates, `"earlier_or_batch"` matched SPO
            where each prompt would be drawn 10 or more times in groups of 2, and SPO was ahead where once or less;
            `"batch"` lost to `"group"` at 8 rollouts a prompt in sorting and was not detected to differ elsewhere.
        advantage_history_window (`float`, *optional*, defaults to `16.0`):
            With `advantage_baseline="history"`: each earlier visit of a prompt weighs `1 - 1/window` times the next,
            so that its history counts about as many visits (1: this batch alone).
        advantage_history_first_visit (`str`, *optional*, defaults to `"group"`):
            With `advantage_baseline="history"`: the baseline of a prompt never seen before. `"group"`: its own
            rollouts of the batch, GRPO's group. `"batch"`: the batch's mean reward (and, with `scale_rewards="group"`,
            its standard deviation), never the prompt's own rollouts alone.
        advantage_history_includes_batch (`bool`, *optional*, defaults to `True`):
            With `advantage_baseline="history"`: pool this batch's rewards into the prompt's history (`True`), or
            compare each reward with the prompt's earlier visits alone (`False`: no row's baseline holds its own
            reward), which takes `scale_rewards` `"batch"` (one deviation for the batch) or `"none"`.
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
        spo_update_rows (`str`, *optional*, defaults to `"last"`):
            How the tracker takes a prompt's several rows in one batch (`num_generations` above 1 under
            `advantage_baseline="spo"`, or a prompt drawn twice): `"last"` (the release's rule: the last row's update
            is kept, one reward of the group) or `"all"` (every row's reward counts: the prompt forgets once, by its
            rho, and gains all its rewards and failures).
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
            separate validation run). A reward above 0 counts as a success (above `spo_reward_range`'s low end when it is
            declared). Logged: `spo/prior_rollouts` (the
            rollouts generated, in whole generation batches) and `spo/prior_seconds`.
        spo_offline_n (`int`, *optional*, defaults to `8`):
            Offline scores per prompt the prior counts (the release's `offline_N`): more are sub-sampled, fewer count
            the missing ones as failures (the release's formula). 0: Beta(0.5, 0.5) for every prompt.
        spo_reward_range (`list[float]` or `None`, *optional*, defaults to `None`):
            The range `[low, high]` of a rollout's weighted reward (the sum of `reward_weights` times each reward
            function's reward), which SPO's tracker maps onto [0, 1]: `(r - low) / (high - low)` counts as the share
            of a success (its baseline, estimates and prior read the mapped reward). `None`: [0, 1], the release's
            0/1 rewards, checked before the first generation: reward functions taken to give rewards in [0, 1] must
            then have a weighted sum in [0, 1] (an accuracy and a format reward summed reach 2: declare `[0, 2]`),
            and a reward model, whose scores are not bounded, needs a declared range. A reward outside the range
            stops training at the batch that gives it.

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
        default="uniform",
        metadata={
            "help": "Allocation rule: 'uniform' (GRPO's equal split, the default), 'spo' (SPO: one rollout a prompt, "
            "drawn by SPO's weights, SPO's baseline; num_generations is not read), 'knapsack' (Knapsack RL), 'coba' "
            "(CoBA-RL), 'reinforce_ada' (Reinforce-Ada's rounds), a name registered with register_allocator, or a "
            "dotted path 'my_package.my_module:MyAllocator'. Ignored when an `allocator` object is passed to the "
            "trainer.",
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
    budget_min_generations: int = field(
        default=2, metadata={"help": "Fewest rollouts a prompt of the batch can receive (formerly min_generations)."},
    )
    budget_max_generations: int | None = field(
        default=None,
        metadata={"help": "Most rollouts a prompt of the batch can receive (formerly max_generations). None: 128, or "
                  "num_generations where that is more."},
    )
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
        metadata={"help": "With rounds, rollouts of every prompt in the first round (budget_min_generations to "
                  "num_generations). None: budget_min_generations."},
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
                  "'all_rollouts' (all its rollouts of the batch, Reinforce-Ada's global statistics), 'batch' (the "
                  "batch's mean reward, one baseline for the batch; scale_rewards 'batch' or 'none'), 'history' "
                  "(its rewards over recent visits, this batch's included; GRPO's group on a first visit), 'spo' "
                  "(SPO's: its success estimate from before this batch, advantages normalized over the batch) or "
                  "'earlier_or_batch' (shorthand: 'history' from earlier visits alone, the batch's mean on a first "
                  "visit, scale_rewards='batch'). None: 'history' under budget_allocator='uniform' (the default) with "
                  "scale_rewards 'group' or 'none' and sum_then_normalize, 'all_rollouts' under Reinforce-Ada with "
                  "reinforce_ada_global_statistics, 'spo' under budget_allocator='spo', else 'group'. 'group' trains "
                  "exactly as GRPOTrainer.",
                  "choices": ["group", "all_rollouts", "batch", "history", "spo", "earlier_or_batch"]},
    )
    advantage_history_window: float = field(
        default=16.0,
        metadata={"help": "With advantage_baseline='history': each earlier visit weighs 1 - 1/window times the next, "
                  "so the history counts about this many visits (1: this batch alone)."},
    )
    advantage_history_first_visit: str = field(
        default="group",
        metadata={"help": "With advantage_baseline='history': a prompt's baseline on its first visit, 'group' (its "
                  "own rollouts, GRPO's) or 'batch' (the batch's mean reward).", "choices": ["group", "batch"]},
    )
    advantage_history_includes_batch: bool = field(
        default=True,
        metadata={"help": "With advantage_baseline='history': pool this batch's rewards into the prompt's history "
                  "(True) or compare with its earlier visits alone (False; scale_rewards 'batch' or 'none')."},
    )
    advantage_clip: float | None = field(
        default=None,
        metadata={"help": "Clip the grouped advantages to [-advantage_clip, advantage_clip]. None: no clipping, as "
                  "TRL. The Knapsack RL release clips at 5."},
    )
    vip_rule: str = field(
        default="grpo", metadata={"help": "VIP's objective: 'grpo' (GRPO's advantages) or 'rloo'.",
                                  "choices": ["grpo", "rloo"]},
    )
    vip_solver: str = field(
        default="slsqp", metadata={"help": "VIP's solver: 'slsqp' (the release's) or 'exact' (water-filling).",
                                   "choices": ["slsqp", "exact"]},
    )
    vip_length_scale: float = field(default=0.4, metadata={"help": "VIP's predictor: the RBF length scale."})
    vip_fit: str = field(
        default="tracked",
        metadata={"help": "VIP's predictor fits: 'tracked' (every tracked rate, from the prior) or 'release' (the "
                  "last batch's rates, each fit's posterior mean the next fit's prior).",
                  "choices": ["tracked", "release"]},
    )
    vip_prior_mean: float | None = field(
        default=None, metadata={"help": "VIP's predictor: the prior mean (a logit). None: -1 under "
                                "vip_fit='tracked', -5 (the release trainer's) under 'release'."},
    )
    vip_max_observed: int = field(
        default=4096, metadata={"help": "VIP's predictor: most tracked prompts a fit conditions on (the latest)."},
    )
    vip_embeddings: str = field(
        default="policy",
        metadata={"help": "VIP's prompt embeddings: 'policy' (the policy's last hidden layer, mean-pooled over the "
                  "prompt's tokens) or the path of a .npy file with a row per training dataset row."},
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
    spo_update_rows: str = field(
        default="last",
        metadata={"help": "How SPO's tracker takes a prompt's several rows in one batch (num_generations above 1 "
                  "under advantage_baseline='spo', or a prompt drawn twice): 'last' (the release's rule: each row's "
                  "update starts from the same estimate and the last row's is kept, one reward of the group) or 'all' "
                  "(every row's reward counts: alpha <- rho alpha + the rewards, beta <- rho beta + the failures).",
                  "choices": ["last", "all"]},
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
    spo_reward_range: list[float] | None = field(
        default=None,
        metadata={"help": "SPO's tracker: the range [low, high] of a rollout's weighted reward, mapped onto [0, 1] as "
                  "the share of a success. None: [0, 1] (0/1 rewards, as the release), with reward functions whose "
                  "weighted sum stays in [0, 1]; an accuracy and a format reward summed need [0, 2]."},
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
    min_generations: int | None = field(
        default=None, metadata={"help": "Deprecated: use `budget_min_generations` instead (the same setting, renamed)."},
    )
    max_generations: int | None = field(
        default=None, metadata={"help": "Deprecated: use `budget_max_generations` instead (the same setting, renamed)."},
    )

    def __post_init__(self):
        self.apply_renamed_settings()
        unread_by_spo = self.budget_allocator == "spo"
        before = dict(self.__dict__) if unread_by_spo else None
        try:
            super().__post_init__()
        except ValueError as error:
            if not (unread_by_spo and is_trl_group_check(str(error))):
                raise
            # SPO never reads num_generations, but TRL's sampler deals the batch in groups of it: TRL's set-up runs
            # again from the settings as given, with groups that divide the generation batch (evaluation keeps the
            # groups of num_generations as given).
            self.__dict__.update(before)
            self.num_generations_eval = self.num_generations_eval or self.num_generations
            self.num_generations_as_given = self.num_generations  # what the line that opens training names
            self.num_generations = sampler_group_size(self.generation_batch_size or trl_generation_batch(error),
                                                      self.num_generations)
            super().__post_init__()
        try:
            self.check_budget_settings()
        except ValueError as error:
            raise ValueError(self.in_the_names_given(str(error))) from error


    def check_budget_settings(self) -> None:
        """Raise a `ValueError` naming the first budget setting that cannot work, or that the chosen rule never reads.

        Every setting's type is checked before its range. Builds the allocator and the tracker once, so that each of
        their settings is checked by its own constructor.
        """
        self.budget_allocator_kwargs = parsed_allocator_kwargs(self.budget_allocator_kwargs)
        self.check_setting_types()
        check_whole_number("budget_min_generations", self.budget_min_generations, 1)  # first: later rules build on
        if self.budget_max_generations is not None:
            check_whole_number("budget_max_generations", self.budget_max_generations, 1)
        fewest, most = self.generation_bounds(rollouts_a_prompt=False)
        if not fewest <= self.num_generations <= most:
            raise ValueError(
                f"num_generations ({self.num_generations}) is the average number of rollouts per prompt, so it must "
                f"lie between budget_min_generations ({fewest}) and budget_max_generations ({most}); otherwise the "
                "batch's budget cannot be split within the bounds."
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
        if self.probe_generations > self.budget_min_generations:
            raise ValueError(
                f"probe_generations={self.probe_generations} must lie between 0 (no probe stage) and "
                f"budget_min_generations={self.budget_min_generations}: the probe's rollouts are part of every "
                "prompt's count. Lower it, or raise budget_min_generations."
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
        self.check_vip_settings()
        self.refuse_unread_settings()
        self.make_allocator()
        self.make_tracker()
        self.warn_if_checkpoints_split_generation_batches()


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
        """Turn a plain `GRPOConfig` (already post-initialised) into a `BudgetGRPOConfig` with default budget settings;
        a subclass of `GRPOConfig` stays an instance of it, with its methods and properties."""
        if type(args) is not GRPOConfig:
            cls = with_budget_settings(cls, type(args))
        config = cls.__new__(cls)
        config.__dict__.update(args.__dict__)
        for budget_field in fields(cls):
            if budget_field.name not in args.__dict__:
                setattr(config, budget_field.name, budget_field.default)
        config.check_budget_settings()
        return config


BudgetGRPOConfig.__init__ = refusing_unknown_names(BudgetGRPOConfig.__init__)


@functools.lru_cache(maxsize=None)
def with_budget_settings(budget_config: type, user_config: type) -> type:
    """A user's `GRPOConfig` subclass with the budget's settings, so that the trainer's config is still an instance of
    the user's class (its own methods, properties and fields kept)."""
    return type(f"Budget{user_config.__name__}", (budget_config, user_config), {"__module__": user_config.__module__})
