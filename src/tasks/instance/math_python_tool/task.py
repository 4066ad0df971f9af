"""Math with a Python tool: arithmetic a small model cannot do in its head, with a sandbox.

Each problem is a product of two three-digit numbers or a sum of several numbers of three
to five digits (`kinds`, taken in turn), drawn from seeded streams per split; a fifth of
the problems (by a stable hash of the arithmetic, operands in any order) may be asked
only in validation, so no validation problem is a train one. The agent has the `python`
tool (and `bash` if `tools` says so) over a sandbox of the episode's own
(src/tasks/tool_episode.py): a reply with a tool call runs it and the output comes back;
a reply without one is the final answer, its last `\\boxed{}` scored as
src/tasks/instance/math_problems scores it (`reward_weights` of its text rewards: by
default 0.9 `accuracy` and 0.1 `boxed_number`, so 1.0 right and 0.1 for a well-formed
wrong number). The prompt shows a worked example with a tool call, since the embedded
model has to see the format. The oracle calls the tool on the problem, then boxes the
tool's answer.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from typing import Literal

from src.configuration.components import COMPONENTS
from src.language_models.tool_calls import hermes_text, tool_response_text
from src.records.episode import Outcome, Sample
from src.sandboxes.settings import SandboxSettings
from src.tasks.instance.math_problems.rewards import TEXT_REWARDS, text_rubric
from src.tasks.instance.math_problems.verification import start_verifier
from src.tasks.splits import Splits
from src.tasks.task import (
    Rounds,
    StepOutcome,
    counted_sample,
    derived_seed,
    split_sample_id,
)
from src.tasks.tool_episode import (
    CallsPerReply,
    OutputChars,
    ToolEpisode,
    ToolName,
    ToolTask,
)

Kind = Literal["product", "sum"]
HELD_OUT_SHARE = 5  # one problem in this many (by its hash) is asked only in validation
_EXAMPLE = (217, 345)  # the worked example's product


def python_call(expression: str) -> str:
    """The reply that asks the python tool to print `expression`."""
    return hermes_text(None, [("python", {"code": f"print({expression})"})])


_EXAMPLE_EXPRESSION, _EXAMPLE_VALUE = f"{_EXAMPLE[0]} * {_EXAMPLE[1]}", _EXAMPLE[0] * _EXAMPLE[1]
WORKED_EXAMPLE = (f"Example:\nQuestion: What is {_EXAMPLE_EXPRESSION}?\n"
                  f"Assistant: {python_call(_EXAMPLE_EXPRESSION)}\n"
                  f"Tool: {tool_response_text([str(_EXAMPLE_VALUE)])}\n"
                  f"Assistant: The answer is \\boxed{{{_EXAMPLE_VALUE}}}.\n\n")


def problem(kind: Kind, rng: random.Random, sum_terms: int) -> tuple[str, int, str]:
    """(expression, value, fact): the fact is the arithmetic with its operands sorted, the
    same for any order of them."""
    if kind == "product":
        operands = [rng.randint(100, 999), rng.randint(100, 999)]
        operator = "*"
    else:
        operands = [rng.randint(10 ** (digits - 1), 10 ** digits - 1)
                    for digits in (rng.randint(3, 5) for _ in range(sum_terms))]
        operator = "+"
    value = operands[0] * operands[1] if operator == "*" else sum(operands)
    return (f" {operator} ".join(map(str, operands)), value,
            f" {operator} ".join(map(str, sorted(operands))))


def is_held_out(fact: str) -> bool:
    """Whether a problem belongs to validation (a stable hash of its fact)."""
    return zlib.crc32(fact.encode()) % HELD_OUT_SHARE == 0


@COMPONENTS.register("math_python_tool")
class MathPythonToolTask(ToolTask["MathPythonToolEpisode"]):
    """Arithmetic with a Python tool in a sandbox (see the module docstring). Metrics:
    the rubric's (`accuracy`, `boxed_answer`, the weighted ones) and the tool episode's
    (`tool_calls`, `used_tool`, `tool_errors`, `malformed_tool_calls`, `sandbox_died`,
    `sandbox/<status>`)."""

    def __init__(
        self,
        kinds: list[Kind] | None = None,  # taken in turn by sample index; default both
        sum_terms: int = 4,  # the numbers of a `sum` problem
        splits: Splits = Splits(),  # each split draws its problems from streams of its own
        instruction: str = ("Use the python tool to compute it, then give the final answer "
                            "in \\boxed{}."),
        worked_example: bool = True,  # a solved problem with a tool call before the question
        # replies in an episode: tool calls and the final answer; at the limit without an
        # answer the episode ends unanswered (reward 0)
        max_round: Rounds = 3,
        reward_weights: dict[str, float] | None = None,  # text reward name -> weight
        tools: list[ToolName] | None = None,  # the tools offered; default python only
        sandbox: SandboxSettings | None = None,  # how sandboxes are made and bounded
        max_tool_output_chars: OutputChars = 1000,  # a tool result, cut with a note
        max_calls_per_reply: CallsPerReply = 2,  # more calls in one reply are not run
    ) -> None:
        super().__init__(max_round, tools or ["python"], sandbox, max_tool_output_chars,
                         max_calls_per_reply)
        self.kinds: tuple[Kind, ...] = tuple(kinds or ["product", "sum"])
        if sum_terms < 2:
            raise ValueError(f"sum_terms must be at least 2, got {sum_terms}")
        self.sum_terms = sum_terms
        self.splits = splits
        self.instruction = instruction
        self.worked_example = worked_example
        self.reward_weights = dict(reward_weights or {"accuracy": 0.9, "boxed_number": 0.1})
        unknown = set(self.reward_weights) - set(TEXT_REWARDS)
        if unknown:
            raise ValueError(f"reward_weights: unknown reward functions {sorted(unknown)}; "
                             f"available: {sorted(TEXT_REWARDS)}")
        self.rubric = text_rubric(self.reward_weights, None)
        start_verifier()  # not within the first step's time limit

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return self.splits.sample_ids(split)

    def _get_sample(self, sample_id: str) -> Sample:
        split, index = counted_sample(sample_id, self.splits.counts)
        kind = self.kinds[index % len(self.kinds)]
        rng = random.Random(derived_seed("math_python_tool", self.splits.seed, split, index))
        expression, value, fact = problem(kind, rng, self.sum_terms)
        while is_held_out(fact) != (split != "train"):
            expression, value, fact = problem(kind, rng, self.sum_terms)
        return Sample(sample_id=split_sample_id(split, index), category=kind,
                      data={"question": f"What is {expression}?", "expression": expression,
                            "answer": str(value)})

    def new_episode(self) -> MathPythonToolEpisode:
        return MathPythonToolEpisode(self)


class MathPythonToolEpisode(ToolEpisode[MathPythonToolTask]):
    _prompt_text = ""

    def _prompt(self, sample: Sample) -> str:
        family = self.family
        prefix = WORKED_EXAMPLE if family.worked_example else ""
        self._prompt_text = (f"{prefix}Question: {sample.data['question']}\n"
                             f"{family.instruction}")
        return self._prompt_text

    def _final_answer(self, action: str) -> StepOutcome:
        assert self.sample is not None
        scored = self.family.rubric.score(action, self.sample, self._prompt_text)
        correct = scored.values["accuracy"] > 0
        return StepOutcome(observation="", reward=scored.score, terminated=True,
                           outcome=Outcome.CORRECT if correct else Outcome.INCORRECT,
                           metrics={**scored.values, **scored.details})

    def _oracle_reply(self) -> str:
        assert self.sample is not None
        results = self.tool_results()
        if not results:  # first, the tool computes it
            return python_call(self.sample.data["expression"])
        # then the tool's output, boxed: the sandbox is checked end to end
        return f"The answer is \\boxed{{{results[-1].content.strip()}}}."
