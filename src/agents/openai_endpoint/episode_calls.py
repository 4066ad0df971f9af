"""One episode's calls to the endpoint, kept token-exact.

The first call's messages are rendered by the chat template. Every later call must send
the conversation of the call before it, that call's reply as the assistant message (its
text as returned), and new user messages: the prefix property. Its prompt is then the
previous prompt, the sampled ids, and the template's ids that close the reply and open the
new turns, as the built-in agent builds it (`TurnBoundary`): what is trained on is exactly
what the model was fed. A call that breaks the property is refused (`PrefixBroken`),
never re-tokenised into a different history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from src.language_models.chat_template import TurnBoundary
from src.records.trajectory import Trajectory


class PrefixBroken(ValueError):
    """A call's messages do not extend the conversation the episode's policy was fed."""


def message_text(message: dict[str, Any]) -> tuple[str, str]:
    """(role, text) of an OpenAI chat message; content may be a list of text parts."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(message.get("role")), "" if content is None else str(content)


@dataclass
class EpisodeCalls:
    trajectory: Trajectory
    boundary: TurnBoundary
    messages: list[tuple[str, str]] = field(default_factory=list)  # the last call's
    last_reply: str | None = None  # the text the last call returned
    calls: int = 0

    def prompt_for(self, messages: Sequence[dict[str, Any]],
                   render: Callable[[list[dict[str, str]]], list[int]],
                   encode: Callable[[str], list[int]]) -> list[int]:
        """The token ids to sample the reply to `messages` from, appended to the
        trajectory; raises PrefixBroken (leaving the trajectory as it was)."""
        chat = [message_text(message) for message in messages]
        if not chat or chat[-1][0] != "user":
            raise PrefixBroken("the last message must be the user's")
        if self.calls == 0:
            ids = render([{"role": role, "content": text} for role, text in chat])
        else:
            expected = [*self.messages, ("assistant", self.last_reply or "")]
            if chat[:len(expected)] != expected:
                raise PrefixBroken(
                    f"call {self.calls + 1} does not extend call {self.calls}: send its "
                    f"messages, then its reply unchanged as the assistant message, then new "
                    f"user messages")
            new = chat[len(expected):]
            if any(role != "user" for role, _ in new):
                raise PrefixBroken(f"call {self.calls + 1}: after the last reply only user "
                                   f"messages may follow (got {[role for role, _ in new]})")
            start, _ = self.trajectory.turn_spans[-1]
            ids = self.boundary.closing_after(self.trajectory.token_ids[start:])
            for _, text in new:
                ids += encode(self.boundary.opening_text(text))
        self.trajectory.append_context(ids)
        self.messages = chat
        self.calls += 1
        return list(self.trajectory.token_ids)
