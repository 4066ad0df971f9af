"""Stepping one episode of a task through scripted replies, for the tasks' tests: its last
step's figures, or the episode recorded as the rollout records it (for `score_group`)."""

from __future__ import annotations

from typing import Any

from src.records.chat import Role
from src.records.episode import Episode, StepInfo
from src.tasks.task import Task


def step_through(task: Task[Any], sample_id: str, replies: list[str]
                 ) -> tuple[float, StepInfo]:
    """The last step's (reward, info) of an episode of `sample_id` stepped with `replies`,
    which must end it."""
    environment = task.new_episode()
    try:
        environment.reset(options={"sample_id": sample_id})
        for reply in replies:
            _, reward, terminated, truncated, info = environment.step(reply)
        assert terminated and not truncated
        return reward, info
    finally:
        environment.close()


def recorded_episode(task: Task[Any], sample_id: str, replies: list[str],
                     group_index: int = 0) -> Episode:
    """An episode of `sample_id` stepped with `replies` until it ends, recorded as the
    rollout records it: the chat, the summed reward, the status, outcome, metrics and info
    of its steps, and its environment (left open, as a group's scoring finds it)."""
    environment = task.new_episode()
    observation, _ = environment.reset(options={"sample_id": sample_id})
    assert environment.sample is not None
    episode = Episode(environment.sample, group_index, 0, environment)
    episode.add_message(Role.USER, observation)
    for reply in replies:
        episode.add_message(Role.AGENT, reply)
        observation, reward, terminated, truncated, info = environment.step(reply)
        episode.reward += reward
        episode.status, episode.outcome = info["status"], info["outcome"]
        episode.metrics.update(info["metrics"])
        episode.info.update(info["extras"])
        if terminated or truncated:
            break
        episode.add_message(Role.USER, observation)
    return episode
