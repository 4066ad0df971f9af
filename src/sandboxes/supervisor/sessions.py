"""The persistent interpreters of a sandbox (its `python` and `bash` sessions): a driver
in each reads the model's code from fd 3, runs it in one namespace or shell that lasts
between calls, and answers on fd 4."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess

from .bounds import preexec
from .protocol import CHUNK

PYTHON_DRIVER = r'''
import ast, json, os, resource, sys, traceback
requests = os.fdopen(3, "rb", buffering=0)
answers = os.fdopen(4, "wb", buffering=0)
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
del ast, json, os, resource, traceback
def _serve(requests=requests, answers=answers):
    import ast, json, resource, sys, traceback
    while True:
        header = requests.readline()
        if not header:
            return
        length, cpu = header.split()
        code = b""
        while len(code) < int(length):
            code += requests.read(int(length) - len(code))
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime + float(cpu)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
        exception = None
        try:
            tree = ast.parse(code.decode("utf-8", "replace"), "<cell>")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<cell>", "exec"), namespace)
            if last is not None:
                exec(compile(ast.Interactive([last]), "<cell>", "single"), namespace)
        except SystemExit:
            raise
        except BaseException as error:
            exception = type(error).__name__
            lines = traceback.format_exception(error)
            # the driver's own frame is not the model's business
            lines = [lines[0]] + [l for l in lines[1:] if "<cell>" in l or not l.startswith("  File")]
            sys.stderr.write("".join(lines))
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps({"exit_code": 1 if exception else 0,
                                  "exception": exception}).encode() + b"\n")
_serve()
'''

BASH_DRIVER = r'''
exec 0</dev/null
while LC_ALL=C IFS= read -r -u 3 __length; do
  LC_ALL=C IFS= read -r -d '' -N "$__length" -u 3 __code
  eval "$__code"
  printf '{"exit_code": %d}\n' "$?" >&4
done
'''


class Session:
    """A persistent interpreter: its requests on fd 3, its answers on fd 4, the model's
    output on its stdout and stderr."""

    def __init__(self, kind: str, python: str, limits: dict, workdir: str,
                 environment: dict[str, str]) -> None:
        self.kind = kind
        self.used = False
        request_read, self.requests = os.pipe()
        self.answers, answer_write = os.pipe()
        os.set_blocking(self.answers, False)  # read as it comes: see watch.read_available_line
        if kind == "python":
            argv = [python, "-u", "-c", PYTHON_DRIVER]
        else:
            argv = ["bash", "--norc", "--noprofile", "-c", BASH_DRIVER]

        def start_interpreter() -> None:
            # via high numbers, so that neither end overwrites the other on its way; made
            # before the limits, whose max_open_files may be below them
            high_read = fcntl.fcntl(request_read, fcntl.F_DUPFD, 100)
            high_write = fcntl.fcntl(answer_write, fcntl.F_DUPFD, 100)
            preexec(limits, cpu_bound=False)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        self.process = subprocess.Popen(argv, cwd=workdir, env=environment,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE,
                                        preexec_fn=start_interpreter, pass_fds=(3, 4))
        os.close(request_read)
        os.close(answer_write)
        self.stdout = self.process.stdout.fileno()
        self.stderr = self.process.stderr.fileno()

    def send(self, code: str, cpu_s: float) -> None:
        data = code.encode("utf-8")
        if self.kind == "bash":
            data += b"\n"
        header = f"{len(data)} {cpu_s}\n".encode() if self.kind == "python" \
            else f"{len(data)}\n".encode()
        os.write(self.requests, header)
        view = memoryview(data)
        while view:
            view = view[os.write(self.requests, view[:CHUNK]):]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        for fd in (self.requests, self.answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.process.stdout.close()
        self.process.stderr.close()
