import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import free_port

from trl_budget.checkpoint import TRACKER_STATE_NAME

pytestmark = pytest.mark.slow


def launch_command(runs: list[tuple[Path, str]], port: int) -> list[str]:
    """The command that runs each (output folder, mode) of `runs` in turn, in one launch of two processes."""
    script = Path(__file__).with_name("multiprocess_run.py")
    # accelerate 1.15's `--cpu` launcher starts a single process unless MPI is set up; torchrun (`--multi_gpu`) starts
    # two, and `use_cpu=True` in the config makes them a gloo-backed MULTI_CPU group.
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), str(script), *[str(part) for run in runs for part in run]]


def launch(tmp_path, mode, timeout=600):
    """A launch of `mode` alone: a run that fails must stop both processes, which then leave from its error."""
    return subprocess.run(launch_command([(tmp_path, mode)], free_port()), capture_output=True, text=True,
                          timeout=timeout)


# Runs that a test of another run compares with: they join any launch that holds that run.
COMPARED_WITH = {"uniform-trl": ("grpo-trl",), "default-trl": ("grpo-trl",)}


class SharedLaunch:
    """One launch of every run the selected tests of this module read, each run in a folder of its own. A launch's
    start-up (two processes importing torch and TRL) is most of a tiny run's time, so the runs share it."""

    def __init__(self, folder: Path, modes: list[str], environment: dict):
        self.folder, self.modes = folder, modes
        self.result = subprocess.run(launch_command([(folder / mode, mode) for mode in modes], free_port()),
                                     capture_output=True, text=True, timeout=300 + 60 * len(modes), env=environment)

    def reports(self, mode: str) -> list[dict]:
        """Both ranks' reports of `mode`'s run, which must have finished."""
        files = [self.folder / mode / f"rank{rank}.json" for rank in range(2)]
        assert all(file.exists() for file in files), f"the run of {mode} did not finish: {self.result.stderr[-4000:]}"
        return [json.loads(file.read_text()) for file in files]


@pytest.fixture(scope="module")
def shared_launch(request, tmp_path_factory) -> SharedLaunch:
    selected = [item.callspec.params["mode"] for item in request.session.items
                if item.module is request.module and "mode" in getattr(getattr(item, "callspec", None), "params", {})]
    # the clean exit's own test, selected alone, checks a launch of one run
    runs = [run for mode in selected or ["knapsack"] for run in (mode, *COMPARED_WITH.get(mode, ()))]
    modes = list(dict.fromkeys(runs))
    environment = dict(os.environ)
    if any("-tools" in mode for mode in modes):  # the tool-calling model of tool_task.py
        environment["TOOL_MODEL"] = str(request.getfixturevalue("tool_model"))
    return SharedLaunch(tmp_path_factory.mktemp("two-processes"), modes, environment)


def test_each_launch_gets_its_own_port(tmp_path):
    # Two launches on accelerate's default port 29500 at once: the second fails to bind, or joins the first's group.
    commands = [launch_command([(tmp_path / str(i), "knapsack")], free_port()) for i in range(2)]
    ports = [command[command.index("--main_process_port") + 1] for command in commands]
    assert ports[0] != ports[1] and "29500" not in ports


def test_a_launch_runs_each_of_its_runs_in_turn_and_exits_cleanly(shared_launch):
    # Every run of the shared launch wrote both ranks' reports, and both processes left without an error.
    assert shared_launch.result.returncode == 0, shared_launch.result.stderr[-4000:]
    for mode in shared_launch.modes:
        assert len(shared_launch.reports(mode)) == 2


@pytest.mark.parametrize("mode", ["knapsack", "coba", "knapsack-probe", "knapsack-rank-seed", "knapsack-beyond",
                                  "uniform-rounds", "knapsack-rounds", "vip-rounds"])
def test_two_processes_make_identical_allocations(shared_launch, mode):
    # knapsack-rank-seed: rank 0 has seed 0, rank 1 seed 1. Before, each rank shuffled the slots with its own seed,
    # rewards were credited to the wrong prompts and the trackers diverged.
    ranks = shared_launch.reports(mode)
    assert all(report["world_size"] == 2 for report in ranks)
    first, second = ranks
    shared = ("keys", "counts", "slot_order") + (("pass_rates",) if mode.startswith("vip") else ())  # no NaN
    assert [{k: b[k] for k in shared} for b in first["batches"]] == [{k: b[k] for k in shared} for b in
                                                                        second["batches"]]
    for batch in first["batches"]:
        assert batch["local_rows"] == 4  # every rank keeps the same number of rows
        assert sum(batch["counts"]) == 8 and len(batch["counts"]) == 2
    if mode != "knapsack-rank-seed":  # there each rank's sampler draws its own prompts: fewer come back
        assert any(batch["counts"] != [4, 4] for batch in first["batches"])  # budgets really moved
    if mode.endswith("-rounds"):  # each round a multiple of 2 rows, one request each; some batches took several
        assert all(rows % 2 == 0 for batch in first["batches"] for rows in batch["round_rows"])
        assert any(len(batch["round_rows"]) > 1 for batch in first["batches"])
    assert first["tracker"] == second["tracker"]
    assert first["losses"] and len(first["losses"]) == 9  # 9 steps: each prompt comes back a third time
    saved = json.loads((shared_launch.folder / mode / "checkpoint-9" / TRACKER_STATE_NAME).read_text())
    assert saved == first["tracker"]

    for mine, theirs in zip(first["batches"], second["batches"]):
        counts = np.array(mine["counts"])
        rewards = np.empty(counts.sum())
        rewards[mine["slot_order"]] = mine["all_rewards"]
        expected = np.empty(counts.sum())  # GRPO's advantage over each prompt's whole group, computed by hand
        for start, count in zip(np.cumsum(counts) - counts, counts):
            group = rewards[start : start + count]
            expected[start : start + count] = (group - group.mean()) / (group.std(ddof=1) + 1e-4)
            if mode.endswith("-beyond"):  # prompt-weighted loss: num_generations / N_i
                expected[start : start + count] *= 4 / count
        prompt_of_slot = np.repeat(np.arange(counts.size), counts)
        for rank in (mine, theirs):
            np.testing.assert_allclose(rank["my_advantages"], expected[rank["my_slots"]], atol=1e-5)
            held = np.bincount(prompt_of_slot[rank["my_slots"]], minlength=counts.size)
            if not mode.endswith("-rounds"):  # in rounds, a prompt's odd counts of two rounds can meet on a rank
                assert (held >= counts // 2).all()  # every prompt's rows are spread over both ranks


@pytest.mark.parametrize("mode", ["reinforce_ada"])
def test_two_processes_train_reinforce_ada_rows_where_they_were_generated_or_not(shared_launch, mode):
    # The rows each process trains are K of each prompt, chosen from rows generated on either process: every trained
    # row must be a (prompt, completion) that was generated and scored, with the reward the plan credits it. The
    # rewards are accuracy (parity) plus 0.5 x a format reward, success by accuracy alone; each advantage is recomputed
    # by hand against the mean and deviation of the weighted rewards of all the prompt's rollouts of the batch.
    first, second = shared_launch.reports(mode)
    shared = ("keys", "counts", "slot_order", "round_rows", "trained_rewards")
    assert [{k: b[k] for k in shared} for b in first["batches"]] == [{k: b[k] for k in shared} for b in
                                                                        second["batches"]]
    assert first["tracker"] == second["tracker"]
    generated = [(prompt, completion, parity + 0.5 * formatted, step)  # every rollout of both ranks, weighted
                 for rank in (first, second)
                 for (prompt, completion, parity, step), (_, _, formatted, _) in zip(rank["scored"],
                                                                                     rank["format_scored"])]
    weighted = {(prompt, completion): reward for prompt, completion, reward, _ in generated}
    for step, (batch_first, batch_second) in enumerate(zip(first["batches"], second["batches"])):
        assert batch_first["counts"] == [4, 4] and sum(batch_first["round_rows"]) >= 8
        for rank in (batch_first, batch_second):
            assert len(rank["my_rows"]) == 4  # every process trains as many rows
            for (prompt, completion), slot in zip(rank["my_rows"], rank["my_slots"]):
                assert prompt == rank["prompts"][slot // 4]  # the plan's prompt for that slot (K = 4 per prompt)
                assert weighted[(prompt, completion)] == rank["trained_rewards"][slot]
        assert sum(s == step for *_, s in generated) == sum(batch_first["round_rows"])
        expected = []
        for slot, reward in enumerate(batch_first["trained_rewards"]):
            prompt = batch_first["prompts"][slot // 4]
            rewards = np.array([r for p, _, r, s in generated if p == prompt and s == step])
            spread = max(rewards.std(ddof=1), 1e-6) + 1e-6
            expected.append(0.0 if np.ptp(rewards) == 0 else (reward - rewards.mean()) / spread)
        advantages = np.full(8, np.nan)  # both ranks' advantages form one vector in plan order
        for rank in (batch_first, batch_second):
            advantages[rank["my_slots"]] = rank["my_advantages"]
        np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-6)
    assert any(len(batch["round_rows"]) > 1 for batch in first["batches"])  # some batches took several rounds
    assert any(reward % 1 for batch in first["batches"] for reward in batch["trained_rewards"])  # non-binary rewards


@pytest.mark.parametrize("mode", ["knapsack-tools", "knapsack-tools-probe"])
def test_two_processes_run_every_rollouts_tool_loop_for_its_own_prompt(shared_launch, mode):
    first, second = ranks_agree_and_rows_show_their_prompts(shared_launch, mode)
    calls = [row for rank in (first, second) for row in rank["scored"]]
    assert len(calls) >= 0.8 * 9 * 8
    assert all(reply == str(sum(arguments)) for _, arguments, reply in calls)  # each loop got its own reply
    assert np.mean([arguments == digits for digits, arguments, _ in calls]) > 0.8


@pytest.mark.parametrize("mode", ["knapsack-rollout_func", "coba-environment", "knapsack-rollout_func-probe",
                                  "coba-environment-probe"])
def test_two_processes_credit_agent_rollouts_to_their_prompts(shared_launch, mode):
    # The reward functions assert, row by row, that a completion names its own prompt (rollout_func) or that the
    # environment scoring a rollout was reset with that rollout's row: a misplaced row fails the run itself.
    first, _ = ranks_agree_and_rows_show_their_prompts(shared_launch, mode)
    assert any(batch["counts"] != [4, 4] for batch in first["batches"])


def ranks_agree_and_rows_show_their_prompts(shared_launch, mode: str) -> tuple[dict, dict]:
    """`mode` on two processes: both ranks make the same plans and end with the same tracker, and every row a rank
    trains shows the prompt its slot is credited to. Returns both ranks' reports."""
    first, second = shared_launch.reports(mode)
    shared = ("keys", "counts", "slot_order", "trained_rewards")
    assert [{k: b[k] for k in shared} for b in first["batches"]] == [{k: b[k] for k in shared} for b in
                                                                        second["batches"]]
    assert first["tracker"] == second["tracker"]
    for batch in first["batches"] + second["batches"]:
        prompt_of_slot = np.repeat(np.arange(len(batch["counts"])), batch["counts"])
        for (shown, _), slot in zip(batch["my_rows"], batch["my_slots"]):
            assert batch["prompts"][prompt_of_slot[slot]] in shown
    return first, second


def test_an_allocator_failure_stops_every_process(tmp_path):
    # Without the outcome broadcast, rank 1 would wait in the broadcast for 30 minutes while rank 0 waits in its
    # exception handler's collective; the timeout turns that hang into a failure.
    result = launch(tmp_path, "failing-allocator", timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    messages = [(tmp_path / f"rank{rank}_error.txt").read_text() for rank in range(2)]
    assert messages[0] == messages[1]
    assert "Rollout allocation failed on the main process" in messages[0]
    assert "ArithmeticError: allocator broke at step 2" in messages[0]


def test_a_reward_failure_on_one_process_stops_every_process(tmp_path):
    # Before, rank 0 waited in TRL's reward gather while rank 1's exception handler waited in another collective.
    result = launch(tmp_path, "failing-reward", timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    messages = [(tmp_path / f"rank{rank}_error.txt").read_text() for rank in range(2)]
    assert messages[0] == messages[1]
    assert messages[0] == ("A reward function failed on process 1, so every process stops: ConnectionError: grader "
                           "unreachable from rank 1")


def test_an_infinite_reward_on_one_process_stops_every_process_naming_it(tmp_path):
    result = launch(tmp_path, "infinite-reward", timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    messages = [(tmp_path / f"rank{rank}_error.txt").read_text() for rank in range(2)]
    assert messages[0] == messages[1]
    assert messages[0].startswith("The reward function 'parity_reward_infinite_on_rank_1' gave inf to a completion "
                                  "of the prompt '")
    assert "(generated on process 1): a reward must be finite" in messages[0]


@pytest.mark.parametrize("mode", ["knapsack-history"])
def test_two_processes_train_against_the_same_reward_history(shared_launch, mode):
    # Each advantage recomputed by hand from both ranks' scored rollouts: every earlier visit of a prompt weighs half
    # the next (advantage_history_window=2), this batch's rollouts included.
    from test_baselines import history_by_hand

    first, second = ranks_agree_and_rows_show_their_prompts(shared_launch, mode)
    scored = [row for rank in (first, second) for row in rank["scored"]]
    visits: dict[str, list[np.ndarray]] = {}
    for step, batch in enumerate(first["batches"]):
        for prompt in dict.fromkeys(batch["prompts"]):
            visits.setdefault(prompt, []).append(np.array([r for p, _, r, s in scored if p == prompt and s == step]))
        counts, expected = np.array(batch["counts"]), []
        for prompt, count in zip(batch["prompts"], counts):
            weight, mean, m2 = history_by_hand(visits[prompt], 0.5)
            trained = np.array(batch["trained_rewards"][len(expected) : len(expected) + count])
            expected += [0.0] * count if m2 == 0 else list((trained - mean) / (np.sqrt(m2 / (weight - 1)) + 1e-4))
        for rank in (batch, second["batches"][step]):
            np.testing.assert_allclose(rank["my_advantages"], np.array(expected)[rank["my_slots"]], rtol=1e-5,
                                       atol=1e-6)


@pytest.mark.parametrize("mode", ["uniform-dynamic"])
def test_two_processes_draw_and_keep_the_same_prompts_under_dynamic_sampling(shared_launch, mode):
    # Every kept prompt's rollouts, gathered from both ranks, differ; every dropped one's agree; the kept are the first
    # two that differ, in the order drawn; each rank trains 4 rows of them, whatever rank generated them.
    first, second = shared_launch.reports(mode)
    shared = ("keys", "counts", "slot_order", "round_rows", "trained_rewards", "prompts")
    assert [{k: b[k] for k in shared} for b in first["batches"]] == [{k: b[k] for k in shared} for b in
                                                                        second["batches"]]
    assert first["tracker"] == second["tracker"] and len(first["losses"]) == 9
    scored = [row for rank in (first, second) for row in rank["scored"]]
    for step, batch in enumerate(first["batches"]):
        rewards = {prompt: {r for p, _, r, s in scored if p == prompt and s == step} for prompt in batch["prompts"]}
        varied = [len(rewards[prompt]) > 1 for prompt in batch["prompts"]]
        kept = [count > 0 for count in batch["counts"]]
        assert kept == [v and sum(varied[: i + 1]) <= 2 for i, v in enumerate(varied)] and sum(kept) == 2
        assert batch["round_rows"] == [8] * len(batch["round_rows"]) and len(batch["prompts"]) == 2 * len(
            batch["round_rows"])
        assert sum(s == step for *_, s in scored) == sum(batch["round_rows"])
        kept_prompts = [prompt for prompt, keep in zip(batch["prompts"], kept) if keep]
        for rank in (batch, second["batches"][step]):
            assert len(rank["my_rows"]) == 4
            for (prompt, _), slot in zip(rank["my_rows"], rank["my_slots"]):
                assert prompt == kept_prompts[slot // 4]
    assert any(len(batch["round_rows"]) > 1 for batch in first["batches"])  # some batches drew a second time


@pytest.mark.parametrize("mode", ["spo", "spo-rank-seed"])
def test_two_processes_draw_the_same_prompts_and_keep_the_same_spo_tracker(shared_launch, mode):
    # One rollout a prompt, 8 drawn a batch by SPO's weights from 6 prompts, KL-adaptive rho (forward passes dealt
    # over both ranks): both ranks draw the same prompts, whatever seed each was given, end with the same tracker and
    # kept responses, and train each row against the estimate from before its batch, normalized over both ranks' rows.
    from trl_budget.spo import spo_advantages

    first, second = ranks_agree_and_rows_show_their_prompts(shared_launch, mode)
    assert first["spo"] == second["spo"] and len(first["spo"]["tracker"]["responses"]) > 0
    assert max(first["spo"]["tracker"]["visits"].values()) > 1  # prompts came back
    for step, batch in enumerate(first["batches"]):
        assert batch["counts"] == [1] * 8 and batch["spo_p_hats"] == second["batches"][step]["spo_p_hats"]
        expected = spo_advantages(np.array(batch["trained_rewards"]), np.array(batch["spo_p_hats"]))
        for rank in (batch, second["batches"][step]):
            np.testing.assert_allclose(rank["my_advantages"], expected[rank["my_slots"]], rtol=1e-5, atol=1e-6)


def test_reaching_dynamic_samplings_cap_stops_every_process_with_the_same_error(tmp_path):
    result = launch(tmp_path, "dynamic-cap")
    assert result.returncode == 0, result.stderr[-4000:]
    messages = [(tmp_path / f"rank{rank}_error.txt").read_text() for rank in range(2)]
    assert messages[0] == messages[1] and "kept 0 of the 2 prompts" in messages[0]
    assert "after 2 generation batches" in messages[0]


@pytest.mark.parametrize("mode", ["uniform-trl"])
def test_uniform_on_two_processes_is_grpo_trainer_bit_for_bit(shared_launch, mode):
    # Before, uniform re-dealt every prompt's slots over both processes: other rows per rank, other completions.
    ours, theirs = (shared_launch.reports(run) for run in (mode, *COMPARED_WITH[mode]))
    assert ours == theirs and len(ours[0]["losses"]) == 4


@pytest.mark.parametrize("mode", ["default-trl"])
def test_the_defaults_on_two_processes_keep_grpo_trainers_rows(shared_launch, mode):
    # The history baseline on TRL's own rows: every rank holds the rows GRPOTrainer gives it; on first visits (8
    # prompts, 2 a step, 4 steps) the advantages are GRPO's, and both ranks log the same. TRL keeps the last batch's.
    ours, theirs = (shared_launch.reports(run) for run in (mode, *COMPARED_WITH[mode]))
    assert ours[0]["completions"] == ours[1]["completions"] and ours[0]["advantages"] == ours[1]["advantages"]
    assert ours[0]["completions"] == theirs[0]["completions"] and len(ours[0]["completions"]) == 8
    np.testing.assert_allclose(ours[0]["advantages"], theirs[0]["advantages"], atol=1e-5)


@pytest.mark.parametrize("mode", ["vip"])
def test_two_processes_predict_and_allocate_identically_under_vip(shared_launch, mode):
    # Every process takes part in the embeddings' forward passes (each its share of the prompts, gathered), the
    # prediction is the main process's; every rank must hold the same embeddings, rates and counts.
    first, second = shared_launch.reports(mode)
    assert first["vip_embeddings"] == second["vip_embeddings"] and len(first["vip_embeddings"]) == 6
    shared = ("keys", "counts", "slot_order", "pass_rates")
    assert [{k: b[k] for k in shared} for b in first["batches"]] == [{k: b[k] for k in shared} for b in
                                                                        second["batches"]]
    assert first["tracker"] == second["tracker"] and len(first["losses"]) == 9
    assert len({rate for batch in first["batches"] for rate in batch["pass_rates"]}) > 2  # predictions moved
    with np.load(shared_launch.folder / mode / "checkpoint-9" / "budget_vip_embeddings.npz") as saved:
        assert saved["embeddings"].tolist() == first["vip_embeddings"]
