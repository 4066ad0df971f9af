"""Records of samples and episodes: what tasks hand out and what the run log keeps."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from src.records.chat import ChatMessage, Role

if TYPE_CHECKING:
    from src.records.trajectory import Trajectory


class EpisodeStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"  # the task reached its own end (answer given, any outcome)
    TASK_LIMIT_REACHED = "task_limit_reached"  # round limit hit
    AGENT_CONTEXT_LIMIT = "agent_context_limit"  # the next prompt would not fit the model
    TASK_ERROR = "task_error"  # the environment itself failed (not the model's fault)
    AGENT_ERROR = "agent_error"  # the model call failed, retries included
    # the task ended before the agent's first turn (a game its opponent decided): the
    # agent was never asked, so nothing is scored, trained or counted in a success rate
    NO_AGENT_TURN = "no_agent_turn"

    @property
    def failed(self) -> bool:
        """The episode says nothing about the policy: its environment or model failed."""
        return self in (EpisodeStatus.TASK_ERROR, EpisodeStatus.AGENT_ERROR)

    @property
    def counted(self) -> bool:
        """The episode counts in success rates and means: it gave the agent a turn."""
        return self is not EpisodeStatus.NO_AGENT_TURN


class Outcome(StrEnum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    UNKNOWN = "unknown"


class Sample(BaseModel):
    """One task instance: an id, a category for per-category metrics, and its data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_id: str
    category: str = "default"
    data: dict[str, Any] = Field(default_factory=dict)


class EpisodeRecord(BaseModel):
    """One line of runs.jsonl (and of an evaluation file).

    Attributes:
        metrics: the episode's figures by name, from its task and agent; the loop logs
            their means as `rollout/<name>`, `eval/<name>`.
        error: why a failed episode (`task_error`, `agent_error`) failed; None otherwise.
        info: free-form entries of the task and agent, kept for reading the run.
    """

    model_config = ConfigDict(extra="forbid")

    sample_id: str
    group_index: int
    batch_index: int
    category: str
    status: EpisodeStatus
    outcome: Outcome
    reward: float
    turns: int
    prompt_tokens: int
    completion_tokens: int
    policy_version: int | None = None
    chat: list[ChatMessage]
    metrics: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


def count_successes(records: Iterable[EpisodeRecord]) -> int:
    """How many of the episodes ended with outcome `correct`: the one definition of a
    success that every success rate and table counts by."""
    return sum(record.outcome is Outcome.CORRECT for record in records)


def counted_records(records: Iterable[EpisodeRecord]) -> list[EpisodeRecord]:
    """The episodes a success rate is over (its denominator): those that gave the agent a
    turn (`EpisodeStatus.counted`)."""
    return [record for record in records if record.status.counted]


class StepInfo(TypedDict):
    """The info of an episode environment's step: a dict, as Gymnasium's contract has it,
    whose keys are fixed and typed.

    `status` is RUNNING while the episode goes on; `metrics` are the step's figures by
    name (a later step's value of a name replaces an earlier one's); `extras` are
    free-form entries for the episode's info.
    """

    status: EpisodeStatus
    outcome: Outcome
    metrics: dict[str, float]
    extras: dict[str, Any]


class EpisodeEnvironment(Protocol):
    """What the rollout and agents call on an episode's environment.

    `src.tasks.task.EpisodeEnv` implements it; a protocol, so that records (a leaf layer)
    import nothing from the tasks above them.
    """

    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]: ...

    def oracle_reply(self) -> str: ...

    def close(self) -> None: ...


@runtime_checkable
class ClientRolloutEnvironment(Protocol):
    """An episode environment that drives its own conversation against an OpenAI client
    (another package's protocol, e.g. a verifiers environment): an agent that serves an
    endpoint (`OpenAIClientAgent` without an agent function) calls it in place of an agent
    function, with the episode's client and its chat so far, and gets the final reply."""

    def client_rollout(self, client: Any, messages: list[dict[str, str]]) -> str: ...


@dataclass(frozen=True)
class ToolResult:
    """One tool call's result, as a tool-role message carries it: the id the environment
    gave the call when it read the reply, the tool's name and the text it returned."""

    call_id: str
    name: str
    content: str


@runtime_checkable
class ToolEnvironment(Protocol):
    """An episode environment that offers the agent tools (src/tasks/tool_episode.py).

    `tool_schemas()`: the tools as OpenAI function definitions, the same for the whole
    episode (the agent renders them at its start). The agent writes its calls in its reply
    as Hermes blocks (src/language_models/tool_calls.py). After a reply with calls, the
    observation text is their results as a user turn of `<tool_response>` blocks (what a
    template without tools is fed, and what the chat records), and `tool_results()` are
    the same results one by one, for an agent whose template has a tool role; None when the
    last observation was not tool results (the first message, an error about a malformed
    call), which then goes to the model as a user turn."""

    def tool_schemas(self) -> list[dict[str, Any]]: ...

    def tool_results(self) -> tuple[ToolResult, ...] | None: ...


@dataclass
class Episode:
    """The live state of one episode while a batch is stepped in lockstep.

    Its task and agent write the episode's figures into `metrics` (float values, averaged
    by the loop under their names) and anything else worth keeping into `info`; a failed
    episode's reason goes in `error`.
    """

    sample: Sample
    group_index: int
    batch_index: int
    environment: EpisodeEnvironment  # the environment the sample runs in
    chat: list[ChatMessage] = field(default_factory=list)
    status: EpisodeStatus = EpisodeStatus.RUNNING
    outcome: Outcome = Outcome.UNKNOWN
    reward: float = 0.0
    turns: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    trajectory: Trajectory | None = None

    @property
    def running(self) -> bool:
        return self.status is EpisodeStatus.RUNNING

    def add_message(self, role: Role, content: str) -> None:
        self.chat.append(ChatMessage(role=role, content=content))

    def to_record(self) -> EpisodeRecord:
        trajectory = self.trajectory
        return EpisodeRecord(
            sample_id=self.sample.sample_id,
            group_index=self.group_index,
            batch_index=self.batch_index,
            category=self.sample.category,
            status=self.status,
            outcome=self.outcome,
            reward=self.reward,
            turns=self.turns,
            prompt_tokens=trajectory.prompt_token_count if trajectory else 0,
            completion_tokens=trajectory.completion_token_count if trajectory else 0,
            policy_version=trajectory.policy_version if trajectory else None,
            chat=list(self.chat),
            metrics=self.metrics,
            error=self.error,
            info=self.info,
        )
