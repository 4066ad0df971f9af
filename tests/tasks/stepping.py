"""Stepping one episode of a task through scripted replies, for the tasks' tests."""

from __future__ import annotations

from typing import Any

from src.records.episode import StepInfo
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
