"""A math task that takes a while per step, so a test can kill a run mid-batch."""

from __future__ import annotations

import time

from src.tasks.instance.math_problems.task import MathEpisode, MathProblemsTask
from src.tasks.task import StepOutcome


class SlowMathEpisode(MathEpisode):
    def _step(self, action: str) -> StepOutcome:
        time.sleep(0.05)
        return super()._step(action)


class SlowMathTask(MathProblemsTask):
    def new_episode(self) -> MathEpisode:
        return SlowMathEpisode(self)
