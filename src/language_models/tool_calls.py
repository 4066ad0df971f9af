"""Tool calls as a model writes them, and the tool protocol of templates without tools.

A model that was taught tools writes its calls as text in its reply; the parser turns that
text into OpenAI-style calls, as vLLM's tool parsers do. The sampled token ids stay exactly
what the model wrote: only the reading is structured. One format is parsed, Hermes's
(Qwen2.5, Qwen3, Hermes and the many models tuned on it):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Two ways to offer tools, one format of calls:
- native: the chat template renders the tool list (`template_renders_tools`:
  `apply_chat_template(tools=...)` writes it into the prompt), and tool results go back
  as `tool` messages, which such a template renders in its own way;
- prompted, for templates without tools (the embedded SmolLM2): `tool_preamble` describes
  the tools and the call format in the system message, and the results go back as one
  user turn of `<tool_response>` blocks (`tool_response_text`), as a Hermes template
  renders `tool` messages.
The OpenAI endpoint (src/agents/openai_endpoint/), the LoRA agent, the tool-episode
tasks (src/tasks/tool_episode.py) and the verifiers harness's prompted protocol
(src/tasks/adapters/verifiers/chat_harness.py) read calls with this one parser, and
describe tools with this one preamble.

Model output is untrusted: a reply whose tool-call blocks are not all well-formed JSON
objects with a name is returned as plain content, and marked malformed with the reason;
so is a call that a client could not send back as it came: arguments that are not strict
JSON (NaN, 1e309) or text that is not Unicode (a lone surrogate written as the escape
\\ud800).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
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
    problem: str = ""  # why, for a malformed reply: what the first unreadable block lacks


def parse_hermes(text: str, call_id_prefix: str) -> ParsedReply:
    """The reply's text before the first block as content (None when blank) and one
    `ToolCall` per block, with ids `<call_id_prefix>-<index>`."""
    calls = hermes_calls(text, call_id_prefix)
    if not calls:
        return ParsedReply(text)
    for index, call in enumerate(calls):
        if isinstance(call, str):
            return ParsedReply(text, malformed=True,
                               problem=f"tool call {index + 1} of {len(calls)}: {call}")
    first = _HERMES_BLOCK.search(text)
    assert first is not None  # there are calls
    content = text[:first.start()].strip()
    return ParsedReply(content or None, tuple(call for call in calls
                                              if isinstance(call, ToolCall)))


def hermes_calls(text: str, call_id_prefix: str) -> list[ToolCall | str]:
    """Each Hermes block of a reply, in order: its `ToolCall` (id
    `<call_id_prefix>-<index>`), or why it cannot be read, for a reader that answers each
    unreadable block on its own and runs the others. Empty without blocks."""
    calls: list[ToolCall | str] = []
    for index, block in enumerate(_HERMES_BLOCK.finditer(text)):
        call = _read_call(block.group(1) if block.group(1) is not None else block.group(2))
        calls.append(call if isinstance(call, str)
                     else ToolCall(f"{call_id_prefix}-{index}", *call))
    return calls


def _read_call(body: str) -> tuple[str, str] | str:
    """The (name, arguments as JSON text) of a call block, or why it is malformed; model
    text nested deeper than the JSON reader's recursion is malformed too."""
    try:
        call = json.loads(body)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return 'not a JSON object with a "name"'
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # some models write the arguments as a JSON text
            arguments = json.loads(arguments)
        if not isinstance(arguments, dict):
            return '"arguments" is not a JSON object'
        name, text = call["name"], json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        (name + text).encode()  # UnicodeEncodeError (a ValueError) on a lone surrogate
        return name, text
    except RecursionError:
        return "nested too deeply to read"
    except ValueError as error:
        return f"not valid JSON ({type(error).__name__}: {str(error)[:200]})"


def hermes_text(content: str | None, calls: Sequence[tuple[str, Any]]) -> str:
    """A reply with (name, arguments) calls as the model writes it in Hermes blocks, after
    its content: what `parse_hermes` reads back into the same calls. Arguments given as
    JSON text (as the OpenAI API carries them) are written as the value they hold."""
    blocks = [json.dumps({"name": name, "arguments": arguments_value(arguments)},
                         ensure_ascii=False) for name, arguments in calls]
    return "\n".join([*([content] if content else []),
                      *(f"<tool_call>\n{block}\n</tool_call>" for block in blocks)])


def tool_preamble(tools: Sequence[dict[str, Any]]) -> str:
    """The prompted protocol's description of the tools (OpenAI function definitions) and
    of the call format, for the system message of a template that renders no tools."""
    listed = "\n".join(json.dumps(tool.get("function", tool), ensure_ascii=False)
                       for tool in tools)
    return ("You may call these tools:\n<tools>\n" + listed + "\n</tools>\nTo call one, "
            'write <tool_call>{"name": NAME, "arguments": {...}}</tool_call> and stop; its '
            "result comes back in <tool_response></tool_response>. Once you know the "
            "answer, reply without a tool call.")


def tool_response_text(results: Sequence[str]) -> str:
    """Tool results as the prompted protocol's user turn (and as a Hermes template renders
    `tool` messages): one `<tool_response>` block each."""
    return "\n".join(f"<tool_response>\n{result}\n</tool_response>" for result in results)


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
