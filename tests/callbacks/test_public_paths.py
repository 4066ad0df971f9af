"""LifelongAgentBench's module paths of the callback contract and the RL trainer still
name the classes, wherever they live."""

from __future__ import annotations

from src.callbacks.callback import Callback, EpisodeTrainer
from src.callbacks.instance.rl_training_callback import RLTrainingCallback
from src.configuration.components import import_component_class
from src.online_training.trainer import RLTrainingCallback as Trainer
from src.run.callbacks import Callback as KernelCallback
from src.run.callbacks import EpisodeTrainer as KernelTrainer


def test_the_seed_paths_name_the_same_classes() -> None:
    assert RLTrainingCallback is Trainer
    assert (Callback, EpisodeTrainer) == (KernelCallback, KernelTrainer)
    assert issubclass(RLTrainingCallback, EpisodeTrainer)
    # a config's `module:` naming the seed's module file
    assert import_component_class("src.callbacks.instance.rl_training_callback",
                                  KernelCallback) is Trainer
