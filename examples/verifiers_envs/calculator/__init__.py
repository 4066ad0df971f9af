"""A multi-turn verifiers environment with a tool: products of two numbers, with a
calculator the model may call before it answers.

A verifiers 0.4.0 taskset package. The calculator is a shared toolset (`tools.py`): one
MCP server for the whole run, started when the environment starts serving, instead of
one per rollout (a process start each, seconds on a small machine). `split: validation`
gives the held-out products.
"""

from __future__ import annotations

import re
from typing import Literal

import verifiers.v1 as vf

from examples.verifiers_envs.calculator.tools import Calculator

SYSTEM_PROMPT = "Use the calculator tool, then give the final answer as a number."
TRAIN = [(12, 13), (17, 23), (25, 4), (31, 7), (44, 11), (19, 19), (8, 125), (63, 3),
         (14, 15), (21, 22), (36, 12), (99, 2), (16, 16), (45, 20), (27, 3), (11, 11)]
VALIDATION = [(13, 14), (18, 22), (24, 5), (33, 3), (15, 15), (7, 70), (26, 4), (12, 12)]


class ProductData(vf.TaskData):
    answer: str


class ProductTask(vf.Task[ProductData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the final reply's last number is the product."""
        numbers = re.findall(r"-?\d+", trace.last_reply.replace(",", ""))
        return float(bool(numbers) and numbers[-1] == self.data.answer)

    @vf.metric
    async def tool_results(self, trace: vf.Trace) -> float:
        """Tool results the model received (as `tool` messages: native tool calls)."""
        return float(len(trace.tool_messages))


class ProductConfig(vf.TasksetConfig):
    split: Literal["train", "validation"] = "train"
    tools: vf.SharedToolsetConfig = vf.SharedToolsetConfig()


class ProductTaskset(vf.Taskset[ProductTask, ProductConfig]):
    @classmethod
    def toolsets(cls, config: ProductConfig) -> list[vf.Toolset]:
        return [Calculator(config.tools)]

    def load(self):
        pairs = TRAIN if self.config.split == "train" else VALIDATION
        for a, b in pairs:
            yield ProductTask(ProductData(id=f"product-{a}-{b}", prompt=f"What is {a} * {b}?",
                                          answer=str(a * b), system_prompt=SYSTEM_PROMPT),
                              self.config.task)


__all__ = ["ProductTaskset"]
