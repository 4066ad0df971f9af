"""Tasks whose agent has tools: `python` and `bash` over a sandbox of each episode's own.

`ToolTask` is a family whose episodes offer tools (`tools`: which of `python`, `bash`). It
holds the sandbox settings (its config group `sandbox`, src/sandboxes/settings.py) and the
warm pool (src/sandboxes/pool.py) its episodes take their sandboxes from, and closes the
pool, with every sandbox still open, when the family closes. `check_parameters` runs the
sandbox layer's host check, so that `--dry_run` says when this host cannot make sandboxes
and what to do.

`ToolEpisode` is one episode, a `ToolEnvironment` for the agents
(src/records/episode.py): `_reset` takes a sandbox from the pool, seeded with the
sample's files (`_files`), and returns the first message (`_prompt`). Each reply is read
with the one Hermes parser (src/language_models/tool_calls.py):
- tool calls: each runs in the episode's sandbox, its persistent session keeping state
  from call to call (at most `max_calls_per_reply` a reply; the rest are answered "not
  run"); the next observation is their results, each cut to `max_tool_output_chars` with
  a note (the tool's own observation text, src/sandboxes/tools.py);
- tool-call blocks that cannot be read: counted (`malformed_tool_calls`) and answered
  with a message naming the problem and the format; the episode goes on;
- no tool call: the final answer, scored by the subclass (`_final_answer`).
A sandbox that dies mid-episode ends the episode, scored as one without an answer (reward
0, outcome incorrect), its info's `sandbox_status` saying so (`sandbox_died`, with the
reason in `sandbox_detail`) and the metric `sandbox_died` 1: the model's code may have
killed it, so it is not an environment failure left out of training. Nothing is retried.
The sandbox is closed as soon as the episode ends and in `close` (which the rollout calls
on every path); the family's `close` closes any left.

Metrics of an episode (counts over the episode so far): `tool_calls` (calls read from
its replies), `used_tool` (1 when it made any), `tool_errors` (calls that did not end
ok: an error exit, a bound, arguments of the wrong shape, an unknown tool, one not run),
`malformed_tool_calls` (replies with blocks that could not be read), `sandbox_died`, and
`sandbox/<status>` per call status of src/sandboxes/contract.py's `CallStatus` (how the
calls that ran ended).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationError

from src.language_models.tool_calls import parse_hermes, tool_response_text
from src.records.episode import Outcome, Sample, ToolResult
from src.sandboxes.backends import check_sandbox_available, open_backend
from src.sandboxes.contract import CallStatus, Files, Sandbox, SandboxNotAvailableOnHost
from src.sandboxes.pool import SandboxPool
from src.sandboxes.settings import SandboxSettings
from src.sandboxes.tools import BashTool, PythonTool, SessionTool
from src.tasks.task import EpisodeEnv, StepOutcome, Task, TaskSettingError

ToolName = Literal["python", "bash"]
TOOLS: dict[str, type[PythonTool] | type[BashTool]] = {"python": PythonTool, "bash": BashTool}
# constructor bounds that a config's value is checked against where the config is read:
# a tool result's length as the model reads it, and the calls of one reply that run
OutputChars = Annotated[int, Field(ge=100)]
CallsPerReply = Annotated[int, Field(ge=1)]
# room for a result's status lines and its `<tool_response>` block beyond the output
_NOTES_CHARS = 500
_NAME_CHARS = 100  # of a tool name the model wrote, as results repeat it
MALFORMED_ANSWER = ("[tool call error] {problem}. Write a call as <tool_call>{{\"name\": "
                    "NAME, \"arguments\": {{...}}}}</tool_call>, or answer without one.")

EpisodeT = TypeVar("EpisodeT", bound="ToolEpisode[Any]")
ToolTaskT = TypeVar("ToolTaskT", bound="ToolTask[Any]")


class ToolTask(Task[EpisodeT]):
    """A family whose episodes offer tools over a sandbox each (see the module docstring).

    Attributes:
        tool_names: the tools every episode offers, in order.
        sandbox_settings: how sandboxes are made and bounded.
        max_tool_output_chars: a tool result's length as the model reads it.
        max_calls_per_reply: tool calls of one reply that run; the rest are not run.
    """

    def __init__(self, max_round: int, tools: Sequence[ToolName],
                 sandbox: SandboxSettings | None, max_tool_output_chars: int,
                 max_calls_per_reply: int) -> None:
        super().__init__(max_round=max_round)
        if not tools or len(set(tools)) != len(tools) or not set(tools) <= set(TOOLS):
            raise ValueError(f"tools: one or more of {sorted(TOOLS)}, each once; got "
                             f"{list(tools)}")
        if max_tool_output_chars < 100 or max_calls_per_reply < 1:
            raise ValueError(f"max_tool_output_chars must be >= 100 and max_calls_per_reply "
                             f">= 1, got {max_tool_output_chars} and {max_calls_per_reply}")
        # a reply's results together stay within the observation bound of every task,
        # which would otherwise cut them where the agent reads them one by one
        if max_calls_per_reply * (max_tool_output_chars + _NOTES_CHARS) > \
                self.max_observation_chars:
            raise ValueError(
                f"max_calls_per_reply * max_tool_output_chars ({max_calls_per_reply} * "
                f"{max_tool_output_chars}, plus {_NOTES_CHARS} a call for status lines) "
                f"exceeds the {self.max_observation_chars} characters an observation may "
                f"hold: lower either")
        self.tool_names = tuple(tools)
        # model_validate also takes the plain dict of direct Python construction
        self.sandbox_settings = SandboxSettings.model_validate(sandbox or {})
        self.max_tool_output_chars = max_tool_output_chars
        self.max_calls_per_reply = max_calls_per_reply
        self._pool = SandboxPool(open_backend(self.sandbox_settings),
                                 self.sandbox_settings.pool_size,
                                 self.sandbox_settings.open_parallelism)

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """A host that cannot make the configured sandbox (no user namespaces, no bwrap)
        is a TaskSettingError on `sandbox`, saying what to do (one sandbox is opened and
        closed to find out)."""
        try:
            settings = SandboxSettings.model_validate(parameters.get("sandbox") or {})
        except ValidationError:
            return  # the constructor's types say what is wrong with it
        try:
            check_sandbox_available(settings)
        except SandboxNotAvailableOnHost as error:
            raise TaskSettingError(("sandbox",), str(error)) from error

    def open_sandbox(self, files: Files | None) -> Sandbox:
        """A warm sandbox from the pool, seeded with `files`, for one episode to close."""
        return self._pool.acquire(files)

    def close(self) -> None:
        """Close the pool: the warm sandboxes and every episode's still open."""
        self._pool.close()
        super().close()


class ToolEpisode(EpisodeEnv[ToolTaskT]):
    """One episode with tools (see the module docstring); a subclass gives the first
    message, the final answer's score and the oracle's replies."""

    def __init__(self, family: ToolTaskT) -> None:
        super().__init__(family)
        self._sandbox: Sandbox | None = None
        self._tools: dict[str, SessionTool] = {}
        self._results: tuple[ToolResult, ...] | None = None
        self._counts: dict[str, float] = {}

    # ---- ToolEnvironment -----------------------------------------------------------
    def tool_schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self._tools.values()]  # empty before reset

    def tool_results(self) -> tuple[ToolResult, ...] | None:
        return self._results

    # ---- EpisodeEnv hooks ----------------------------------------------------------
    def _reset(self, sample: Sample) -> str:
        self.close()  # an episode reset again starts in a sandbox of its own
        family = self.family
        self._sandbox = family.open_sandbox(self._files(sample))
        self._tools = {name: TOOLS[name](self._sandbox, family.max_tool_output_chars)
                       for name in family.tool_names}
        self._results = None
        self._counts = {"tool_calls": 0.0, "used_tool": 0.0, "tool_errors": 0.0,
                        "malformed_tool_calls": 0.0, "sandbox_died": 0.0}
        self._counts |= {f"sandbox/{status.value}": 0.0 for status in CallStatus}
        return self._prompt(sample)

    def _step(self, action: str) -> StepOutcome:
        self._results = None
        reply = parse_hermes(action, f"call_{self.round_index}")
        if reply.malformed:
            self._counts["malformed_tool_calls"] += 1
            return self._going_on(MALFORMED_ANSWER.format(problem=reply.problem))
        if not reply.tool_calls:
            answered = self._final_answer(action)
            self.close()
            return replace(answered, metrics={**self._counts, **answered.metrics})
        results, died = [], None
        for index, call in enumerate(reply.tool_calls):
            self._counts["tool_calls"] += 1
            self._counts["used_tool"] = 1.0
            text, status = self._run(index, call.name, call.arguments)
            if status is not CallStatus.OK:
                self._counts["tool_errors"] += 1
            results.append(ToolResult(call.id, call.name[:_NAME_CHARS], text))
            if status is CallStatus.SANDBOX_DIED:
                died = text
                break
        if died is not None:
            self._counts["sandbox_died"] = 1.0
            self.close()
            return StepOutcome(observation="", reward=0.0, terminated=True,
                               outcome=Outcome.INCORRECT, metrics=dict(self._counts),
                               info={"sandbox_status": CallStatus.SANDBOX_DIED.value,
                                     "sandbox_detail": died})
        self._results = tuple(results)
        return self._going_on(tool_response_text([result.content for result in results]))

    def _run(self, index: int, name: str, arguments: str) -> tuple[str, CallStatus | None]:
        """One call's observation text and how it ended (None: it did not run)."""
        if index >= self.family.max_calls_per_reply:
            return (f"[not run] at most {self.family.max_calls_per_reply} tool calls run "
                    f"per reply"), None
        tool = self._tools.get(name)
        if tool is None:
            return (f"[unknown tool] {name[:_NAME_CHARS]!r}; the tools are "
                    f"{', '.join(self.family.tool_names)}"), None
        text, result = tool.run(json.loads(arguments))
        if result is None:
            return text, None
        self._counts[f"sandbox/{result.status.value}"] += 1
        return text, result.status

    def _going_on(self, observation: str) -> StepOutcome:
        """The episode goes on with `observation`; its sandbox closed if the round limit
        ends it now."""
        if self.round_index >= self.family.max_round:
            self.close()
        return StepOutcome(observation=observation, metrics=dict(self._counts))

    def close(self) -> None:
        """Close the episode's sandbox (its sessions and files go with it). Idempotent."""
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    @property
    def tool_calls_made(self) -> int:
        """Tool calls read from the episode's replies so far (for an oracle's next move)."""
        return int(self._counts.get("tool_calls", 0))

    def _sandbox_for_check(self) -> Sandbox:
        """The episode's sandbox, for a check of the final answer run in it (from
        `_final_answer`, before it is closed), with the agent's sessions ended first: a
        thread its interpreter left running cannot act while the check runs. Raises
        `SandboxUnavailable` when the sandbox died."""
        if self._sandbox is None:
            raise RuntimeError("no sandbox: the episode was not reset or has ended")
        for kind in self.family.tool_names:
            self._sandbox.session(kind).restart()
        return self._sandbox

    # ---- subclass hooks ------------------------------------------------------------
    @abstractmethod
    def _prompt(self, sample: Sample) -> str:
        """The first user message."""

    def _files(self, sample: Sample) -> Files | None:
        """The files the sample's sandbox starts with (none by default)."""
        return None

    @abstractmethod
    def _final_answer(self, action: str) -> StepOutcome:
        """The score of a reply without tool calls, which ends the episode."""
