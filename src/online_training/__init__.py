"""Online RL: the loop that rolls out batches, trains through the RL trainer and commits
(`assignment_config` files)."""
