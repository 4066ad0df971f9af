"""An agent driven by a (LoRA) language model that records token-exact trajectories.

The first prompt is the chat template's rendering of the system prompt and the first
user message. Every later turn appends: the sampled ids (mask 1), then the ids of the
text that closes the agent's turn and opens the next user turn and the new
assistant turn (mask 0). The whole chat is never re-rendered, so what is trained on
is exactly what the model was fed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from src.agents.agent import Agent, AgentReply
from src.language_models.language_model import LanguageModel, SamplingParams
from src.records.chat import Role
from src.records.episode import Episode, EpisodeStatus
from src.records.trajectory import Trajectory

_PROBE_USER, _PROBE_AGENT = "PROBE-USER-TEXT", "PROBE-AGENT-TEXT"


class TemplateError(ValueError):
    """The chat template is not append-only, so turns cannot be added as token suffixes."""


def render_chat(language_model: LanguageModel, system_prompt: str | None,
                chat: Sequence[tuple[str, str]], generation_prompt: bool) -> str:
    """The chat template's text for (role, content) pairs with roles "user" / "agent",
    mapped by the model's `role_dict`, after the system prompt if there is one."""
    roles = getattr(language_model, "role_dict", {"user": "user", "agent": "assistant"})
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


class LoRARLAgent(Agent):
    def __init__(
        self,
        language_model: LanguageModel,
        system_prompt: str | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
    ) -> None:
        self.language_model = language_model
        self.system_prompt = system_prompt
        self.sampling = SamplingParams(temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens)
        self._consumed: dict[int, int] = {}  # id(episode) -> chat messages already in its ids
        self._turn_closing, self._turn_opening = probe_template(language_model, system_prompt)

    # ---- templating ----------------------------------------------------------------
    def _render(self, chat: Sequence[tuple[str, str]], generation_prompt: bool) -> str:
        return render_chat(self.language_model, self.system_prompt, chat, generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return self.language_model.tokenizer(text, add_special_tokens=False)["input_ids"]

    # ---- Agent hooks ---------------------------------------------------------------
    def _start_episode(self, episode: Episode) -> None:
        first = episode.chat[0]
        trajectory = Trajectory()
        trajectory.append_context(self._encode(self._render([("user", first.content)], True)))
        episode.trajectory = trajectory
        episode.info["template_consistent"] = True
        self._consumed[id(episode)] = 1

    def _append_observation(self, episode: Episode) -> None:
        """Append the ids for the user messages the agent has not seen yet."""
        trajectory = episode.trajectory
        assert trajectory is not None
        consumed = self._consumed[id(episode)]
        new_messages = episode.chat[consumed:]
        if not new_messages:
            return
        if new_messages[0].role is not Role.AGENT or any(
                message.role is not Role.USER for message in new_messages[1:]):
            raise RuntimeError("expected the agent's reply followed by user messages")
        tokenizer = self.language_model.tokenizer
        last_start, _ = trajectory.turn_spans[-1]
        sampled_text = tokenizer.decode(trajectory.token_ids[last_start:],
                                        skip_special_tokens=False)
        closing = self._turn_closing
        # The sampler may already have produced the start of the closing (its stop token).
        for cut in range(len(closing), 0, -1):
            if sampled_text.endswith(closing[:cut]):
                closing = closing[cut:]
                break
        pieces = [closing]
        for message in new_messages[1:]:
            opening = self._turn_opening.replace(_PROBE_USER, message.content)
            pieces.append(opening)
        trajectory.append_context(self._encode("".join(pieces)))
        self._consumed[id(episode)] = len(episode.chat)
        # Diagnostic: does the template render the same text that the ids decode to?
        rendered = self._render([(m.role.value, m.content) for m in episode.chat], True)
        fed = tokenizer.decode(trajectory.token_ids, skip_special_tokens=False)
        if rendered != fed:
            episode.info["template_consistent"] = False

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        model = self.language_model
        replies: list[AgentReply | None] = [None] * len(episodes)
        prompts, waiting = [], []
        for index, episode in enumerate(episodes):
            self._append_observation(episode)
            trajectory = episode.trajectory
            assert trajectory is not None
            if len(trajectory.token_ids) + self.sampling.max_new_tokens > model.max_context_tokens:
                replies[index] = AgentReply(None, EpisodeStatus.AGENT_CONTEXT_LIMIT)
                continue
            prompts.append(trajectory.token_ids)
            waiting.append(index)
        generations = model.generate(prompts, self.sampling) if prompts else []
        end_ids = set(model.end_of_turn_ids()) | set(self.sampling.stop_token_ids)
        for index, [generation] in zip(waiting, generations, strict=True):
            episode = episodes[index]
            assert episode.trajectory is not None
            episode.trajectory.append_sampled(generation.token_ids, generation.logprobs,
                                              generation.finish_reason,
                                              generation.policy_version)
            content_ids = generation.token_ids
            if generation.finish_reason == "stop" and content_ids and content_ids[-1] in end_ids:
                content_ids = content_ids[:-1]
            text = model.tokenizer.decode(content_ids, skip_special_tokens=True)
            replies[index] = AgentReply(text)
        return [reply for reply in replies if reply is not None]

    @contextmanager
    def evaluating(self, temperature: float) -> Iterator[None]:
        training_sampling = self.sampling
        self.sampling = replace(training_sampling, temperature=temperature)
        try:
            yield
        finally:
            self.sampling = training_sampling
