"""An agent written as a plain function against the `openai` client, made trainable.

    def agent(client: openai.OpenAI, messages: list[dict]) -> str

gets the episode's chat so far (user and assistant messages) and returns its reply; it may
call `client.chat.completions.create` as often as it likes (the `model` name is not used).
Without an agent function, each episode's environment drives the conversation itself: it
must be a `ClientRolloutEnvironment` (e.g. a verifiers environment), whose `client_rollout`
is called in the function's place; the episode's chat then holds every call of that
conversation (each reply as sampled, each tool result or user message after it), a turn
per model call.
Its client talks to an OpenAI-compatible endpoint (`src.agents.openai_endpoint`) served by
this agent's language model, the policy being trained (in process or a rollout pool), that
records every call token-exact into the episode's trajectory, so that the RL trainer
trains on exactly what was sampled. The functions of all running episodes run in threads
and their calls are answered in one batched `generate` (lockstep). With `tools`, where the
model's chat template renders them, replies in the Hermes format come back as `tool_calls`;
the function runs the tools and sends their results as `tool` messages in its next call
(the episode metrics `tool_calls`, `malformed_tool_calls` count them).

An episode whose environment offers tools (a `ToolEnvironment`, src/tasks/tool_episode.py)
runs them in its own sandbox; the function reaches them through the endpoint's tool calls:

    def agent(client, messages, tools) -> str | the assistant message

is called with `tools` to send (None where the template renders none: the messages then
open with a system message that describes them, the prompted protocol of
src/language_models/tool_calls.py) and the episode's conversation as OpenAI messages: each
earlier reply as the endpoint returned it, each tool result as a `tool` message answering
its call (a user message of `<tool_response>` blocks in the prompted protocol), each other
observation as a user message. It makes one call and returns the reply's message (or its
text): its tool calls are the episode's to run, and their results come in the next call's
messages. A turn per call, token-exact as every call.

An episode ends as `agent_error` (left out of the update, reason in its `error`, counted in
the metric `prefix_broken` where that was the reason) when its function raises or returns
no text, or when a call breaks the prefix property; as `agent_context_limit` when a call's
prompt would not fit the model. An episode's calls are one conversation: one sent while
another of the same episode is being answered is refused (`call_in_flight`).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from src.agents.agent import AgentReply, SamplingAgent
from src.agents.openai_endpoint.episode_calls import (
    CallInFlight,
    EpisodeCalls,
    PrefixBroken,
    TemplateRefused,
)
from src.agents.openai_endpoint.lockstep import LockstepBatcher
from src.agents.openai_endpoint.server import (
    ChatCompletionRequest,
    ChatCompletionsEndpoint,
    EndpointRefusal,
    EpisodeSession,
    check_supported,
    completion_response,
)
from src.configuration.components import COMPONENTS, import_dotted
from src.language_models.chat_template import probe_turn_boundary, render_continuation
from src.language_models.language_model import (
    LanguageModel,
    NewTokens,
    SamplingParams,
    Temperature,
    TopP,
)
from src.language_models.tool_calls import (
    ParsedReply,
    hermes_text,
    parse_hermes,
    template_message,
    template_renders_tools,
    tool_preamble,
)
from src.records.chat import Role
from src.records.episode import (
    ClientRolloutEnvironment,
    Episode,
    EpisodeStatus,
    ToolEnvironment,
)
from src.records.trajectory import Trajectory

AgentFunction = Callable[..., Any]
ROLES = {Role.USER: "user", Role.AGENT: "assistant"}


@dataclass
class _ToolConversation:
    """A tool episode's conversation as the agent function is handed it."""

    tools: list[dict[str, Any]] | None  # sent with each call; None: the prompted protocol
    messages: list[dict[str, Any]]
    fed: int = 1  # chat messages already in `messages`


@COMPONENTS.register("openai_client_agent")
class OpenAIClientAgent(SamplingAgent):
    def __init__(self, language_model: LanguageModel, agent_function: str | None = None,
                 temperature: Temperature = 1.0, top_p: TopP = 1.0,
                 max_new_tokens: NewTokens = 256) -> None:
        """`agent_function`: the dotted path of the function, e.g.
        `examples.openai_agent.db_bench_agent.reply`; None for tasks whose episodes drive
        their own conversation (`ClientRolloutEnvironment`)."""
        import openai  # the optional client: only this agent needs it

        for name in ("httpx", "httpx2"):  # its HTTP client logs every call at INFO
            logging.getLogger(name).setLevel(logging.WARNING)
        self._openai = openai
        self.language_model = language_model
        self.agent_function: AgentFunction | None = (
            None if agent_function is None else import_dotted(agent_function))
        self.sampling = SamplingParams(temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens)
        self._boundary = probe_turn_boundary(language_model, None)
        # no token is longer than the longest in the vocabulary: a prompt text longer than
        # the context times that cannot fit, and is refused before it is tokenized (15 MB
        # took 50 s and 5 GB to tokenize)
        self._max_prompt_chars = language_model.max_context_tokens * max(
            map(len, language_model.tokenizer.get_vocab()))
        self._renders_tools = template_renders_tools(language_model.tokenizer)
        self._batcher = LockstepBatcher(lambda prompts: [
            samples[0] for samples in language_model.generate(prompts, self.sampling)])
        # id(episode) -> (the episode, held until it has ended, and its session)
        self._sessions: dict[int, tuple[Episode, EpisodeSession]] = {}
        self._tool_conversations: dict[int, _ToolConversation] = {}  # by id(episode)
        self._clients: dict[str, Any] = {}
        self.endpoint = ChatCompletionsEndpoint(self._answer)

    # ---- the endpoint's side: one call ---------------------------------------------
    def _encode(self, text: str) -> list[int]:
        if len(text) > self._max_prompt_chars:
            raise EndpointRefusal("context_length_exceeded",
                                  f"a prompt of {len(text)} characters cannot fit the model's "
                                  f"{self.language_model.max_context_tokens} tokens")
        return self.language_model.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _answer(self, session: EpisodeSession, request: ChatCompletionRequest
                ) -> dict[str, Any]:
        try:
            with session.calls.one_call():
                return self._answer_call(session, request)
        except CallInFlight as error:
            raise EndpointRefusal("call_in_flight", str(error)) from error

    def _answer_call(self, session: EpisodeSession, request: ChatCompletionRequest
                     ) -> dict[str, Any]:
        check_supported(request)
        tools = request.tools or None
        if tools and not self._renders_tools:
            raise EndpointRefusal("unsupported", "this model's chat template does not render "
                                  "tools, so it was not taught tool calls: send none")
        tokenizer = self.language_model.tokenizer
        trajectory = session.calls.trajectory

        def render(messages: Sequence[dict[str, Any]]) -> list[int]:
            return self._encode(tokenizer.apply_chat_template(
                [template_message(message) for message in messages], tools=tools,
                tokenize=False, add_generation_prompt=True))

        def continuation(messages: Sequence[dict[str, Any]]) -> list[int]:
            return self._encode(render_continuation(
                tokenizer, [template_message(message) for message in messages], tools))

        try:
            prompt = session.calls.prompt_for(request.messages, tools, render, continuation)
        except PrefixBroken as error:
            raise EndpointRefusal("prefix_broken", str(error)) from error
        except TemplateRefused as error:
            raise EndpointRefusal("invalid_request", str(error)) from error
        limit = self.language_model.max_context_tokens
        if len(prompt) + self.sampling.max_new_tokens > limit:
            raise EndpointRefusal("context_length_exceeded",
                                  f"{len(prompt)} prompt tokens + {self.sampling.max_new_tokens} "
                                  f"new ones exceed the model's {limit}")
        generation = self._batcher.submit(session.order, prompt)
        sampling = self.sampling
        trajectory.append_sampled(generation.token_ids, generation.logprobs,
                                  generation.finish_reason, generation.policy_version,
                                  sampling.temperature, sampling.top_p,
                                  sampling.max_new_tokens)
        text = self._reply_text(generation)
        reply = (parse_hermes(text, f"call_{session.key}_{session.calls.calls}")
                 if tools and request.tool_choice != "none" else ParsedReply(text))
        return completion_response(
            session, request, prompt, generation.token_ids, generation.logprobs,
            [tokenizer.decode([token]) for token in generation.token_ids],
            session.calls.replied(reply, text), generation.finish_reason)

    # ---- Agent hooks ---------------------------------------------------------------
    def _start_episode(self, episode: Episode) -> None:
        self._function_for(episode)  # a task it cannot serve: said before any call
        self._start_tool_conversation(episode)
        episode.trajectory = Trajectory()
        session = EpisodeSession(self._session_key(episode),
                                 EpisodeCalls(episode.trajectory, self._boundary))
        episode.metrics["prefix_broken"] = 0.0
        for key in ("tool_calls", "malformed_tool_calls"):
            episode.metrics[key] = 0.0
        episode.info["endpoint_session"] = session.key  # the `id` of its responses
        self._sessions[id(episode)] = (episode, session)
        self.endpoint.sessions[session.key] = session

    def _start_tool_conversation(self, episode: Episode) -> None:
        """A tool episode's first messages, once the function is known to take tools."""
        task = episode.environment
        tools = task.tool_schemas() if isinstance(task, ToolEnvironment) else []
        if not tools:
            return
        function = self.agent_function
        if function is None or not _takes_keyword(function, "tools"):
            raise TypeError(
                f"{type(task).__name__} offers tools, so the agent function must take them: "
                f"def agent(client, messages, tools) (tools to send with its call)")
        first = {"role": "user", "content": episode.chat[0].content}
        if self._renders_tools:
            self._tool_conversations[id(episode)] = _ToolConversation(tools, [first])
        else:
            self._tool_conversations[id(episode)] = _ToolConversation(
                None, [{"role": "system", "content": tool_preamble(tools)}, first])

    def _tool_messages(self, episode: Episode) -> tuple[list[dict[str, Any]], Any]:
        """A tool episode's conversation through its latest observation, and its tools."""
        conversation = self._tool_conversations[id(episode)]
        observations = episode.chat[conversation.fed + 1:]  # after the reply already in it
        task = episode.environment
        results = (task.tool_results() if conversation.tools is not None
                   and isinstance(task, ToolEnvironment) else None)
        calls = conversation.messages[-1].get("tool_calls") or []
        if observations and results is not None and len(calls) == len(results):
            conversation.messages += [{"role": "tool", "tool_call_id": call["id"],
                                       "content": result.content}
                                      for call, result in zip(calls, results, strict=True)]
        else:
            conversation.messages += [{"role": "user", "content": message.content}
                                      for message in observations]
        conversation.fed = len(episode.chat)
        return list(conversation.messages), conversation.tools

    def _tool_reply(self, episode: Episode, result: Any) -> Any:
        """The action a tool episode's environment reads from the function's return: its
        text, or the returned message's content and tool calls as Hermes blocks (the
        message kept for the next call); a return that is neither, as it was (an error)."""
        message = result.model_dump(exclude_none=True) if hasattr(result, "model_dump") \
            else result
        if isinstance(message, str):
            message = {"role": "assistant", "content": message}
        if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
            return result
        try:
            calls = [(str(call["function"]["name"]), call["function"].get("arguments") or "{}")
                     for call in message.get("tool_calls") or []]
        except (KeyError, TypeError, AttributeError):
            return result
        content = message.get("content")
        text = content if isinstance(content, str) else None
        if not calls and text is None:
            return result
        self._tool_conversations[id(episode)].messages.append(message)
        return hermes_text(text, calls) if calls else text

    def _function_for(self, episode: Episode) -> AgentFunction:
        """The agent function, or else the episode environment's own `client_rollout`."""
        if self.agent_function is not None:
            return self.agent_function
        if not isinstance(episode.environment, ClientRolloutEnvironment):
            raise TypeError(
                f"openai_client_agent has no agent_function, so each episode's environment "
                f"must drive its conversation itself (a client_rollout method), and "
                f"{type(episode.environment).__name__} does not: give the agent an agent_function")
        return episode.environment.client_rollout

    def _session_key(self, episode: Episode) -> str:
        """A URL-safe key from the episode's identity (so a resumed run logs the same)."""
        base = hashlib.sha1(f"{episode.batch_index}:{episode.sample.sample_id}:"
                            f"{episode.group_index}".encode()).hexdigest()[:16]
        key, copy = base, 1
        while key in self.endpoint.sessions:  # the same episode rolled out again
            copy += 1
            key = f"{base}-{copy}"
        return key

    def _client(self, key: str) -> Any:
        if key not in self._clients:
            self._clients[key] = self._openai.OpenAI(
                base_url=self.endpoint.base_url(key), api_key=self.endpoint.secret,
                max_retries=0,
                timeout=None)
        return self._clients[key]

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        self._forget_ended_episodes()
        sessions = [self._sessions[id(episode)][1] for episode in episodes]
        results: list[Any] = [None] * len(episodes)

        tool_calls = [self._tool_messages(episode) if id(episode) in self._tool_conversations
                      else None for episode in episodes]

        def run(index: int) -> None:
            messages = [{"role": ROLES[message.role], "content": message.content}
                        for message in episodes[index].chat]
            try:
                function = self._function_for(episodes[index])
                client = self._client(sessions[index].key)
                if tool_calls[index] is None:
                    results[index] = function(client, messages)
                else:
                    messages, tools = tool_calls[index]
                    results[index] = function(client, messages, tools=tools)
            except BaseException as error:  # noqa: BLE001 - the user's code: any failure ends its episode
                results[index] = error
            finally:
                self._batcher.leave()

        for order, session in enumerate(sessions):
            session.order, session.refusal = order, None
        self._batcher.open(len(episodes))
        threads = [threading.Thread(target=run, args=(index,), name=f"agent-{index}")
                   for index in range(len(episodes))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [self._reply(episode, session, result)
                for episode, session, result in zip(episodes, sessions, results, strict=True)]

    def _reply(self, episode: Episode, session: EpisodeSession, result: Any) -> AgentReply:
        if id(episode) in self._tool_conversations:
            # the environment runs the calls and counts them (the same names)
            if not isinstance(result, BaseException):
                result = self._tool_reply(episode, result)
        else:
            episode.metrics["tool_calls"] = float(session.calls.tool_calls)
            episode.metrics["malformed_tool_calls"] = float(session.calls.malformed_tool_calls)
        # the conversation of an environment's own rollout is the episode's: all of it
        # in the chat (an agent function's calls are its own way to one reply)
        exchange = tuple(session.calls.exchange) if self.agent_function is None else ()
        if isinstance(result, str):
            return AgentReply(result, exchange=exchange)
        refusal = session.refusal
        if refusal is not None and refusal.code == "context_length_exceeded":
            return AgentReply(None, EpisodeStatus.AGENT_CONTEXT_LIMIT, exchange)
        if refusal is not None and refusal.code == "prefix_broken":
            episode.metrics["prefix_broken"] = 1.0
        reason = (f"endpoint refused a call ({refusal.code}): {refusal}" if refusal is not None
                  else f"the agent function returned {type(result).__name__}: {result}")
        episode.error = reason
        return AgentReply(None, EpisodeStatus.AGENT_ERROR, exchange)

    def _forget_ended_episodes(self) -> None:
        for key, (episode, session) in list(self._sessions.items()):
            if not episode.running:
                del self._sessions[key]
                self._tool_conversations.pop(key, None)
                self.endpoint.sessions.pop(session.key, None)
                self._clients.pop(session.key, None)


def _takes_keyword(function: Callable[..., Any], name: str) -> bool:
    """Whether `function` can be called with the keyword argument `name`."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): assume it does
        return True
    return any(parameter.name == name and parameter.kind in (
        parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
               or parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)
