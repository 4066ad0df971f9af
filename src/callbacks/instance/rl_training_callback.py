"""LifelongAgentBench's module path of the RL trainer (`module:
src.callbacks.instance.rl_training_callback` in its configs), which the online pipeline
defines (src.online_training.trainer): configs and code naming this path keep working."""

from src.online_training.trainer import RLTrainingCallback

__all__ = ["RLTrainingCallback"]
