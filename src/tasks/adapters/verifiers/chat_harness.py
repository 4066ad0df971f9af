"""The verifiers harness that drives an episode against the project's endpoint.

verifiers' own harnesses do not fit a training run here: they launch a program through
`uv` (a download on first use) and always send `stream: true`, which the endpoint refuses
(it answers whole replies, recorded token-exact). This one is verifiers' contract for an
in-process loop (`Harness.launch`): every call goes through the rollout's interception
(`endpoint`, `secret`), which imposes the model and sampling and records the trace.

Each reply is appended exactly as the endpoint returned it, so every call extends the one
before (the endpoint's prefix property). Tools, two ways:
- `native`: the task's MCP tools are sent as OpenAI `tools`; the endpoint parses the
  model's calls into `tool_calls` and the results go back as `tool` messages. Needs a
  chat template that renders tools (the endpoint refuses them otherwise).
- `prompted`: for templates without tools (the embedded SmolLM2): the tools are listed in
  the system message and calls are read from the reply text, in the same Hermes blocks
  (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`); the results go back as one
  user message of `<tool_response>` blocks. The trace then holds no `tool` messages. The
  preamble, the parser and the results' text are the project's one prompted protocol
  (src/language_models/tool_calls.py), as the LoRA agent feeds tool episodes. The
  harness reads the calls here, so it counts them (`tool_calls`, and
  `malformed_tool_calls`: blocks it could not read, each answered with its error while
  the reply's other calls run), as the endpoint counts the native ones.
The conversation ends at the first reply without a tool call, or when the interception
refuses a call (the agent's `max_turns`, a refused or failed model call).
"""

from __future__ import annotations

import importlib
import json
from contextlib import AsyncExitStack
from typing import Any, Literal

import httpx
from openai import APIError, AsyncOpenAI

from src.language_models.tool_calls import (
    ToolCall,
    hermes_calls,
    tool_preamble,
    tool_response_text,
)
from src.tasks.optional_packages import import_optional

import_optional("verifiers", "verifiers")  # where it is missing: the pip command
vf = importlib.import_module("verifiers.v1")
mcp_utils = importlib.import_module("verifiers.v1.harnesses.utils.mcp")
chat_dialect = importlib.import_module("verifiers.v1.dialects.chat")

HARNESS_ID = "agent_rl_chat"  # the name the adapter registers this module under
MAX_TOOL_RESULT_CHARS = 4_000  # a tool's output is fed back to the model: bounded


class ChatHarnessConfig(vf.HarnessConfig):
    id: str = HARNESS_ID
    tool_protocol: Literal["native", "prompted"] = "native"


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True  # the system prompt as a system message
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True  # a stateless chat loop: relaunching on the transcript is right
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def setup(self, runtime: Any) -> None:
        """Nothing to install: the loop runs in this process."""

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: Any) -> Any:
        system, prompt = self.resolve_prompt(data)
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0,
                             http_client=httpx.AsyncClient(timeout=httpx.Timeout(None,
                                                                                 connect=10)))
        try:
            async with AsyncExitStack() as stack:
                spec = {"mcpServers": {name: {"url": url, "timeout": self.config.tool_timeout}
                                       for name, url in mcp_urls.items()}}
                tools, dispatch, servers = ((await mcp_utils.connect_mcp(spec, stack))
                                            if mcp_urls else ([], {}, {}))
                prompted = bool(tools) and self.config.tool_protocol == "prompted"
                if prompted:
                    system = "\n\n".join(filter(None, [system, tool_preamble(tools)]))
                messages = _opening(system, prompt)
                while True:
                    request: dict[str, Any] = {"model": ctx.model, "messages": messages}
                    if tools and not prompted:
                        request["tools"] = tools
                    raw = await client.chat.completions.with_raw_response.create(**request)
                    message = raw.http_response.json()["choices"][0]["message"]
                    messages.append(message)
                    answers = await _tool_answers(message, prompted, servers, dispatch,
                                                  trace)
                    if not answers:
                        break
                    messages += answers
        except APIError as error:  # the interception refused the call (turn limit, a
            # refused or failed model call): it has recorded why on the trace
            return vf.ProgramResult(exit_code=1, stdout="", stderr=f"{type(error).__name__}: "
                                                                   f"{error}")
        finally:
            await client.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def _opening(system: str | None, prompt: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": prompt})
    elif prompt:
        messages += [chat_dialect.message_to_wire(message) for message in prompt]
    return messages


async def _tool_answers(message: dict[str, Any], prompted: bool, servers: dict[str, Any],
                        dispatch: dict[str, Any], trace: Any) -> list[dict[str, Any]]:
    """The messages that answer a reply's tool calls: `tool` messages, or (prompted) one
    user message of `<tool_response>` blocks, the calls counted on the trace; none where
    the reply calls nothing."""
    if not prompted:
        answers = []
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            result = await _run_tool(servers, dispatch, function.get("name"),
                                     _arguments(function.get("arguments")))
            answers.append({"role": "tool", "tool_call_id": call.get("id"), "content": result})
        return answers
    calls = hermes_calls(message.get("content") or "", "call")
    _count_calls(trace, calls)
    if not calls:
        return []
    results = [await _run_tool(servers, dispatch, call.name, json.loads(call.arguments))
               if isinstance(call, ToolCall) else f"error: {call}" for call in calls]
    return [{"role": "user", "content": tool_response_text(results)}]


def _count_calls(trace: Any, calls: list[ToolCall | str]) -> None:
    """Adds a reply's prompted calls to the trace's `tool_calls` (those read) and
    `malformed_tool_calls` (blocks that could not be read as a call)."""
    malformed = sum(isinstance(call, str) for call in calls)
    for metric, count in (("tool_calls", len(calls) - malformed),
                          ("malformed_tool_calls", malformed)):
        trace.record_metric(metric, trace.metrics.get(metric, 0.0) + count)


def _arguments(value: Any) -> dict[str, Any] | str:
    """A call's arguments as an object (OpenAI sends them as JSON text), or the reason
    they are not one."""
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except (ValueError, RecursionError) as error:
            return f"the arguments are not JSON ({error})"
    return value if isinstance(value, dict) else "the arguments must be a JSON object"


async def _run_tool(servers: dict[str, Any], dispatch: dict[str, Any], name: str | None,
                    arguments: dict[str, Any] | str) -> str:
    """The tool's output, or an error text for the model: a malformed call is the model's
    mistake, answered, never an exception."""
    if isinstance(arguments, str):
        return f"error: {arguments}"
    if name not in dispatch:
        return f"error: unknown tool {name!r} (tools: {', '.join(dispatch) or 'none'})"
    result = await mcp_utils.call_mcp(servers, dispatch, name, arguments)
    text = result if isinstance(result, str) else json.dumps(result)
    return text[:MAX_TOOL_RESULT_CHARS]


__all__ = ["ChatHarness"]
