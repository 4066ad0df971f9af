"""The real sandbox (bubblewrap) against what model code may do: each case ends as a
recorded status within its bound, and nothing of the sandbox is left running."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from src.sandboxes.backends import SUPERVISOR_INSIDE, check_sandbox_available, open_backend
from src.sandboxes.contract import CallStatus, SandboxNotAvailableOnHost
from src.sandboxes.process import SupervisedSandbox
from src.sandboxes.settings import CallLimits, SandboxSettings
from tests.sandboxes.processes import sandbox_processes

PROJECT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
LIMITS = CallLimits(wall_timeout_s=4, cpu_time_s=2, memory_bytes=512 * MiB, max_processes=32,
                    max_file_bytes=8 * MiB, output_limit_bytes=64 * 1024)
SETTINGS = SandboxSettings(limits=LIMITS, workdir_bytes=16 * MiB, hang_grace_s=2)


def wait_until_gone(processes: list[psutil.Process], timeout_s: float = 5.0) -> list:
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return alive


@pytest.fixture
def sandbox() -> Iterator[SupervisedSandbox]:
    before = sandbox_processes()
    assert before == []
    opened = open_backend(SETTINGS).open({"seed/data.txt": "seeded", "raw.bin": b"\x00\x01"})
    supervisor = psutil.Process(opened.supervisor_pid)
    yield opened
    inside = [supervisor, *sandbox_processes()]
    with contextlib.suppress(psutil.NoSuchProcess):
        inside += supervisor.children(recursive=True)
    opened.close()
    assert wait_until_gone(inside) == []
    assert sandbox_processes() == []


def call_processes(sandbox: SupervisedSandbox) -> list[psutil.Process]:
    """The sandbox's live processes beyond its supervisor and session interpreters."""
    def is_session(process: psutil.Process) -> bool:
        command = process.cmdline()
        return command[:2] == ["bash", "--norc"] or command[1:3] == ["-u", "-c"]

    found = []
    for process in psutil.Process(sandbox.supervisor_pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.status() != psutil.STATUS_ZOMBIE and not is_session(process):
                found.append(process)
    return found


def test_the_host_check_passes_here_and_names_a_missing_bwrap() -> None:
    check_sandbox_available(SETTINGS)
    with pytest.raises(SandboxNotAvailableOnHost, match="bwrap_path"):
        check_sandbox_available(SETTINGS.model_copy(update={"bwrap_path": "/nonexistent/bwrap"}))


def test_seed_files_commands_and_files(sandbox: SupervisedSandbox) -> None:
    result = sandbox.run("cat seed/data.txt; echo; pwd; echo oops >&2; exit 3")
    assert result.status is CallStatus.ERROR_EXIT and result.exit_code == 3
    assert result.stdout == "seeded\n/workspace\n" and result.stderr == "oops\n"
    assert sandbox.run(["python3", "-c", "import sys; print(sys.stdin.read()[::-1])"],
                       stdin="abc").stdout == "cba\n"
    sandbox.write_file("out/a.txt", "written")
    assert sandbox.run_python("print(open('out/a.txt').read())").stdout == "written\n"
    assert sandbox.read_file("raw.bin").data == b"\x00\x01"
    assert sandbox.read_file("missing.txt") is None
    with pytest.raises(ValueError, match="relative"):
        sandbox.read_file("../etc/passwd")
    sandbox.run("ln -s /usr/bin/env link")
    assert sandbox.read_file("link") is None  # a link out of the working directory


def test_fork_bomb_ends_as_process_limit(sandbox: SupervisedSandbox) -> None:
    start = time.monotonic()
    result = sandbox.run(":(){ :|:& };:; sleep 10")
    assert result.status is CallStatus.PROCESS_LIMIT, result
    assert time.monotonic() - start < LIMITS.wall_timeout_s + 2
    python = sandbox.run_python("import os, time\nwhile True:\n    if os.fork() == 0:\n"
                                "        time.sleep(30)")
    assert python.status is CallStatus.PROCESS_LIMIT, python
    assert call_processes(sandbox) == []
    assert sandbox.run("echo still working").stdout == "still working\n"


def test_memory_bomb_ends_as_memory_limit(sandbox: SupervisedSandbox) -> None:
    result = sandbox.run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))")
    assert result.status is CallStatus.MEMORY_LIMIT, result
    assert "MemoryError" in result.stderr


def test_endless_loops_end_at_their_bounds() -> None:
    # a wall bound far above the CPU one: the CPU bound holds even on a loaded machine
    limits = LIMITS.model_copy(update={"cpu_time_s": 1, "wall_timeout_s": 15})
    with open_backend(SETTINGS.model_copy(update={"limits": limits})).open() as sandbox:
        spinning = sandbox.run_python("while True: pass")
        assert spinning.status is CallStatus.CPU_LIMIT and spinning.signal == signal.SIGXCPU
        assert 0.5 <= spinning.cpu_s < 3 and spinning.wall_s < limits.wall_timeout_s
        sleeping = sandbox.run("sleep 100", timeout_s=1)
        assert sleeping.status is CallStatus.TIMEOUT and 1 <= sleeping.wall_s < 2
        session = sandbox.session("python").call("while True: pass")
        assert session.status is CallStatus.CPU_LIMIT and 0.5 <= session.cpu_s < 3
        assert call_processes(sandbox) == []
    assert wait_until_gone(sandbox_processes()) == []


def test_disk_filler_and_big_file_end_at_their_bounds(sandbox: SupervisedSandbox) -> None:
    big = sandbox.run("head -c 20000000 /dev/zero > big.bin")
    assert big.status is CallStatus.FILE_SIZE_LIMIT and "File size limit" in big.stderr
    direct = sandbox.run(["dd", "if=/dev/zero", "of=big.bin", "bs=1M", "count=20"])
    assert direct.status is CallStatus.FILE_SIZE_LIMIT and direct.signal == signal.SIGXFSZ
    python = sandbox.run_python("open('big.bin', 'wb').write(bytes(20_000_000))")
    assert python.status is CallStatus.FILE_SIZE_LIMIT and "File too large" in python.stderr
    filler = sandbox.run("for i in 1 2 3 4; do head -c 6000000 /dev/zero > fill$i; done")
    assert filler.status is CallStatus.DISK_LIMIT, filler
    assert "No space left on device" in filler.stderr


def test_a_gigabyte_printed_ends_as_output_limit(sandbox: SupervisedSandbox) -> None:
    result = sandbox.run("head -c 1000000000 /dev/zero | tr '\\0' x")
    assert result.status is CallStatus.OUTPUT_LIMIT and result.output_truncated
    assert len(result.stdout) + len(result.stderr) <= LIMITS.output_limit_bytes
    assert result.wall_s < 2
    session = sandbox.session("python").call("while True: print('x' * 1000)")
    assert session.status is CallStatus.OUTPUT_LIMIT


def test_background_processes_do_not_outlive_their_call(sandbox: SupervisedSandbox) -> None:
    result = sandbox.run("sleep 1000 & setsid sleep 1000 & echo started")
    assert result.status is CallStatus.OK and result.wall_s < 2
    assert call_processes(sandbox) == []
    bash = sandbox.session("bash")
    assert bash.call("(sleep 1000 &) ; nohup sleep 999 > /dev/null 2>&1 & echo ok").ok
    assert call_processes(sandbox) == []
    # the fixture checks that closing leaves nothing


def test_no_network(sandbox: SupervisedSandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        code = textwrap.dedent(f"""
            import socket
            for address in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("pypi.org", 443)]:
                try:
                    socket.create_connection(address, timeout=2)
                    print("connected", address)
                except OSError as error:
                    print("refused", type(error).__name__)
        """)
        result = sandbox.run_python(code)
    finally:
        listener.close()
    assert "connected" not in result.stdout and result.stdout.count("refused") == 3


def test_nothing_outside_is_readable_or_writable(sandbox: SupervisedSandbox,
                                                 tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    with open_backend(SETTINGS).open({"other.txt": "another episode"}) as other:
        other_files = other.run("ls /workspace").stdout
    assert "other.txt" in other_files
    # (of the supervisor's folder only its sources are mounted: not the host's compiled
    # caches beside them)
    paths = [str(PROJECT / "README.md"), str(secret), os.path.expanduser("~/.bashrc"),
             "/etc/passwd", "/etc/shadow", "/workspace/other.txt",
             f"{SUPERVISOR_INSIDE}/__pycache__"]
    result = sandbox.run_python(textwrap.dedent(f"""
        import os
        for path in {paths!r}:
            print(path, os.path.exists(path))
        found = [f for top in ("/", "/tmp") for f in os.listdir(top)]
        print("other.txt" in found, "secret.txt" in found)
    """))
    assert result.ok and "True" not in result.stdout, result.stdout
    writes = sandbox.run(f"for p in /usr/x /etc/x /x /root/x /.sandbox/x {SUPERVISOR_INSIDE}/x "
                         + os.path.dirname(sys.executable)
                         + "/x; do touch $p 2>/dev/null && echo wrote $p; done; echo done")
    assert writes.stdout == "done\n"
    assert not Path(os.path.dirname(sys.executable), "x").exists()


def test_python_and_bash_sessions_keep_their_state(sandbox: SupervisedSandbox) -> None:
    python = sandbox.session("python")
    assert python.call("x = 3\nimport math").ok
    answer = python.call("print(x)\nmath.sqrt(x * 3)")
    assert answer.stdout == "3\n3.0\n" and not answer.session_restarted
    error = python.call("1 / 0")
    assert error.status is CallStatus.ERROR_EXIT and "ZeroDivisionError" in error.stderr
    assert "_serve" not in error.stderr  # the driver's own frames are not shown
    assert python.call("x").stdout == "3\n"
    timed_out = python.call("import time; time.sleep(100)", timeout_s=1)
    assert timed_out.status is CallStatus.TIMEOUT
    after = python.call("print('x' in globals())")
    assert after.session_restarted and after.stdout == "False\n"
    bash = sandbox.session("bash")
    assert bash.call("cd seed; GREETING=héllo; f() { echo f$1; }").ok
    state = bash.call("pwd; echo $GREETING; f 1; false")
    assert state.stdout == "/workspace/seed\nhéllo\nf1\n" and state.exit_code == 1
    assert bash.call("exit 4").exit_code == 4
    assert bash.call("pwd").session_restarted


@pytest.mark.parametrize("signal_name", ["TERM", "INT", "HUP", "QUIT", "USR1"])
def test_the_models_code_cannot_signal_the_sandbox_away(sandbox: SupervisedSandbox,
                                                        signal_name: str) -> None:
    # process 1 of the pid namespace: a signal from inside reaches it only through a
    # handler, and a handler for SIGTERM or SIGINT let `kill -TERM 1` end the sandbox
    assert sandbox.run(f"kill -{signal_name} 1").status in (CallStatus.OK,
                                                             CallStatus.ERROR_EXIT)
    python = sandbox.session("python")
    python.call(f"import os, signal; os.kill(1, signal.SIG{signal_name})")
    assert sandbox.alive and sandbox.run("echo alive").stdout == "alive\n"
    assert python.call("print(1)").stdout == "1\n"


@pytest.mark.parametrize("kind, code", [
    ("python", "import os, time; os.write(4, b'{'); time.sleep(60)"),
    ("bash", "printf '{' >&4; sleep 60")])
def test_a_partial_answer_line_is_still_bounded_by_the_call(sandbox: SupervisedSandbox,
                                                            kind: str, code: str) -> None:
    # the supervisor waited for the rest of the line, past the wall bound, until the host
    # declared the sandbox hung
    started = time.monotonic()
    result = sandbox.session(kind).call(code, timeout_s=1)
    assert result.status is CallStatus.TIMEOUT
    assert time.monotonic() - started < 1 + SETTINGS.hang_grace_s
    assert sandbox.alive and sandbox.session(kind).call("echo 5" if kind == "bash"
                                                        else "print(5)").stdout == "5\n"


def test_a_low_open_files_bound_still_runs_sessions() -> None:
    # the session's pipes were moved through descriptor 100 after the bound was set
    settings = SandboxSettings(limits=CallLimits(max_open_files=32))
    with open_backend(settings).open() as sandbox:
        assert sandbox.session("python").call("print(2)").stdout == "2\n"
        assert sandbox.session("bash").call("echo 3").stdout == "3\n"


def test_a_dead_or_hung_sandbox_is_a_status(sandbox: SupervisedSandbox) -> None:
    supervisor = psutil.Process(sandbox.supervisor_pid)
    supervisor.suspend()  # hung: the host's wait is bounded
    hung = sandbox.run("echo hi", timeout_s=1)
    assert hung.status is CallStatus.SANDBOX_DIED and hung.status.is_infrastructure
    assert hung.wall_s < 1 + SETTINGS.hang_grace_s + 3
    assert not sandbox.alive
    assert sandbox.run("echo again").status is CallStatus.SANDBOX_DIED


def test_killing_the_parent_kills_the_sandbox(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(PROJECT)!r})
        from src.sandboxes.backends import open_backend
        from src.sandboxes.settings import SandboxSettings
        sandbox = open_backend(SandboxSettings()).open()
        sandbox.session("bash").call("echo ready")
        threading.Thread(target=sandbox.run, args=("sleep 1000",), daemon=True).start()
        print("opened", flush=True)
        threading.Event().wait()
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    assert parent.stdout.readline() == b"opened\n"
    time.sleep(0.3)
    tree = psutil.Process(parent.pid).children(recursive=True)
    assert len(tree) >= 3  # bwrap, its supervisor, the bash session, sleep
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_until_gone(tree) == []


def test_the_unsafe_backend_keeps_the_limits() -> None:
    settings = SETTINGS.model_copy(update={"backend": "unsafe_process"})
    with open_backend(settings).open({"a.txt": "x"}) as sandbox:
        assert sandbox.run("cat a.txt").stdout == "x"
        printed = sandbox.run("head -c 100000000 /dev/zero")
        assert printed.status is CallStatus.OUTPUT_LIMIT
        assert sandbox.run("sleep 100 &").ok
        assert psutil.Process(sandbox.supervisor_pid).children(recursive=True) == []
        workdir = sandbox.host_workdir
    assert not workdir.exists()
    assert sandbox_processes() == []
