"""Hostile code and shell through the sandbox layer (src/sandboxes/) and the tool tasks
that use it: does everything code a model writes can do end as a `CallResult` whose
status names the bound it hit, inside its bounds, with nothing of the host changed or
read and no process left once the sandbox is closed?

Tried. A fixed corpus (`CORPUS`: fork and thread bombs, memory hogs, endless output with
and without newlines, binary and invalid UTF-8 output, sleeps past the wall bound, CPU
spins, writes past the file-size bound and the working directory's size, writes and
deletions outside it (/, /usr, /etc, the host's /tmp, the project checkout, $HOME, the
study's canary files), reads of /etc/shadow, the canaries and the project's files,
sockets to the host's PostgreSQL (5432) and MariaDB (3306) and DNS, `kill -9 -1`,
signals to the supervisor (process 1), stdout and stdin closed, processes left in the
background (nohup, setsid, a double fork, disown), huge argv, many open files, signals to
itself, ptrace, setuid programs, `os._exit`, `sys.exit`, deep recursion, and persistent
sessions corrupted or killed between calls (answer pipes closed or written to, the
driver's modules replaced, threads left running)), each through its channels: `run`
(bash -c), `run_python`, and the `python` and `bash` tools (src/sandboxes/tools.py) over
the persistent sessions; then `--tries` seeded programs of 1-3 calls, each a corpus
entry combined with others, sent to the background, scaled, carried by the other
language, or edited character by character. After a program each session used and a
plain command are called once more (the sandbox must still answer, or say it died).
Then `--episodes` episodes of each tool task (code_tests: a python tool call, then a
final answer whose code block holds hostile code at load or in the function;
shell_tasks: a bash tool call, a hostile script or output file, then the final answer),
rolled out by the project's rollout with a scripted agent.

Counted per target (tries: programs or episodes):

- crashes: an exception out of a call, a tool, `close` or the rollout;
- hangs: a try past its bound (each call's wall bound, the host's grace and the
  sandbox's start and close), or an episode step past the rollout's step timeout;
- escapes: a file made, changed or deleted outside the sandbox (marker files in the
  folders above, the canaries in the host /tmp and in the checkout), a secret read (a
  canary's content, /etc/shadow, README.md), a socket that connected, uid 0 of the host;
- leftovers: processes alive after `close` (this process's descendants, and any process
  on the host whose command line holds the try's marker);
- bounds exceeded: a call slower than its wall bound plus the supervisor's kill-and-sweep
  (`START_GRACE_S`) and `SLACK_S` (one that ended `sandbox_died`: plus the host's
  `hang_grace_s`), more output kept than `output_limit_bytes`, a tool observation longer
  than its cut and notes, a bound's status without its detail;
- misnamed: a corpus entry whose status is not one it names (e.g. a sleep past the wall
  bound that is not `timeout`);
- infrastructure: a call of the model's code that ended `sandbox_died` or
  `infrastructure_error` (statuses that say the sandbox, not the model, failed), or a
  sandbox found dead by the probe after calls that did not say so;
- unscored: episodes ending `task_error` or `agent_error`, or with a reward not finite.

    OMP_NUM_THREADS=1 python -m experiments.hostile_inputs.fuzz_sandboxes --seed 0 \\
        --tries 600 --episodes 80 --output outputs/hostile_inputs/fuzz_sandboxes.json

Exit status 1 when anything but `tries` and the statuses was counted.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import random
import re
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from experiments.hostile_inputs.fuzz_model_text import random_character
from src.agents.agent import Agent, AgentReply
from src.configuration.models import FaultPolicy
from src.language_models.tool_calls import hermes_text
from src.records.episode import Episode
from src.run.rollout import roll_out_lockstep
from src.sandboxes.backends import open_backend
from src.sandboxes.contract import CallResult, CallStatus, Sandbox
from src.sandboxes.process import START_GRACE_S
from src.sandboxes.settings import CallLimits, MiB, SandboxSettings
from src.sandboxes.tools import BashTool, PythonTool
from src.tasks.instance.code_tests.task import CodeTestsTask
from src.tasks.instance.shell_tasks.task import ShellTask
from src.tasks.splits import Splits
from src.tasks.tool_episode import ToolTask
from tests.sandboxes.processes import live_descendants

CHECKOUT = Path(__file__).resolve().parents[2]
HOME = Path.home()
# small bounds, so that many tries fit; each one a bound the corpus reaches
LIMITS = CallLimits(wall_timeout_s=2.0, cpu_time_s=1.0, memory_bytes=256 * MiB,
                    max_processes=32, max_file_bytes=1 * MiB, max_open_files=128,
                    output_limit_bytes=64 * 1024)
SETTINGS = SandboxSettings(limits=LIMITS, workdir_bytes=4 * MiB, hang_grace_s=3.0)
SLACK_S = 1.5  # a loaded machine's scheduling, beyond a call's bound
MAX_OBSERVATION_CHARS = 1000  # the tools' cut here
OBSERVATION_NOTES_CHARS = 400  # the status, restart and output-cut lines after the cut
SETTLE_S = 3.0  # how long a closed sandbox's processes may take to be gone
STEP_TIMEOUT_S = 60.0  # the rollout's bound of one episode step
BOUND_STATUSES = {CallStatus.TIMEOUT, CallStatus.CPU_LIMIT, CallStatus.MEMORY_LIMIT,
                  CallStatus.OUTPUT_LIMIT, CallStatus.PROCESS_LIMIT,
                  CallStatus.FILE_SIZE_LIMIT, CallStatus.DISK_LIMIT}
# printed by the corpus only when it got through; built at run time, so that code that
# is echoed back (a traceback, "command not found") does not hold them
ROOT_TOKEN = "uid-zero-reached"
NET_TOKEN = "port-reached"
OUTSIDE = ("/", "/tmp", "/usr", "/etc", "/var/tmp", "/dev/shm", str(CHECKOUT), str(HOME))
CHANNELS = {"py": ("run_python", "python_tool"), "sh": ("run", "bash_tool"),
            "pysession": ("python_tool",), "shsession": ("bash_tool",)}


@dataclass(frozen=True)
class Entry:
    name: str
    language: str  # py, sh; pysession, shsession: code that only means harm to a session
    code: str  # @MARK@, @TMPCANARY@, @CKCANARY@, @CHECKOUT@, @HOME@ filled per try
    expected: frozenset[str] | None = None  # the statuses that name what it did


def entry(name: str, language: str, code: str, *expected: str) -> Entry:
    return Entry(name, language, code, frozenset(expected) if expected else None)


def encoded(code: str) -> str:
    """`code` in base64 (a lone surrogate a mutation put in kept as its UTF-8 bytes)."""
    return base64.b64encode(code.encode("utf-8", "surrogatepass")).decode()


def wrap_python(code: str) -> str:
    return f"exec(__import__('base64').b64decode('{encoded(code)}'))"


def shell_of_python(code: str) -> str:
    return f"python3 -c \"$(printf %s '{encoded(code)}' | base64 -d)\""


def python_of_shell(code: str) -> str:
    return f"import subprocess\nsubprocess.run(['bash', '-c', {code!r}])"


_WRITE_OUTSIDE_PY = """import os, shutil
for folder in ('/', '/tmp', '/usr', '/etc', '/var/tmp', '/dev/shm', '@CHECKOUT@', '@HOME@'):
    try:
        open(os.path.join(folder, '@MARK@'), 'w').write('x')
    except OSError as error:
        print(folder, error)
for path in ('@TMPCANARY@', '@CKCANARY@'):
    for act in (lambda: open(path, 'w').write('changed'), lambda: os.remove(path),
                lambda: shutil.rmtree(os.path.dirname(path))):
        try:
            act()
        except OSError as error:
            print(path, error)
"""
_READ_SECRETS_PY = """for path in ('/etc/shadow', '@TMPCANARY@', '@CKCANARY@', '@CHECKOUT@/README.md',
             '/proc/1/environ', '/proc/1/fd/0', '@HOME@/.bash_history', '/proc/1/root/etc/shadow'):
    try:
        print(open(path, errors='replace').read()[:2000])
    except OSError as error:
        print(path, error)
"""
_NETWORK_PY = """import socket
for host, port in (('127.0.0.1', 5432), ('127.0.0.1', 3306), ('localhost', 5432),
                   ('10.0.2.2', 5432), ('172.17.0.1', 3306), ('8.8.8.8', 53)):
    try:
        socket.create_connection((host, port), 0.5).close()
        print('port-' + 'reached', host, port)
    except OSError as error:
        print(host, port, error)
for name in ('localhost', 'example.com', 'pypi.org'):
    try:
        print(name, socket.getaddrinfo(name, 80)[:1])
    except OSError as error:
        print(name, error)
"""
_ROOT_CHECK_PY = """import os
mapped = open('/proc/self/uid_map').read().split()
if os.geteuid() == 0 and mapped[:2] == ['0', '0']:
    print('uid-zero-' + 'reached')
"""
_SETUID_PY = _ROOT_CHECK_PY.replace("import os", """import os, subprocess
for argv in (['su', '-c', 'id'], ['mount', '-t', 'tmpfs', 'none', '/usr'], ['passwd', '-d', 'root'],
             ['newgrp', 'root'], ['unshare', '-r', 'id'], ['chsh', '-s', '/bin/sh']):
    try:
        print(subprocess.run(argv, capture_output=True, timeout=1, stdin=subprocess.DEVNULL))
    except (OSError, subprocess.SubprocessError) as error:
        print(argv, error)
for call in (lambda: os.setuid(0), lambda: os.setresuid(0, 0, 0), lambda: os.chroot('/')):
    try:
        call()
    except OSError as error:
        print(error)""")
_PTRACE_PY = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for pid in (1, os.getppid()):
    print(pid, libc.ptrace(16, pid, 0, 0), ctypes.get_errno())
print(libc.prctl(4, 1, 0, 0, 0), libc.unshare(0x10000000 | 0x20000))
"""
_DOUBLE_FORK_PY = """import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp('sleep', ['@MARK@-double-fork', '300'])
    os._exit(0)
time.sleep(0.1)
print('parent done')
"""

CORPUS: tuple[Entry, ...] = (
    # processes
    entry("py_fork_bomb", "py", "import os\nwhile True:\n    os.fork()", "process_limit"),
    entry("py_fork_bomb_quiet", "py",
          "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
          "process_limit", "timeout", "cpu_limit"),
    # (the threads started keep the interpreter from exiting: the wall bound ends it)
    entry("py_thread_bomb", "py", "import threading, time\nwhile True:\n"
          "    threading.Thread(target=time.sleep, args=(60,)).start()", "process_limit",
          "timeout"),
    entry("sh_fork_bomb", "sh", ":(){ :|:& };:",
          "ok", "process_limit", "error_exit", "memory_limit"),
    entry("sh_fork_bomb_wait", "sh", ":(){ :|:& };:; wait; sleep 5", "process_limit", "timeout"),
    # memory
    entry("py_bytearray_10g", "py", "x = bytearray(10**10)", "memory_limit"),
    entry("py_string_1g", "py", "x = 'a' * 10**9", "memory_limit"),
    entry("py_list_growth", "py", "l = []\nwhile True:\n    l.append(' ' * 10**6)",
          "memory_limit"),
    entry("sh_python_hog", "sh", "python3 -c 'x = bytearray(10**10)'", "memory_limit"),
    entry("sh_variable_hog", "sh", "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo ${#x}",
          "memory_limit", "timeout", "cpu_limit"),
    # output
    entry("py_endless_lines", "py", "while True:\n    print('x' * 100)", "output_limit"),
    entry("py_no_newline", "py", "import sys\nwhile True:\n    sys.stdout.write('x')",
          "output_limit"),
    entry("py_stderr_flood", "py", "import sys\nwhile True:\n    sys.stderr.write('e' * 1000)",
          "output_limit"),
    entry("py_binary_flood", "py", "import os\nwhile True:\n    os.write(1, os.urandom(4096))",
          "output_limit"),
    entry("py_invalid_utf8", "py", "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\xc3("
          "\\xed\\xa0\\x80\\x00\\x1b[2J' * 300)\nsys.stderr.buffer.write(b'\\x80' * 100)", "ok"),
    entry("sh_yes", "sh", "yes", "output_limit"),
    entry("sh_urandom", "sh", "head -c 10000000 /dev/urandom", "output_limit"),
    entry("sh_no_newline", "sh", "while :; do printf x; done", "output_limit"),
    entry("sh_zero_bytes", "sh", "cat /dev/zero", "output_limit"),
    # time
    entry("py_sleep", "py", "import time\ntime.sleep(60)", "timeout"),
    entry("py_spin", "py", "while True:\n    pass", "cpu_limit", "timeout"),
    entry("sh_sleep", "sh", "sleep 60", "timeout"),
    entry("sh_spin", "sh", "while :; do :; done", "cpu_limit", "timeout"),
    entry("sh_stop_self", "sh", "kill -STOP $$", "timeout"),
    # files
    entry("py_big_file", "py", "open('big', 'wb').write(b'x' * (2 * 1024 * 1024))",
          "file_size_limit"),
    entry("py_fill_disk", "py", "i = 0\nwhile True:\n"
          "    open(f'f{i}', 'wb').write(b'x' * (512 * 1024))\n    i += 1", "disk_limit"),
    entry("sh_big_file", "sh", "head -c 2000000 /dev/zero > big", "file_size_limit"),
    entry("sh_fill_disk", "sh", "for i in $(seq 20); do head -c 900000 /dev/zero > f$i; done",
          "disk_limit"),
    entry("py_write_outside", "py", _WRITE_OUTSIDE_PY, "ok"),
    entry("sh_write_outside", "sh",
          "for d in / /tmp /usr /etc /var/tmp /dev/shm @CHECKOUT@ @HOME@; do "
          "echo x > $d/@MARK@; cp /bin/sh $d/@MARK@.sh; done; echo changed > @TMPCANARY@; "
          "rm -rf @TMPCANARY@ @CKCANARY@ @CHECKOUT@/README.md; ln -s / root && "
          "echo x > root/@MARK@; mkdir -p @HOME@/.ssh && echo key >> @HOME@/.ssh/authorized_keys"),
    entry("py_read_secrets", "py", _READ_SECRETS_PY, "ok"),
    entry("sh_read_secrets", "sh",
          "cat /etc/shadow @TMPCANARY@ @CKCANARY@ @CHECKOUT@/README.md /proc/1/environ; "
          "ls -la @CHECKOUT@ @HOME@ /root/.ssh /etc /proc/1/root/; "
          "find / -xdev -name 'fuzz_sandboxes_canary*' 2>/dev/null"),
    # network
    entry("py_network", "py", _NETWORK_PY, "ok"),
    entry("sh_network", "sh",
          "for p in 5432 3306; do (exec 3<>/dev/tcp/127.0.0.1/$p) && echo port-reach''ed $p; "
          "done; getent hosts example.com localhost; cat /etc/resolv.conf", "error_exit"),
    # signals, to everything, to the supervisor, to itself
    entry("sh_kill_all", "sh", "kill -9 -1; echo survived", "ok", "error_exit"),
    entry("py_kill_all", "py", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('after')",
          "ok", "error_exit"),
    *(entry(f"sh_signal_1_{name}", "sh", f"kill -{name} 1; sleep 0.2; echo alive",
            "ok", "error_exit")
      for name in ("KILL", "TERM", "INT", "HUP", "QUIT", "STOP", "SEGV", "USR1", "PIPE",
                   "XCPU", "ALRM", "CHLD")),
    *(entry(f"py_signal_1_{name}", "py", f"import os, signal, time\nos.kill(1, signal.SIG{name})"
            f"\ntime.sleep(0.2)\nprint('alive')", "ok", "error_exit")
      for name in ("KILL", "TERM", "INT", "HUP")),
    *(entry(f"py_signal_self_{name}", "py",
            f"import os, signal, time\nos.kill(os.getpid(), signal.SIG{name})\ntime.sleep(5)",
            *statuses)
      for name, statuses in (("SEGV", ("error_exit",)), ("KILL", ("error_exit",)),
                             ("STOP", ("timeout",)), ("XCPU", ("cpu_limit",)),
                             ("XFSZ", ("timeout",)), ("TERM", ("error_exit",)))),
    # streams
    entry("sh_close_streams", "sh", "exec 0<&- 1>&- 2>&-; sleep 0.3; echo gone", "ok",
          "error_exit"),
    entry("py_close_streams", "py", "import os, time\nfor fd in (0, 1, 2):\n    os.close(fd)\n"
          "time.sleep(0.3)", "ok"),
    # left in the background
    entry("sh_nohup", "sh", "nohup bash -c 'exec -a @MARK@-nohup sleep 300' >/dev/null 2>&1 &",
          "ok"),
    entry("sh_setsid", "sh", "setsid bash -c 'exec -a @MARK@-setsid sleep 300' &", "ok"),
    entry("sh_disown", "sh", "bash -c 'exec -a @MARK@-disown sleep 300' & disown", "ok"),
    entry("sh_subshell", "sh", "( ( exec -a @MARK@-sub sleep 300 ) & ) &", "ok"),
    entry("py_double_fork", "py", _DOUBLE_FORK_PY, "ok"),
    entry("py_popen_session", "py", "import subprocess\nsubprocess.Popen(['bash', '-c', "
          "'exec -a @MARK@-popen sleep 300'], start_new_session=True)", "ok"),
    # argv, descriptors
    entry("sh_huge_argv", "sh", "/bin/true $(head -c 3000000 /dev/zero | tr '\\0' x)",
          "error_exit"),
    entry("py_huge_argv", "py", "import subprocess\nsubprocess.run(['true'] + ['x' * 1000] * 3000)",
          "error_exit"),
    entry("py_many_files", "py", "files = [open('/dev/null') for _ in range(100000)]",
          "error_exit"),
    entry("sh_many_files", "sh", "for i in $(seq 1000); do exec {fd}</dev/null || exit 3; done",
          "error_exit"),
    # privileges
    entry("py_ptrace", "py", _PTRACE_PY, "ok"),
    entry("py_setuid", "py", _SETUID_PY, "ok"),
    entry("sh_setuid", "sh", "su -c id; mount -t tmpfs none /mnt; unshare -r id; "
          + shell_of_python(_ROOT_CHECK_PY)),
    # ways to end
    entry("py_os_exit", "py", "import os\nprint('bye', end='')\nos._exit(3)", "error_exit"),
    entry("py_sys_exit_0", "py", "import sys\nsys.exit(0)", "ok"),
    entry("py_sys_exit_text", "py", "import sys\nsys.exit('goodbye')", "error_exit"),
    entry("py_recursion", "py", "def f(n):\n    return f(n + 1)\nf(0)", "error_exit"),
    entry("py_recursion_unbounded", "py", "import sys\nsys.setrecursionlimit(10**7)\n"
          "def f(n):\n    return f(n + 1)\nf(0)", "error_exit", "memory_limit", "timeout",
          "cpu_limit"),
    entry("sh_recursion", "sh", "f(){ f; }; f", "error_exit", "memory_limit", "timeout",
          "cpu_limit"),
    entry("sh_exit", "sh", "exit 7", "error_exit"),
    # a persistent session harmed for the calls after it
    entry("session_close_requests", "pysession", "import os\nos.close(3)", "error_exit", "ok"),
    entry("session_close_answers", "pysession", "import os\nos.close(4)",
          "error_exit", "timeout"),
    entry("session_garbage_answer", "pysession", "import os\nos.write(4, b'garbage\\n')",
          "error_exit", "ok"),
    entry("session_stale_answers", "pysession",
          "import os\nos.write(4, b'{\"exit_code\": 0}\\n' * 3)", "ok"),
    entry("session_partial_answer", "pysession",
          "import os, time\nos.write(4, b'{')\ntime.sleep(60)", "timeout"),
    entry("session_stale_then_sleep", "pysession",
          "import os, time\nos.write(4, b'{\"exit_code\": 0}\\n')\ntime.sleep(60)", "ok"),
    entry("session_json_replaced", "pysession",
          "import sys\nsys.modules['json'].dumps = lambda *a, **k: 'garbage'", "error_exit", "ok"),
    entry("session_stdout_none", "pysession", "import sys\nsys.stdout = None\nsys.stderr = None",
          "ok", "error_exit"),
    entry("session_builtins_gone", "pysession", "import builtins\ndel builtins.print, "
          "builtins.len, builtins.BaseException", "ok", "error_exit"),
    entry("session_exit", "pysession", "exit()", "error_exit", "ok"),
    entry("session_keyboard_interrupt", "pysession", "raise KeyboardInterrupt", "error_exit"),
    entry("session_thread_spin", "pysession", "import resource, threading\n"
          "resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY,) * 2)\n"
          "threading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()",
          "ok", "cpu_limit"),
    entry("session_thread_spawns_later", "pysession", "import threading, time, subprocess\n"
          "threading.Thread(target=lambda: (time.sleep(0.3), subprocess.Popen(['bash', '-c', "
          "'exec -a @MARK@-later sleep 300']))).start()", "ok"),
    entry("session_thread_floods_later", "pysession", "import os, threading, time\n"
          "threading.Thread(target=lambda: (time.sleep(0.2), [os.write(1, b'x' * 65536) "
          "for _ in iter(int, 1)]), daemon=True).start()", "ok"),
    entry("session_thread_kills_supervisor", "pysession", "import os, threading, time\n"
          "threading.Thread(target=lambda: (time.sleep(0.05), os.kill(1, 15))).start()", "ok"),
    entry("session_dup_over_answers", "pysession",
          "import os\nos.dup2(os.open('/dev/null', os.O_WRONLY), 4)", "error_exit", "timeout"),
    entry("session_segfault", "pysession", "import ctypes\nctypes.string_at(0)", "error_exit"),
    entry("shsession_close_answers", "shsession", "exec 4>&-", "error_exit", "timeout"),
    entry("shsession_close_requests", "shsession", "exec 3<&-", "error_exit", "ok"),
    entry("shsession_stale_answers", "shsession",
          "printf '{\"exit_code\": 0}\\n{\"exit_code\": 0}\\n' >&4", "ok"),
    entry("shsession_partial_answer", "shsession", "printf '{' >&4; sleep 60", "timeout"),
    entry("shsession_exit", "shsession", "exit 4", "error_exit"),
    entry("shsession_exec", "shsession", "exec sleep 60", "timeout"),
    entry("shsession_trap_kill", "shsession", "trap 'sleep 60' EXIT; kill -9 $$", "error_exit"),
    entry("shsession_background_job", "shsession",
          "bash -c 'exec -a @MARK@-job sleep 300' &", "ok"),
    # (the shell cannot answer with 5 descriptors: the wall bound ends the call)
    entry("shsession_broken_env", "shsession", "unset PATH; IFS=x; cd /; ulimit -n 5", "ok",
          "timeout"),
)
ENTRIES = {item.name: item for item in CORPUS}
PROBES = {"run_python": "print('probe')", "python_tool": "print('probe')",
          "run": "echo probe", "bash_tool": "echo probe"}


# ---- the host: canaries, markers, processes ---------------------------------------------
@dataclass
class Host:
    """What must not change outside the sandboxes, and what must not be read there."""

    secret: str
    canaries: tuple[Path, ...]
    secrets: tuple[str, ...]  # text that no output may hold
    baseline: set[int] = field(default_factory=set)  # descendants not of the study

    @classmethod
    def prepare(cls) -> Host:
        secret = secrets.token_hex(16)
        canaries = (Path(tempfile.gettempdir()) / f"fuzz_sandboxes_canary_{os.getpid()}",
                    CHECKOUT / "outputs" / "hostile_inputs" /
                    f"fuzz_sandboxes_canary_{os.getpid()}")
        readme = next(line for line in (CHECKOUT / "README.md").read_text().splitlines()
                      if len(line) >= 40)
        hidden = [secret, readme]
        with contextlib.suppress(OSError):  # a password hash: no output may hold it
            hidden += [line for line in Path("/etc/shadow").read_text().splitlines()
                       if len([*line.split(":"), ""][1]) > 8][:3]
        host = cls(secret, canaries, tuple(hidden))
        host.restore()
        host.baseline = {process.pid for process in live_descendants()}
        return host

    def restore(self) -> None:
        for canary in self.canaries:
            canary.parent.mkdir(parents=True, exist_ok=True)
            canary.write_text(self.secret)

    def fill(self, code: str, marker: str) -> str:
        return (code.replace("@MARK@", marker).replace("@TMPCANARY@", str(self.canaries[0]))
                .replace("@CKCANARY@", str(self.canaries[1]))
                .replace("@CHECKOUT@", str(CHECKOUT)).replace("@HOME@", str(HOME)))

    def output_escapes(self, text: str) -> list[str]:
        found = [f"an output holds {token!r}" for token in (ROOT_TOKEN, NET_TOKEN)
                 if token in text]
        return found + ["an output holds a host secret" for hidden in self.secrets
                        if hidden in text][:1]

    def outside_changes(self, marker: str) -> list[str]:
        """Files the marker names outside the sandbox, canaries changed (each removed or
        restored, so that the next try starts clean)."""
        found = []
        for folder in OUTSIDE:
            for name in (marker, f"{marker}.sh"):
                path = Path(folder) / name
                if path.exists() or path.is_symlink():
                    found.append(f"{path} was made")
                    path.unlink()
        for canary in self.canaries:
            try:
                intact = canary.read_text() == self.secret
            except OSError:
                intact = False
            if not intact:
                found.append(f"{canary} was changed or deleted")
        if found:
            self.restore()
        return found

    def leftovers(self, marker: str) -> list[str]:
        """Processes alive after a close (killed once seen): this process's descendants
        that were not there at the start, and processes anywhere holding the marker."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            left = [process for process in live_descendants()
                    if process.pid not in self.baseline]
            left += [process for process in marked_processes(marker) if process not in left]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        described = []
        for process in left:
            try:
                described.append(" ".join(process.cmdline())[:200])
                process.kill()
            except psutil.Error:
                continue
        return described


def marked_processes(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(marker in part for part in cmdline) and process.pid != os.getpid():
            found.append(process)
    return found


def processes_between_calls(sandbox: Sandbox) -> list[str]:
    """Processes of a sandbox beyond its supervisor and its sessions' interpreters, as
    the host sees them (after a call, the supervisor has killed its leftovers)."""
    supervisor = getattr(sandbox, "supervisor_pid", None)
    try:
        children = psutil.Process(supervisor).children() if supervisor else []
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            cmdline = child.cmdline()
            interpreter = "-c" in cmdline and any("answers" in part or "<&3" in part
                                                  or "-u 3" in part for part in cmdline)
            found += [" ".join(p.cmdline())[:120]
                      for p in ([] if interpreter else [child]) + child.children(recursive=True)
                      if p.status() != psutil.STATUS_ZOMBIE]
        except psutil.Error:
            continue
    return found


# ---- the tally ----------------------------------------------------------------------------
COUNTED = ("crashes", "hangs", "escapes", "leftovers", "bounds_exceeded", "misnamed",
           "infrastructure", "unscored")


@dataclass
class Finding:
    kind: str
    what: str
    count: int = 0
    example: str = ""


@dataclass
class Tally:
    target: str
    tries: int = 0
    calls: int = 0
    crashes: int = 0
    hangs: int = 0
    escapes: int = 0
    leftovers: int = 0
    bounds_exceeded: int = 0
    misnamed: int = 0
    infrastructure: int = 0
    unscored: int = 0
    alive_between_calls: int = 0  # noted: a session's thread may start processes then
    max_call_s: float = 0.0
    seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    findings: dict[str, Finding] = field(default_factory=dict)

    def record(self, kind: str, what: str, example: object) -> None:
        if kind in COUNTED:
            setattr(self, kind, getattr(self, kind) + 1)
        key = f"{kind}: {what[:160]}"
        finding = self.findings.setdefault(key, Finding(kind, what[:500],
                                                        example=str(example)[:400]))
        finding.count += 1

    @property
    def bad(self) -> int:
        return sum(getattr(self, kind) for kind in COUNTED)


# ---- programs -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    channel: str  # run, run_python, python_tool, bash_tool
    code: str
    expected: frozenset[str] | None = None
    name: str = ""


def scale_numbers(rng: random.Random, code: str) -> str:
    factor = rng.choice((0.001, 0.1, 10, 1000))
    return re.sub(r"\b\d+\b", lambda match: str(max(0, int(int(match.group()) * factor))),
                  code, count=rng.randint(1, 3))


def mutate(rng: random.Random, code: str, language: str) -> str:
    """One edit of a piece of hostile code: sent to the background, scaled, repeated,
    carried by the other language, or edited character by character."""
    python = language.startswith("py")
    edit = rng.randrange(7)
    if edit == 0:  # to the background: a thread or a fork (Python), & or nohup (shell)
        if python:
            return rng.choice((f"import threading\nthreading.Thread(target=lambda: "
                               f"{wrap_python(code)}).start()",
                               f"import os\nif os.fork() == 0:\n    {wrap_python(code)}"))
        return rng.choice((f"( {code} ) &", f"nohup bash -c {json.dumps(code)} &",
                           f"setsid bash -c {json.dumps(code)} & disown"))
    if edit == 1:
        return scale_numbers(rng, code)
    if edit == 2:  # repeated
        return "\n".join([code] * rng.choice((2, 5)))
    if edit == 3:  # carried by the other language
        return shell_of_python(code) if python else python_of_shell(code)
    if edit == 4:  # characters replaced, cut or doubled
        position = rng.randint(0, len(code))
        end = rng.randint(position, min(len(code), position + 20))
        return rng.choice((code[:position] + random_character(rng) + code[position + 1:],
                           code[:position] + code[end:], code[:end] + code[position:end] * 50
                           + code[end:]))
    if edit == 5:  # run under try, so that the next part runs too
        if python:
            return f"try:\n    {wrap_python(code)}\nexcept BaseException:\n    pass"
        return f"{{ {code} ; }} 2>/dev/null || true"
    return code


def combine(rng: random.Random, parts: Sequence[Entry]) -> tuple[str, str]:
    """(language, code) of parts run one after the other (shell: also in a pipe or in
    the background), each as the first part's language."""
    language = "py" if parts[0].language.startswith("py") else "sh"
    pieces = []
    for part in parts:
        same = part.language.startswith("py") == (language == "py")
        if same:
            pieces.append(part.code)
        else:
            pieces.append(python_of_shell(part.code) if language == "py"
                          else shell_of_python(part.code))
    if language == "py":
        return language, "\n".join(pieces)
    return language, rng.choice(("; ", " & ", " | ", " && ", "\n")).join(pieces)


def random_program(rng: random.Random) -> list[Call]:
    """1-3 calls, each a corpus entry or a combination of up to three, mutated 0-2 times;
    session calls share their session (state harmed by one is met by the next)."""
    calls = []
    for _ in range(rng.randint(1, 3)):
        parts = rng.sample(CORPUS, rng.choice((1, 1, 2, 3)))
        language, code = combine(rng, parts)
        for _ in range(rng.choice((0, 1, 1, 2))):
            code = mutate(rng, code, language)
        channel = rng.choice(CHANNELS["py" if language == "py" else "sh"])
        if parts[0].language.endswith("session") and len(parts) == 1:
            channel = CHANNELS[parts[0].language][0]
        calls.append(Call(channel, code, name="+".join(part.name for part in parts)))
    return calls


def fixed_programs(entries: Iterable[Entry]) -> list[list[Call]]:
    return [[Call(channel, item.code, item.expected, item.name)]
            for item in entries for channel in CHANNELS[item.language]]


# ---- one try ------------------------------------------------------------------------------
def call_once(sandbox: Sandbox, tools: dict[str, Any], channel: str, code: str
              ) -> tuple[CallResult, str | None]:
    """The call's result and, through a tool, its observation text."""
    if channel == "run":
        return sandbox.run(code), None
    if channel == "run_python":
        return sandbox.run_python(code), None
    tool = tools[channel]
    text, result = tool.run({tool.argument: code})
    if result is None:
        raise TypeError(f"the {channel} tool refused its own argument shape: {text[:200]}")
    return result, text


def check_call(tally: Tally, host: Host, call: Call, result: Any, text: str | None,
               seconds: float, example: str, died: bool) -> None:
    """The checks of one call's result; `died`: an earlier call of the try said the
    sandbox died (then `sandbox_died` is this call's right status)."""
    if not isinstance(result, CallResult) or not isinstance(result.status, CallStatus):
        tally.record("crashes", f"{call.channel} returned {type(result).__name__}", example)
        return
    status = result.status
    tally.calls += 1
    tally.statuses[f"{call.channel} {status.value}"] += 1
    tally.max_call_s = max(tally.max_call_s, seconds)
    bound = LIMITS.wall_timeout_s + START_GRACE_S + SLACK_S
    if status is CallStatus.SANDBOX_DIED:
        bound += SETTINGS.hang_grace_s
    if seconds > bound:
        tally.record("bounds_exceeded", f"a {call.channel} call ({status.value}) took "
                     f"{seconds:.1f} s, bound {bound:g} s", example)
    if len(result.stdout) + len(result.stderr) > LIMITS.output_limit_bytes:
        tally.record("bounds_exceeded", f"{call.channel}: more output kept than the bound",
                     example)
    if text is not None and len(text) > MAX_OBSERVATION_CHARS + OBSERVATION_NOTES_CHARS:
        tally.record("bounds_exceeded", f"{call.channel}: an observation of {len(text)} "
                     f"characters", example)
    if status in BOUND_STATUSES and not result.detail:
        tally.record("bounds_exceeded", f"{status.value} without its detail", example)
    if status.is_infrastructure and not (died and status is CallStatus.SANDBOX_DIED):
        tally.record("infrastructure", f"{call.name or 'mutated'} via {call.channel}: "
                     f"{status.value}: {result.detail[:200]}", example)
    elif call.expected is not None and status.value not in call.expected:
        tally.record("misnamed", f"{call.name} via {call.channel}: {status.value}, expected "
                     f"{sorted(call.expected)} ({result.detail or result.stderr[-150:]!r})",
                     example)
    for escape in host.output_escapes(result.stdout + result.stderr + (text or "")):
        tally.record("escapes", f"{call.name or 'mutated'} via {call.channel}: {escape}",
                     example)


def run_program(tally: Tally, host: Host, backend: Any, program: list[Call],
                marker: str) -> None:
    """Open a sandbox, make the program's calls, probe it, close it; counted into tally."""
    example = " || ".join(f"{call.channel}: {call.code[:150]!r}" for call in program)
    sandbox = backend.open()
    died = False
    try:
        tools = {"python_tool": PythonTool(sandbox, MAX_OBSERVATION_CHARS),
                 "bash_tool": BashTool(sandbox, MAX_OBSERVATION_CHARS)}
        probes = [Call(channel, PROBES[channel], name=f"probe after {program[0].name}")
                  for channel in dict.fromkeys([call.channel for call in program
                                                if call.channel.endswith("_tool")] + ["run"])]
        for index, call in enumerate([*program, *probes]):
            probe = index >= len(program)
            started = time.monotonic()
            try:
                result, text = call_once(sandbox, tools, call.channel,
                                         host.fill(call.code, marker))
            except Exception as error:  # noqa: BLE001 - what the study counts
                tally.record("crashes", f"{call.channel}: {type(error).__name__}: {error}",
                             example)
                continue
            check_call(tally, host, call, result, text, time.monotonic() - started, example,
                       died)
            is_dead = result.status is CallStatus.SANDBOX_DIED
            if probe and not is_dead and not is_dead and result.stdout.strip() != "probe":
                # the model's own session or processes, harmed by its earlier calls
                tally.record("noted", f"a {call.channel} probe after {program[0].name}: "
                             f"{result.status.value}", f"{result.stdout[:80]!r} {example}")
            died = died or is_dead
            if probe and not died and index == len(program):
                left = processes_between_calls(sandbox)
                if left:
                    tally.alive_between_calls += 1
                    tally.record("noted", f"processes alive between calls after "
                                 f"{program[0].name}", f"{left} {example}")
    finally:
        try:
            sandbox.close()
        except Exception as error:  # noqa: BLE001 - what the study counts
            tally.record("crashes", f"close: {type(error).__name__}: {error}", example)


def bounded_try(tally: Tally, host: Host, bound_s: float, work: Callable[[], None],
                marker: str, example: str) -> None:
    """`work` in a thread within `bound_s`, then the host's checks."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - handed to the study
            failure.append(error)

    thread = threading.Thread(target=target, name="fuzz-try", daemon=True)
    thread.start()
    thread.join(bound_s)
    tally.tries += 1
    if thread.is_alive():
        tally.record("hangs", f"a try ran past {bound_s:g} s", example)
        # its sandbox is still held by the thread: not the next try's leftover
        host.baseline |= {process.pid for process in live_descendants()}
    elif failure:
        tally.record("crashes", f"{type(failure[0]).__name__}: {failure[0]}", example)
    for change in host.outside_changes(marker):
        tally.record("escapes", change, example)
    for process in host.leftovers(marker):
        tally.record("leftovers", f"a process after close: {process[:120]}", example)


def program_bound(program: Sequence[Call]) -> float:
    per_call = LIMITS.wall_timeout_s + START_GRACE_S + SETTINGS.hang_grace_s + SLACK_S
    return SETTINGS.start_timeout_s + (len(program) + 3) * per_call + 10.0


def fuzz_calls(host: Host, entries: Sequence[Entry], tries: int, rng: random.Random
               ) -> Tally:
    tally = Tally("sandbox calls and tools")
    backend = open_backend(SETTINGS)
    started = time.monotonic()
    programs = fixed_programs(entries) + [random_program(rng) for _ in range(tries)]
    for index, program in enumerate(programs):
        marker = f"fuzzmark{index:05d}{secrets.token_hex(3)}"
        example = " || ".join(f"{call.channel}: {call.code[:300]!r}" for call in program)
        bounded_try(tally, host, program_bound(program),
                    lambda program=program, marker=marker: run_program(
                        tally, host, backend, program, marker), marker, example)
        progress(tally, index, len(programs), started)
    tally.seconds = time.monotonic() - started
    return tally


def progress(tally: Tally, index: int, total: int, started: float) -> None:
    if (index + 1) % 50 == 0 or index + 1 == total:
        print(f"  {tally.target}: {index + 1}/{total} in {time.monotonic() - started:.0f} s, "
              f"{tally.bad} counted", flush=True)


# ---- tool episodes ------------------------------------------------------------------------
class Script(Agent):
    """Each episode's scripted replies, in order (the last one repeated)."""

    def __init__(self, replies: dict[tuple[str, int], list[str]]) -> None:
        self.replies = replies

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        answers = []
        for episode in episodes:
            script = self.replies[(episode.sample.sample_id, episode.group_index)]
            answers.append(AgentReply(script[min(episode.turns, len(script) - 1)]))
        return answers


def hostile_code(rng: random.Random, language: str) -> str:
    """A corpus entry of `language` (sessions' entries included), mutated now and then."""
    items = [item for item in CORPUS if item.language.startswith(language)]
    code = rng.choice(items).code
    return mutate(rng, code, language) if rng.random() < 0.3 else code


def code_tests_replies(rng: random.Random, solution: str) -> list[str]:
    """A python tool call of hostile code, maybe a second, then a final answer whose code
    runs hostile code as it loads, inside the function, or alone."""
    calls = [hermes_text(None, [("python", {"code": hostile_code(rng, "py")})])
             for _ in range(rng.randint(1, 2))]
    hostile = hostile_code(rng, "py")
    answer = rng.choice((
        f"{hostile}\n{solution}", hostile,
        re.sub(r"(def \w+\(.*\):\n)", lambda match: f"{match.group(1)}    "
               f"{wrap_python(hostile)}\n", solution, count=1),
        f"{solution}\n{wrap_python(hostile)}"))
    return [*calls, f"```python\n{answer}\n```"]


def shell_replies(rng: random.Random, sample: Any) -> list[str]:
    """A bash tool call of hostile shell; for a file task a hostile output file or script
    (the script is run by the check in a fresh sandbox); then the final answer."""
    replies = [hermes_text(None, [("bash", {"command": hostile_code(rng, "sh")})])]
    if sample.category == "fix_script":
        script = encoded(hostile_code(rng, "py"))
        replies.append(hermes_text(None, [("bash", {
            "command": f"printf %s '{script}' | base64 -d > script.py"})]))
    elif sample.category == "sort_file":
        replies.append(hermes_text(None, [("bash", {"command": rng.choice((
            "ln -sf /etc/shadow sorted.txt", "mkfifo sorted.txt",
            "head -c 3000000 /dev/urandom > sorted.txt", "ln -sf /proc/1/environ sorted.txt",
            "mkdir sorted.txt", "printf '\\xff\\xfe' > sorted.txt",
            "ln -sf @TMPCANARY@ sorted.txt"))})]))
    return [*replies, rng.choice(("Done.", "\\boxed{3}", "\\boxed{" + "9" * 5000 + "}"))]


def fuzz_episodes(host: Host, name: str, episodes: int, batch_size: int,
                  rng: random.Random) -> Tally:
    tally = Tally(f"{name} episodes")
    started = time.monotonic()
    family: ToolTask[Any]
    if name == "code_tests":
        family = CodeTestsTask(splits=Splits(num_train=64, num_validation=1, seed=0), max_round=3,
                               call_timeout_s=1.0, check_timeout_s=LIMITS.wall_timeout_s,
                               sandbox=SETTINGS, max_tool_output_chars=MAX_OBSERVATION_CHARS)
    else:
        family = ShellTask(kinds=["fix_script", "sort_file", "count_lines"],
                           splits=Splits(num_train=64, num_validation=1, seed=0), max_round=4,
                           script_timeout_s=LIMITS.wall_timeout_s, sandbox=SETTINGS,
                           max_tool_output_chars=MAX_OBSERVATION_CHARS)
    try:
        for batch in range(math.ceil(episodes / batch_size)):
            size = min(batch_size, episodes - batch * batch_size)
            samples = [(family.get_sample(f"train-{(batch * batch_size + index) % 64:06d}"), 0)
                       for index in range(size)]
            marker = f"fuzzmark{batch:05d}{secrets.token_hex(3)}"
            replies = {}
            for sample, group in samples:
                script = (code_tests_replies(rng, sample.data["solution"]) if name == "code_tests"
                          else shell_replies(rng, sample))
                replies[(sample.sample_id, group)] = [host.fill(reply, marker) for reply in script]
            example = json.dumps(list(replies.values()))[:400]
            rolled: list[list[Episode]] = []
            bounded_try(tally, host, STEP_TIMEOUT_S * (family.max_round + 2),
                        lambda samples=samples, replies=replies, batch=batch, rolled=rolled:
                        rolled.append(roll_out_lockstep(
                            samples, family, Script(replies), batch, list(range(len(samples))),
                            faults=FaultPolicy(step_timeout_s=STEP_TIMEOUT_S))),
                        marker, example)
            tally.tries += len(samples) - 1  # bounded_try counted the batch once
            for episode in rolled[0] if rolled else []:
                check_episode(tally, host, episode, replies)
            progress(tally, batch * batch_size + size - 1, episodes, started)
    finally:
        family.close()
    tally.seconds = time.monotonic() - started
    return tally


def check_episode(tally: Tally, host: Host, episode: Episode,
                  replies: dict[tuple[str, int], list[str]]) -> None:
    example = json.dumps(replies[(episode.sample.sample_id, episode.group_index)])[:400]
    tally.statuses[f"episode {episode.status.value}"] += 1
    tally.statuses[f"check {episode.info.get('check_status', 'answered')}"] += 1
    for key, value in episode.metrics.items():
        if key.startswith("sandbox/") and value:
            tally.statuses[f"tool {key.removeprefix('sandbox/')}"] += int(value)
            tally.calls += int(value)
    if episode.status.failed:
        kind = "hangs" if "TimeoutError" in (episode.error or "") else "unscored"
        tally.record(kind, f"{episode.sample.category}: {episode.status.value}: "
                     f"{(episode.error or '').strip().splitlines()[-1:]}", example)
    elif not math.isfinite(episode.reward):
        tally.record("unscored", f"reward {episode.reward}", example)
    if episode.metrics.get("sandbox_died"):
        tally.record("infrastructure", f"{episode.sample.category}: a tool call ended "
                     f"sandbox_died: {str(episode.info.get('sandbox_detail'))[:150]}", example)
    text = json.dumps([message.content for message in episode.chat], default=str)
    for escape in host.output_escapes(text):
        tally.record("escapes", f"{episode.sample.category}: {escape}", example)


# ---- the study ----------------------------------------------------------------------------
def summary_table(tallies: Sequence[Tally]) -> str:
    columns = ("tries", "calls", *COUNTED, "alive_between_calls")
    lines = ["| target | " + " | ".join(columns) + " | slowest call s | seconds |",
             "| --- |" + " ---: |" * (len(columns) + 2)]
    for t in tallies:
        lines.append(f"| {t.target} | " + " | ".join(str(getattr(t, c)) for c in columns)
                     + f" | {t.max_call_s:.1f} | {t.seconds:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tries", type=int, default=200,
                        help="random programs, beside the fixed corpus")
    parser.add_argument("--entries", default="all",
                        help="corpus entries tried first (comma-separated names), or all")
    parser.add_argument("--episodes", type=int, default=24, help="episodes per tool task")
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--tasks", default="code_tests,shell_tasks")
    parser.add_argument("--output", type=Path, help="the counts and findings as JSON")
    arguments = parser.parse_args(argv)
    rng = random.Random(arguments.seed)
    entries = CORPUS if arguments.entries == "all" else \
        [ENTRIES[name] for name in arguments.entries.split(",") if name]
    host = Host.prepare()
    started = time.monotonic()
    tallies: list[Tally] = []
    try:
        print("sandbox calls and tools", flush=True)
        tallies.append(fuzz_calls(host, entries, arguments.tries, rng))
        for name in (arguments.tasks.split(",") if arguments.episodes else []):
            print(f"{name} episodes", flush=True)
            tallies.append(fuzz_episodes(host, name, arguments.episodes,
                                         arguments.batch_size, rng))
    finally:
        for canary in host.canaries:
            canary.unlink(missing_ok=True)
    seconds = time.monotonic() - started
    print(summary_table(tallies))
    for tally in tallies:
        print(f"- {tally.target}: {dict(sorted(tally.statuses.items()))}")
        for finding in tally.findings.values():
            print(f"- {tally.target}: {finding.count} x {finding.kind}: {finding.what[:240]}\n"
                  f"    e.g. {finding.example[:240]}")
    print(f"{sum(t.tries for t in tallies)} tries in {seconds:.0f} s")
    if arguments.output is not None:
        arguments.output.parent.mkdir(parents=True, exist_ok=True)
        arguments.output.write_text(json.dumps({
            "command": " ".join(["python -m experiments.hostile_inputs.fuzz_sandboxes",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "seconds": seconds,
            "bounds": {"limits": LIMITS.model_dump(), "workdir_bytes": SETTINGS.workdir_bytes,
                       "hang_grace_s": SETTINGS.hang_grace_s, "slack_s": SLACK_S,
                       "step_timeout_s": STEP_TIMEOUT_S},
            "targets": [{**asdict(t), "statuses": dict(t.statuses),
                         "findings": list(map(asdict, t.findings.values()))}
                        for t in tallies]}, indent=1))
    return 1 if any(t.bad for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
