"""LifelongAgentBench's module path of the callback contract, which the run kernel
defines (src.run.callbacks): callbacks written against this path keep working."""

from src.run.callbacks import BatchContext, Callback, EpisodeTrainer, TrainingSchedule

__all__ = ["BatchContext", "Callback", "EpisodeTrainer", "TrainingSchedule"]
