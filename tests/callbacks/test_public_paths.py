"""LifelongAgentBench's module paths of the callback contract and the RL trainer still
name the classes, wherever they live."""

from __future__ import annotations

from src.callbacks.callback import Callback, EpisodeTrainer
from src.callbacks.instance.rl_training_callback import RLTrainingCallback
from src.configuration.components import import_component_class
from src.online_training.trainer import RLTrainer
from src.run.trainer import Trainer


def test_the_seed_paths_name_the_same_classes() -> None:
    assert RLTrainingCallback is RLTrainer
    assert Callback is Trainer and EpisodeTrainer is Trainer
    assert issubclass(RLTrainingCallback, Trainer)
    # a config's `module:` naming the seed's module file, or the class in it
    assert import_component_class("src.callbacks.instance.rl_training_callback",
                                  Trainer) is RLTrainer
    assert import_component_class(
        "src.callbacks.instance.rl_training_callback.RLTrainingCallback", Trainer) is RLTrainer
