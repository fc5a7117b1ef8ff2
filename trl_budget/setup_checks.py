"""What `BudgetGRPOTrainer` checks when it is built, before any model loads: the config against the training
dataset, the allocator and the agent options, so that a run that cannot work stops before compute is spent."""

from __future__ import annotations

import numpy as np
from transformers.utils import logging

from .allocators.token_cap import check_token_cap_allocator
from .allocators.uniform import UniformAllocator
from .checks import is_missing
from .config import BudgetGRPOConfig
from .dynamic_sampling import refuse_short_dataset
from .prior import arrow_missing, check_prior_columns, first_row_where
from .prompt_sampling import checked_prompt_values
from .prompts import IMAGE_COLUMNS, has_images, missing_id_error
from .rollout_plan import checked_allocation
from .settings.vip import check_vip_batch
from .vip_stage import first_batch_rates, uses_vip

logger = logging.get_logger(__name__)

__all__ = ["check_before_building", "check_prompt_id_column", "refuse_images_in_rounds",
           "refuse_images_under_kl_adaptive_rho"]


def check_before_building(args: BudgetGRPOConfig, allocator, tracker, train_dataset, agent_options: dict) -> None:
    """Every check of a run's settings against its dataset, allocator, tracker and agent options (the trainer's
    `tools`, `rollout_func` and `environment_factory` arguments); warnings said once."""
    refuse_seeded_vllm_generation(args)
    check_tracker_serves_the_baseline(tracker, args.resolved_advantage_baseline(allocator), args)
    check_agent_options(agent_options.get("environment_factory"), train_dataset, args)
    if args.rounds_prompt_by_prompt:
        check_per_prompt_rounds(args, allocator, agent_options)
    check_prompt_id_column(args.prompt_id_column, train_dataset)
    check_prior_columns(args, train_dataset)
    prompts_per_batch = args.generation_batch_size // args.num_generations
    if (prompts_per_batch * args.probe_generations) % args.world_size:
        raise ValueError(
            f"probe_generations={args.probe_generations} gives {prompts_per_batch} prompts x "
            f"{args.probe_generations} = {prompts_per_batch * args.probe_generations} probe rollouts "
            f"per generation batch, which {args.world_size} processes cannot share evenly. Choose a probe size "
            "that makes that product a multiple of the number of processes."
        )
    if uses_vip(args, allocator):
        check_vip_run(args, allocator)
    checked_allocation(  # a broken allocator fails here, before any model is loaded
        allocator, first_batch_rates(args, allocator, args.prompts_per_generation_batch()), args.generation_batch_size,
        None,
        args.generation_bounds(allocator=allocator),
    )
    check_dataset_fills_a_generation_batch(train_dataset, prompts_per_batch, args)
    if args.budget_token_cap is not None:
        check_token_cap_allocator(allocator, args.budget_token_cap)
    if hasattr(allocator, "round_rule"):
        check_rounds_allocator(allocator, args, prompts_per_batch)
    args.check_baseline_scaling(args.resolved_advantage_baseline(allocator))  # an allocator object's baseline
    if dataset_shows_images(train_dataset):
        refuse_images_in_rounds(allocator, args)
        refuse_images_under_kl_adaptive_rho(args, allocator)
    warn_if_rounds_cannot_follow_the_first(allocator, args, prompts_per_batch)
    if args.dynamic_sampling:
        check_dynamic_sampling(allocator, train_dataset, prompts_per_batch * args.dynamic_sampling_oversample)
    if args.resolved_prompt_sampling() is not None:
        check_prompt_sampling(train_dataset, args, allocator)


def check_vip_run(args: BudgetGRPOConfig, allocator) -> None:
    """A VIPAllocator given beside another `budget_allocator` name: its bounds against the batch, as the settings check
    VIP's own. (An embeddings file is checked by `VIPStage.for_run`, which keeps the array it read.)"""
    if args.budget_allocator != "vip":
        check_vip_batch(args, allocator.max_generations, "the VIPAllocator's max_generations")


def refuse_unindexable(dataset, who: str, other_fix: str = "") -> None:
    """A stage that reads training rows by index (`who` does) needs a map-style dataset."""
    if dataset is None or isinstance(dataset, dict) or not hasattr(dataset, "__getitem__") or not hasattr(
            dataset, "__len__"):
        raise ValueError(
            f"{who} from the training data by index, in TRL's sampler's order, but the training dataset is a "
            f"{type(dataset).__name__}, which cannot be indexed. Pass a map-style dataset (e.g. datasets.Dataset, or "
            f"load it without streaming=True){other_fix}."
        )


def check_prompt_sampling(dataset, args: BudgetGRPOConfig, allocator) -> None:
    """Prompt sampling draws its candidates from the training data by index, pools no larger than the data; by value,
    with an allocator that values a prompt."""
    if args.resolved_prompt_sampling() == "value":
        if not callable(getattr(allocator, "prompt_values", None)):
            raise ValueError(
                f"prompt_sampling='value' weighs each prompt by the allocator's value, but {allocator!r} "
                f"(budget_allocator={args.budget_allocator!r}) values no prompt: it has no prompt_values(counts, "
                "pass_rates, failure_rate). Choose budget_allocator='knapsack' or 'coba', give the allocator that "
                "method, or set prompt_sampling='spo'."
            )
        # a broken prompt_values fails here, before any model is loaded
        checked_prompt_values(allocator, np.array([np.nan, 0.0, 0.25, 0.5, 1.0]), args.num_generations, None)
    refuse_unindexable(dataset, f"prompt_sampling={args.resolved_prompt_sampling()!r} draws each batch's prompts")
    if args.prompt_sampling_pool is not None and args.prompt_sampling_pool > len(dataset):
        raise ValueError(
            f"prompt_sampling_pool={args.prompt_sampling_pool} candidates per generation batch, but the training "
            f"dataset has {len(dataset)} prompts. Lower it, or leave it at None to draw from the whole dataset."
        )


def check_trainer_objects(allocator, tracker) -> None:
    """The trainer's `allocator` is an allocator object (a callable) and its `tracker` a `CapabilityTracker`."""
    from .tracker import CapabilityTracker

    if allocator is not None and not callable(allocator):
        raise ValueError(
            f"the trainer's allocator= takes an allocator object, called as allocator(pass_rates, budget, "
            f"failure_rate); got {allocator!r}. To choose one by name, set budget_allocator={allocator!r} in the "
            "config and leave allocator unset." if isinstance(allocator, str) else
            f"the trainer's allocator= takes an allocator object, called as allocator(pass_rates, budget, "
            f"failure_rate); got a {type(allocator).__name__}, which cannot be called."
        )
    if tracker is not None and not isinstance(tracker, CapabilityTracker):
        raise ValueError(f"the trainer's tracker= takes a CapabilityTracker; got a {type(tracker).__name__}. Leave it "
                         "unset to build one from the config.")


def check_tracker_serves_the_baseline(tracker, baseline: str, args: BudgetGRPOConfig) -> None:
    """A tracker passed to the trainer agrees with every tracker setting the config states (those it leaves to the
    allocator's release, or at their defaults, are the tracker's to choose); under the history baseline it keeps each
    prompt's reward history with the window the config names. Otherwise the run would train otherwise than the config
    says (or fail after the first batch is generated)."""
    from .settings.tracker import TRACKER_FIELDS

    for argument, stated in args.stated_tracker_settings().items():
        held = getattr(tracker, argument, stated)
        if held != stated:
            name = TRACKER_FIELDS[argument]
            raise ValueError(
                f"the tracker passed to the trainer has {argument}={held!r}, but {name}={getattr(args, name)!r}: the "
                f"run would follow the tracker, not the config. Build the tracker with {argument}={stated!r}, set "
                f"{name}={held!r} (or leave it unset), or leave the trainer's tracker argument unset to build it from "
                "the config."
            )
    if baseline != "history":
        return
    kept = getattr(tracker, "reward_history_window", None)
    fix = (f"Build it with CapabilityTracker(..., reward_history_window={args.advantage_history_window!r}), or leave "
           "the trainer's tracker argument unset to build it from the config")
    if kept is None:
        raise ValueError(
            f"advantage_baseline='history' compares each reward with its prompt's reward history, but the tracker "
            f"passed to the trainer keeps none (its reward_history_window is None). {fix}."
        )
    if kept != args.advantage_history_window:
        raise ValueError(
            f"the tracker passed to the trainer keeps reward histories with reward_history_window={kept!r}, but "
            f"advantage_history_window={args.advantage_history_window!r}: the run would train with the tracker's "
            f"window, not the config's. {fix}, or set advantage_history_window={kept!r}."
        )


def check_dynamic_sampling(allocator, dataset, prompts_per_generation_batch: int) -> None:
    """Dynamic sampling trains uniform groups and draws its prompts by index from a dataset large enough for one of
    its generation batches."""
    if not isinstance(allocator, UniformAllocator):
        raise ValueError(
            f"dynamic_sampling=True trains num_generations rollouts of each kept prompt, so it runs with the "
            f"uniform allocator only; the trainer was given {allocator!r}. Drop the allocator argument (with "
            "budget_allocator='uniform'), or set dynamic_sampling=False."
        )
    refuse_unindexable(dataset, "dynamic_sampling=True draws its prompts",
                       ", or set dynamic_sampling=False")
    refuse_short_dataset(len(dataset), prompts_per_generation_batch)


def check_per_prompt_rounds(args: BudgetGRPOConfig, allocator, agent_options: dict) -> None:
    """Rounds prompt by prompt send vLLM's requests themselves: a rule of rounds decided prompt by prompt, whose rounds
    deal evenly over the processes, in colocate mode one engine a process that stays awake, single-turn text
    generation."""
    fix = " Set rounds_prompt_by_prompt=False to generate one blocking request a round."
    if not (hasattr(allocator, "round_rule") or args.rounds_generations) or args.dynamic_sampling:
        raise ValueError(
            f"rounds_prompt_by_prompt=True is read only by a rule that generates each batch in rounds decided prompt "
            f"by prompt: budget_allocator='reinforce_ada', or rounds until mixed (rounds_generations > 0); this "
            f"run's allocator is {allocator!r} with rounds_generations={args.rounds_generations}"
            f"{' and dynamic sampling' if args.dynamic_sampling else ''}, which would ignore it.{fix}")
    if not args.use_vllm:
        raise ValueError(f"rounds_prompt_by_prompt=True sends each prompt's rounds to vLLM, so it needs "
                         f"use_vllm=True; this run has use_vllm=False.{fix}")
    wanted = {"vllm_enable_sleep_mode": (args.vllm_enable_sleep_mode, False),
              "vllm_tensor_parallel_size": (args.vllm_tensor_parallel_size, 1)}
    for name, (value, needed) in wanted.items():
        if args.vllm_mode == "colocate" and value != needed:
            raise ValueError(
                f"rounds_prompt_by_prompt=True in vllm_mode='colocate' sends each prompt's rounds to an in-process "
                f"vLLM engine that stays awake between them, so it needs {name}={needed!r}; this run has "
                f"{name}={value!r}.{fix} (or vllm_mode='server')")
    if args.world_size > 1:
        check_rounds_deal_evenly(args, allocator)
    used = [name for name in ("tools", "rollout_func", "environment_factory") if agent_options.get(name)]
    if used:
        raise ValueError(
            f"rounds_prompt_by_prompt=True generates single-turn completions on the engine itself; the trainer was "
            f"given {used[0]}, whose generation it would skip.{fix}")


def check_rounds_deal_evenly(args: BudgetGRPOConfig, allocator) -> None:
    """On several processes each prompt's round is dealt evenly over them: every amount a prompt's round can take alone
    must be a multiple of the processes (otherwise the rounding of a round to the processes may move a rollout between
    prompts, and no round could go prompt by prompt)."""
    if hasattr(allocator, "round_rule"):
        amounts = {"reinforce_ada_samples_per_round": args.reinforce_ada_samples_per_round}
    else:
        first = ("rounds_first_generations" if args.rounds_first_generations else "budget_min_generations")
        amounts = {first: getattr(args, first), "rounds_generations": args.rounds_generations,
                   "budget_max_generations": args.generation_bounds()[1]}
    uneven = {name: value for name, value in amounts.items() if value % args.world_size}
    if uneven:
        settings = ", ".join(f"{name}={value}" for name, value in uneven.items())
        raise ValueError(
            f"rounds_prompt_by_prompt=True on {args.world_size} processes deals each prompt's round evenly over them, "
            f"so every amount of a round must be a multiple of {args.world_size}; this run has {settings}. Choose "
            f"multiples of {args.world_size}, or rounds_prompt_by_prompt=False to generate one request a round.")


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
            raise missing_id_error(column, dataset[missing][column], f"in row {missing} of the training dataset")


def check_rounds_allocator(allocator, args: BudgetGRPOConfig, prompts_per_batch: int) -> None:
    """An allocator that brings its own rounds (Reinforce-Ada) trains `num_generations` of each prompt, alone."""
    if args.probe_generations or args.rounds_generations:
        raise ValueError(
            f"{allocator!r} generates each batch in rounds of its own, so probe_generations="
            f"{args.probe_generations} and rounds_generations={args.rounds_generations} cannot "
            "apply; set both to 0."
        )
    if allocator.keep != args.num_generations:
        raise ValueError(f"{allocator!r} trains K={allocator.keep} rollouts of each prompt, but TRL's batch holds "
                         f"num_generations={args.num_generations} of each; build it with default_generations="
                         f"{args.num_generations}.")
    allocator.check_batch(prompts_per_batch, args.world_size)


def refuse_images_under_kl_adaptive_rho(args: BudgetGRPOConfig, allocator) -> None:
    """KL-adaptive rho scores each prompt's kept response again from its token ids alone: without its images the
    policy's log-probabilities, and so the drift, are not those of the prompt it trained on."""
    if args.uses_spo_tracker(allocator) and args.spo_rho == "kl":
        raise ValueError(
            "The training prompts show images, and spo_rho='kl' (KL-adaptive rho, SPO's default) measures each "
            "prompt's drift by scoring its kept response again from its token ids, which would leave its images out. "
            "Set spo_rho to a constant forgetting factor (the release's constant is 0.875)."
        )


def dataset_shows_images(dataset) -> bool:
    """The training dataset has an image column, or its first row's prompt holds an image (map-style datasets)."""
    names = getattr(dataset, "column_names", None)
    if isinstance(names, list) and any(name in names for name in IMAGE_COLUMNS):
        return True
    if dataset is None or isinstance(dataset, dict) or not hasattr(dataset, "__len__") or len(dataset) == 0:
        return False
    first = dataset[0]
    return isinstance(first, dict) and has_images(first)


def refuse_images_in_rounds(allocator, args: BudgetGRPOConfig) -> None:
    """Rounds merge, gather and down-sample TRL's generation outputs, which cannot carry multimodal fields yet: say so
    before anything is generated, with the fix for the rule in use."""
    if args.dynamic_sampling:
        rule, fix = ("dynamic_sampling=True generates each batch in rounds of new prompts",
                     "set dynamic_sampling=False")
    elif hasattr(allocator, "round_rule"):
        rule, fix = (f"{allocator!r} generates each batch in rounds and trains a subset of the rows",
                     "train vision prompts with a one-shot allocator (budget_allocator='knapsack', 'coba' or "
                     "'uniform')")
    elif args.rounds_generations:
        rule, fix = (f"rounds_generations={args.rounds_generations} generates each batch in rounds",
                     "set rounds_generations=0 (the allocator then decides in one shot)")
    elif args.probe_generations:
        rule, fix = (f"probe_generations={args.probe_generations} generates each batch in two stages",
                     "set probe_generations=0 (the allocator then decides in one shot, from history)")
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
    elif args.rounds_generations:
        first = args.rounds_first_generations or args.budget_min_generations
        if first < args.num_generations:
            return
        logger.warning(
            f"Rounds until mixed can never take a second round here: rounds_first_generations={first} equals "
            f"num_generations, so the first round ({prompts_per_batch} prompts x {first} = "
            f"{prompts_per_batch * first} rollouts) spends the batch's whole budget, and every batch is uniform "
            "GRPO. Lower rounds_first_generations (it defaults to budget_min_generations)."
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
