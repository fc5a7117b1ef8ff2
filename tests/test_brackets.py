"""The brackets task: its answer on hand-written cases and against a check of its own (prompt and answer make a
well-nested string), its levels, its data's determinism, and its shipped warm start (scoring what its record says)."""

import json

import pytest

from trl_budget.demo.brackets import BRACKETS, CLOSING, LEVELS, MOST_OPEN, OPENING, closing, make_problems
from trl_budget.demo.task import exact_match_reward, split_problems, task_named


def well_nested(text: str) -> bool:
    """The reference: remove adjacent matching pairs until none is left; well nested when nothing remains."""
    pairs = [opening + closer for opening, closer in zip(OPENING, CLOSING)]
    while any(pair in text for pair in pairs):
        for pair in pairs:
            text = text.replace(pair, "")
    return text == ""


@pytest.mark.parametrize("prompt, answer", [
    ("([]{<>(:", ")})"),
    ("(:", ")"),
    ("<[{(:", ")}]>"),
    ("()[]{<:", ">}"),
    ("<()>[[]{}(:", ")]"),
])
def test_closing_closes_every_open_bracket_innermost_first(prompt, answer):
    assert closing(prompt) == answer
    assert well_nested(prompt.removesuffix(":") + answer)


@pytest.mark.parametrize("prompt", ["(]:", ")(:", "([)]:", "(a:"])
def test_closing_refuses_a_prompt_that_is_not_the_start_of_a_well_nested_string(prompt):
    with pytest.raises(ValueError, match="is not the start of a well-nested string"):
        closing(prompt)


def test_every_problem_is_well_nested_once_answered_and_its_answer_is_the_only_one_that_rewards():
    problems = make_problems(600, seed=0)
    assert {p["level"] for p in problems} == set(range(len(LEVELS)))
    for problem in problems:
        body = problem["prompt"].removesuffix(":")
        assert len(body) == LEVELS[problem["level"]] and set(problem["prompt"]) <= set(BRACKETS.alphabet)
        assert 1 <= len(problem["answer"]) <= MOST_OPEN and set(problem["answer"]) <= set(CLOSING)
        assert well_nested(body + problem["answer"])
        assert not any(well_nested(body + problem["answer"][:cut]) for cut in range(len(problem["answer"])))
    assert max(len(p["answer"]) for p in problems) + 1 == BRACKETS.max_answer_tokens  # the answer and its end
    answers = [p["answer"] for p in problems[:6]]
    assert exact_match_reward([f" {answers[0]} ", answers[0] + ")", answers[1]], [answers[0]] * 3) == [1.0, 0.0,
                                                                                                       float(
        answers[1] == answers[0])]


def test_the_data_is_the_same_for_a_seed_and_its_splits_are_disjoint_and_balanced():
    assert make_problems(200, seed=7) == make_problems(200, seed=7)
    assert make_problems(200, seed=7) != make_problems(200, seed=8)
    assert task_named("brackets") is BRACKETS
    train, held_out = split_problems(1500, 1000, 0, (4, 5), BRACKETS)
    assert (train, held_out) == split_problems(1500, 1000, 0, (4, 5), BRACKETS)
    assert len(train) == 1500 and len(held_out) == 1000
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held_out}
    assert [sum(p["level"] == level for p in held_out) for level in (4, 5)] == [500, 500]


def test_the_shipped_brackets_warm_start_scores_what_its_record_says():
    from trl_budget.demo.build_warm_start import greedy_held_out_accuracy
    from trl_budget.demo.run import SHIPPED_RECORD, shipped_folder, shipped_warm_start, warm_start
    from trl_budget.demo.settings import WarmStartSettings

    assert warm_start(WarmStartSettings(), task=BRACKETS) == shipped_warm_start(BRACKETS) == shipped_folder(BRACKETS)
    assert shipped_folder(BRACKETS).name == "warm_start_brackets"
    record = json.loads((shipped_folder(BRACKETS) / SHIPPED_RECORD).read_text())
    assert record["task"] == "brackets" and record["rebuild"].endswith("--task brackets")
    measured = greedy_held_out_accuracy(shipped_folder(BRACKETS), BRACKETS)
    assert {name: round(value, 3) for name, value in measured.items()} == {
        name: round(value, 3) for name, value in record["greedy_held_out_accuracy"].items()}
    # Learned on 4 to 12 brackets: the longer levels are left for RL, each harder than the one before.
    by_level = [measured[f"level_{level}"] for level in range(3, len(LEVELS))]
    assert measured["level_2"] > 0.95 and by_level == sorted(by_level, reverse=True) and by_level[-1] < 0.5
