"""A language model's chat template, probed once for how one turn closes and the next opens.

Multi-turn trajectories are built by appending token ids, never by re-rendering the
chat, so every layer that renders prompts (agents, offline training, benchmarks) needs
the same rendering and the same turn boundary; they live here, below all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from src.language_models.language_model import LanguageModel
from src.language_models.tool_calls import tool_preamble
from src.records.episode import ToolResult

_PROBE_USER, _PROBE_AGENT = "PROBE-USER-TEXT", "PROBE-AGENT-TEXT"


class TemplateError(ValueError):
    """The chat template cannot be extended turn by turn with token suffixes."""


def render_chat(language_model: LanguageModel, system_prompt: str | None,
                chat: Sequence[tuple[str, str]], generation_prompt: bool) -> str:
    """The chat template's text for (role, content) pairs with roles "user" / "agent",
    mapped by the model's `role_dict`, after the system prompt if there is one."""
    roles = language_model.role_dict
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages += [{"role": roles[role], "content": content} for role, content in chat]
    return language_model.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt)


def probe_template(language_model: LanguageModel, system_prompt: str | None) -> tuple[str, str]:
    """(text that closes an agent turn, text that opens a user turn up to the next reply).

    Checks the prefix property: the rendering up to an agent turn must be a prefix
    of the rendering with one more user turn and the generation prompt.
    """
    through_agent = render_chat(language_model, system_prompt,
                                [("user", _PROBE_USER), ("agent", _PROBE_AGENT)], False)
    next_turn = render_chat(language_model, system_prompt,
                            [("user", _PROBE_USER), ("agent", _PROBE_AGENT),
                             ("user", _PROBE_USER)], True)
    if not next_turn.startswith(through_agent):
        raise TemplateError("the chat template re-renders earlier turns (prefix property "
                            "fails), so multi-turn token trajectories cannot be appended")
    closing = through_agent[through_agent.rindex(_PROBE_AGENT) + len(_PROBE_AGENT):]
    opening = next_turn[len(through_agent):]
    return closing, opening


def render_continuation(tokenizer: Any, messages: Sequence[dict[str, Any]],
                        tools: list[dict[str, Any]] | None = None) -> str:
    """The template's text for OpenAI `messages` (user turns, tool results) that follow a
    closed agent turn, through the next generation prompt: rendered after a probe turn
    and cut where the rendering up to that turn ends, so that the template decides how
    consecutive messages are grouped (several tool results in one turn, say)."""
    probe = [{"role": "user", "content": _PROBE_USER},
             {"role": "assistant", "content": _PROBE_AGENT}]
    extra = {"tools": tools} if tools else {}
    closed = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=False,
                                           **extra)
    extended = tokenizer.apply_chat_template([*probe, *messages], tokenize=False,
                                             add_generation_prompt=True, **extra)
    if not extended.startswith(closed):
        raise TemplateError("the chat template re-renders earlier turns when messages follow "
                            "an agent turn (prefix property fails)")
    return extended[len(closed):]


@dataclass
class ToolChat:
    """A tool episode's chat as the template is fed it, one of two ways
    (src/language_models/tool_calls.py): native, where the template renders tools (they
    go to `apply_chat_template(tools=...)`, results as `tool` messages), else prompted (the
    preamble after the system prompt, results as the user turns the chat holds). The
    LoRA agent appends its trajectory with it turn by turn, and the supervised stage
    tokenises a demonstration with it, so both feed the model the same ids.

    `messages`: the chat so far as the template's messages, each rendered once."""

    language_model: LanguageModel
    tools: list[dict[str, Any]]
    native: bool  # `template_renders_tools` of the model's tokenizer, probed once by the caller
    messages: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, language_model: LanguageModel, system_prompt: str | None,
              tools: list[dict[str, Any]], native: bool,
              chat: Sequence[tuple[str, str]]) -> ToolChat:
        """The first messages: the system message (prompted: the preamble after the
        system prompt) and the chat's (role, content) pairs, roles "user" / "agent"."""
        system = system_prompt if native else "\n\n".join(
            filter(None, [system_prompt, tool_preamble(tools)]))
        roles = language_model.role_dict
        messages = [{"role": "system", "content": system}] if system else []
        messages += [{"role": roles[role], "content": content} for role, content in chat]
        return cls(language_model, tools, native, messages)

    @property
    def template_tools(self) -> list[dict[str, Any]] | None:
        return self.tools if self.native else None

    def render(self) -> str:
        """The whole chat through the generation prompt."""
        return self.language_model.tokenizer.apply_chat_template(
            self.messages, tools=self.template_tools, tokenize=False,
            add_generation_prompt=True)

    def continue_after(self, reply: str, results: Sequence[ToolResult] | None,
                       user_messages: Sequence[str]) -> str:
        """Append the agent's `reply` and what answers it; the template's text after the
        closed reply through the next generation prompt. Native, with `results` (the
        observation's tool results): they go as `tool` messages; otherwise the user
        messages as they are."""
        roles = self.language_model.role_dict
        if self.native and results is not None:
            following = [{"role": "tool", "tool_call_id": result.call_id, "name": result.name,
                          "content": result.content} for result in results]
        else:
            following = [{"role": roles["user"], "content": text} for text in user_messages]
        self.messages += [{"role": roles["agent"], "content": reply}, *following]
        return render_continuation(self.language_model.tokenizer, following,
                                   self.template_tools)


@dataclass(frozen=True)
class TurnBoundary:
    """What goes between an agent's reply and its next one, as the template renders it.

    `closing_ids` close the agent turn and start with `end_of_turn_id`, the token the
    sampler stops on; `opening` is the text of a user turn up to the next generation
    prompt, with `_PROBE_USER` where the user's message goes.
    """

    closing_ids: tuple[int, ...]
    opening: str

    @property
    def end_of_turn_id(self) -> int:
        return self.closing_ids[0]

    def closing_after(self, sampled_ids: Sequence[int]) -> list[int]:
        """The closing ids still missing after a reply: those that follow the end-of-turn
        token when the reply stopped on it, else all of them, so that a reply cut off by
        the token limit still ends with the end-of-turn token whatever its last token is."""
        if sampled_ids and sampled_ids[-1] == self.end_of_turn_id:
            return list(self.closing_ids[1:])
        return list(self.closing_ids)

    def opening_text(self, user_message: str) -> str:
        return self.opening.replace(_PROBE_USER, user_message)


def probe_turn_boundary(language_model: LanguageModel, system_prompt: str | None) -> TurnBoundary:
    """The template's turn boundary, with the closing tokenized once.

    Raises TemplateError unless the closing starts with one of the model's end-of-turn
    tokens: only then does the sampler stop where the template ends a turn, and can a
    turn's end be decided on token ids rather than on decoded text.
    """
    closing, opening = probe_template(language_model, system_prompt)
    closing_ids = tuple(language_model.tokenizer(closing, add_special_tokens=False)["input_ids"])
    end_of_turn_ids = language_model.end_of_turn_ids()
    if not closing_ids or closing_ids[0] not in end_of_turn_ids:
        raise TemplateError(
            f"the chat template closes an agent turn with {closing!r} (ids {list(closing_ids)}), "
            f"which does not start with one of the model's end-of-turn tokens "
            f"{list(end_of_turn_ids)}: the sampler would not stop where the template ends a turn")
    return TurnBoundary(closing_ids, opening)


@dataclass(frozen=True)
class DemonstrationTools:
    """A tool episode's tools for `demonstration_ids`: the tool list, whether the template
    renders it (`native`), and by chat index the tool results that user turn held (native
    templates render them as `tool` messages)."""

    tools: list[dict[str, Any]]
    native: bool
    results: Mapping[int, Sequence[ToolResult]] = field(default_factory=dict)


def demonstration_ids(language_model: LanguageModel, boundary: TurnBoundary,
                      system_prompt: str | None, chat: Sequence[tuple[str, str]],
                      tools: DemonstrationTools | None = None
                      ) -> tuple[list[int], list[int]]:
    """(ids, loss mask) of a finished chat of "user" / "agent" turns, built as the LoRA
    agent builds a trajectory: the first user turn rendered with the generation prompt,
    then per agent turn its reply's ids and the end-of-turn token (mask 1: what a policy
    would have sampled), and before each next user turn the rest of the closing and the
    turn's opening (mask 0). With `tools`, the chat is a tool episode's, rendered by
    `ToolChat` as the agent renders one."""
    if not chat or chat[0][0] != "user":
        raise ValueError("a demonstration starts with a user message")
    encode = language_model.tokenizer
    tool_chat = None if tools is None else ToolChat.start(
        language_model, system_prompt, tools.tools, tools.native, chat[:1])
    tool_results = {} if tools is None else tools.results
    ids = encode(render_chat(language_model, system_prompt, [chat[0]], True)
                 if tool_chat is None else tool_chat.render(),
                 add_special_tokens=False)["input_ids"]
    mask = [0] * len(ids)
    previous = "user"
    for index, (role, content) in enumerate(chat[1:], start=1):
        if role == "agent":
            if previous == "agent":
                raise ValueError("two agent turns in a row")
            reply = encode(content, add_special_tokens=False)["input_ids"] + [
                boundary.end_of_turn_id]
            ids += reply
            mask += [1] * len(reply)
        elif role == "user":
            if previous == "user":
                raise ValueError("two user turns in a row")
            opening = (boundary.opening_text(content) if tool_chat is None else
                       tool_chat.continue_after(chat[index - 1][1],
                                                tool_results.get(index), [content]))
            context = list(boundary.closing_ids[1:]) + encode(
                opening, add_special_tokens=False)["input_ids"]
            ids += context
            mask += [0] * len(context)
        else:
            raise ValueError(f"unknown role '{role}' (user or agent)")
        previous = role
    if previous != "agent":
        raise ValueError("a demonstration ends with the agent's reply")
    return ids, mask
