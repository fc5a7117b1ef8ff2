"""The reward of DAPO-Math-17k, the dataset both releases train on, for `trl-budget grpo` (and `trl grpo`).

The dataset's prompts ask for a last line `Answer: $Answer`; a completion earns 1.0 when the answer after its last
`Answer:` equals the row's `reward_model["ground_truth"]`, compared with math-verify as TRL's `accuracy_reward` compares
a solution (the text itself where math-verify finds no expression), else 0.0. The recipes name it by its dotted path,
so run them from the repository's root:

    trl-budget grpo --config examples/knapsack_rl.yaml --model_name_or_path Qwen/Qwen2.5-7B-Instruct ...

`overlong_punishment` is DAPO's soft overlong punishment (TRL's `get_soft_overlong_punishment`) at its recipe's
lengths: 0 up to 16384 completion tokens, falling linearly to -1 at 20480 (`examples/dapo.yaml`).
"""

from __future__ import annotations

from trl.rewards import get_soft_overlong_punishment

overlong_punishment = get_soft_overlong_punishment(max_completion_len=20480, soft_punish_cache=4096)
overlong_punishment.__name__ = "overlong_punishment"


def accuracy_reward(completions, reward_model, **kwargs) -> list[float]:
    from math_verify import parse, verify

    rewards = []
    for completion, reference in zip(completions, reward_model):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        if "Answer:" not in text:
            rewards.append(0.0)
            continue
        answer, truth = text.rsplit("Answer:", 1)[1].strip(), str(reference["ground_truth"]).strip()
        gold, given = parse(truth), parse(answer)
        rewards.append(float(verify(gold, given) if gold and given else answer == truth))
    return rewards
