"""The sixth study's regimes and arms, written out once for its pilot (`pilot.py`) and the study (`sixth_study.py`).

Every arm generates 512 rollouts a generation batch and makes 8 optimizer updates of it, 960 updates in all
(`RLSettings.study(960)`); an arm changes one factor at a time against another: rollouts a prompt (8, 2 or 1: 64,
256 or 512 prompts a batch), the advantage baseline, the prompt order (TRL's sampler, or SPO's weights).
"""

from __future__ import annotations

from dataclasses import replace

from trl_budget.demo.settings import STUDY_RATE, RLSettings

BUDGET = 960  # optimizer updates, in every arm
ROLLOUTS = 512  # generated a batch, in every arm but the room gate's
REVISITED_POOL = 1_500  # the fifth study's pool: under one rollout a prompt, a prompt comes back about 41 times a run
# 256 prompts x 120 generation batches: the n = 2 arms see every prompt once, SPO's layout (61 440 draws) about twice,
# uniform n = 8 a quarter of them once.
FRESH_POOL = 30_720

# name -> (task, levels, learning rate, training pool): the fifth study's sorting and brackets regimes (whose room gates
# passed there: +1.24 and +1.43 points, 20 seeds each), each at the fifth study's pool and at a fresh-prompt pool. The
# arithmetic family cannot be one: its three levels hold about 9 700 distinct problems, fewer than a fresh pool.
REGIMES = {
    "sorting-revisited": ("sorting", (3, 4), STUDY_RATE, REVISITED_POOL),
    "brackets-revisited": ("brackets", (3, 4, 5), 1e-4, REVISITED_POOL),
    "sorting-fresh": ("sorting", (3, 4), STUDY_RATE, FRESH_POOL),
    "brackets-fresh": ("brackets", (3, 4, 5), 1e-4, FRESH_POOL),
}

# The pilot's second round (`pilot.py --pilot 2`), after "brackets-fresh" failed its room gate: the brackets family at
# 20 and 24 brackets (the fifth study's pilot 3 qualified it at the pool of 1 500), at each pool.
PILOT_2_REGIMES = {
    "brackets-20-24-revisited": ("brackets", (4, 5), 1e-4, REVISITED_POOL),
    "brackets-20-24-fresh": ("brackets", (4, 5), 1e-4, FRESH_POOL),
}
CANDIDATE_REGIMES = {**REGIMES, **PILOT_2_REGIMES}

GROUP = {"advantage_baseline": "group"}  # GRPO's group mean, scaled by the group's deviation (TRL's default)
# The project's history baseline as the fourth and fifth studies ran it: the prompt's tracked rewards with this
# batch's, window 16; on a first visit the group's own.
HISTORY = {"advantage_baseline": "history", "advantage_history_window": 16.0}
# One baseline for the whole generation batch: its mean reward, scaled by its deviation (SPO's normalization of a
# first visit).
BATCH = {"advantage_baseline": "batch", "scale_rewards": "batch"}
# The contract-keeping candidate: each row against its prompt's mean reward from earlier visits (window 16), on a
# first visit against the batch's mean reward (never the group's), advantages scaled over the batch. The shorthand
# `advantage_baseline="earlier_or_batch"` stands for exactly these settings.
EARLIER_OR_BATCH = {"advantage_baseline": "earlier_or_batch", "advantage_history_window": 16.0}
# SPO as the project runs it, without its offline prior (Beta(0.5, 0.5)): one rollout a prompt, SPO's weights over
# the whole pool, SPO's baseline normalized over the batch, KL-adaptive rho clipped at 0.875, the release's rule for
# a prompt drawn twice.
SPO = {"budget_allocator": "spo", "spo_rollouts_per_prompt": 1, "advantage_baseline": "spo", "prompt_sampling": "spo",
       "spo_update_rows": "last", "spo_rho": "kl", "spo_rho_clip_lower": 0.875}
# A constant rho: the release reads `rho.value` from its configuration, which its trainer file does not set; 0.875 is
# the value the project's settings name for it (`spo_rho`'s help), the same number as the release's `rho.clip_lower`.
SPO_CONSTANT_RHO = 0.875

# label -> (rollouts a prompt, BudgetGRPOConfig settings). Prompts a batch = ROLLOUTS / rollouts a prompt (SPO: the
# generation batch of 64 x 8 drawn as 512 prompts x 1).
ARMS = {
    "uniform-n8": (8, {"budget_allocator": "uniform", **GROUP}),
    "uniform-n8-history": (8, {"budget_allocator": "uniform", **HISTORY}),
    "uniform-n8-batch": (8, {"budget_allocator": "uniform", **BATCH}),
    "spo": (8, SPO),
    "spo-trl-order": (8, {**SPO, "prompt_sampling_pool": ROLLOUTS}),
    "spo-constant-rho": (8, {**SPO, "spo_rho": SPO_CONSTANT_RHO}),
    "uniform-n8-earlier-or-batch": (8, {"budget_allocator": "uniform", **EARLIER_OR_BATCH}),
    # SPO's layout (one rollout for each of 512 prompts, TRL's sampler order) with the batch baseline: the one-rollout
    # cell without SPO's tracker. Its tracker only orders prompts, and a pool of one batch draws every candidate once,
    # so its rho is the constant one (no forward passes for an estimate nothing reads).
    "n1-batch": (8, {**SPO, **BATCH, "prompt_sampling_pool": ROLLOUTS, "spo_rho": SPO_CONSTANT_RHO}),
    "n2-group": (2, {"budget_allocator": "uniform", **GROUP}),
    "n2-history": (2, {"budget_allocator": "uniform", **HISTORY}),
    "n2-batch": (2, {"budget_allocator": "uniform", **BATCH}),
    "n2-earlier-or-batch": (2, {"budget_allocator": "uniform", **EARLIER_OR_BATCH}),
    # VIP as released: the release's solver (SLSQP) and fit (the last batch's rates, the posterior mean carried),
    # GRPO's objective (this trainer trains group advantages), bounds 2 to 32 a prompt (the release's upper bound;
    # its trainer's lower bound of 1 gives a group no advantage under GRPO), 512 rollouts over 64 prompts.
    "vip": (8, {"budget_allocator": "vip", "vip_solver": "slsqp", "vip_fit": "release", "vip_rule": "grpo",
                **GROUP}),
    "uniform-n16": (16, {"budget_allocator": "uniform", **GROUP}),  # the room gate: twice the rollouts a batch
}
MAX_GENERATIONS = {"vip": 32}  # the release's upper bound; every other arm keeps the studies' 128 (unread by uniform)


def arm_settings(regime: str, label: str, quick: bool = False) -> RLSettings:
    """The RL settings of `label` in `regime`: 512 rollouts a batch (the room gate 1 024), 8 updates a batch."""
    _, levels, rate, pool = CANDIDATE_REGIMES[regime]
    per_prompt = ARMS[label][0]
    prompts = ROLLOUTS // per_prompt if label != "uniform-n16" else ROLLOUTS // 8
    settings = replace(RLSettings.study(16 if quick else BUDGET), learning_rate=rate, levels=levels,
                       train_prompts=pool, num_generations=per_prompt, prompts_per_step=prompts,
                       max_generations=MAX_GENERATIONS.get(label, 128))
    if label.startswith("spo"):  # SPO's generation batch: 64 prompts x 8 in TRL's terms, drawn as 512 x 1
        settings = replace(settings, num_generations=8, prompts_per_step=ROLLOUTS // 8)
    if quick:  # two generation batches of a small pool
        settings = replace(settings, train_prompts=min(pool, 1024), eval_prompts=48, train_eval_prompts=24)
    return settings
