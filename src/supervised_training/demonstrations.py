"""Demonstrations for the supervised stage: from the task's expert, a finished run's
episodes (filtered by outcome and reward), or a jsonl of OpenAI-style chats; kept in the
run folder so that a resumed run trains on exactly the same ones.

A tool episode's demonstration (the expert's, on a task whose episodes offer tools,
src/tasks/tool_episode.py) keeps the tools it was offered and the tool results of each
of its user turns, so that it is tokenised as the LoRA agent renders a tool episode
(src/language_models/chat_template.py's `ToolChat`)."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from src.agents.agent import AgentReply
from src.agents.instance.oracle_agent import OracleAgent
from src.records.chat import Role
from src.records.episode import Episode, EpisodeRecord, Outcome, ToolEnvironment, ToolResult
from src.run.folder import resolve_latest
from src.run.rollout import roll_out_lockstep
from src.storage.files import atomic_write_text, read_validated_json_lines
from src.supervised_training.config import (
    ChatsJsonlDemonstrations,
    DemonstrationsConfig,
    OracleDemonstrations,
    OversampledDemonstrations,
    RunsJsonlDemonstrations,
)
from src.tasks.task import Task

logger = logging.getLogger(__name__)
SNAPSHOT_FILE = "demonstrations.jsonl"
ORACLE_CHUNK = 32  # oracle episodes rolled out together (each may hold a database)
Row = TypeVar("Row", bound=BaseModel)


class DemonstrationError(ValueError):
    """A demonstration source that cannot be read: names the file, the line and the key."""


class Demonstration(BaseModel):
    """A finished chat of user and agent turns; the loss falls on the agent's turns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str  # where it came from: "oracle:<sample id>", "<file>:<line>"
    category: str = "default"
    system_prompt: str | None = None  # None: the agent's
    chat: list[tuple[Literal["user", "agent"], str]]
    # a tool episode's: the tools offered (OpenAI function definitions; None: no tools)
    # and, by chat index of a user turn, the tool results it held
    tools: list[dict[str, Any]] | None = None
    tool_results: dict[int, tuple[ToolResult, ...]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _results_of_user_turns(self) -> Demonstration:
        for index in self.tool_results:
            if self.tools is None or not 0 < index < len(self.chat) \
                    or self.chat[index][0] != "user":
                raise ValueError(f"tool_results[{index}]: tool results belong to a user turn "
                                 f"after the first of a demonstration with tools")
        return self


class ChatMessageRow(BaseModel):
    model_config = ConfigDict(extra="ignore")  # name, tool_call_id... do not matter here

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRow(BaseModel):
    model_config = ConfigDict(extra="ignore")  # other keys (ids, metadata) ride along

    messages: list[ChatMessageRow]

    @field_validator("messages")
    @classmethod
    def _shape(cls, messages: list[ChatMessageRow]) -> list[ChatMessageRow]:
        turns = messages[1:] if messages and messages[0].role == "system" else messages
        if not turns or turns[-1].role != "assistant":
            raise ValueError("a chat must end with an assistant message")
        for index, message in enumerate(turns):
            expected = "user" if index % 2 == 0 else "assistant"
            if message.role != expected:
                raise ValueError(f"message {index + len(messages) - len(turns)} is "
                                 f"'{message.role}', expected '{expected}' (turns alternate, "
                                 f"user first, one optional system message at the start)")
        return messages


class _ToolNotingOracle(OracleAgent):
    """The expert, noting what a tool episode offered: its tools at the start, and before
    each reply the tool results that the observation being answered held."""

    def __init__(self) -> None:
        super().__init__()
        self.tools: dict[int, list[dict[str, Any]]] = {}  # by id(episode)
        self.results: dict[int, dict[int, tuple[ToolResult, ...]]] = {}

    def _start_episode(self, episode: Episode) -> None:
        if isinstance(episode.environment, ToolEnvironment) and episode.environment.tool_schemas():
            self.tools[id(episode)] = episode.environment.tool_schemas()
            self.results[id(episode)] = {}

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        for episode in episodes:
            task = episode.environment
            if id(episode) in self.tools and isinstance(task, ToolEnvironment) \
                    and (results := task.tool_results()) is not None:
                self.results[id(episode)][len(episode.chat) - 1] = results
        return super()._act(episodes)


def from_oracle(source: OracleDemonstrations, task: Task[Any]) -> list[Demonstration]:
    """The expert's winning episodes on the first train samples."""
    ids = list(task.sample_ids("train"))[:source.num_samples]
    kept: list[Demonstration] = []
    for start in range(0, len(ids), ORACLE_CHUNK):
        agent = _ToolNotingOracle()  # its notes are by id(episode): one rollout's
        pairs = [(task.get_sample(sample_id), 0) for sample_id in ids[start:start + ORACLE_CHUNK]]
        episodes = roll_out_lockstep(pairs, task, agent, 0, list(range(len(pairs))))
        kept += [Demonstration(source=f"oracle:{episode.sample.sample_id}",
                               category=episode.sample.category,
                               chat=[(message.role.value, message.content)
                                     for message in episode.chat],
                               tools=agent.tools.get(id(episode)),
                               tool_results=agent.results.get(id(episode), {}))
                 for episode in episodes if episode.outcome is Outcome.CORRECT]
    logger.info("oracle: %d of %d train samples won, kept as demonstrations", len(kept), len(ids))
    return kept


def from_runs_jsonl(source: RunsJsonlDemonstrations) -> list[Demonstration]:
    """A run's episodes whose outcome and reward pass the filter (rejection sampling)."""
    path = resolve_latest(source.path)
    records = _rows(path, EpisodeRecord)
    kept = [Demonstration(source=f"{path}:{line}", category=record.category,
                          chat=[(message.role.value, message.content) for message in record.chat])
            for line, record in records
            if (source.outcomes is None or record.outcome in source.outcomes)
            and (source.min_reward is None or record.reward >= source.min_reward)
            and record.chat and record.chat[-1].role is Role.AGENT]
    logger.info("%s: %d of %d episodes pass the filter", path, len(kept), len(records))
    return kept


def from_chats_jsonl(source: ChatsJsonlDemonstrations) -> list[Demonstration]:
    path = Path(source.path)
    rows = _rows(path, ChatRow)
    roles = {"user": "user", "assistant": "agent"}
    demonstrations = []
    for line, row in rows:
        messages = row.messages
        system = messages[0].content if messages[0].role == "system" else None
        demonstrations.append(Demonstration(
            source=f"{path}:{line}", system_prompt=system,
            chat=[(roles[message.role], message.content) for message in messages
                  if message.role != "system"]))
    return demonstrations


def _rows(path: Path, model: type[Row]) -> list[tuple[int, Row]]:
    try:
        return read_validated_json_lines(path, model)
    except ValueError as error:
        raise DemonstrationError(str(error)) from error


def read_demonstrations(config: DemonstrationsConfig, task: Task[Any],
                        random_seed: int) -> list[Demonstration]:
    """Every configured source, joined in the config's order, then at most
    `max_demonstrations` of them by a seeded shuffle, then the `oversample` repeats."""
    demonstrations: list[Demonstration] = []
    if config.oracle is not None:
        demonstrations += from_oracle(config.oracle, task)
    if config.runs_jsonl is not None:
        demonstrations += from_runs_jsonl(config.runs_jsonl)
    if config.chats_jsonl is not None:
        demonstrations += from_chats_jsonl(config.chats_jsonl)
    if config.max_demonstrations is not None and len(demonstrations) > config.max_demonstrations:
        chosen = random.Random(random_seed).sample(range(len(demonstrations)),
                                                   config.max_demonstrations)
        demonstrations = [demonstrations[index] for index in sorted(chosen)]
    if not demonstrations:
        raise DemonstrationError("no demonstration to train on: the sources gave none")
    return oversampled(demonstrations, config.oversample)


def oversampled(demonstrations: list[Demonstration],
                rules: list[OversampledDemonstrations]) -> list[Demonstration]:
    """Each demonstration `times` times in a row, `times` of the largest rule it matches
    (once where none does); the trainer shuffles them."""
    matches = [[_matches(rule, demonstration) for rule in rules]
               for demonstration in demonstrations]
    for index, rule in enumerate(rules):
        logger.info("%s: %d of %d demonstrations", rule.describe(),
                    sum(row[index] for row in matches), len(demonstrations))
    repeated: list[Demonstration] = []
    for demonstration, row in zip(demonstrations, matches, strict=True):
        times = max((rule.times for rule, hit in zip(rules, row, strict=True) if hit), default=1)
        repeated += [demonstration] * times
    return repeated


def _matches(rule: OversampledDemonstrations, demonstration: Demonstration) -> bool:
    last_reply = next((text for role, text in reversed(demonstration.chat) if role == "agent"),
                      "")
    return ((rule.category is None or rule.category == demonstration.category)
            and (rule.reply_pattern is None
                 or re.search(rule.reply_pattern, last_reply) is not None))


def snapshot_demonstrations(folder: Path, config: DemonstrationsConfig, task: Task[Any],
                            random_seed: int) -> list[Demonstration]:
    """The demonstrations a run trains on, kept in folder/demonstrations.jsonl: a resumed
    run reads them back, even if a source changed (or {LATEST} moved)."""
    snapshot = folder / SNAPSHOT_FILE
    if snapshot.is_file():
        return [row for _, row in read_validated_json_lines(snapshot, Demonstration)]
    demonstrations = read_demonstrations(config, task, random_seed)
    atomic_write_text(snapshot, "".join(demonstration.model_dump_json() + "\n"
                                        for demonstration in demonstrations))
    return demonstrations
