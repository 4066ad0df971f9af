"""The agent contract: turn the latest observation of many episodes into replies at once."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import final

from src.language_models.language_model import Generation, LanguageModel, SamplingParams
from src.records.chat import ChatMessage
from src.records.episode import Episode, EpisodeStatus


@dataclass(frozen=True)
class AgentReply:
    """A reply, or None with the status that ends the episode (e.g. context limit).

    `exchange`: where the reply took a conversation of several model calls that belongs
    to the episode (an environment that drove its own rollout), its messages in order
    (each sampled reply, each tool result or user message sent after it), the chat's
    record in place of `content`; each agent message in it counts as a turn."""

    content: str | None
    status: EpisodeStatus | None = None
    exchange: tuple[ChatMessage, ...] = ()


class Agent(ABC):
    @final
    def start_episode(self, episode: Episode) -> None:
        """Called after the task's reset, when `episode.chat` holds the first message."""
        self._start_episode(episode)

    @final
    def act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        """Reply to the last user message of every episode (one batched model call)."""
        if not episodes:
            return []
        replies = self._act(episodes)
        if len(replies) != len(episodes):
            raise RuntimeError(f"{type(self).__name__} gave {len(replies)} replies "
                               f"for {len(episodes)} episodes")
        return replies

    @contextmanager
    def evaluating(self, temperature: float) -> Iterator[None]:
        """Within this block, act as for evaluation (e.g. greedy decoding)."""
        yield

    def _start_episode(self, episode: Episode) -> None:  # noqa: B027 - optional hook
        """Hook: set up per-episode state."""

    @abstractmethod
    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]: ...


class SamplingAgent(Agent):
    """An agent that samples its replies from a language model with its own settings,
    which evaluation changes only in temperature."""

    language_model: LanguageModel
    sampling: SamplingParams

    def _reply_text(self, generation: Generation) -> str:
        """The reply's text: the sampled ids without the end-of-turn token it stopped on."""
        ids = generation.token_ids
        if (generation.finish_reason == "stop" and ids and ids[-1] in
                set(self.language_model.end_of_turn_ids()) | set(self.sampling.stop_token_ids)):
            ids = ids[:-1]
        return self.language_model.tokenizer.decode(ids, skip_special_tokens=True)

    @contextmanager
    def evaluating(self, temperature: float) -> Iterator[None]:
        training_sampling = self.sampling
        self.sampling = replace(training_sampling, temperature=temperature)
        try:
            yield
        finally:
            self.sampling = training_sampling
