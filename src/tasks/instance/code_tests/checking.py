"""The host's side of the unit-test check: the submitted code, its tests, the verdicts.

The answer is the last fenced code block of the final reply, labelled ```python (or
```py), else the last unlabelled one; a block must be closed. It is compiled on the host
first (nothing runs: a syntax error is scored without the sandbox), then checked in the
episode's sandbox by a fresh process, `python3 -I -c <sandbox_checker.py>` (isolated: no
module of the working directory, no environment variable or user site is read), whose
input (the tests, the code, a nonce drawn now) comes on its stdin, never from a file the
agent could have written. src/tasks/instance/code_tests/sandbox_checker.py says how the
submitted code is kept away from the verdicts.

The verdicts are taken only from the one output line carrying the nonce, and only when
they are one boolean per test; anything else (no such line, two, a malformed one) is a
check without a result: every test failed, status `timeout` when the sandbox's time
bound ended it, else `crashed`. A sandbox that failed as infrastructure (it died) raises
`SandboxUnavailable`: the episode is an environment failure, not a score.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from src.sandboxes.contract import CallStatus, Sandbox, SandboxUnavailable
from src.tasks.instance.code_tests.sandbox_checker import RESULT_MARKER

CHECKER_SOURCE = Path(__file__).with_name("sandbox_checker.py").read_text(encoding="utf-8")
MAX_CODE_CHARS = 50_000  # a longer block is not run
MAX_ANSWER_BYTES = 1 << 20  # one return value sent from the submitted code's process
_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_PYTHON_LABELS = ("python", "python3", "py")


class CheckStatus(StrEnum):
    OK = "ok"  # the tests ran (some may have failed)
    NO_CODE = "no_code"  # no closed code block in the final reply
    SYNTAX_ERROR = "syntax_error"  # the block does not compile
    LOAD_ERROR = "load_error"  # running the block failed, or it defines no such function
    TIMEOUT = "timeout"  # a call of the function, or the whole check, ran past its bound
    CRASHED = "crashed"  # the check ended without a result (its process was killed)


@dataclass(frozen=True)
class UnitTestProgram:
    """A function's tests as the checker runs them.

    Attributes:
        entry_point: the function's name.
        steps: statements run in order by the checker with `candidate` bound to the
            function, each marked whether it is a test (its verdict counts) or set-up.
        setup: trusted code run first in the checker (a benchmark's helpers).
        prelude: trusted code run before the answer in the answer's own process (a
            benchmark's prompt, whose helpers the answer may call).
    """

    entry_point: str
    steps: tuple[tuple[str, bool], ...]
    setup: str = ""
    prelude: str = ""

    @property
    def num_tests(self) -> int:
        return sum(is_test for _, is_test in self.steps)

    def to_data(self) -> dict[str, Any]:
        """The program as plain data, for a sample's `data`."""
        return {"entry_point": self.entry_point, "steps": [list(step) for step in self.steps],
                "setup": self.setup, "prelude": self.prelude}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> UnitTestProgram:
        return cls(data["entry_point"], tuple((code, bool(is_test))
                                              for code, is_test in data["steps"]),
                   data.get("setup", ""), data.get("prelude", ""))


@dataclass(frozen=True)
class CheckResult:
    status: CheckStatus
    verdicts: tuple[bool, ...]  # one per test, in order
    detail: str = ""  # the first failure, or why nothing ran

    @property
    def passed_share(self) -> float:
        return sum(self.verdicts) / len(self.verdicts) if self.verdicts else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.verdicts) and all(self.verdicts)


def last_code_block(text: str) -> str | None:
    """The last closed ```python (```py) block of `text`, else its last unlabelled one."""
    python, plain = None, None
    for match in _BLOCK.finditer(text):
        label = match.group(1).lower()
        if label in _PYTHON_LABELS:
            python = match.group(2)
        elif not label:
            plain = match.group(2)
    return python if python is not None else plain


def compile_error(code: str) -> str | None:
    """Why `code` does not compile (on the host: nothing runs), or None."""
    if len(code) > MAX_CODE_CHARS:
        return f"the code is longer than {MAX_CODE_CHARS} characters"
    try:
        compile(code, "<answer>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as error:
        return f"{type(error).__name__}: {error}"[:500]
    return None


def check_code(sandbox: Sandbox, program: UnitTestProgram, code: str, call_timeout_s: float,
               check_timeout_s: float) -> CheckResult:
    """Run `program`'s tests on `code` in a fresh process of `sandbox` (see the module
    docstring)."""
    failed = (False,) * program.num_tests
    problem = compile_error(code)
    if problem is not None:
        return CheckResult(CheckStatus.SYNTAX_ERROR, failed, problem)
    nonce = secrets.token_hex(16)
    request = {"nonce": nonce, "child": CHECKER_SOURCE + "\nchild_main()\n",
               "prelude": program.prelude, "setup": program.setup, "answer": code,
               "entry_point": program.entry_point,
               "steps": [{"code": step, "test": is_test} for step, is_test in program.steps],
               "call_timeout_s": call_timeout_s, "max_answer_bytes": MAX_ANSWER_BYTES}
    result = sandbox.run(["python3", "-I", "-c", CHECKER_SOURCE + "\nparent_main()\n"],
                         stdin=json.dumps(request), timeout_s=check_timeout_s)
    if result.status.is_infrastructure:
        raise SandboxUnavailable(f"the unit-test check could not run: {result.status.value} "
                                 f"{result.detail}")
    prefix = f"{RESULT_MARKER} {nonce} "
    lines = [line[len(prefix):] for line in result.stdout.splitlines()
             if line.startswith(prefix)]
    verdict = _verdict(lines[0], program.num_tests) if len(lines) == 1 else None
    if verdict is not None:
        return verdict
    bounded = result.status in (CallStatus.TIMEOUT, CallStatus.CPU_LIMIT)
    why = result.detail or result.stderr.strip()[-300:] or f"{len(lines)} result lines"
    return CheckResult(CheckStatus.TIMEOUT if bounded else CheckStatus.CRASHED, failed,
                       f"the check gave no result ({result.status.value}): {why}")


def _verdict(text: str, num_tests: int) -> CheckResult | None:
    """The checker's result line read back, or None where it is not of its form."""
    try:
        data = json.loads(text)
        status = CheckStatus(data["status"])
        verdicts = data["verdicts"]
        detail = data["failure"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if status in (CheckStatus.NO_CODE, CheckStatus.SYNTAX_ERROR) or not isinstance(detail, str) \
            or not isinstance(verdicts, list) or len(verdicts) != num_tests \
            or not all(isinstance(verdict, bool) for verdict in verdicts):
        return None
    return CheckResult(status, tuple(verdicts), detail[:500])
