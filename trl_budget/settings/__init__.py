"""`BudgetGRPOConfig`'s checks and builders, one module per concern: the allocation, the tracker, how a
batch is generated, the advantage baseline and loss, SPO and prompt selection, renamed and unread settings."""
