"""The task contract: a task family, built once per run, hands out thin episode environments.

`Task` is the family: the samples of each split (`sample_ids`, `get_sample`), the caches
its episodes share, the rewards that need a whole group (`score_group`) and
`new_episode()`. A family that learns from finished episodes (a memory later prompts read)
also subclasses `src.storage.state.Stateful`, so that a resumed run gets it back.
`EpisodeEnv` is one running episode: a Gymnasium environment whose observations and
actions are text, holding only that episode's own state; the rest it reads from
`self.family`. A family supplies `sample_ids`, `_get_sample` and `new_episode`; its
episode supplies the first observation (`_reset`), one round (`_step`) and the expert
reply for the oracle agent (`_oracle_reply`). The public methods are final: they keep the
round count, the round limit, the status and the gymnasium return shapes the same for
every task. A round's figures travel as typed metrics by name (`StepOutcome.metrics`, then
the step's `StepInfo`), which the loop logs as means under `rollout/<name>`, `eval/<name>`.

Numbered samples use one id scheme, `<split>-NNNNNN` (`split_sample_ids`,
`parse_split_sample_id`); a family takes how many each split holds, and their seed, as one
settings group (src/tasks/splits.py). Splits: "train" is trained on; "validation" is the held-out set
whose figures a run reports; "selection", which a task may leave empty, is a second
held-out draw for choices made while training (the stopping step), so that the reported
validation figure was never used to choose anything.
"""

from __future__ import annotations

import difflib
import math
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Generic, TypeVar, final

import gymnasium
from pydantic import Field

from src.records.episode import Episode, EpisodeStatus, Outcome, Sample, StepInfo
from src.tasks.reward_terms import score_last_replies
from src.tasks.rubric import Rubric, RubricScore

SPLITS = ("train", "validation", "selection")
# a task's round limit as a constructor parameter: a config's value below 1 is refused
# where the config is read (`--dry_run` too), not when the task is built
Rounds = Annotated[int, Field(ge=1)]
_TEXT_SPACE = gymnasium.spaces.Text(max_length=1_000_000)
# An observation longer than this is cut (with a note saying so) before any agent reads or
# tokenizes it and before the chat is logged: an environment may answer with megabytes
MAX_OBSERVATION_CHARS = 20_000

EpisodeT = TypeVar("EpisodeT", bound="EpisodeEnv[Any]")
TaskT = TypeVar("TaskT", bound="Task[Any]")


def split_sample_id(split: str, index: int) -> str:
    return f"{split}-{index:06d}"


def split_sample_ids(split: str, count: int) -> list[str]:
    """The ids of a split whose samples are numbered 0 .. count - 1."""
    if split not in SPLITS:
        raise ValueError(f"unknown split '{split}' (splits: {', '.join(SPLITS)})")
    return [split_sample_id(split, index) for index in range(count)]


def counted_sample(sample_id: str, counts: Mapping[str, int]) -> tuple[str, int]:
    """(split, index) of an id among a split's `counts[split]` numbered samples; KeyError
    for any other id."""
    split, index = parse_split_sample_id(sample_id)
    if index >= counts.get(split, 0):
        raise KeyError(f"no sample '{sample_id}': split '{split}' has {counts.get(split, 0)}")
    return split, index


def derived_seed(*parts: object) -> int:
    """A 31-bit seed named by `parts` (a task, its seed, a sample id, ...): the same parts
    give the same seed in every process and run, so a resumed run draws the same."""
    return zlib.crc32(":".join(map(str, parts)).encode()) & 0x7FFFFFFF


def parse_split_sample_id(sample_id: str) -> tuple[str, int]:
    """(split, index) of an id made by `split_sample_id`; KeyError for any other id."""
    split, _, number = sample_id.rpartition("-")
    if split not in SPLITS or not number.isdigit():
        raise KeyError(f"malformed sample id '{sample_id}' (expected "
                       f"{' or '.join(split + '-NNNNNN' for split in SPLITS)})")
    return split, int(number)


@dataclass(frozen=True)
class StepOutcome:
    """What one round of an episode produced."""

    observation: str  # the next user message ("" when the episode ended)
    reward: float = 0.0
    terminated: bool = False
    outcome: Outcome = Outcome.UNKNOWN
    # the round's figures by name, logged as `rollout/<name>` and `eval/<name>`
    metrics: Mapping[str, float] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)  # free-form, for the episode's info


@dataclass(frozen=True)
class EpisodeScore:
    """An episode's reward once its group has ended, the metrics and info entries the
    group's scoring adds to it, and its outcome: None leaves it to `Task.score_group`
    (the task's rule on the final reward, else the outcome the episode ended with)."""

    reward: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)
    outcome: Outcome | None = None


class TaskSettingError(ValueError):
    """A task parameter names something its environment does not have (a game id, a
    dataset, an argument). `key` is the parameter's path under the task's `parameters`,
    such as ("env_kwargs", "max_digit"), so the config error can name the file and line."""

    def __init__(self, key: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.key = tuple(key)
        self.message = message


def unknown_name(kind: str, name: str, known: Sequence[str]) -> str:
    """'unknown <kind> 'name'' with the closest known names, for a TaskSettingError."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} '{name}'{hint}"


class Task(ABC, Generic[EpisodeT]):
    """A task family: its dataset and rules, built once per run from the config.

    Attributes:
        max_round: the most replies an episode takes; at the limit the episode is
            truncated (status `task_limit_reached`).
        max_observation_chars: the longest observation an agent is given; a longer one is
            cut to it, with a note saying so (a task may expose it as a parameter).
    """

    max_observation_chars: int = MAX_OBSERVATION_CHARS
    # reward terms given to a family that takes none of its own (`add_reward_terms`)
    added_terms: Rubric | None = None

    def __init__(self, max_round: int = 1) -> None:
        if max_round < 1:
            raise ValueError(f"max_round must be at least 1, got {max_round}")
        self.max_round = max_round

    # ---- settings ------------------------------------------------------------------
    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """Checks, without building the task or loading a model, that what `parameters`
        name exists (an environment id, a dataset, its arguments): raises TaskSettingError.
        Called where a config is read, `--dry_run` included. The default checks nothing."""

    # ---- samples -------------------------------------------------------------------
    @abstractmethod
    def sample_ids(self, split: str = "train") -> Sequence[str]:
        """The ids of the samples of a split (one of `SPLITS`; none for a split the task
        does not draw)."""

    @final
    def get_sample(self, sample_id: str) -> Sample:
        sample = self._get_sample(sample_id)
        if sample.sample_id != sample_id:
            raise ValueError(f"asked for sample '{sample_id}', got '{sample.sample_id}'")
        return sample

    # ---- episodes ------------------------------------------------------------------
    @abstractmethod
    def new_episode(self) -> EpisodeT:
        """A fresh episode environment of this family; `reset` starts it on a sample."""

    @final
    def score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        """The final scores of a finished group (the completions of one sample), one per
        episode in order, for the caller to give to the episodes.

        For rewards that depend on the group or on what only the agent knows (token
        lengths), and for state learnt from finished episodes: called once all of the
        group's episodes have ended, before they are logged or trained on.
        """
        if any(episode.running for episode in episodes):
            raise RuntimeError("score_group() called while an episode is still running")
        scores = self._score_group(episodes)
        if len(scores) != len(episodes):
            raise ValueError(f"{type(self).__name__}._score_group gave {len(scores)} scores "
                             f"for {len(episodes)} episodes")
        if self.added_terms is not None:
            scores = _with_terms(scores, episodes,
                                 score_last_replies(self.added_terms, episodes))
        # success rates and the best checkpoint read the outcome: where the task's outcome
        # is a rule on the reward, it is the rule on the final reward (a group term may
        # have changed it); an episode the task did not end itself keeps its own
        return [score if score.outcome is not None or episode.status is not
                EpisodeStatus.COMPLETED else replace(
                    score, outcome=self.outcome_of_reward(score.reward))
                for episode, score in zip(episodes, scores, strict=True)]

    def outcome_of_reward(self, reward: float) -> Outcome | None:
        """The task's rule from an episode's final reward to its outcome (a success
        threshold), applied by `score_group` after the group's scoring; None where the
        outcome is not a rule on the reward (the answer's correctness, whatever terms the
        reward adds), and then the outcome the episode ended with stands."""
        return None

    @final
    def add_reward_terms(self, rubric: Rubric) -> None:
        """Score each finished episode's last reply by `rubric` too (a judge, a reward
        model: src/tasks/reward_terms.py), where the group ends, after the family's own
        scoring: an episode that ended itself (not cut at the round limit) earns its
        weighted sum; every scored episode gets its figures and its info (a judge's
        prompt and verdict). A config gives a family's `reward_terms` so where its
        constructor takes none (src/run/assembly.py). `close` closes the rubric."""
        if self.added_terms is not None:
            raise ValueError(f"{type(self).__name__} was given reward terms already")
        self.added_terms = rubric

    # ---- resources -----------------------------------------------------------------
    def close(self) -> None:
        """Release what the family holds. Safe to call twice. A family that overrides
        it calls `super().close()`: the reward terms added to it are closed here."""
        if self.added_terms is not None:
            self.added_terms.close()

    # ---- hooks ---------------------------------------------------------------------
    @abstractmethod
    def _get_sample(self, sample_id: str) -> Sample: ...

    def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        """Hook: scores over a finished group; by default each episode keeps its reward."""
        return [EpisodeScore(episode.reward) for episode in episodes]


def _with_terms(scores: Sequence[EpisodeScore], episodes: Sequence[Episode],
                terms: Sequence[RubricScore | None]) -> list[EpisodeScore]:
    """The family's scores with the added reward terms' (`Task.add_reward_terms`)."""
    return [score if scored is None else EpisodeScore(
        score.reward + (scored.score if episode.status is EpisodeStatus.COMPLETED else 0.0),
        {**score.metrics, **scored.metrics()}, {**score.info, **scored.info()}, score.outcome)
        for score, episode, scored in zip(scores, episodes, terms, strict=True)]


class EpisodeEnv(gymnasium.Env[str, str], ABC, Generic[TaskT]):
    """One running episode of `family`, reset on a sample and stepped with text replies.

    Attributes:
        family: the task family that handed it out (settings, samples, caches).
        sample: the sample of the episode under way (None before the first reset).
        group_index: which of its sample's group the episode is (reset's option
            `group_index`, 0 without it), for a task whose group members differ (sides).
        round_index: replies stepped since the last reset.
        ended_before_agent: why the episode was over before the agent's first turn (a
            game its opponent decided), set by `_reset`; the rollout then ends it as
            `no_agent_turn` without asking the agent. None for an episode under way.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = _TEXT_SPACE
    action_space = _TEXT_SPACE

    def __init__(self, family: TaskT) -> None:
        self.family = family
        self.sample: Sample | None = None
        self.group_index = 0
        self.round_index = 0
        self.ended_before_agent: str | None = None

    # ---- gymnasium API -------------------------------------------------------------
    @final
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on options={'sample': Sample} or {'sample_id': id}, with
        'group_index' for its place in its group."""
        super().reset(seed=seed)
        options = options or {}
        sample = options.get("sample")
        if sample is None:
            if "sample_id" not in options:
                raise ValueError("reset needs options={'sample': Sample} or {'sample_id': id}")
            sample = self.family.get_sample(options["sample_id"])
        self.sample = sample
        self.group_index = int(options.get("group_index", 0))
        self.round_index = 0
        self.ended_before_agent = None
        observation = self._reset(sample)
        if not isinstance(observation, str):
            raise TypeError(f"{type(self).__name__}._reset gave a {type(observation).__name__}"
                            f" for sample {sample.sample_id}, not the observation text")
        return (self._bounded(observation),
                {"sample_id": sample.sample_id, "category": sample.category})

    @final
    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]:
        if self.sample is None:
            raise RuntimeError("step() called before reset()")
        self.round_index += 1
        result = self._step(action)
        if not (isinstance(result, StepOutcome) and isinstance(result.observation, str)
                and isinstance(result.reward, int | float) and math.isfinite(result.reward)
                and all(isinstance(value, int | float) for value in result.metrics.values())):
            raise TypeError(f"{type(self).__name__}._step gave {result!r:.200} for sample "
                            f"{self.sample.sample_id}, not a StepOutcome with an observation "
                            f"text, a finite reward and numeric metrics")
        truncated = not result.terminated and self.round_index >= self.family.max_round
        reward, outcome = result.reward, result.outcome
        if result.terminated:
            status = EpisodeStatus.COMPLETED
        elif truncated:
            outcome, reward = self._at_round_limit()
            status = EpisodeStatus.TASK_LIMIT_REACHED
        else:
            status = EpisodeStatus.RUNNING
        info = StepInfo(status=status, outcome=outcome,
                        metrics={name: float(value) for name, value in result.metrics.items()},
                        extras=dict(result.info))
        return self._bounded(result.observation), reward, result.terminated, truncated, info

    def _bounded(self, observation: str) -> str:
        """The observation, cut to the family's `max_observation_chars` with a note."""
        limit = self.family.max_observation_chars
        if len(observation) <= limit:
            return observation
        return (f"{observation[:limit]}\n[... the observation was cut here: "
                f"{len(observation)} characters; the first {limit} are kept]")

    @final
    def oracle_reply(self) -> str:
        """The reply an expert gives now, from the sample's reference solution."""
        if self.sample is None:
            raise RuntimeError("oracle_reply() called before reset()")
        return self._oracle_reply()

    def close(self) -> None:
        """Release the episode's resources (sandboxes, connections). Safe to call twice."""

    # ---- hooks ---------------------------------------------------------------------
    @abstractmethod
    def _reset(self, sample: Sample) -> str:
        """Prepare the episode and return the first user message."""

    @abstractmethod
    def _step(self, action: str) -> StepOutcome:
        """Parse the agent's reply and act on it. Malformed replies are outcomes, not errors."""

    @abstractmethod
    def _oracle_reply(self) -> str: ...

    def _at_round_limit(self) -> tuple[Outcome, float]:
        """Outcome and reward when the round limit ends the episode without an answer."""
        return Outcome.INCORRECT, 0.0
