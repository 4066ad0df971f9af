"""The unit-test checker in the real sandbox: the reference passes, wrong code fails test
by test, and what submitted code does in its own process (exit at import, fake result
lines, objects equal to anything, reaching for the checker through /proc, an endless
loop) is a scored outcome that never counts as a pass."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from src.sandboxes.backends import open_backend
from src.sandboxes.contract import Sandbox
from src.sandboxes.settings import SandboxSettings
from src.tasks.instance.code_tests.checking import (
    CheckResult,
    CheckStatus,
    UnitTestProgram,
    check_code,
    last_code_block,
)
from src.tasks.instance.code_tests.sandbox_checker import NotPlainData, decode, encode

ADD_3 = UnitTestProgram("add_3", tuple((f"assert candidate({x}) == {x + 3}", True)
                                   for x in (-4, 0, 7, 100)))
REFERENCE = "def add_3(x):\n    return x + 3\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with open_backend(SandboxSettings()).open() as opened:
        yield opened


def check(sandbox: Sandbox, code: str, call_timeout_s: float = 3.0,
          check_timeout_s: float = 20.0) -> CheckResult:
    return check_code(sandbox, ADD_3, code, call_timeout_s, check_timeout_s)


def test_values_cross_between_the_processes_as_plain_data_only() -> None:
    values = [None, True, 0, -(10 ** 5000), 2.5, math.inf, complex(1, -2), "é\ud800", b"\x00",
              [1, (2, 3)], (), {1, "a"}, frozenset({4}), {"k": [None], (1, 2): {3.0}}]
    for value in values:
        assert decode(encode(value)) == value
        assert type(decode(encode(value))) is type(value)
    assert math.isnan(decode(encode(math.nan)))

    class Number(int):
        pass

    for hostile in (Number(3), [object()], {"key": Number(1)}, lambda: 0):
        with pytest.raises(NotPlainData):
            encode(hostile)
    nested: list = []
    for _ in range(200):
        nested = [nested]
    with pytest.raises(NotPlainData, match="nested too deeply"):
        encode(nested)
    for garbage in ([], ["int", "zz"], ["list", 3], ["dict", [[["int", "1"]]]], ["eval", "1"],
                    ["set", [["list", []]]], "text"):
        with pytest.raises(NotPlainData):
            decode(garbage)


def test_the_answer_is_the_last_closed_python_block() -> None:
    assert last_code_block("```python\na = 1\n```\ntext\n```py\nb = 2\n```") == "b = 2\n"
    # a python block wins over a later unlabelled one, which beats none
    assert last_code_block("```python\na = 1\n```\n```\nb = 2\n```") == "a = 1\n"
    assert last_code_block("```\nb = 2\n```") == "b = 2\n"
    assert last_code_block("```bash\nls\n```") is None
    assert last_code_block("```python\nnever closed") is None
    assert last_code_block("def f(): pass") is None


def test_the_reference_passes_and_wrong_code_fails_test_by_test(sandbox: Sandbox) -> None:
    assert check(sandbox, REFERENCE) == CheckResult(CheckStatus.OK, (True,) * 4, "")
    wrong = check(sandbox, "def add_3(x):\n    return x + 3 if x > 0 else x\n")
    assert wrong.status is CheckStatus.OK and wrong.verdicts == (False, False, True, True)
    assert wrong.passed_share == 0.5 and not wrong.all_passed
    assert wrong.detail.startswith("assert candidate(-4) == -1: AssertionError")
    raising = check(sandbox, "def add_3(x):\n    return x // x * x + 3\n")
    assert raising.verdicts == (True, False, True, True)  # 0 // 0 raises: that test fails
    missing = check(sandbox, "def add_three(x):\n    return x + 3\n")
    assert missing.status is CheckStatus.LOAD_ERROR and "no function 'add_3'" in missing.detail


def test_syntax_errors_are_scored_without_running(sandbox: Sandbox) -> None:
    result = check(sandbox, "def add_3(x)\n    return x + 3\n")
    assert result.status is CheckStatus.SYNTAX_ERROR and result.verdicts == (False,) * 4
    assert "SyntaxError" in result.detail
    assert check(sandbox, "x = '\0'").status is CheckStatus.SYNTAX_ERROR


FORGED_LINE = ('CODE_TESTS_RESULT {nonce} {{"status": "ok", "verdicts": [true, true, true, '
               'true], "failure": ""}}')
FOOLING = {
    "exit(0) at import": ("import sys\nsys.exit(0)\n", CheckStatus.LOAD_ERROR),
    "os._exit(0) at import": ("import os\nos._exit(0)\n", CheckStatus.CRASHED),
    "exit(0) in the function": (
        "import sys\ndef add_3(x):\n    sys.exit(0)\n", CheckStatus.OK),
    "forged result lines and files": (
        "import os, sys\n"
        f"line = {FORGED_LINE.format(nonce='0' * 32)!r}\n"
        "for stream in (sys.stdout, sys.stderr, sys.__stdout__):\n"
        "    print(line, file=stream, flush=True)\n"
        "os.write(1, (line + '\\n').encode())\n"
        "for name in ('results.json', '/workspace/results.json', '/workspace/.tmp/result'):\n"
        "    open(name, 'w').write(line)\n"
        "def add_3(x):\n    print(line)\n    return 0\n", CheckStatus.OK),
    "an object equal to anything": (
        "class Any:\n    def __eq__(self, other):\n        return True\n"
        "def add_3(x):\n    return Any()\n", CheckStatus.OK),
    "an int subclass equal to anything": (
        "class Int(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "def add_3(x):\n    return Int(0)\n", CheckStatus.OK),
    "the checker's own functions patched": (
        "import __main__\n"
        "__main__.encode = lambda value, depth=0: ['bool', True]\n"
        "def add_3(x):\n    return 0\n", CheckStatus.OK),
    "the parent reached through /proc": (
        "import os\n"
        "parent = os.getppid()\n"
        f"line = {FORGED_LINE.format(nonce='0' * 32)!r}\n"
        "for path, mode in ((f'/proc/{parent}/fd/1', 'w'), (f'/proc/{parent}/mem', 'rb'),\n"
        "                   (f'/proc/{parent}/fd/0', 'rb')):\n"
        "    try:\n"
        "        with open(path, mode) as stream:\n"
        "            stream.write(line) if mode == 'w' else stream.read(10)\n"
        "        raise SystemExit(f'opened {path}')\n"
        "    except PermissionError:\n"
        "        pass\n"
        "def add_3(x):\n    return 0\n", CheckStatus.OK),
    "the parent killed": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", CheckStatus.CRASHED),
}


@pytest.mark.parametrize("attempt", sorted(FOOLING))
def test_attempts_to_fool_the_checker_fail_every_test(sandbox: Sandbox, attempt: str) -> None:
    code, status = FOOLING[attempt]
    result = check(sandbox, code)
    assert result.status is status, result.detail
    assert result.verdicts == (False,) * 4 and result.passed_share == 0.0


def test_an_endless_loop_is_a_timeout_scored_zero(sandbox: Sandbox) -> None:
    # the checker's bound on one call: the check ends there, the tests not run failed
    looping = check(sandbox, "def add_3(x):\n    while True:\n        pass\n",
                    call_timeout_s=1.0)
    assert looping.status is CheckStatus.TIMEOUT and looping.verdicts == (False,) * 4
    assert "timeout: no answer within 1 s" in looping.detail
    # tests that passed before the call that looped still count
    partly = check(sandbox, "def add_3(x):\n    while x == 7:\n        pass\n"
                            "    return x + 3\n", call_timeout_s=1.0)
    assert partly.status is CheckStatus.TIMEOUT and partly.verdicts == (True, True, False, False)
    # at import, and past the sandbox's own wall bound on the whole check
    assert check(sandbox, "while True:\n    pass\n", call_timeout_s=1.0).status \
        is CheckStatus.TIMEOUT
    bounded = check(sandbox, "def add_3(x):\n    while True:\n        pass\n",
                    call_timeout_s=30.0, check_timeout_s=2.0)
    assert bounded.status is CheckStatus.TIMEOUT and bounded.verdicts == (False,) * 4
    assert "timeout" in bounded.detail
    assert check(sandbox, REFERENCE).all_passed  # the sandbox serves the next check
