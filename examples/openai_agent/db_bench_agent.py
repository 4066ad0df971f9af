"""A DB-bench agent written for the OpenAI chat API, as people write agents today; the
framework trains it through its endpoint (configs/assignments/db_bench_openai_agent.yaml).

`reply` is the whole agent: the task's rules arrive in the first user message, and each
reply is one SQL operation or the final answer."""

from __future__ import annotations

from openai import OpenAI

SYSTEM = "You are a careful SQL expert. Follow the user's answer format exactly."


def reply(client: OpenAI, messages: list[dict[str, str]]) -> str:
    completion = client.chat.completions.create(
        model="policy", messages=[{"role": "system", "content": SYSTEM}, *messages])
    return completion.choices[0].message.content or ""
