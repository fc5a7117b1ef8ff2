"""Vision-language prompts under per-prompt budgets: a tiny LLaVA built locally (CLIP vision tower, Llama text model,
character tokenizer, slow CLIP image processor: no download, no torchvision) trains with BudgetGRPOTrainer, and the
same text with another image is another prompt."""

import string

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers import config_kwargs
from PIL import Image

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer

pytestmark = pytest.mark.slow

TEMPLATE = ("{% for message in messages %}<|{{ message.role }}|>"
            "{% if message.content is string %}{{ message.content }}{% else %}{% for part in message.content %}"
            "{% if part.type == 'image' %}<image>{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
            "{% endfor %}{% endif %}<eos>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def build_tiny_llava(folder):
    """A tiny LLaVA and its processor, saved to `folder`: 28-pixel images, one 14-pixel patch grid of 2 x 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor, PreTrainedTokenizerFast)

    specials = ["<pad>", "<eos>", "<image>", "<|user|>", "<|assistant|>"]
    vocab = {token: index for index, token in enumerate(specials)}
    for char in string.digits + "+=":
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<pad>", padding_side="left", additional_special_tokens=specials[2:])
    tokenizer.chat_template = TEMPLATE
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}),
        tokenizer=tokenizer, chat_template=TEMPLATE, patch_size=14, num_additional_image_tokens=1,
        vision_feature_select_strategy="default", image_token="<image>")
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                       image_size=28, patch_size=14),
        text_config=LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id,
                                eos_token_id=tokenizer.eos_token_id, bos_token_id=None),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_layer=-1,
        vision_feature_select_strategy="default")
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def first_token_parity(completions, **kwargs):
    """Mixed over a random model's rollouts: the parity of the completion's first character."""
    return [float(ord(completion[0]["content"][:1] or "a") % 2) for completion in completions]


def test_a_tiny_vlm_trains_with_budgets_and_images_key_their_prompts(tmp_path):
    from transformers import LlavaForConditionalGeneration, LlavaProcessor

    folder = build_tiny_llava(tmp_path / "llava")
    rng = np.random.default_rng(0)
    images = [Image.fromarray((rng.random((28, 28, 3)) * 255).astype("uint8")) for _ in range(2)]
    # Two prompts with the same text and different images, each coming back every step.
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "3+4="}], "image": image} for image in images])
    trainer = BudgetGRPOTrainer(
        model=LlavaForConditionalGeneration.from_pretrained(folder), reward_funcs=first_token_parity,
        args=BudgetGRPOConfig(**config_kwargs(tmp_path / "out", max_steps=6, pass_rate_min_rollouts=1,
                                              knapsack_fallback=False, bf16=False)),
        train_dataset=data, processing_class=LlavaProcessor.from_pretrained(folder))
    plans, generate = [], trainer._generate_and_score_completions

    def recording(inputs):
        output = generate(inputs)
        plans.append(trainer.last_rollout_plan)
        return output

    trainer._generate_and_score_completions = recording
    trainer.train()
    assert trainer.state.global_step == 6
    assert len(trainer.tracker) == 2  # the same text with two images: two prompts
    assert all(plan.counts.sum() == 8 for plan in plans)
    assert any(plan.counts.tolist() != [4, 4] for plan in plans)  # budgets moved between the two images' prompts
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and np.isfinite(losses).all()


@pytest.mark.parametrize(
    "overrides, fix",
    [
        ({"budget_allocator": "reinforce_ada", "reinforce_ada_max_rounds": 1},
         r"ReinforceAda\(.*\) generates each batch in rounds and trains a subset of the rows, which cannot merge "
         r"multimodal generation outputs yet\. To train vision prompts with a one-shot allocator"),
        ({"rounds_generations": 2}, "To set rounds_generations=0"),
        ({"probe_generations": 2}, "To set probe_generations=0"),
    ],
)
def test_vision_prompts_in_rounds_are_refused_before_the_model_loads(tmp_path, overrides, fix):
    # Before: Reinforce-Ada in one round failed in its first batch with AttributeError: 'list' object has no attribute
    # 'device', and rounds were refused only after they were generated, with the probe's and rounds' fix for all.
    images = [Image.fromarray(np.full((28, 28, 3), shade, dtype="uint8")) for shade in (0, 255)]
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "3+4="}], "image": image} for image in images])
    with pytest.raises(ValueError, match=f"^The training prompts show images, and .*{fix}"):
        BudgetGRPOTrainer(model="no-such-org/no-such-model", reward_funcs=first_token_parity,
                          args=BudgetGRPOConfig(**config_kwargs(tmp_path, per_device_train_batch_size=8, **overrides)),
                          train_dataset=data)
