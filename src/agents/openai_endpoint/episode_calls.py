"""One episode's calls to the endpoint, kept token-exact.

The first call's messages are rendered by the chat template. Every later call must send
the conversation of the call before it, that call's reply as the assistant message (as
returned: its content, and its `tool_calls` where it has them), and new user messages or
tool results: the prefix property. Its prompt is then the previous prompt, the sampled ids,
the template's ids that close the reply (`TurnBoundary`, as the built-in agent does) and
those that render the new messages: what is trained on is exactly what the model was fed.
A call that breaks the property is refused (`PrefixBroken`), never re-tokenised into a
different history. The calls of one episode are one conversation, so one at a time: a call
sent while another of the episode is in flight is refused (`CallInFlight`).

`exchange` keeps the conversation past the first call's messages as the chat shows it:
each reply as sampled, each user message or tool result sent after it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError

from src.language_models.chat_template import TurnBoundary
from src.language_models.tool_calls import (
    ParsedReply,
    arguments_value,
    message_text,
    tool_response_text,
)
from src.records.chat import ChatMessage, Role
from src.records.trajectory import Trajectory


class PrefixBroken(ValueError):
    """A call's messages do not extend the conversation the episode's policy was fed."""


class CallInFlight(RuntimeError):
    """A call of an episode sent while another of its calls is being answered."""


class TemplateRefused(ValueError):
    """The chat template cannot render a call's messages (content it cannot join, roles
    in an order it refuses): the call is at fault, not the endpoint."""


# (role, text, tool calls as (id, name, arguments), tool_call_id): what the prefix check
# compares; arguments are compared as JSON values, so their spacing may change
Message = tuple[str, str, tuple[tuple[str, str, Any], ...], str | None]
FOLLOWING_ROLES = ("user", "tool")  # the roles a call may add after the last reply


def canonical_message(message: dict[str, Any]) -> Message:
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        calls.append((str(call.get("id")), str(function.get("name")),
                      json.dumps(arguments_value(function.get("arguments")), sort_keys=True)))
    tool_call_id = message.get("tool_call_id")
    return (str(message.get("role")), message_text(message), tuple(calls),
            None if tool_call_id is None else str(tool_call_id))


@dataclass
class EpisodeCalls:
    trajectory: Trajectory
    boundary: TurnBoundary
    messages: list[Message] = field(default_factory=list)  # the last call's
    last_reply: Message | None = None  # the assistant message the last call returned
    tools: str | None = None  # the first call's tool list, as JSON
    calls: int = 0
    tool_calls: int = 0  # tool calls returned
    malformed_tool_calls: int = 0  # replies whose tool-call blocks could not be read
    exchange: list[ChatMessage] = field(default_factory=list)
    _in_flight: threading.Lock = field(default_factory=threading.Lock, init=False,
                                       repr=False, compare=False)

    @contextmanager
    def one_call(self) -> Iterator[None]:
        """Holds the episode's turn for one call; CallInFlight where another holds it."""
        if not self._in_flight.acquire(blocking=False):
            raise CallInFlight(
                f"call {self.calls + 1} was sent while another call of this episode is "
                "being answered: an episode's calls are one conversation, each sent with "
                "the reply of the one before")
        try:
            yield
        finally:
            self._in_flight.release()

    def prompt_for(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   render: Callable[[Sequence[dict[str, Any]]], list[int]],
                   continuation: Callable[[Sequence[dict[str, Any]]], list[int]]) -> list[int]:
        """The token ids to sample the reply to `messages` from, appended to the
        trajectory; raises PrefixBroken or TemplateRefused (leaving the trajectory as it
        was).

        `render` gives a first call's ids; `continuation` the template's ids for messages
        that follow a closed assistant turn, through the generation prompt."""
        chat = [canonical_message(message) for message in messages]
        if not chat or chat[-1][0] not in FOLLOWING_ROLES:
            raise PrefixBroken("the last message must be the user's or a tool result")
        tools_json = json.dumps(tools, sort_keys=True) if tools else None
        if self.calls == 0:
            ids = _rendered(render, messages)
            self.tools = tools_json
        else:
            if tools_json != self.tools:
                raise PrefixBroken(f"call {self.calls + 1} changes the tools of call 1: the "
                                   f"template renders them at the start of the conversation")
            expected = [*self.messages, self.last_reply]
            if chat[:len(expected)] != expected:
                raise PrefixBroken(
                    f"call {self.calls + 1} does not extend call {self.calls}: send its "
                    f"messages, then its reply unchanged as the assistant message, then new "
                    f"user messages or tool results")
            new = messages[len(expected):]
            if any(role not in FOLLOWING_ROLES for role, *_ in chat[len(expected):]):
                raise PrefixBroken(
                    f"call {self.calls + 1}: after the last reply only user messages and "
                    f"tool results may follow (got {[role for role, *_ in chat[len(expected):]]})")
            start, _ = self.trajectory.turn_spans[-1]
            ids = self.boundary.closing_after(self.trajectory.token_ids[start:])
            ids += _rendered(continuation, new)
            self.exchange += [ChatMessage(role=Role.USER, content=_chat_text(message))
                              for message in new]
        self.trajectory.append_context(ids)
        self.messages = chat
        self.calls += 1
        return list(self.trajectory.token_ids)

    def replied(self, reply: ParsedReply, text: str) -> dict[str, Any]:
        """Records the reply the call returns (`text` as sampled, `reply` as parsed); its
        OpenAI assistant message."""
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in reply.tool_calls]
        self.last_reply = canonical_message(message)
        self.exchange.append(ChatMessage(role=Role.AGENT, content=text))
        self.tool_calls += len(reply.tool_calls)
        self.malformed_tool_calls += reply.malformed
        return message


def _chat_text(message: dict[str, Any]) -> str:
    """A user message's text; a tool result's in the block a Hermes template renders it
    in (as a prompted tool protocol sends it), so the chat shows it as a tool's."""
    text = message_text(message)
    return tool_response_text([text]) if message.get("role") == "tool" else text


def _rendered(render: Callable[[Sequence[dict[str, Any]]], list[int]],
              messages: Sequence[dict[str, Any]]) -> list[int]:
    """`render(messages)`; TemplateRefused for what a template raises on messages it
    cannot render (its own `raise_exception`, or Python's errors on content it joins)."""
    try:
        return render(messages)
    except (TemplateError, TypeError, ValueError) as error:
        raise TemplateRefused(f"the chat template cannot render these messages: "
                              f"{type(error).__name__}: {error}"[:1000]) from error
