"""The built-in demo (`trl-budget demo`) and the allocator benchmark's building blocks; not part of the library's API.

- `settings`: the warm start's and the RL run's settings.
- `task`: built-in arithmetic problems of six difficulty levels, with an exact-match reward.
- `task_spec`: what a task is (`Task`), imported by every task module.
- `sorting`: the second task, sort 4 to 14 digits (six levels).
- `equations`: the third task, fill in the signs of an equation (six levels, one answer each).
- `brackets`: the fourth task, close the brackets a well-nested prefix leaves open (six levels, one answer each).
- `tiny`: a tiny Llama and a character tokenizer, built locally with no download.
- `run`: the cached supervised warm start, and an RL run with an allocator that records its curves.
- `report`: summaries over seeds, the table and the PNG report.
- `study_stats`: the allocation study's statistics (paired intervals, power, Holm, rollouts to match).
"""
