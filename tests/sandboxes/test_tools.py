"""The python and bash tools over the real sandbox's sessions."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from src.sandboxes.backends import open_backend
from src.sandboxes.contract import CallResult, CallStatus, Sandbox, retry_infrastructure
from src.sandboxes.settings import CallLimits, SandboxSettings
from src.sandboxes.tools import BashTool, PythonTool, cut_text

SETTINGS = SandboxSettings(limits=CallLimits(wall_timeout_s=3, output_limit_bytes=4096))


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with open_backend(SETTINGS).open() as opened:
        yield opened


def test_python_tool_keeps_state_and_reports_status(sandbox: Sandbox) -> None:
    tool = PythonTool(sandbox, max_observation_chars=200)
    assert tool.name == "python" and tool.parameters["required"] == ["code"]
    assert tool.schema()["function"]["name"] == "python"
    assert tool.call({"code": "x = 3"}) == "[no output]"
    assert tool.call({"code": "print(x)"}) == "3"
    error = tool.call({"code": "raise ValueError('bad')"})
    assert "ValueError: bad" in error and error.endswith("[status: error_exit] exit code 1")
    long = tool.call({"code": "print('a' * 1000)"})
    assert "characters cut" in long and len(long) < 300
    flood = tool.call({"code": "while True: print('y' * 100)"})
    assert "[output cut:" in flood and "[status: output_limit]" in flood
    assert "earlier state is lost" in tool.call({"code": "print(1)"})
    assert tool.call({"code": 3}).startswith("[invalid arguments]")
    assert tool.call({"command": "ls"}).startswith("[invalid arguments]")


def test_bash_tool(sandbox: Sandbox) -> None:
    tool = BashTool(sandbox)
    assert tool.parameters["properties"].keys() == {"command"}
    assert tool.call({"command": "A=1; echo out; echo err >&2"}) == "out\n[stderr]\nerr"
    assert tool.call({"command": "echo $A"}) == "1"
    assert tool.call({"command": "sleep 10"}).startswith("[status: timeout]")
    sandbox.close()
    assert tool.call({"command": "echo"}) == "[status: sandbox_died] the sandbox is closed"


def test_cut_text_keeps_head_and_tail() -> None:
    cut = cut_text("a" * 50 + "b" * 50, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10) and "80 characters cut" in cut


def test_retry_infrastructure_opens_a_new_sandbox_only_for_infrastructure_failures() -> None:
    backend = open_backend(SETTINGS)
    opened: list[Sandbox] = []

    def open_sandbox() -> Sandbox:
        opened.append(backend.open())
        return opened[-1]

    def dies_first(sandbox: Sandbox) -> CallResult:
        if len(opened) == 1:
            os.kill(sandbox.supervisor_pid, signal.SIGKILL)  # the first sandbox dies
        return sandbox.run("echo hi")

    result = retry_infrastructure(open_sandbox, dies_first, tries=3)
    assert result.ok and len(opened) == 2
    failing = retry_infrastructure(open_sandbox, lambda sandbox: sandbox.run("exit 1"), 3)
    assert failing.status is CallStatus.ERROR_EXIT and len(opened) == 3
