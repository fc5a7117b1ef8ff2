"""Training scripts that `trl-budget` launches (`trl-budget grpo`), as TRL keeps its own in `trl.scripts`."""
