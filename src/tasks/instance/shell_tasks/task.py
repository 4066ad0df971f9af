"""Shell tasks: file and text work with a `bash` tool in a working folder seeded from the
sample, checked after the episode against what the host computed from the seed.

Each sample is one task of a kind of src/tasks/instance/shell_tasks/generation.py
(`kinds` taken in turn by sample index): count lines holding a word, words of a file,
files with an extension; find the file holding a string; sort a file, write it in upper
case, replace a word in place; repair a script. Its files are written into the episode's
sandbox (src/tasks/tool_episode.py) before the first message; each split draws from
streams of its own.

Protocol: replies with tool calls run them (`bash` by default, a persistent shell in the
working folder); the first reply without a tool call ends the episode. A question's
answer is the last `\\boxed{}` of that reply (a path as written, or relative to the
working folder with or without `./`); for a file task the reply's text does not matter,
the file does.

The check (after the final answer, the agent's sessions ended first, so nothing it
started still runs): a question's answer against the host's value; a produced file,
read from the sandbox by its supervisor (not by a process of the agent), against the
host's content (trailing newlines aside); a repaired script copied into a fresh sandbox
beside input files the agent never saw, run there by a fresh `python3 -I`, its output
against the host's figure for those inputs (a script that prints the visible answer
fails). No expected value is read from the agent's sandbox. Reward 1 correct, 0 not.

Metrics: `correct`, `answer_given` (a boxed answer; the produced file exists), and the
tool episode's (`tool_calls`, `used_tool`, `tool_errors`, `malformed_tool_calls`,
`sandbox_died`, `sandbox/<status>`); the check's detail is in the episode's info. The
oracle runs the kind's shell command, then boxes its output (a question) or says done.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field

from src.configuration.components import COMPONENTS
from src.language_models.tool_calls import hermes_text, tool_response_text
from src.records.episode import Outcome, Sample
from src.sandboxes.contract import Files, SandboxUnavailable
from src.sandboxes.settings import SandboxSettings
from src.tasks.answers import final_answer
from src.tasks.instance.shell_tasks.generation import (
    GENERATORS,
    KINDS,
    Kind,
    ScriptCheck,
    ShellProblem,
)
from src.tasks.splits import Splits
from src.tasks.task import (
    Rounds,
    StepOutcome,
    TaskSettingError,
    counted_sample,
    derived_seed,
    split_sample_id,
    unknown_name,
)
from src.tasks.tool_episode import (
    CallsPerReply,
    OutputChars,
    ToolEpisode,
    ToolName,
    ToolTask,
)

Seconds = Annotated[float, Field(gt=0)]
_EXAMPLE_COMMAND = "wc -l < data.txt"
WORKED_EXAMPLE = (f"Example:\nTask: How many lines does data.txt have?\n"
                  f"Assistant: {hermes_text(None, [('bash', {'command': _EXAMPLE_COMMAND})])}\n"
                  f"Tool: {tool_response_text(['3'])}\n"
                  f"Assistant: The answer is \\boxed{{3}}.\n\n")


def problem_data(problem: ShellProblem) -> dict[str, Any]:
    return dataclasses.asdict(problem)


def problem_of(data: Mapping[str, Any]) -> ShellProblem:
    script = data.get("script")
    return ShellProblem(**{**data, "script": ScriptCheck(**script) if script else None})


@COMPONENTS.register("shell_tasks")
class ShellTask(ToolTask["ShellEpisode"]):
    """File and text tasks with a bash tool, checked on the host's values (see the module
    docstring)."""

    def __init__(
        self,
        kinds: list[Kind] | None = None,  # taken in turn by sample index; default all
        # each split draws its files and questions from streams of its own
        splits: Splits = Splits(),
        instruction: str = ("Use the bash tool in the working folder. When you are done, "
                            "reply without a tool call; if the task asks a question, give "
                            "the answer in \\boxed{}."),
        worked_example: bool = True,  # a solved task with a tool call before the question
        # replies in an episode: tool calls and the final one; at the limit without a
        # final reply the episode ends unanswered (reward 0)
        max_round: Rounds = 4,
        script_timeout_s: Seconds = 10.0,  # a repaired script's run in the check
        tools: list[ToolName] | None = None,  # the tools offered; default bash only
        sandbox: SandboxSettings | None = None,  # how sandboxes are made and bounded
        max_tool_output_chars: OutputChars = 1000,  # a tool result, cut with a note
        max_calls_per_reply: CallsPerReply = 2,  # more calls in one reply are not run
    ) -> None:
        _check_kinds(kinds)
        super().__init__(max_round, tools or ["bash"], sandbox, max_tool_output_chars,
                         max_calls_per_reply)
        self.kinds: tuple[Kind, ...] = tuple(kinds or KINDS)
        self.splits = splits
        self.instruction = instruction
        self.worked_example = worked_example
        self.script_timeout_s = script_timeout_s

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """Known kinds, and the sandbox layer's host check."""
        kinds = parameters.get("kinds")
        _check_kinds(kinds if isinstance(kinds, list) else None)
        super().check_parameters(parameters)

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return self.splits.sample_ids(split)

    def _get_sample(self, sample_id: str) -> Sample:
        split, index = counted_sample(sample_id, self.splits.counts)
        kind = self.kinds[index % len(self.kinds)]
        rng = random.Random(derived_seed("shell_tasks", self.splits.seed, split, index))
        return Sample(sample_id=split_sample_id(split, index), category=kind,
                      data=problem_data(GENERATORS[kind](rng)))

    def new_episode(self) -> ShellEpisode:
        return ShellEpisode(self)


def _check_kinds(kinds: list[Any] | None) -> None:
    for index, kind in enumerate(kinds or []):
        if kind not in KINDS:
            raise TaskSettingError(("kinds", index), unknown_name("kind", str(kind), KINDS))


def same_answer(given: str, expected: str) -> bool:
    """A boxed answer read as the host's value: spaces, quotes or backticks around it and
    a leading `./` of a path do not count."""
    given = given.strip().strip("`'\"").strip()
    return given.removeprefix("./") == expected


class ShellEpisode(ToolEpisode[ShellTask]):
    def _files(self, sample: Sample) -> Files:
        return dict(sample.data["files"])

    def _prompt(self, sample: Sample) -> str:
        family = self.family
        prefix = WORKED_EXAMPLE if family.worked_example else ""
        return f"{prefix}Task: {sample.data['question']}\n{family.instruction}"

    def _final_answer(self, action: str) -> StepOutcome:
        assert self.sample is not None
        problem = problem_of(self.sample.data)
        if problem.answer is not None:
            given = final_answer(action, "boxed")
            answered = given is not None
            correct = answered and same_answer(given, problem.answer)
            detail = f"answered {given!r}, expected {problem.answer!r}"
        else:
            answered, correct, detail = self._check_file(problem)
        return StepOutcome(observation="", reward=float(correct), terminated=True,
                           outcome=Outcome.CORRECT if correct else Outcome.INCORRECT,
                           metrics={"correct": float(correct), "answer_given": float(answered)},
                           info={"check_detail": detail})

    def _check_file(self, problem: ShellProblem) -> tuple[bool, bool, str]:
        """(the file exists, it is right, why) for a file the task asked for."""
        assert problem.output_path is not None
        content = self._sandbox_for_check().read_file(problem.output_path)
        if content is None:
            return False, False, f"no file {problem.output_path}"
        try:
            text = content.data.decode("utf-8")
        except UnicodeDecodeError:
            return True, False, f"{problem.output_path} is not UTF-8 text"
        if content.truncated:
            return True, False, f"{problem.output_path} is {content.size} bytes, too long"
        if problem.script is not None:
            return (True, *self._run_script(problem.script, text))
        if text.rstrip("\n") == (problem.expected_output or "").rstrip("\n"):
            return True, True, "the file is as expected"
        return True, False, f"{problem.output_path} differs from the expected content"

    def _run_script(self, script: ScriptCheck, text: str) -> tuple[bool, str]:
        """(right, why): the script run in a fresh sandbox on the check's own inputs."""
        with self.family.open_sandbox({script.path: text, **script.files}) as sandbox:
            result = sandbox.run(["python3", "-I", script.path],
                                 timeout_s=self.family.script_timeout_s)
        if result.status.is_infrastructure:
            raise SandboxUnavailable(f"the script's check could not run: "
                                     f"{result.status.value} {result.detail}")
        printed = result.stdout.strip()
        if result.ok and printed == script.expected_stdout:
            return True, "the script prints the expected figure on the check's inputs"
        return False, (f"on the check's inputs the script ended {result.status.value} and "
                       f"printed {printed[:200]!r}, expected {script.expected_stdout!r}")

    def _oracle_reply(self) -> str:
        assert self.sample is not None
        results = self.tool_results()
        if not results:  # first, the kind's command runs in the sandbox
            return hermes_text(None, [("bash", {"command": self.sample.data["oracle_command"]})])
        if self.sample.data["answer"] is None:
            return "Done."
        # a question: the command's output, boxed (the sandbox is checked end to end)
        return f"The answer is \\boxed{{{results[-1].content.strip()}}}."
