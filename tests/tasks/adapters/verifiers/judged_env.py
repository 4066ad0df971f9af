"""A verifiers taskset package for the tests: an Env whose `finalize` judges the group
(a bonus for the longest reply), and a reward that fails, or blocks its event loop, when
told to."""

from __future__ import annotations

import time

import verifiers.v1 as vf

BLOCK_S = 60.0  # how long a blocking reward holds the loop


class EchoData(vf.TaskData):
    answer: str


class EchoTask(vf.Task[EchoData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        if self.data.answer == "fail":
            raise ZeroDivisionError("the reward function has a bug")
        if self.data.answer == "block":
            time.sleep(BLOCK_S)  # a blocking call where it should await: holds the loop
        return float(trace.last_reply == self.data.answer)


class EchoConfig(vf.TasksetConfig):
    failing: bool = False  # every task's reward raises
    blocking: bool = False  # every task's reward blocks the loop for BLOCK_S


class EchoTaskset(vf.Taskset[EchoTask, EchoConfig]):
    def load(self):
        for index in range(4):
            answer = ("fail" if self.config.failing else "block" if self.config.blocking
                      else str(index))
            yield EchoTask(EchoData(prompt=f"Say {index}.", answer=answer), self.config.task)


class JudgedConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class JudgedEnv(vf.Env[JudgedConfig]):
    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)

    async def finalize(self, task: vf.Task, episode: vf.Episode) -> None:
        longest = max(len(trace.last_reply) for trace in episode.traces)
        for trace in episode.traces:
            trace.record_reward("longest", float(len(trace.last_reply) == longest), weight=0.5)
            trace.record_metric("group_size", len(episode.traces))


__all__ = ["EchoTaskset", "JudgedEnv"]
