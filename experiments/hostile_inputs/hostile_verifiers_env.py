"""A verifiers taskset package for the scorer study: one reward whose behaviour the
config picks (`reward`): sound (1 for the reply "4"), blocking its event loop, raising,
or returning NaN, infinity, an integer past floats, or text."""

from __future__ import annotations

import time

import verifiers.v1 as vf

BLOCK_S = 8.0  # how long a blocking reward holds the loop: past the study's rollout bound
REWARDS = ("sound", "block", "raise", "nan", "inf", "huge", "text")


class HostileData(vf.TaskData):
    answer: str


class HostileTask(vf.Task[HostileData]):
    @vf.reward(weight=1.0)
    async def judged(self, trace: vf.Trace) -> float:
        reward = self.data.answer
        if reward == "block":
            time.sleep(BLOCK_S)  # a blocking call where it should await: holds the loop
        if reward == "raise":
            raise ZeroDivisionError("the reward function raised")
        hostile: dict[str, object] = {"nan": float("nan"), "inf": float("inf"),
                                      "huge": 10**400, "text": "full marks"}
        if reward in hostile:
            return hostile[reward]  # type: ignore[return-value]
        return float(trace.last_reply.strip() == "4")


class HostileConfig(vf.TasksetConfig):
    reward: str = "sound"  # one of REWARDS, for every task


class HostileTaskset(vf.Taskset[HostileTask, HostileConfig]):
    def load(self):
        for index in range(4):
            yield HostileTask(HostileData(prompt=f"What is 2 + 2? ({index})",
                                          answer=self.config.reward), self.config.task)


__all__ = ["HostileTaskset"]
