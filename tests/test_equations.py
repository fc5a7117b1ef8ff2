"""The equations task: its evaluator and reward on hand-written cases, its levels, its data's determinism, and its
shipped warm start (loaded only with its digest intact, scoring what its record says)."""

import builtins
import itertools
import json
import shutil
import subprocess
import sys

import pytest

from trl_budget.demo.equations import EQUATIONS, LEVELS, SIGNS, evaluate, holds, make_problems, parse_prompt
from trl_budget.demo.task import exact_match_reward, split_problems, task_named


def python_value(digits, signs) -> int:
    """The reference: Python's own precedence, on a string the test builds from digits and signs only."""
    return eval("".join(f"{digit}{sign}" for digit, sign in zip(digits, signs)) + str(digits[-1]))


@pytest.mark.parametrize("digits, signs, value", [
    ([2, 3, 4], "+*", 14),  # products first
    ([2, 3, 4], "*+", 10),
    ([9, 1, 1], "--", 7),  # left to right: (9 - 1) - 1, not 9 - (1 - 1)
    ([8, 2, 3, 1], "-*-", 1),
    ([5, 2, 4], "-*", -3),
    ([1, 9, 9, 9], "-**", -728),
    ([6, 8, 7], "*+", 55),
    ([3], "", 3),
])
def test_evaluate_takes_products_first_then_sums_left_to_right(digits, signs, value):
    assert evaluate(digits, signs) == value == python_value(digits, signs)


def test_evaluate_refuses_anything_but_one_sign_between_each_pair_of_digits():
    for signs in ("+", "+*-", "/+", "**" + "*", "+ "):
        with pytest.raises(ValueError, match="must be 2 of '\\+-\\*', one between each pair of digits"):
            evaluate([2, 3, 4], signs)


@pytest.mark.parametrize("completion, right", [
    ("*+", True), (" *+\n", True),  # the answer, surrounding spaces ignored
    ("+*", False), ("--", False), ("++", False),  # wrong signs
    ("*", False), ("*+-", False), ("", False), ("*?+", False), ("6*8+7", False), ("*+:", False),  # malformed
    ("*/", False), ("**", False),  # signs the task has not: division, and no power however they are read
    ("__import__('os').system('false')", False), ("55", False),  # not signs at all
])
def test_the_reward_on_right_wrong_malformed_and_unsafe_completions(completion, right, monkeypatch):
    prompt, answer = "6?8?7=55:", "*+"
    monkeypatch.setattr(builtins, "eval", lambda *args: pytest.fail("the check evaluated a completion with eval"))
    assert holds(prompt, completion) is right
    assert exact_match_reward([completion], [answer]) == [float(right)]


def test_a_power_is_not_a_sign_even_where_it_would_make_the_target():
    # 2**3 = 8: an eval of the digits joined by the completion would accept `**` here; no sign string makes 8 from 2, 3.
    assert not holds("2?3=8:", "**")
    assert not any(holds("2?3=8:", sign) for sign in SIGNS)


def test_every_problem_has_exactly_one_answer_and_the_exact_match_reward_is_the_check():
    problems = make_problems(120, seed=3)
    for problem in problems:
        digits, target = parse_prompt(problem["prompt"])
        assert python_value(digits, problem["answer"]) == target
        completions = ["".join(signs) for signs in itertools.product(SIGNS, repeat=len(digits) - 1)]
        checked = [float(holds(problem["prompt"], completion)) for completion in completions]
        assert checked == exact_match_reward(completions, [problem["answer"]] * len(completions))
        assert sum(checked) == 1


def test_levels_grow_by_one_digit_and_fit_the_alphabet_and_the_answer_length():
    problems = make_problems(600, seed=0)
    assert {p["level"] for p in problems} == set(range(len(LEVELS)))
    for problem in problems:
        digits, _ = parse_prompt(problem["prompt"])
        assert len(digits) == LEVELS[problem["level"]] and all(1 <= digit <= 9 for digit in digits)
        assert len(problem["answer"]) == len(digits) - 1 and set(problem["answer"]) <= set(SIGNS)
        assert set(problem["prompt"]) <= set(EQUATIONS.alphabet)
    assert max(len(p["answer"]) for p in problems) + 1 == EQUATIONS.max_answer_tokens  # the answer and its end
    assert make_problems(12, seed=0, levels=(4,)) == [p for p in make_problems(72, seed=0, levels=(4,))][:12]
    assert {p["level"] for p in make_problems(12, seed=0, levels=(1, 4))} == {1, 4}


def test_the_data_is_the_same_for_a_seed_and_its_splits_are_disjoint_and_balanced():
    assert make_problems(200, seed=7) == make_problems(200, seed=7)
    assert make_problems(200, seed=7) != make_problems(200, seed=8)
    task = task_named("equations")
    assert task is EQUATIONS
    train, held_out = split_problems(1500, 1000, 0, (1, 2, 3), task)
    assert (train, held_out) == split_problems(1500, 1000, 0, (1, 2, 3), task)
    assert len(train) == 1500 and len(held_out) == 1000
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held_out}
    assert [sum(p["level"] == level for p in held_out) for level in (1, 2, 3)] == [334, 333, 333]


def test_the_task_modules_import_no_other_task_module():
    # Each task module imports what a task is from task_spec; only the registry (task.py) imports the task modules.
    code = ("import sys, trl_budget.demo.equations, trl_budget.demo.sorting, trl_budget.demo.brackets; "
            "assert 'trl_budget.demo.task' not in sys.modules, 'a task module imports the registry'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_shipped_equations_warm_start_scores_what_its_record_says():
    from trl_budget.demo.build_warm_start import greedy_held_out_accuracy
    from trl_budget.demo.run import SHIPPED_RECORD, shipped_folder, shipped_warm_start, warm_start
    from trl_budget.demo.settings import WarmStartSettings

    assert warm_start(WarmStartSettings(), task=EQUATIONS) == shipped_warm_start(EQUATIONS) == shipped_folder(
        EQUATIONS)
    assert shipped_folder(EQUATIONS).name == "warm_start_equations"
    record = json.loads((shipped_folder(EQUATIONS) / SHIPPED_RECORD).read_text())
    assert record["task"] == "equations" and record["rebuild"].endswith("--task equations")
    measured = greedy_held_out_accuracy(shipped_folder(EQUATIONS), EQUATIONS)
    assert {name: round(value, 3) for name, value in measured.items()} == {
        name: round(value, 3) for name, value in record["greedy_held_out_accuracy"].items()}
    by_level = [measured[f"level_{level}"] for level in range(1, len(LEVELS))]
    assert by_level == sorted(by_level, reverse=True) and 0 < measured["accuracy"] < 0.5  # graded, with room


def test_a_shipped_equations_warm_start_whose_weights_changed_is_refused(tmp_path, monkeypatch):
    from trl_budget.demo import run

    copy = tmp_path / "warm_start_equations"
    shutil.copytree(run.shipped_folder(EQUATIONS), copy)
    monkeypatch.setattr(run, "SHIPPED_WARM_START", tmp_path / "warm_start")
    assert run.shipped_warm_start(EQUATIONS) == copy  # intact: loaded
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(RuntimeError, match="does not match its record.*build_warm_start --task equations"):
        run.shipped_warm_start(EQUATIONS)
