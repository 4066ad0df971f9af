"""Tool calls in the OpenAI format, for chat templates that render tools.

A model that was taught tools writes its calls as text in its reply; the parser turns
that text into the response's `tool_calls`, as vLLM's tool parsers do. The sampled token
ids stay exactly what the model wrote: only the response is structured. One format is
parsed, Hermes's (Qwen2.5, Qwen3, Hermes and the many models tuned on it):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Model output is untrusted: a reply whose tool-call blocks are not all well-formed JSON
objects with a name is returned as plain content, and counted as malformed; so is a call
that the client could not send back as it came: arguments that are not strict JSON (NaN,
1e309) or text that is not Unicode (a lone surrogate written as the escape \\ud800).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

_PROBE_TOOL = "probe_tool_name_7f3a"
# closed blocks, or one left open at the end of the reply (cut off, or closed by the
# end-of-turn token instead)
_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON text, as the OpenAI API carries it

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParsedReply:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    malformed: bool = False  # there were tool-call blocks, and not all could be read


def parse_hermes(text: str, call_id_prefix: str) -> ParsedReply:
    """The reply's text before the first block as content (None when blank) and one
    `ToolCall` per block, with ids `<call_id_prefix>-<index>`."""
    blocks = list(_HERMES_BLOCK.finditer(text))
    if not blocks:
        return ParsedReply(text)
    calls = []
    for index, block in enumerate(blocks):
        call = _read_call(block.group(1) if block.group(1) is not None else block.group(2))
        if call is None:
            return ParsedReply(text, malformed=True)
        name, arguments = call
        calls.append(ToolCall(f"{call_id_prefix}-{index}", name, arguments))
    content = text[:blocks[0].start()].strip()
    return ParsedReply(content or None, tuple(calls))


def _read_call(body: str) -> tuple[str, str] | None:
    """The (name, arguments as JSON text) of a call block, or None where it is malformed;
    model text nested deeper than the JSON reader's recursion is malformed too."""
    try:
        call = json.loads(body)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # some models write the arguments as a JSON text
            arguments = json.loads(arguments)
        if not isinstance(arguments, dict):
            return None
        name, text = call["name"], json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        (name + text).encode()  # UnicodeEncodeError (a ValueError) on a lone surrogate
        return name, text
    except (ValueError, RecursionError):
        return None


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template writes a tool list into the prompt."""
    tools = [{"type": "function", "function": {
        "name": _PROBE_TOOL, "description": "probe", "parameters": {"type": "object",
                                                                    "properties": {}}}}]
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                             tools=tools, tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that fails on tools does not render them
        return False
    return _PROBE_TOOL in text


def message_text(message: dict[str, Any]) -> str:
    """The text of an OpenAI chat message; content may be a list of text parts."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message as chat templates expect it: content of text parts as its text
    (templates of text models join content as a string), tool-call arguments as objects
    (the API carries them as JSON text)."""
    if isinstance(message.get("content"), list):
        message = {**message, "content": message_text(message)}
    calls = message.get("tool_calls")
    if not calls:
        return message
    converted = []
    for call in calls:
        function = dict(call.get("function") or {})
        function["arguments"] = arguments_value(function.get("arguments") or "{}")
        converted.append({**call, "function": function})
    return {**message, "tool_calls": converted}


def arguments_value(arguments: Any) -> Any:
    """A tool call's arguments as a JSON value; what is not JSON text stays as sent."""
    with contextlib.suppress(TypeError, ValueError, RecursionError):
        return json.loads(arguments)
    return arguments
