"""A single-turn verifiers environment: one-digit sums, one reply, scored by its reward.

A verifiers 0.4.0 taskset package: `__all__` exports its one `Taskset`, whose config
fields are the environment's arguments. The 100 sums a + b (a, b in 0..9) are split by a
fixed rule, every fifth one held out: `split: validation` gives the 20 held out.
"""

from __future__ import annotations

import re
from typing import Literal

import verifiers.v1 as vf

SYSTEM_PROMPT = "Answer with the number only."


class SumData(vf.TaskData):
    answer: str  # the reference, carried on the task's data (and so in every trace)


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the reply's last number is the sum."""
        numbers = re.findall(r"-?\d+", trace.last_reply)
        return float(bool(numbers) and numbers[-1] == self.data.answer)

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class SumConfig(vf.TasksetConfig):
    split: Literal["train", "validation"] = "train"


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        pairs = [(a, b) for a in range(10) for b in range(10)]
        held_out = self.config.split == "validation"
        for index, (a, b) in enumerate(pairs):
            if (index % 5 == 4) == held_out:
                yield SumTask(SumData(id=f"sum-{a}-{b}", prompt=f"What is {a} + {b}?",
                                      answer=str(a + b), system_prompt=SYSTEM_PROMPT),
                              self.config.task)


__all__ = ["SumTaskset"]
