"""verl's custom reward hook: users' `compute_score` files work unchanged.

`custom_reward_function: {path, name}` names a Python file and a function
`compute_score(data_source, solution_str, ground_truth, extra_info)` returning a float,
or a dict whose "score" is the reward (its other numeric keys become metrics).
`CustomReward` makes it the math rubric's `custom` reward function.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from src.tasks.reward_functions import DetailedReward

CUSTOM = "custom"  # the reward's name: that of a `CustomReward`


class CustomRewardFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    name: str = "compute_score"


def load_compute_score(config: CustomRewardFunction) -> Callable[..., Any]:
    path = Path(config.path)
    if not path.is_file():
        raise FileNotFoundError(f"custom_reward_function.path: no file {path}")
    spec = importlib.util.spec_from_file_location(f"custom_reward_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"custom_reward_function.path: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, config.name, None)
    if not callable(function):
        raise AttributeError(f"custom_reward_function.name: {path} defines no function "
                             f"'{config.name}'")
    return function


def read_score(result: Any, where: str) -> tuple[float, dict[str, float]]:
    """The reward and the extra metrics from what `compute_score` returned."""
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"{where} returned a dict without 'score': {sorted(result)}")
        extras = {key: float(value) for key, value in result.items()
                  if key != "score" and isinstance(value, int | float | bool)}
        return float(result["score"]), extras
    if isinstance(result, int | float | bool):
        return float(result), {}
    raise TypeError(f"{where} returned {type(result).__name__}; expected a float or a dict "
                    f"with 'score'")


class CustomReward:
    """The reward function `custom`: the file's `compute_score` called as verl calls it,
    its dict's other numbers reported as `custom/<key>`. It crosses to the rubric's
    scoring process as the file's path and the function's name, and loads the file again
    there (a file loaded by path is no module that process could import)."""

    def __init__(self, config: CustomRewardFunction, data_source: str) -> None:
        self.config = config
        self.data_source = data_source
        self.compute_score = load_compute_score(config)
        self.__name__ = CUSTOM
        self.read_paths = (config.path,)  # the scoring process loads the file again

    def __getstate__(self) -> tuple[CustomRewardFunction, str]:
        return self.config, self.data_source

    def __setstate__(self, state: tuple[CustomRewardFunction, str]) -> None:
        self.__init__(*state)

    def __call__(self, reply: str, answer: str, sample: Mapping[str, Any],
                 sample_id: str) -> DetailedReward:
        extra_info: dict[str, Any] = {"sample_id": sample_id, "question": sample["question"]}
        score, details = read_score(
            self.compute_score(self.data_source, reply, answer, extra_info),
            "custom_reward_function")
        return DetailedReward(score, details)
