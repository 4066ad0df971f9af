"""The task contract: a Gymnasium environment whose observations and actions are text.

A subclass supplies its samples (`sample_ids`, `_get_sample`), the first observation
(`_reset`), one round of interaction (`_step`) and the expert reply for the oracle agent
(`_oracle_reply`). The public methods are final: they keep the round count, the
round limit and the gymnasium return shapes the same for every task.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

import gymnasium

from src.records.episode import EpisodeStatus, Outcome, Sample

if TYPE_CHECKING:
    from src.records.episode import Episode

_TEXT_SPACE = gymnasium.spaces.Text(max_length=1_000_000)


@dataclass(frozen=True)
class StepOutcome:
    """What one round of a task produced."""

    observation: str  # the next user message ("" when the episode ended)
    reward: float = 0.0
    terminated: bool = False
    outcome: Outcome = Outcome.UNKNOWN
    info: dict[str, Any] | None = None


class Task(gymnasium.Env[str, str], ABC):
    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = _TEXT_SPACE
    action_space = _TEXT_SPACE

    def __init__(self, max_round: int = 1) -> None:
        if max_round < 1:
            raise ValueError(f"max_round must be at least 1, got {max_round}")
        self.max_round = max_round
        self.sample: Sample | None = None
        self.round_index = 0

    # ---- samples -------------------------------------------------------------------
    @abstractmethod
    def sample_ids(self, split: str = "train") -> Sequence[str]:
        """The ids of the samples of a split ("train" or "validation")."""

    @final
    def get_sample(self, sample_id: str) -> Sample:
        sample = self._get_sample(sample_id)
        if sample.sample_id != sample_id:
            raise ValueError(f"asked for sample '{sample_id}', got '{sample.sample_id}'")
        return sample

    @abstractmethod
    def _get_sample(self, sample_id: str) -> Sample: ...

    # ---- gymnasium API -------------------------------------------------------------
    @final
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        sample = options.get("sample")
        if sample is None:
            if "sample_id" not in options:
                raise ValueError("reset needs options={'sample': Sample} or {'sample_id': id}")
            sample = self.get_sample(options["sample_id"])
        self.sample = sample
        self.round_index = 0
        observation = self._reset(sample)
        return observation, {"sample_id": sample.sample_id, "category": sample.category}

    @final
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.sample is None:
            raise RuntimeError("step() called before reset()")
        self.round_index += 1
        result = self._step(action)
        info = dict(result.info or {})
        info["outcome"] = result.outcome
        truncated = not result.terminated and self.round_index >= self.max_round
        reward = result.reward
        if result.terminated:
            info["status"] = EpisodeStatus.COMPLETED
        elif truncated:
            limit_outcome, reward = self._at_round_limit()
            info["outcome"] = limit_outcome
            info["status"] = EpisodeStatus.TASK_LIMIT_REACHED
        else:
            info["status"] = EpisodeStatus.RUNNING
        return result.observation, reward, result.terminated, truncated, info

    @final
    def score_group(self, episodes: Sequence[Episode]) -> None:
        """Adjust the rewards of a finished group (the completions of one sample).

        For rewards that depend on the group or on what only the agent knows (token
        lengths): called once all of the group's episodes have ended, before they are
        logged or trained on. Any task instance of the family may be asked.
        """
        if any(episode.running for episode in episodes):
            raise RuntimeError("score_group() called while an episode is still running")
        self._score_group(episodes)

    @final
    def oracle_reply(self) -> str:
        """The reply an expert gives now, from the sample's reference solution."""
        if self.sample is None:
            raise RuntimeError("oracle_reply() called before reset()")
        return self._oracle_reply()

    def close(self) -> None:
        """Release resources (sandboxes, connections). Safe to call twice."""

    # ---- hooks ---------------------------------------------------------------------
    @abstractmethod
    def _reset(self, sample: Sample) -> str:
        """Prepare the episode and return the first user message."""

    @abstractmethod
    def _step(self, action: str) -> StepOutcome:
        """Parse the agent's reply and act on it. Malformed replies are outcomes, not errors."""

    @abstractmethod
    def _oracle_reply(self) -> str: ...

    def _score_group(self, episodes: Sequence[Episode]) -> None:
        """Hook: rewards over a finished group; by default each episode keeps its own."""

    def _at_round_limit(self) -> tuple[Outcome, float]:
        """Outcome and reward when the round limit ends the episode without an answer."""
        return Outcome.INCORRECT, 0.0
