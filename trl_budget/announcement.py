"""The WARNING line that opens training: the rule in effect, what it changes against `GRPOTrainer`, and the settings
that train exactly as `GRPOTrainer` does. A warning, so that it shows in a plain script and under `trl-budget grpo`
alike (Python prints warnings where no logging is set up; transformers' verbosity does not govern this package's
loggers)."""

from __future__ import annotations

__all__ = ["announcement", "differences_from_grpo", "rule_in_effect"]

PROMPT_ORDERS = {"spo": "drawn by SPO's weights", "value": "drawn by the allocator's value"}
BASELINES = {
    "group": "GRPO's group (the prompt's rollouts of the batch)",
    "all_rollouts": "all the prompt's rollouts generated in the batch, trained or not",
    "batch": "the batch's mean reward, one baseline for the whole generation batch",
    "spo": "the prompt's SPO estimate from before the batch, normalized over the batch",
}
STAGES = {  # the setting that turns a stage off -> what the stage changes
    "probe_generations=0": "each batch is generated in two stages (a probe of every prompt, then the rest)",
    "rounds_generations=0": "each batch is generated in rounds until its prompts' rewards are mixed, so a prompt gets "
                            "more or fewer rollouts than num_generations, their average",
    "dynamic_sampling=False": "generation batches are drawn until every trained prompt's rewards differ (more "
                              "rollouts are generated than generation_batch_size)",
}


def vip_clause(args, allocator) -> str:
    """What VIP adds to the allocation's change: where its rates come from, and the prompts it drops (in one shot) or
    what it splits (under rounds until mixed)."""
    from .vip_stage import uses_vip

    if not uses_vip(args, allocator):
        return ""
    source = ("the policy's hidden states" if args.budget_allocator != "vip" or args.vip_embeddings == "policy"
              else args.vip_embeddings)
    fitted = ("the last batch's rates, each fit's posterior mean carried as the next one's prior (the release's "
              "fit)" if args.vip_fit == "release" else "every tracked rate")
    objective = f"minimising the gradient's variance (VIP's {allocator.rule} objective"
    if args.rounds_generations:  # every prompt has its first round: nothing is dropped, no solve is needed
        return (f", {objective}) over the budget the rounds leave, from rates that include the batch's rollouts "
                f"(where a prompt has no scored rollout, the rate a Gaussian process fitted to {fitted} predicts from "
                f"embeddings of {source})")
    return (f", {objective}, solver {allocator.solver!r}) from success rates a Gaussian process fitted to {fitted} "
            f"predicts for every prompt, unseen ones included, over embeddings of {source}; a prompt whose count "
            "rounds below 4 gets none and is left out of the batch")


def num_generations_given(args) -> int:
    """`num_generations` as the user gave it (under SPO, TRL's sampler may deal the batch in other groups)."""
    return args.__dict__.get("num_generations_as_given", args.num_generations)


def draws_every_candidate(args) -> bool:
    """Whether prompt sampling's pools hold one generation batch's prompts each (`prompt_sampling_pool`), so that
    every candidate is drawn once: the batch's prompts are TRL's sampler's, whatever the weights."""
    return (args.resolved_prompt_sampling() is not None
            and args.prompt_sampling_pool == args.prompts_per_generation_batch())


def rule_in_effect(args, allocator, baseline: str) -> str:
    """The run's rule in one sentence: its allocation, how its batches are generated, its prompts, its baseline."""
    stages = [name for name, on in (("a probe stage", args.probe_generations),
                                    ("rounds until mixed", args.rounds_generations),
                                    ("dynamic sampling", args.dynamic_sampling),
                                    ("its own rounds", hasattr(allocator, "round_rule"))) if on]
    prompts = ("in TRL's sampler's order" if draws_every_candidate(args) else
               PROMPT_ORDERS.get(args.resolved_prompt_sampling(), "in TRL's sampler's order"))
    per_prompt = getattr(allocator, "rollouts_per_prompt", None)  # SPO's layout: the batch's size in prompts
    # that num_generations is not read is said once, among the differences from GRPOTrainer
    layout = ("" if per_prompt is None else f", {per_prompt} rollout{'s' if per_prompt > 1 else ''} for each of the "
              f"generation batch's {args.generation_batch_size // per_prompt} prompts")
    return (f"Rollout budget: allocation by {allocator!r} (budget_allocator={args.budget_allocator!r}){layout}"
            f"{', with ' + ' and '.join(stages) if stages else ', in one shot'}; prompts {prompts}; advantage "
            f"baseline {baseline!r}.")


def differences_from_grpo(args, allocator, baseline: str) -> dict[str, str]:
    """What the rule changes against `GRPOTrainer` with the same TRL settings: the setting (with GRPO's value) that
    undoes each change -> the change in words. Empty: the same run as `GRPOTrainer`'s."""
    from .allocators.uniform import UniformAllocator

    changes = {}
    per_prompt = getattr(allocator, "rollouts_per_prompt", None)
    if per_prompt is not None:
        prompts, times = args.generation_batch_size // per_prompt, num_generations_given(args) / per_prompt
        changes["budget_allocator='uniform'"] = (
            f"each generation batch trains {prompts} distinct prompts, {times:g} times GRPOTrainer's, one rollout "
            f"each, so an epoch (num_train_epochs) visits every prompt about {times:g} times and num_generations="
            f"{num_generations_given(args)} is not read; TRL's frac_reward_zero_std is not logged, since a group of one "
            "rollout has no spread (budget/effective_ratio is the share of rollouts with a gradient)"
            if per_prompt == 1 else
            f"each generation batch trains {prompts} distinct prompts, {per_prompt} rollouts each, and "
            f"num_generations={num_generations_given(args)} is not read")
    elif hasattr(allocator, "round_rule"):
        changes["budget_allocator='uniform'"] = ("each batch is generated in rounds and down-sampled to "
                                                 "generation_batch_size rows")
    elif not isinstance(allocator, UniformAllocator):
        changes["budget_allocator='uniform'"] = (f"num_generations={args.num_generations} is the batch's average "
                                                 "number of rollouts a prompt: the rule gives each prompt its own"
                                                 f"{vip_clause(args, allocator)}")
    for setting, change in STAGES.items():
        if getattr(args, setting.split("=")[0]):
            changes[setting] = change
    if args.prompt_sampling is not None and not draws_every_candidate(args):
        changes["prompt_sampling=None"] = (f"the prompts are {PROMPT_ORDERS[args.prompt_sampling]}, not in TRL's "
                                           "sampler's order")
    if baseline == "history":
        changes["advantage_baseline='group'"] = history_in_words(args)
    elif baseline != "group":
        changes["advantage_baseline='group'"] = (f"each reward is compared with {BASELINES[baseline]} "
                                                 f"(advantage_baseline={baseline!r})")
    if args.advantage_clip is not None:
        changes["advantage_clip=None"] = f"advantages are clipped to +-{args.advantage_clip:g}"
    if args.loss_weighting == "prompt":
        changes["loss_weighting='token'"] = ("each prompt's rollouts together weigh as num_generations rollouts in "
                                             "the loss")
    return changes


def history_in_words(args) -> str:
    """What the history baseline compares each reward with: the visits it pools, and a first visit's fallback."""
    visits = ("this batch's included" if args.advantage_history_includes_batch else
              "its earlier visits alone, not this batch's")
    if args.advantage_history_first_visit == "batch":
        first_visit = "and on a prompt's first visit with the batch's mean reward"
    elif args.advantage_history_includes_batch:
        first_visit = "which is GRPO's group on a prompt's first visit"
    else:
        first_visit = "and on a prompt's first visit with its group's mean reward"
    shorthand = args.baseline_shorthand()
    named = (f"advantage_baseline={shorthand!r}, which sets advantage_baseline='history', "
             "advantage_history_includes_batch=False, advantage_history_first_visit='batch' and scale_rewards='batch'"
             if shorthand else "advantage_baseline='history'")
    return (f"each reward is compared with its prompt's reward history over about {args.advantage_history_window:g} "
            f"visits, {visits} ({named}), {first_visit}")


def history_settings_given(args) -> bool:
    """Whether a setting only the history baseline reads was given (GRPO's group refuses it), beyond those a
    shorthand baseline set for itself (which go with it)."""
    from .settings.baselines import BASELINE_SHORTHANDS
    from .settings.unread import HISTORY_SETTINGS

    own = BASELINE_SHORTHANDS.get(args.baseline_shorthand(), {})
    return any(getattr(args, name) != args.__dataclass_fields__[name].default and name not in own
               for name in HISTORY_SETTINGS)


def announcement(args, allocator, baseline: str) -> str:
    """The line that opens training: the rule in effect, what it changes against `GRPOTrainer` (or that it changes
    nothing), and the settings that train exactly as `GRPOTrainer`."""
    changes = differences_from_grpo(args, allocator, baseline)
    rule = rule_in_effect(args, allocator, baseline)
    if not changes:
        return f"{rule} This run trains exactly as GRPOTrainer with the same settings."
    others = (", and remove the settings only this rule reads"
              if set(changes) - {"advantage_baseline='group'"} or history_settings_given(args) else "")
    return (f"{rule} Against GRPOTrainer with the same settings it changes: {'; '.join(changes.values())}. To train "
            f"exactly as GRPOTrainer, set {', '.join(changes)}{others}.")
