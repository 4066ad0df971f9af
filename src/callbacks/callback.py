"""LifelongAgentBench's module path of the callback contract: its configs' `callback_dict`
lists the run's trainers, and code written against `Callback` or `EpisodeTrainer` names the
run kernel's trainer contract (src.run.trainer)."""

from src.run.trainer import BatchContext, Trainer, TrainingSchedule

Callback = Trainer
EpisodeTrainer = Trainer

__all__ = ["BatchContext", "Callback", "EpisodeTrainer", "TrainingSchedule"]
