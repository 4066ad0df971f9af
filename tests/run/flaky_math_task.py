"""A math task whose environments fail on purpose: steps that raise, hang or return garbage.

Which steps fail is drawn from the episode's seed, sample and round, so a resumed or
repeated run fails at the same places.
"""

from __future__ import annotations

import random
import time

from src.tasks.instance.math_problems.task import MathEpisode, MathProblemsTask
from src.tasks.splits import Splits
from src.tasks.task import StepOutcome


class FlakyMathTask(MathProblemsTask):
    def __init__(self, step_error_rate: float = 0.0, step_hang_rate: float = 0.0,
                 step_garbage_rate: float = 0.0, hang_s: float = 3600.0,
                 splits: Splits = Splits(), levels: list[int] | None = None,
                 reward_weights: dict[str, float] | None = None, worked_example: bool = True,
                 step_error: type[Exception] = RuntimeError) -> None:
        super().__init__(splits=splits, levels=levels, reward_weights=reward_weights,
                         worked_example=worked_example)
        self.step_error_rate = step_error_rate
        self.step_hang_rate = step_hang_rate
        self.step_garbage_rate = step_garbage_rate
        self.hang_s = hang_s
        self.step_error = step_error  # the exception class a failing step raises

    def new_episode(self) -> MathEpisode:
        return FlakyMathEpisode(self)


class FlakyMathEpisode(MathEpisode):
    family: FlakyMathTask

    def _step(self, action: str) -> StepOutcome:
        assert self.sample is not None
        family = self.family
        draw = random.Random(f"{self.np_random_seed}-{self.sample.sample_id}-"
                             f"{self.round_index}").random()
        if draw < family.step_error_rate:
            raise family.step_error("injected step failure")
        draw -= family.step_error_rate
        if draw < family.step_hang_rate:
            time.sleep(family.hang_s)
        draw -= family.step_hang_rate
        if draw < family.step_garbage_rate:
            return None  # type: ignore[return-value]  # what a broken task returns
        return super()._step(action)
