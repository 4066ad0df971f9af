"""In-context experience replay: LifelongAgentBench's "previous sample utilisation".

The LoRA agent, with the `num_examples` most recent successful training episodes of the
same category (or of any, `same_category: false`) rendered before each new episode's chat
as earlier turns of the conversation. No weight changes: it is the baseline an RL run is
compared with. Successes are collected from training episodes only (evaluation reads
the memory, never adds to it), once an episode has ended, so a batch learns from the
batches before it. The memory is saved with each committed batch and restored on resume.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from src.agents.instance.token_exact_agent import TokenExactAgent
from src.configuration.components import COMPONENTS
from src.language_models.language_model import LanguageModel, NewTokens, Temperature, TopP
from src.records.episode import Episode, Outcome
from src.storage.files import atomic_write_json
from src.storage.state import Stateful

MEMORY_FILE = "replay_memory.json"
Turns = list[tuple[str, str]]


@COMPONENTS.register("experience_replay_agent")
class ExperienceReplayAgent(TokenExactAgent, Stateful):
    """The LoRA agent with earlier successes shown before each chat, as earlier turns of
    the conversation: the in-context baseline an RL run is compared with (no weight
    changes). Only training episodes add to the memory, once they have ended; evaluation
    reads it. The memory is saved with each committed batch (agent_state/) and restored on
    resume. Logs `replayed_examples`."""

    def __init__(
        self,
        language_model: LanguageModel,
        system_prompt: str | None = None,
        temperature: Temperature = 1.0,
        top_p: TopP = 1.0,
        max_new_tokens: NewTokens = 256,
        num_examples: int = 1,  # the most recent successes shown before each episode
        same_category: bool = True,  # only successes of the sample's category
        memory_size: int = 256,  # successes kept, the oldest dropped first
    ) -> None:
        super().__init__(language_model, system_prompt, temperature, top_p, max_new_tokens)
        if num_examples < 1:
            raise ValueError(f"num_examples must be at least 1, got {num_examples}")
        self.num_examples = num_examples
        self.same_category = same_category
        self.memory_size = memory_size  # successes kept, newest last
        self.memory: list[tuple[str, Turns]] = []  # (category, chat)
        self._watched: dict[int, Episode] = {}  # training episodes not yet ended
        self._evaluation = False

    def _turns_before(self, episode: Episode) -> Turns:
        self._collect_successes()
        if not self._evaluation:
            self._watched[id(episode)] = episode
        category = episode.sample.category
        examples = [chat for kind, chat in reversed(self.memory)
                    if not self.same_category or kind == category][:self.num_examples]
        episode.metrics["replayed_examples"] = float(len(examples))
        return [turn for chat in reversed(examples) for turn in chat]  # oldest first

    def _collect_successes(self) -> None:
        for key, episode in list(self._watched.items()):
            if episode.running:
                continue
            del self._watched[key]
            if episode.outcome is Outcome.CORRECT:
                self.memory.append((episode.sample.category,
                                    [(message.role.value, message.content)
                                     for message in episode.chat]))
        del self.memory[:-self.memory_size]

    @contextmanager
    def evaluating(self, temperature: float) -> Iterator[None]:
        self._collect_successes()
        self._evaluation = True
        try:
            with super().evaluating(temperature):
                yield
        finally:
            self._evaluation = False

    def save_state(self, directory: Path) -> None:
        self._collect_successes()  # the committed batch's episodes have all ended
        atomic_write_json(directory / MEMORY_FILE,
                          [{"category": category, "chat": chat} for category, chat in self.memory])

    def restore_state(self, directory: Path) -> None:
        rows = json.loads((directory / MEMORY_FILE).read_text(encoding="utf-8"))
        self.memory = [(row["category"], [(role, text) for role, text in row["chat"]])
                       for row in rows]
        self._watched.clear()
