"""The unit-test checker that runs inside a sandbox: standard library only, no import of
the project (the host sends this file's text as `python3 -I -c`, with `parent_main()` or
`child_main()` appended; the project is not mounted there).

Two processes, so that the submitted code never runs where the verdicts are made:
- the parent (trusted code only) reads the whole request from its stdin (the tests, the
  nonce, the submitted code: nothing comes from a file the agent could have changed),
  makes itself not dumpable (the child cannot read its memory or file descriptors through
  /proc), starts the child in a fresh empty folder and runs the tests: each test is a
  statement such as `assert candidate(3) == 5`, where `candidate` is a proxy that sends
  the arguments to the child and returns what the child sends back;
- the child runs the trusted prelude and the submitted code (`__name__` is not
  "__main__", so a main guard does not run), then answers calls: each return value is
  sent as tagged JSON of the plain built-in types only (an int subclass or an object with
  its own `__eq__` is refused: the call fails), so whatever the submitted code does in its
  own process (exit at import, patch modules, print fake lines, inspect frames) reaches
  the parent only as return values of calls.

The parent prints exactly one line, `CODE_TESTS_RESULT <nonce> <json>`, with the verdict of
each test; the host takes the run's result only from a single line carrying its nonce.
The first call past its time bound ends the check (status "timeout", the tests not yet
run failed); a child that dies fails the calls from then on (status "crashed").
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import subprocess
import sys
import tempfile
import time

RESULT_MARKER = "CODE_TESTS_RESULT"
PR_SET_DUMPABLE = 4
MAX_DEPTH = 100  # nesting of a value sent between the processes


# ------------------------------------------------------------------ values as tagged JSON


class NotPlainData(TypeError):
    """A value that is not built of the plain built-in types."""


def encode(value, depth=0):
    """`value` as tagged JSON data; only exact built-in types (no subclasses)."""
    if depth > MAX_DEPTH:
        raise NotPlainData("nested too deeply")
    kind = type(value)
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", hex(value)]
    if kind is float:
        return ["float", value.hex()]
    if kind is complex:
        return ["complex", value.real.hex(), value.imag.hex()]
    if kind is str:
        return ["str", value]
    if kind is bytes:
        return ["bytes", value.hex()]
    if kind in (list, tuple, set, frozenset):
        return [kind.__name__, [encode(item, depth + 1) for item in value]]
    if kind is dict:
        return ["dict", [[encode(key, depth + 1), encode(item, depth + 1)]
                         for key, item in value.items()]]
    raise NotPlainData(f"a value of type {kind.__name__!r} is not plain data")


def decode(data, depth=0):
    """The value `encode` wrote; NotPlainData for anything else."""
    if depth > MAX_DEPTH or not isinstance(data, list) or not data \
            or not isinstance(data[0], str):
        raise NotPlainData("not an encoded value")
    tag, rest = data[0], data[1:]
    try:
        if tag == "none" and not rest:
            return None
        if tag == "bool" and len(rest) == 1 and isinstance(rest[0], bool):
            return rest[0]
        if tag == "int" and len(rest) == 1:
            return int(rest[0], 16)
        if tag == "float" and len(rest) == 1:
            return float.fromhex(rest[0])
        if tag == "complex" and len(rest) == 2:
            return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
        if tag == "str" and len(rest) == 1 and isinstance(rest[0], str):
            return rest[0]
        if tag == "bytes" and len(rest) == 1:
            return bytes.fromhex(rest[0])
        containers = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
        if tag in containers and len(rest) == 1 and isinstance(rest[0], list):
            return containers[tag](decode(item, depth + 1) for item in rest[0])
        if tag == "dict" and len(rest) == 1 and isinstance(rest[0], list) \
                and all(isinstance(pair, list) and len(pair) == 2 for pair in rest[0]):
            return {decode(key, depth + 1): decode(item, depth + 1) for key, item in rest[0]}
    except (TypeError, ValueError, OverflowError, RecursionError, IndexError) as error:
        raise NotPlainData(f"not an encoded value ({type(error).__name__})") from None
    raise NotPlainData(f"not an encoded value (tag {tag!r})")


# ----------------------------------------------------------------------------- the child


def child_main():
    """Load the prelude and the submitted code, then answer calls until the input ends.

    Requests and answers are JSON lines on the private copies of fd 0 and 1 made first;
    fd 0 and 1 themselves then point at /dev/null, so what the submitted code prints
    does not reach the parent as an answer."""
    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    dumps = json.dumps

    def answer(message):
        channel_out.write(dumps(message).encode() + b"\n")
        channel_out.flush()

    request = json.loads(channel_in.readline())
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(request["prelude"], "<prompt>", "exec"), namespace)
        exec(compile(request["answer"], "<answer>", "exec"), namespace)
        function = namespace.get(request["entry_point"])
        if not callable(function):
            raise NameError(f"the answer defines no function {request['entry_point']!r}")
    except BaseException as error:  # noqa: BLE001 - SystemExit at import included
        answer({"error": f"{type(error).__name__}: {error}"[:500]})
        return
    answer({"loaded": True})
    for line in channel_in:
        call = json.loads(line)
        try:
            result = function(*decode(call["args"]), **decode(call["kwargs"]))
            message = {"value": encode(result)}
        except BaseException as error:  # noqa: BLE001 - the call's failure is its answer
            message = {"error": f"{type(error).__name__}: {error}"[:500]}
        answer(message)


# ---------------------------------------------------------------------------- the parent


class CandidateFailed(Exception):
    """A call of the submitted function did not return a plain value."""


class Child:
    """The child process, called through one request and one answer line at a time."""

    def __init__(self, source, folder, call_timeout_s, max_answer_bytes):
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", source], cwd=folder, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        self.call_timeout_s = call_timeout_s
        self.max_answer_bytes = max_answer_bytes
        self.buffer = b""
        self.ended = None  # "timeout" or "crashed" once the child cannot answer

    def ask(self, message):
        """The child's answer to `message` (a dict); CandidateFailed when it does not
        answer in time or in form."""
        if self.ended is not None:
            raise CandidateFailed(f"not run: the submitted code {self.ended} earlier")
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:
            self.end("crashed")
            raise CandidateFailed("the submitted code's process ended") from None
        line = self.read_line()
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            raise CandidateFailed("the submitted code's process answered garbage")
        return answer

    def read_line(self):
        deadline = time.monotonic() + self.call_timeout_s
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.end("timeout")
                raise CandidateFailed(f"timeout: no answer within {self.call_timeout_s:g} s")
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                self.end("crashed")
                raise CandidateFailed("the submitted code's process ended")
            self.buffer += data
            if len(self.buffer) > self.max_answer_bytes:
                self.end("crashed")
                raise CandidateFailed(f"an answer longer than {self.max_answer_bytes} bytes")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def end(self, why):
        self.ended = why
        self.process.kill()
        self.process.wait()


def run_tests(request):
    """Each step's verdict: (status, verdicts of the test steps, first failure)."""
    folder = tempfile.mkdtemp(prefix="check-")
    child = Child(request["child"], folder, request["call_timeout_s"],
                  request["max_answer_bytes"])
    loaded = None
    try:
        loaded = child.ask({"prelude": request["prelude"], "answer": request["answer"],
                            "entry_point": request["entry_point"]})
    except CandidateFailed as error:
        loaded = {"error": str(error)}
    tests = [step for step in request["steps"] if step["test"]]
    if "error" in loaded or loaded.get("loaded") is not True:
        status = child.ended or "load_error"
        return status, [False] * len(tests), str(loaded.get("error", "not loaded"))[:500]

    def candidate(*args, **kwargs):
        answer = child.ask({"args": encode(list(args)), "kwargs": encode(dict(kwargs))})
        if "error" in answer:
            raise CandidateFailed(str(answer["error"])[:500])
        try:
            return decode(answer.get("value"))
        except NotPlainData as error:
            raise CandidateFailed(str(error)) from None

    namespace = {"__name__": "tests"}
    verdicts, failure = [], ""
    for step in [{"code": request["setup"], "test": False}, *request["steps"]]:
        # the tests may call the function by its own name too, not the prompt's stub
        namespace.update(candidate=candidate, **{request["entry_point"]: candidate})
        try:
            exec(compile(step["code"], "<tests>", "exec"), namespace)
            passed = True
        except Exception as error:  # noqa: BLE001 - a failed test is a verdict
            passed = False
            failure = failure or f"{step['code'].strip()[:300]}: {type(error).__name__}: " \
                                 f"{str(error)[:300]}"
        if step["test"]:
            verdicts.append(passed)
    child.end(child.ended or "done")
    return (child.ended if child.ended in ("timeout", "crashed") else "ok"), verdicts, failure


def parent_main():
    # not dumpable: the child cannot read this process's memory or file descriptors
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    request = json.loads(sys.stdin.buffer.read())
    status, verdicts, failure = run_tests(request)
    print(f"{RESULT_MARKER} {request['nonce']} "
          + json.dumps({"status": status, "verdicts": verdicts, "failure": failure}),
          flush=True)
