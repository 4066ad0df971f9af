"""The supervised stage: demonstrations of a task turned into an SFT run
(`supervised_training_config` files)."""
