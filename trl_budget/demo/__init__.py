"""The built-in demo (`trl-budget demo`) and the allocator benchmark's building blocks; not part of the library's API.

- `settings`: the warm start's and the RL run's settings.
- `task`: built-in arithmetic problems of six difficulty levels, with an exact-match reward.
- `tiny`: a tiny Llama and a character tokenizer, built locally with no download.
- `run`: the cached supervised warm start, and an RL run with an allocator that records its curves.
- `report`: summaries over seeds, the table and the PNG report.
- `study_stats`: the allocation study's statistics (paired intervals, power, Holm, rollouts to match).
"""
