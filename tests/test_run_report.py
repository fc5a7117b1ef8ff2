"""`trl-budget report`: each prompt's pass rate and rollouts over a real run's checkpoints, checked by hand against the
tracker states it saved; the shares of solved, hopeless, learning and unseen prompts; the files, the PNG, the command
line, SPO's estimates, the W&B tables of `BudgetReportCallback`, and the errors."""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from datasets import concatenate_datasets
from helpers import make_dataset, make_trainer
from test_package import BLOCK_FRAMEWORKS

from trl_budget import CapabilityTracker, prompt_key
from trl_budget.checkpoint import save_tracker
from trl_budget.cli import main
from trl_budget.run_report import (
    BudgetReportCallback,
    build_report,
    format_report,
    plot_report,
    prompt_table,
    prompt_texts,
    read_prompts_file,
    report_json,
    shares_table,
    write_report,
)

ROOT = Path(__file__).resolve().parents[1]
STEPS = 3
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokenizer):
    """Three steps of Knapsack RL on three prompts that come back, a checkpoint at every step, W&B offline with the
    report callback. Each visit's rollouts pool whole (no rollout pool, 16 visits), trusted after one rollout."""
    folder = tmp_path_factory.mktemp("report-run")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(folder)), ("WANDB_SILENT", "true")):
            patch.setenv(name, value)
        import wandb

        trainer = make_trainer(folder / "out", tokenizer, dataset=concatenate_datasets([make_dataset(3)] * 4),
                               max_steps=STEPS, save_strategy="steps", save_steps=1, budget_allocator="knapsack",
                               pass_rate_min_rollouts=1, pass_rate_rollout_pool=0, pass_rate_window=16,
                               report_to=["wandb"])
        trainer.add_callback(BudgetReportCallback(prompts=make_dataset(3)))
        trainer.train()
        # wandb reads WANDB_DIR once a process: after another test's run its files are not under this folder.
        (folder / "wandb_files").write_text(wandb.run.dir)
        wandb.finish()
    return folder


def by_hand(state: dict) -> dict[str, tuple[int, int, int]]:
    """Each key's (successes, rollouts) over its kept visits and its scored rollouts, read off the saved columns: with
    no rollout pool and a window longer than the run, the pass rate pools every kept visit."""
    visits = len(state["wins"]) // len(state["keys"])
    return {key: (sum(state["wins"][row * visits:(row + 1) * visits]),
                  sum(state["trials"][row * visits:(row + 1) * visits]), state["scored"][row])
            for row, key in enumerate(state["keys"])}


def status_by_hand(wins: int, trials: int) -> str:
    return "unseen" if trials == 0 else "solved" if wins == trials else "hopeless" if wins == 0 else "learning"


def test_the_report_of_a_real_run_agrees_with_its_tracker_states_by_hand(run):
    out = run / "out"
    report = build_report(out)
    states = [json.loads((out / f"checkpoint-{step}" / "budget_tracker_state.json").read_text())
              for step in range(1, STEPS + 1)]
    assert report.steps == [1, 2, 3]
    assert sorted(report.keys) == sorted(states[-1]["keys"]) and len(report.keys) == 3
    assert {(state["rollout_pool"], state["min_rollouts"]) for state in states} == {(None, 1)}
    share_columns, share_rows = shares_table(report)
    for index, state in enumerate(states):
        figures = by_hand(state)
        statuses = []
        for column, key in enumerate(report.keys):
            wins, trials, scored = figures.get(key, (0, 0, 0))
            assert (report.wins[index, column], report.trials[index, column]) == (wins, trials)
            assert report.rollouts[index, column] == scored
            if trials:
                assert report.pass_rates[index, column] == pytest.approx(wins / trials)
            else:
                assert np.isnan(report.pass_rates[index, column])
            statuses.append(status_by_hand(wins, trials))
            assert report.statuses[index, column] == statuses[-1]
        row = dict(zip(share_columns, share_rows[index]))
        for status in ("solved", "hopeless", "learning", "unseen"):
            assert row[status] == statuses.count(status) and row[f"{status}_share"] == pytest.approx(
                statuses.count(status) / 3)
        assert row["rollouts"] == sum(scored for _, _, scored in figures.values())
    # What the test compares is not trivial: a prompt first seen after the first checkpoint, prompts revisited,
    # and rollouts spread unevenly by the allocator.
    assert np.isnan(report.pass_rates[0]).any() and not np.isnan(report.pass_rates[-1]).any()
    visits = np.count_nonzero(np.reshape(states[-1]["trials"], (3, -1)), axis=1)
    assert visits.max() >= 2
    assert len(set(report.rollouts[-1].tolist())) > 1

    columns, rows = prompt_table(report)
    latest = by_hand(states[-1])
    assert [row[columns.index("rollouts")] for row in rows] == sorted((figure[2] for figure in latest.values()),
                                                                       reverse=True)
    for row in rows:
        entry = dict(zip(columns, row))
        wins, trials, scored = latest[entry["key"]]
        assert (entry["wins"], entry["trials"], entry["rollouts"]) == (wins, trials, scored)
        assert entry["rollout_share"] == pytest.approx(scored / sum(f[2] for f in latest.values()))


def test_the_logged_budget_figures_come_from_the_newest_trainer_state(run):
    out = run / "out"
    report = build_report(out)
    history = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["log_history"]
    logged = [entry for entry in history if "budget/effective_ratio" in entry]
    assert [entry["step"] for entry in report.logs] == [entry["step"] for entry in logged] == [1, 2, 3]
    assert [entry["budget/zero_std_groups"] for entry in report.logs] == [
        entry["budget/zero_std_groups"] for entry in logged]
    columns, rows = shares_table(report)
    for row, entry in zip(rows, logged):  # one log entry between checkpoints: its mean is itself
        assert row[columns.index("budget/effective_ratio")] == entry["budget/effective_ratio"]


def test_the_files_hold_the_tables_and_a_valid_png(run, tmp_path):
    report = build_report(run / "out")
    paths = write_report(report, tmp_path)
    png = paths["report.png"].read_bytes()
    assert png[:8] == PNG_SIGNATURE
    import matplotlib.image

    assert matplotlib.image.imread(paths["report.png"]).shape[:2] == (900, 1400)
    with open(paths["prompts.csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    columns, table = prompt_table(report)
    assert [row["key"] for row in rows] == [line[0] for line in table]
    assert [int(row["rollouts"]) for row in rows] == [line[columns.index("rollouts")] for line in table]
    with open(paths["prompts_by_checkpoint.csv"], newline="") as f:
        long_rows = list(csv.DictReader(f))
    assert len(long_rows) == STEPS * len(report.keys)
    for row in long_rows:
        index, column = report.steps.index(int(row["step"])), report.keys.index(row["key"])
        assert int(row["rollouts"]) == report.rollouts[index, column]
        assert row["pass_rate"] == ("" if np.isnan(report.pass_rates[index, column]) else
                                    str(report.pass_rates[index, column]))
    saved = json.loads(paths["report.json"].read_text())
    assert saved["steps"] == [1, 2, 3] and set(saved["definitions"]) >= {"solved", "hopeless", "learning", "unseen"}
    for entry in saved["prompts"]:
        column = report.keys.index(entry["key"])
        assert entry["rollouts"] == report.rollouts[:, column].tolist()
        assert entry["pass_rate"] == [None if np.isnan(rate) else rate for rate in report.pass_rates[:, column]]


def test_the_command_runs_on_the_run_and_names_prompts_from_a_file(run, tmp_path):
    prompts = tmp_path / "train.jsonl"
    make_dataset(3).to_json(prompts)  # rows with their prompt under 'prompt', one a line
    result = subprocess.run([sys.executable, "-m", "trl_budget", "report", str(run / "out"), "--prompts",
                             str(prompts), "--top", "2"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    report = build_report(run / "out", read_prompts_file(prompts))
    most = report.keys[int(np.argmax(report.rollouts[-1]))]
    assert "Prompts by rollouts at step 3 (2 of 3)" in result.stdout
    assert report.texts[most] in result.stdout and most not in result.stdout  # texts in place of digests
    assert "digest" not in result.stdout
    assert (run / "out" / "report" / "report.png").read_bytes()[:8] == PNG_SIGNATURE
    assert {row["prompt"] for row in make_dataset(3)} == set(report.texts.values())


def test_the_report_loads_no_framework(run):
    result = subprocess.run([sys.executable, "-c", BLOCK_FRAMEWORKS + f"""
from trl_budget.cli import main
main(["report", {str(run / "out")!r}, "--top", "1"])
"""], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Prompts by status over checkpoints" in result.stdout


def test_the_callback_logged_the_same_tables_to_wandb_at_every_save(run):
    files = Path((run / "wandb_files").read_text()) / "media" / "table" / "budget_report"
    prompts = sorted(files.glob("prompts_*.table.json"), key=lambda path: int(path.name.split("_")[1]))
    assert len(prompts) == STEPS and len(list(files.glob("shares_*.table.json"))) == STEPS
    report = build_report(run / "out", prompt_texts(make_dataset(3), "the dataset"))
    logged = json.loads(prompts[-1].read_text())
    columns, rows = prompt_table(report)
    assert logged["columns"] == columns
    assert logged["data"] == rows
    assert {row[1] for row in logged["data"]} == {row["prompt"] for row in make_dataset(3)}
    shares = json.loads(max(files.glob("shares_*.table.json"), key=lambda p: int(p.name.split("_")[1])).read_text())
    assert shares["data"] == [list(row) for row in shares_table(report)[1]]


def test_statuses_follow_the_saved_pass_rate_rule(tmp_path):
    # min_rollouts=2, window=1: a tracker with the default settings would call "few" seen and "recovers" learning.
    names = ["always", "never", "half", "few", "recovers", "listed only"]
    key = {name: prompt_key(name) for name in names}
    tracker = CapabilityTracker(window=1, min_rollouts=2)
    tracker.update([key[n] for n in ("always",) * 3 + ("never",) * 4 + ("half",) * 2 + ("few", "recovers", "recovers")],
                   [1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0])
    save_tracker(str(tmp_path / "checkpoint-10"), tracker)
    tracker.update([key["recovers"]] * 2, [1, 1])
    save_tracker(str(tmp_path / "checkpoint-20"), tracker)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(names))

    report = build_report(tmp_path, read_prompts_file(prompts))
    status = {report.texts[k]: report.statuses[:, report.keys.index(k)].tolist() for k in report.keys}
    assert status == {"always": ["solved"] * 2, "never": ["hopeless"] * 2, "half": ["learning"] * 2,
                      "few": ["unseen"] * 2, "recovers": ["hopeless", "solved"]}
    columns, rows = shares_table(report)
    assert [dict(zip(columns, row))["unseen"] for row in rows] == [1, 1]  # of the five prompts the tracker holds
    assert dict(zip(columns, rows[1]))["solved_share"] == pytest.approx(2 / 5)
    # The prompt only the file lists is named apart, not counted: the shares are those of the run without texts.
    assert report.unmatched_texts == [key["listed only"]]
    assert shares_table(build_report(tmp_path)) == (columns, rows)
    assert "1 of the 6 prompts given for their texts are in no saved state" in format_report(report)
    assert rows[1][columns.index("rollouts")] == 14 and rows[1][columns.index("new_rollouts")] == 2
    entry = dict(zip(*[prompt_table(report)[0], next(r for r in prompt_table(report)[1] if r[1] == "recovers")]))
    assert entry["status_history"] == "hopeless@10 > solved@20" and entry["rollouts"] == 4
    text = format_report(report)
    assert "recovers" in text and "digest" not in text


SPO_STEPS = 6


@pytest.fixture(scope="module")
def spo_run(tmp_path_factory, tokenizer):
    """Six steps of SPO's allocator (one rollout a prompt, 8 prompts a step drawn by SPO's weights) on the 39 distinct
    prompts of 50 rows, a checkpoint every other step, rho constant; and the training rows as a --prompts file."""
    folder = tmp_path_factory.mktemp("spo-report-run")
    make_trainer(folder / "out", tokenizer, max_steps=SPO_STEPS, spo_rho=0.875, dataset=make_dataset(50),
                 save_strategy="steps", save_steps=2, budget_allocator="spo", budget_max_generations=128).train()
    make_dataset(50).to_json(folder / "train.jsonl")
    return folder


def spo_status_by_hand(alpha: float, beta: float, visits: int) -> str:
    estimate = alpha / (alpha + beta)
    return "unseen" if visits == 0 else "solved" if estimate >= 0.9 else "hopeless" if estimate <= 0.1 else "learning"


def test_spo_runs_are_classified_by_spos_estimates_and_visits(spo_run):
    out = spo_run / "out"
    report = build_report(out)
    assert report.statuses_from == "spo" and report.steps == [2, 4, 6]
    by_tracker = []  # what the capability tracker's saved rule (one visit, one rollout) would call each prompt
    for index, step in enumerate(report.steps):
        saved = json.loads((out / f"checkpoint-{step}" / "budget_spo_state.json").read_text())["tracker"]
        spo = {k: (a, b) for k, a, b in zip(saved["keys"], saved["alpha"], saved["beta"])}
        tracked = by_hand(json.loads((out / f"checkpoint-{step}" / "budget_tracker_state.json").read_text()))
        for column, key in enumerate(report.keys):
            visits = saved["visits"].get(key, 0)
            assert report.spo_visits[index, column] == visits
            if key in spo:
                assert report.spo_estimates[index, column] == pytest.approx(spo[key][0] / sum(spo[key]))
                assert report.statuses[index, column] == spo_status_by_hand(*spo[key], visits)
            else:
                assert np.isnan(report.spo_estimates[index, column]) and report.statuses[index, column] == "unseen"
            by_tracker.append(status_by_hand(*tracked.get(key, (0, 0, 0))[:2]))
    statuses = report.statuses.ravel().tolist()
    assert statuses != by_tracker  # the tracker's last-visit rate would classify otherwise
    assert "learning" in report.statuses[-1] and report.spo_visits[-1].sum() > 0
    columns, rows = prompt_table(report)
    for row in rows:
        entry, column = dict(zip(columns, row)), report.keys.index(row[0])
        assert entry["spo_visits"] == report.spo_visits[-1, column] and entry["status"] == report.statuses[-1, column]
        assert entry["spo_estimate"] == (None if np.isnan(report.spo_estimates[-1, column]) else pytest.approx(
            report.spo_estimates[-1, column]))
    text = format_report(report)
    assert "from SPO's estimate p = alpha / (alpha + beta)" in text and "spo visits" in text
    assert "from the tracker's pass rate" not in text


def test_the_prompts_counted_are_the_same_with_and_without_texts(spo_run, tmp_path):
    out, prompts = spo_run / "out", spo_run / "train.jsonl"
    plain, named = build_report(out), build_report(out, read_prompts_file(prompts))
    assert named.keys == plain.keys and shares_table(named) == shares_table(plain)
    drawn = set(json.loads((out / "checkpoint-6" / "budget_tracker_state.json").read_text())["keys"])
    listed = set(named.texts)
    assert set(plain.keys) == drawn and listed > drawn  # some training prompts were never drawn
    assert sorted(named.unmatched_texts) == sorted(listed - drawn)
    printed = []
    for extra in ([], ["--prompts", str(prompts)]):
        result = subprocess.run([sys.executable, "-m", "trl_budget", "report", str(out), "--no-plot", *extra],
                                capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert result.returncode == 0, result.stderr
        printed.append(result.stdout)
    assert [text.splitlines()[0] for text in printed] == [
        f"Run {out}: 3 checkpoint(s) (steps 2, 4, 6), {len(drawn)} prompts, {8 * SPO_STEPS} rollouts scored."] * 2
    tables = [text[text.index("Prompts by status"):text.index("Prompts by rollouts")] for text in printed]
    assert tables[0] == tables[1]
    assert (f"{len(listed - drawn)} of the {len(listed)} prompts given for their texts are in no saved state"
            in printed[1])
    saved = json.loads((out / "report" / "report.json").read_text())
    assert saved["prompts_file_unmatched"] == len(listed - drawn) and saved["statuses_from"] == "spo"


def test_with_offline_priors_spos_state_holds_every_training_prompt_and_unvisited_ones_are_unseen(tmp_path,
                                                                                                 tokenizer):
    rows = make_dataset(30)
    dataset = rows.add_column("scores", [[float(index % 3 == 0)] * 2 for index in range(len(rows))])
    make_trainer(tmp_path, tokenizer, max_steps=2, spo_rho=0.875, dataset=dataset, save_strategy="steps",
                 save_steps=1, budget_allocator="spo", budget_max_generations=128, spo_offline_column="scores",
                 spo_offline_n=2).train()
    report = build_report(tmp_path)
    assert set(report.keys) == set(prompt_texts(rows, "the rows"))  # the training set, drawn or not
    assert shares_table(build_report(tmp_path, prompt_texts(rows, "the rows"))) == shares_table(report)
    never = report.spo_visits[-1] == 0
    assert never.any() and (~never).any()
    assert (report.statuses[-1][never] == "unseen").all() and not (report.statuses[-1][~never] == "unseen").any()
    assert not np.isnan(report.spo_estimates).any()  # every prompt has its prior


def test_the_commands_help_states_spos_thresholds(capsys):
    from trl_budget.run_report import SPO_HOPELESS_AT, SPO_SOLVED_AT

    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"solved p >= {SPO_SOLVED_AT}, hopeless p <= {SPO_HOPELESS_AT}" in text


@pytest.mark.parametrize("rho", np.linspace(0.875, 1.0, 6).tolist())
def test_from_spos_uninformed_prior_four_outcomes_running_make_a_prompt_solved_or_hopeless_and_three_do_not(rho):
    # DEFINITIONS and docs/report.md state it for every constant rho from 0.875 to 1.
    from trl_budget.spo import SPOTracker

    for reward, status in ((1.0, "solved"), (0.0, "hopeless")):
        tracker = SPOTracker(rho=rho)
        for outcomes in range(1, 5):
            tracker.update(["prompt"], np.array([reward]), rho)
            called = spo_status_by_hand(tracker.alpha["prompt"], tracker.beta["prompt"], outcomes)
            assert called == (status if outcomes == 4 else "learning"), (outcomes, tracker.p_hats(["prompt"]))


def test_a_missing_or_empty_folder_or_a_broken_state_is_refused_clearly(tmp_path, capsys):
    missing = tmp_path / "missing"
    with pytest.raises(SystemExit) as stopped:
        main(["report", str(missing)])
    assert stopped.value.code == 2 and "is not a folder: name the output_dir of a training run" in capsys.readouterr(
    ).err
    assert not missing.exists()  # nothing is created where the run is not

    with pytest.raises(ValueError, match="has no checkpoint-N folder, hence no budget_tracker_state.json"):
        build_report(tmp_path)
    (tmp_path / "checkpoint-5").mkdir()  # a checkpoint of a run without the budget's files
    with pytest.raises(ValueError, match=r"its checkpoints \(checkpoint-5\) lack budget_tracker_state.json"):
        build_report(tmp_path)
    state = tmp_path / "checkpoint-5" / "budget_tracker_state.json"
    state.write_text('{"version": 4, "keys": [')
    with pytest.raises(ValueError, match=f"{state} cannot be read as a tracker state"):
        build_report(tmp_path)
    state.write_text(json.dumps({**CapabilityTracker().state_dict(), "version": 1}))
    with pytest.raises(ValueError, match=f"{state} is not a tracker state.*version 1"):
        build_report(tmp_path)
    assert not (tmp_path / "report").exists()


def test_prompts_files_that_name_no_prompt_are_refused(tmp_path):
    lines = tmp_path / "rows.jsonl"
    lines.write_text('{"prompt": "1+1="}\n{"question": "2+2="}\n')
    with pytest.raises(ValueError, match="entry 1 is an object without a 'prompt'"):
        read_prompts_file(lines)
    lines.write_text('"1+1="\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_prompts_file(lines)
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1="}]
    lines.write_text(json.dumps(conversation) + "\n" + json.dumps("2+2=") + "\n")
    assert read_prompts_file(lines) == {prompt_key(conversation): "1+1=", prompt_key("2+2="): "2+2="}


def test_without_matplotlib_the_png_is_refused_naming_the_extra_and_no_plot_works(run, tmp_path, monkeypatch,
                                                                                  capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails, as where it is not installed
    report = build_report(run / "out")
    with pytest.raises(ImportError, match=r"pip install 'trl_budget\[demo\]'"):
        plot_report(report, tmp_path / "report.png")
    with pytest.raises(SystemExit) as stopped:
        main(["report", str(run / "out")])
    assert stopped.value.code == 2 and "--no-plot" in capsys.readouterr().err
    copy = tmp_path / "out"
    for step in range(1, STEPS + 1):  # the run's tracker states alone, so that the report writes beside them
        (copy / f"checkpoint-{step}").mkdir(parents=True)
        source = run / "out" / f"checkpoint-{step}" / "budget_tracker_state.json"
        (copy / f"checkpoint-{step}" / source.name).write_bytes(source.read_bytes())
    assert main(["report", str(copy), "--no-plot"]) == 0
    assert sorted(path.name for path in (copy / "report").iterdir()) == [
        "prompts.csv", "prompts_by_checkpoint.csv", "report.json", "shares.csv"]


def test_the_callback_warns_and_lets_training_go_on_where_no_report_can_be_read(tmp_path, monkeypatch, caplog):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    import wandb

    (tmp_path / "out" / "checkpoint-1").mkdir(parents=True)  # its save wrote no tracker state
    wandb.init(project="report")
    try:
        state = TrainerState()
        state.global_step = 1
        BudgetReportCallback().on_save(TrainingArguments(str(tmp_path / "out"), report_to=[]), state,
                                       TrainerControl())
    finally:
        wandb.finish()
    assert "BudgetReportCallback logged no report at step 1" in caplog.text
    assert "lack budget_tracker_state.json" in caplog.text
    assert not list(tmp_path.glob("wandb/offline-run-*/files/media/table"))


def off_scale_reward(completions, **kwargs):
    """A reward on another scale than 0/1: 0 at three characters, below 0 elsewhere; never reaches 1."""
    return [-float(abs(3 - len(completion))) for completion in completions]


@pytest.fixture(scope="module")
def history_run(tmp_path_factory, tokenizer):
    """Three steps of the default rule (uniform, the history baseline) on three prompts that come back, with a reward
    that never reaches success_threshold=1, a checkpoint at every step."""
    folder = tmp_path_factory.mktemp("history-report-run")
    trainer = make_trainer(folder / "out", tokenizer, reward_funcs=off_scale_reward, max_steps=STEPS,
                           dataset=concatenate_datasets([make_dataset(3)] * 4), save_strategy="steps", save_steps=1,
                           budget_allocator="uniform", budget_min_generations=1, budget_max_generations=1 << 30)
    assert trainer.advantage_baseline == "history"
    trainer.train()
    return folder


def history_status_by_hand(weight: float, mean: float, m2: float, top: float, bottom: float) -> str:
    """The history baseline's reading: rewards that differ (a spread beyond rounding) give a gradient; rewards that
    agree are placed among the means the run's histories hold."""
    if weight == 0:
        return "unseen"
    if weight > 1 and math.sqrt(m2 / (weight - 1)) > 1e-9 * abs(mean):
        return "learning"
    at_top, at_bottom = math.isclose(mean, top, rel_tol=1e-9), math.isclose(mean, bottom, rel_tol=1e-9)
    return "solved" if at_top and not at_bottom else "hopeless" if at_bottom and not at_top else "stalled"


def test_under_the_history_baseline_statuses_come_from_the_reward_history(history_run):
    out = history_run / "out"
    report = build_report(out)
    assert report.statuses_from == "history" and report.steps == [1, 2, 3]
    logged = [entry["budget/effective_ratio"] for entry in report.logs if "budget/effective_ratio" in entry]
    assert logged and max(logged) > 0  # prompts trained, though no rollout reached success_threshold
    assert np.nanmax(report.pass_rates) == 0  # the pass rate the old reading went by: every prompt "hopeless"
    for index, step in enumerate(report.steps):
        state = json.loads((out / f"checkpoint-{step}" / "budget_tracker_state.json").read_text())
        moments = {key: state["reward_moments"][3 * row:3 * row + 3] for row, key in enumerate(state["keys"])}
        means = [mean for weight, mean, _ in moments.values() if weight > 0]
        for column, key in enumerate(report.keys):
            weight, mean, m2 = moments.get(key, (0.0, 0.0, 0.0))
            assert report.statuses[index, column] == history_status_by_hand(weight, mean, m2, max(means), min(means))
            if weight:
                assert report.history_means[index, column] == pytest.approx(mean)
                spread = math.sqrt(m2 / (weight - 1)) if weight > 1 else 0.0
                assert report.history_spreads[index, column] == pytest.approx(spread)
    assert "learning" in report.statuses[-1] and "hopeless" not in report.statuses[-1]
    columns, rows = prompt_table(report)
    assert {"history_mean", "history_spread"} <= set(columns)
    text = format_report(report)
    assert "history mean" in text and "from the prompt's reward history" in text
    saved = report_json(report)
    assert saved["statuses_from"] == "history" and "history_solved" in saved["definitions"]


def test_history_statuses_by_the_means_the_run_holds(tmp_path):
    # Summed 0/1 rewards (correct + format): "format" earns 1 on every rollout, which success_threshold=1 calls solved.
    names = ["both", "format", "none", "mixed", "middle", "thirds", "tenths", "pass rate only"]
    key = {name: prompt_key(name) for name in names}
    tracker = CapabilityTracker(reward_history_window=4.0)
    rollouts = {"both": [2, 2, 2], "format": [1, 1, 1, 1], "none": [0, 0], "mixed": [0, 2, 1, 1],
                "middle": [1.5, 1.5], "thirds": [0.1] * 3}
    keys = [key[name] for name, rewards in rollouts.items() for _ in rewards]
    values = [reward for rewards in rollouts.values() for reward in rewards]
    tracker.update(keys, values, reward_values=values)
    save_tracker(str(tmp_path / "checkpoint-1"), tracker)
    plain = CapabilityTracker()  # a state that keeps no history, from before the baseline: read by pass rate
    plain.update([key["pass rate only"]], [1.0])
    report = build_report(tmp_path, {key[name]: name for name in names})
    status = {report.name(k): report.statuses[0, report.keys.index(k)] for k in report.keys}
    assert status == {"both": "solved", "format": "stalled", "none": "hopeless", "mixed": "learning",
                      "middle": "stalled", "thirds": "stalled"}
    assert report.pass_rates[0, report.keys.index(key["format"])] == 1  # what the pass rate would call solved
    columns, rows = shares_table(report)
    assert dict(zip(columns, rows[0]))["stalled"] == 3
    # Rewards that agree but leave a rounding residue in the history (0.1 three times: a mean a hair above 0.1, squared
    # deviations of 6e-34) have no spread, and sit at the lowest mean beside a prompt whose 0.1s left none.
    assert tracker.reward_moments([key["thirds"]])[2][0] == pytest.approx(6e-34, rel=0.1)  # as docs/report.md says
    tracker.update([key["none"]] * 2 + [key["tenths"]] * 2, [1, 1, 0.1, 0.1], reward_values=[1, 1, 0.1, 0.1])
    save_tracker(str(tmp_path / "checkpoint-2"), tracker)
    report = build_report(tmp_path)
    latest = {k: report.statuses[-1, report.keys.index(k)] for k in report.keys}
    assert latest[key["thirds"]] == latest[key["tenths"]] == "hopeless" and latest[key["none"]] == "learning"
    save_tracker(str(tmp_path / "checkpoint-3"), plain)
    assert build_report(tmp_path).statuses_from == "tracker"  # the newest state decides


def test_where_every_group_is_one_rollout_zero_std_groups_is_left_out(spo_run, run):
    report = build_report(spo_run / "out")
    assert {entry["budget/rollouts_max"] for entry in report.logs} == {1.0}
    assert all(entry["budget/zero_std_groups"] == 1.0 for entry in report.logs)  # logged: every group agrees
    columns, _ = shares_table(report)
    assert "budget/effective_ratio" in columns and "budget/zero_std_groups" not in columns
    assert "zero_std_groups" not in format_report(report)
    columns, _ = shares_table(build_report(run / "out"))  # groups of several rollouts: kept
    assert "budget/zero_std_groups" in columns
