"""VIP's settings (`budget_allocator="vip"`): its objective and solver, its predictor, where its embeddings come from,
and the stages it does not run with."""

from __future__ import annotations

import os

from .common import name_the_field

EMBEDDING_SOURCES = ("policy",)  # or the path of a .npy file with a row per training dataset row
# What a fit sees -> its prior mean when vip_prior_mean is None: the release's GPR class default (-1), or the value
# its trainer passes along with reuse_mean=True (-5).
FIT_PRIOR_MEANS = {"tracked": -1.0, "release": -5.0}


class VIPSettings:
    """`BudgetGRPOConfig`'s part for VIP's settings, checked, and the predictor's options they give."""

    def check_vip_settings(self) -> None:
        """VIP's settings build a predictor; its embeddings are the policy's or a `.npy` file's; VIP allocates in
        one shot from its predictions, so the stages that allocate from other rates are refused with it."""
        if self.budget_allocator != "vip":
            return
        if self.vip_fit not in FIT_PRIOR_MEANS:
            raise ValueError(f"vip_fit must be 'tracked' (each fit on every tracked rate, from the prior) or 'release' "
                             f"(the last batch's rates, the posterior mean carried as the next prior), got "
                             f"{self.vip_fit!r}.")
        self.predictor_options()  # refuses a bad length scale, prior mean or bound, by its field
        source = self.vip_embeddings
        if not (isinstance(source, str) and (source in EMBEDDING_SOURCES or source.endswith(".npy"))):
            raise ValueError(f"vip_embeddings must be 'policy' (the policy's last hidden layer, mean-pooled over each "
                             f"prompt's tokens) or the path of a .npy file with a row per training dataset row, got "
                             f"{source!r}.")
        if source != "policy" and not os.path.isfile(source):
            raise ValueError(f"vip_embeddings={source!r} is not a file. Give the path of a .npy file holding a row "
                             "per training dataset row (e.g. all-MiniLM-L6-v2's embeddings of the questions, as VIP's "
                             "release makes them), or 'policy'.")
        check_vip_batch(self, self.generation_bounds()[1], "budget_max_generations")
        if self.prompt_sampling is not None:  # (dynamic sampling runs under uniform only: refused there)
            raise ValueError(f"prompt_sampling={self.prompt_sampling!r} chooses the batch's prompts from the "
                             "tracker's rates, not from VIP's predictions, and is not built with "
                             "budget_allocator='vip'. Remove prompt_sampling, or choose another allocator.")

    def predictor_options(self) -> dict:
        """`SuccessRatePredictor`'s options from the `vip_*` fields (the prior mean `vip_fit`'s where
        `vip_prior_mean` is None), checked by building one on a single prompt."""
        import numpy as np

        from ..success_prediction import SuccessRatePredictor

        prior_mean = FIT_PRIOR_MEANS.get(self.vip_fit) if self.vip_prior_mean is None else self.vip_prior_mean
        options = {"length_scale": self.vip_length_scale, "prior_mean": prior_mean,
                   "max_observed": self.vip_max_observed, "carry_mean": self.vip_fit == "release"}
        try:
            SuccessRatePredictor(np.zeros((1, 1)), **options)
        except ValueError as error:
            raise ValueError(name_the_field(str(error), lambda name: f"vip_{name}")) from error
        return options


def check_vip_batch(args, most: int, most_name: str) -> None:
    """Refuse bounds and batches whose rollouts VIP's rounding (which keeps no count in (0, 4)) cannot spend in counts
    of 4 or more: at most `most` a prompt (named `most_name`), `generation_batch_size` a batch."""
    from ..allocators.vip import MIN_KEEP

    batch, prompts = args.generation_batch_size, args.prompts_per_generation_batch()
    if most < MIN_KEEP:
        raise ValueError(f"{most_name}={most} is below {MIN_KEEP}: VIP's rounding gives every prompt it keeps at least "
                         f"{MIN_KEEP} rollouts. Raise {most_name} to {MIN_KEEP} or more (VIP's release uses 32).")
    if batch < MIN_KEEP * prompts and batch % MIN_KEEP:
        raise ValueError(
            f"num_generations={args.num_generations} gives the generation batch's {prompts} prompts fewer than "
            f"{MIN_KEEP} rollouts each, and its {batch} rollouts (generation_batch_size) are not a multiple of "
            f"{MIN_KEEP}: where every rate is equal (the first batch's, all at the prior) VIP hands out groups of "
            f"{MIN_KEEP} rollouts, which cannot spend it. Raise num_generations to {MIN_KEEP} or more, or choose a "
            f"generation batch size (per_device_train_batch_size x processes x steps_per_generation) that is a "
            f"multiple of {MIN_KEEP}.")
    left = batch % most
    if not args.rounds_generations and 0 < left < MIN_KEEP:
        raise ValueError(
            f"the generation batch's {batch} rollouts are {batch // most} x {most_name}={most} plus {left}: where "
            f"VIP's rounding fills prompts to {most_name}, the {left} left go to one prompt, which would train fewer "
            f"than the {MIN_KEEP} rollouts VIP keeps. Choose {most_name} or a generation batch size that leaves 0 or at "
            f"least {MIN_KEEP} rollouts over whole multiples of {most_name}.")
