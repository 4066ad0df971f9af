"""LifelongAgentBench's module path and name of the RL trainer (`module:
src.callbacks.instance.rl_training_callback` in its configs), which the online pipeline
defines as `RLTrainer` (src.online_training.trainer): configs and code naming this path
keep working."""

from src.online_training.trainer import RLTrainer

RLTrainingCallback = RLTrainer

__all__ = ["RLTrainingCallback"]
