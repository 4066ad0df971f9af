"""Any Gymnasium environment whose observations and actions are text, as a task.

`GymnasiumTextTask` makes the environment for every episode, by a registered id
(`gymnasium.make(env_id, **env_kwargs)`, where an id `module:Name-v0` imports its module
first) or by its class (`entry_point`, `package.module:Class` or a dotted path, built with
`env_kwargs`). A sample is a seed: `reset(seed=...)` with a seed from the task's seed and
the sample id, so every episode of a group meets the same start and a resumed run replays
it; every call into the environment, its construction included (and the task's own check
at construction), also runs on random streams of its own (`src.tasks.random_streams`),
for environments that draw from the global ones. Observations are the user turns, the
agent's reply is the action; the reward is the sum of the environment's rewards, the
episode ends when the environment terminates or truncates (metric `truncated`). It is
correct when the environment's `info["is_success"]` says so or, where the environment
gives none, when the return reaches `success_threshold`.

An environment that raises on a reply ends the episode there, scored (reward 0,
incorrect), since the reply is the model's text; so does a reward that is not a finite
number (a string, None, NaN), the environment's error: the metric `environment_error`
counts both, the episode's info's `environment_error` names the environment and the error,
and the first one of a family is logged. One that raises when made or reset, or gives an
observation that is not text, ends its episode as `task_error`. A call that hangs is cut
by the rollout's `rollout.faults.step_timeout_s`: its episode alone ends as `task_error`,
the others go on. The call itself cannot be stopped (Python cannot kill a thread): it
keeps its thread, its memory and, while it computes in Python, a share of the
interpreter's lock until it returns, and `rollout.faults.max_hung_calls` bounds how many
such threads pile up.
Metrics: `return`, `truncated`, `environment_error`.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
from gymnasium.envs.registration import (
    find_highest_version,
    get_env_id,
    load_env_creator,
    parse_env_id,
)

from src.configuration.components import COMPONENTS, import_dotted
from src.records.episode import Outcome, Sample
from src.tasks.adapters.keyword_arguments import check_keyword_arguments
from src.tasks.random_streams import RandomStreams
from src.tasks.splits import SplitsWithSelection
from src.tasks.task import (
    EpisodeEnv,
    Rounds,
    StepOutcome,
    Task,
    TaskSettingError,
    counted_sample,
    derived_seed,
    unknown_name,
)

logger = logging.getLogger(__name__)


@COMPONENTS.register("gymnasium_text")
class GymnasiumTextTask(Task["GymnasiumTextEpisode"]):
    """A Gymnasium environment of text per episode, by `env_id` or `entry_point` (see the
    module docstring). Outcome: correct when the environment's `info["is_success"]` says
    so or, without it, when the return reaches `success_threshold`. Metrics: `return` (the
    sum of the rewards so far), `truncated` (the environment truncated the episode) and
    `environment_error` (it raised on a reply or gave a reward that is no finite number:
    the episode ends there, reward 0, incorrect)."""

    def __init__(
        self,
        env_id: str | None = None,  # a registered id (or `module:Name-v0`)
        entry_point: str | None = None,  # or the class: `package.module:Class`
        env_kwargs: dict[str, Any] | None = None,
        # a sample is a start, its seed drawn from `seed` and the sample id
        splits: SplitsWithSelection = SplitsWithSelection(),
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
        self.splits = splits
        self.success_threshold = success_threshold
        self.instruction = instruction
        self.name = env_id or str(entry_point)
        self.logged_failed_step = False  # the first failed step is logged
        # a wrong id or argument: an error now (on streams of its own: the process's are
        # left as they were)
        with RandomStreams(0).active():
            environment = self.make_environment()
            try:
                observation, _ = environment.reset(seed=0)
            finally:
                environment.close()
        if not isinstance(observation, str):
            raise ValueError(f"{self.name} observes {type(observation).__name__}, not "
                             "text: this task takes environments of text observations")

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """An id Gymnasium does not register (its module imported first, for an id
        `module:Name-v0`), an entry point that does not import, or an `env_kwargs` key the
        environment's constructor does not take (nor `gymnasium.make`, for an id), is a
        TaskSettingError (no environment is made)."""
        env_id, entry_point = parameters.get("env_id"), parameters.get("entry_point")
        env_kwargs = parameters.get("env_kwargs")
        env_kwargs = env_kwargs if isinstance(env_kwargs, Mapping) else {}
        if isinstance(env_id, str):
            spec = _registered_spec(env_id)
            make_keywords = set(inspect.signature(gymnasium.make).parameters) - {"id"}
            check_keyword_arguments(load_env_creator(spec.entry_point)
                                    if isinstance(spec.entry_point, str) else spec.entry_point,
                                    env_kwargs, env_id, also=make_keywords)
        elif isinstance(entry_point, str):
            try:
                constructor = import_dotted(entry_point.replace(":", "."))
            except ImportError as error:
                raise TaskSettingError(("entry_point",),
                                       f"cannot import '{entry_point}': {error}") from error
            check_keyword_arguments(constructor, env_kwargs, entry_point)

    def make_environment(self) -> gymnasium.Env:
        if self.env_id is not None:
            return gymnasium.make(self.env_id, **self.env_kwargs)
        assert self.entry_point is not None
        environment_class = import_dotted(self.entry_point.replace(":", "."))
        return environment_class(**self.env_kwargs)

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return self.splits.sample_ids(split)

    def _get_sample(self, sample_id: str) -> Sample:
        counted_sample(sample_id, self.splits.counts)  # KeyError for an id of no sample
        return Sample(sample_id=sample_id, category=self.name,
                      data={"env_seed": derived_seed("gymnasium", self.splits.seed, sample_id)})

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
                return self._failed_step(f"{type(error).__name__}: {error}")
        if not (isinstance(reward, numbers.Real) and math.isfinite(reward)):
            return self._failed_step(f"{self.family.name} gave the reward {reward!r:.200}, "
                                     "not a finite number")
        reward = float(reward)
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

    def _failed_step(self, error: str) -> StepOutcome:
        """The end of an episode whose environment raised on the reply or gave a reward
        that is no finite number (`error` says which). The first such failure of a family
        is logged, with its traceback where it raised, where a bug of the environment
        itself would show."""
        family = self.family
        if not family.logged_failed_step:
            family.logged_failed_step = True
            logger.warning("%s failed on a reply (%s): the episode ends there, scored 0 "
                           "(later ones are only counted in the metric environment_error)",
                           family.name, error[:500], exc_info=sys.exc_info()[0] is not None)
        return StepOutcome(observation="", reward=0.0, terminated=True,
                           outcome=Outcome.INCORRECT,
                           metrics={"return": self._return, "truncated": 0.0,
                                    "environment_error": 1.0},
                           info={"environment_error": error[:500]})

    def _oracle_reply(self) -> str:
        raise NotImplementedError("a Gymnasium environment has no reference actions")

    def close(self) -> None:
        if self._environment is not None:
            environment, self._environment = self._environment, None
            environment.close()


def _registered_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec:
    """The registry's entry for `env_id` (`module:Name-v0` imports its module first; an id
    without a version is its latest), as `gymnasium.make` finds it; TaskSettingError for
    an id of none."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise TaskSettingError(("env_id",), f"cannot import the module '{module}' of "
                                                f"'{env_id}': {error}") from error
    spec = gymnasium.registry.get(name)
    try:
        namespace, base, version = parse_env_id(name)
    except gymnasium.error.Error:
        namespace, base, version = None, name, 0
    if spec is None and version is None:
        latest = find_highest_version(namespace, base)
        spec = None if latest is None else gymnasium.registry.get(
            get_env_id(namespace, base, latest))
    if spec is None:
        raise TaskSettingError(("env_id",), unknown_name("Gymnasium environment", name,
                                                         sorted(gymnasium.registry)))
    return spec


def _text(observation: Any, where: str) -> str:
    if not isinstance(observation, str):
        raise TypeError(f"the environment's {where} gave a {type(observation).__name__} "
                        "observation, not text")
    return observation
