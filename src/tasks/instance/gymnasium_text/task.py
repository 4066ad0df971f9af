"""Any Gymnasium environment whose observations and actions are text, as a task.

`GymnasiumTextTask` makes the environment for every episode, by a registered id
(`gymnasium.make(env_id, **env_kwargs)`, where an id `module:Name-v0` imports its module
first) or by its class (`entry_point`, `package.module:Class` or a dotted path, built with
`env_kwargs`). A sample is a seed: `reset(seed=...)` with a seed from the task's seed and
the sample id, so every episode of a group meets the same start and a resumed run replays
it; the episode also runs on random streams of its own (`src.tasks.random_streams`), for
environments that draw from the global ones. Observations are the user turns, the
agent's reply is the action; the reward is the sum of the environment's rewards, the
episode ends when the environment terminates or truncates (metric `truncated`). It is
correct when the environment's `info["is_success"]` says so or, where the environment
gives none, when the return reaches `success_threshold`. An environment that raises on a
reply ends the episode there, scored (reward 0, incorrect), since the reply is the model's
text; the metric `environment_error` counts it and the episode's info holds the error.
Metrics: `return`, `truncated`, `environment_error`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import gymnasium

from src.configuration.components import import_dotted
from src.records.episode import Outcome, Sample
from src.tasks.random_streams import RandomStreams
from src.tasks.task import (
    EpisodeEnv,
    Rounds,
    StepOutcome,
    Task,
    counted_sample,
    derived_seed,
    split_sample_ids,
)

logger = logging.getLogger(__name__)


class GymnasiumTextTask(Task["GymnasiumTextEpisode"]):
    def __init__(
        self,
        env_id: str | None = None,  # a registered id (or `module:Name-v0`)
        entry_point: str | None = None,  # or the class: `package.module:Class`
        env_kwargs: dict[str, Any] | None = None,
        num_train: int = 256,  # starts (seeds) of each split
        num_validation: int = 64,
        num_selection: int = 0,
        seed: int = 0,
        max_turns: Rounds = 30,  # replies before the episode is cut (a round limit)
        success_threshold: float = 1.0,  # the return that counts as a success
        instruction: str = "",  # added after the first observation
    ) -> None:
        super().__init__(max_round=max_turns)
        if (env_id is None) == (entry_point is None):
            raise ValueError("give env_id (a registered Gymnasium id) or entry_point "
                             "(package.module:Class), one of the two")
        self.env_id = env_id
        self.entry_point = entry_point
        self.env_kwargs = dict(env_kwargs or {})
        self.counts = {"train": num_train, "validation": num_validation,
                       "selection": num_selection}
        self.seed = seed
        self.success_threshold = success_threshold
        self.instruction = instruction
        self.name = env_id or str(entry_point)
        self.logged_failed_step = False  # the first reply the environment raised on is logged
        environment = self.make_environment()  # a wrong id or argument: an error now
        try:
            observation, _ = environment.reset(seed=0)
            if not isinstance(observation, str):
                raise ValueError(f"{self.name} observes {type(observation).__name__}, not "
                                 "text: this task takes environments of text observations")
        finally:
            environment.close()

    def make_environment(self) -> gymnasium.Env:
        if self.env_id is not None:
            return gymnasium.make(self.env_id, **self.env_kwargs)
        assert self.entry_point is not None
        environment_class = import_dotted(self.entry_point.replace(":", "."))
        return environment_class(**self.env_kwargs)

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return split_sample_ids(split, self.counts.get(split, 0))

    def _get_sample(self, sample_id: str) -> Sample:
        counted_sample(sample_id, self.counts)  # KeyError for an id of no sample
        return Sample(sample_id=sample_id, category=self.name,
                      data={"env_seed": derived_seed("gymnasium", self.seed, sample_id)})

    def new_episode(self) -> GymnasiumTextEpisode:
        return GymnasiumTextEpisode(self)


class GymnasiumTextEpisode(EpisodeEnv[GymnasiumTextTask]):
    def __init__(self, family: GymnasiumTextTask) -> None:
        super().__init__(family)
        self._environment: gymnasium.Env | None = None
        self._streams = RandomStreams(0)
        self._return = 0.0

    def _reset(self, sample: Sample) -> str:
        self.close()
        seed = sample.data["env_seed"]
        self._streams = RandomStreams(seed)
        self._return = 0.0
        with self._streams.active():
            self._environment = self.family.make_environment()
            observation, _ = self._environment.reset(seed=seed)
        text = _text(observation, "reset")
        instruction = self.family.instruction
        return f"{text}\n{instruction}" if instruction else text

    def _step(self, action: str) -> StepOutcome:
        assert self._environment is not None
        with self._streams.active():
            try:
                observation, reward, terminated, truncated, info = self._environment.step(
                    action)
            except Exception as error:  # noqa: BLE001 - it failed on the model's text
                return self._failed_step(error)
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"{self.family.name} gave the reward {reward}")
        self._return += reward
        metrics = {"return": self._return, "truncated": float(bool(truncated)),
                   "environment_error": 0.0}
        if not (terminated or truncated):
            return StepOutcome(observation=_text(observation, "step"), reward=reward,
                               metrics=metrics)
        success = info.get("is_success") if isinstance(info, dict) else None
        if success is None:
            success = self._return >= self.family.success_threshold
        return StepOutcome(observation="", reward=reward, terminated=True,
                           outcome=Outcome.CORRECT if success else Outcome.INCORRECT,
                           metrics=metrics)

    def _failed_step(self, error: Exception) -> StepOutcome:
        """The end of an episode whose environment raised on the reply. The first such
        failure of a family is logged with its traceback, where a bug of the environment
        itself would show."""
        family = self.family
        if not family.logged_failed_step:
            family.logged_failed_step = True
            logger.warning("%s raised on a reply: the episode ends there, scored 0 (later "
                           "ones are only counted in the metric environment_error)",
                           family.name, exc_info=True)
        return StepOutcome(observation="", reward=0.0, terminated=True,
                           outcome=Outcome.INCORRECT,
                           metrics={"return": self._return, "truncated": 0.0,
                                    "environment_error": 1.0},
                           info={"environment_error":
                                 f"{type(error).__name__}: {error}"[:500]})

    def _oracle_reply(self) -> str:
        raise NotImplementedError("a Gymnasium environment has no reference actions")

    def close(self) -> None:
        if self._environment is not None:
            environment, self._environment = self._environment, None
            environment.close()


def _text(observation: Any, where: str) -> str:
    if not isinstance(observation, str):
        raise TypeError(f"the environment's {where} gave a {type(observation).__name__} "
                        "observation, not text")
    return observation
