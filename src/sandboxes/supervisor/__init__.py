"""The process inside a sandbox: it runs the calls and enforces their bounds.

Standard library only, and no import of the project: it runs as a folder under the
sandbox's own interpreter (`python3 -I FOLDER serve CONFIG`, see __main__.py), where the
project is not mounted; only this folder's sources are. Under bubblewrap it is the
sandbox's process 1: the model's code, running as the same user, cannot kill it (process 1
of a pid namespace ignores signals it has no handler for) nor read its file descriptors (it
is not dumpable).

Protocol with the host (protocol.py, server.py): one JSON object a line on stdin
(requests) and stdout (answers), bytes in base64. Requests: {"op": "write", "path",
"data"}, {"op": "read", "path", "max"}, {"op": "run", "argv", "stdin", "timeout"},
{"op": "session", "kind", "code", "timeout"}, {"op": "restart", "kind"}. The first line it
writes is {"ready": true}.

A call: its processes get the resource limits (bounds.py); the supervisor reads their
output (at most output_limit_bytes), watches the wall time, the process count and, for a
session (sessions.py), the interpreter's CPU time (watch.py); on a bound it freezes and
kills the call's processes (processes.py). When a call ends, every process it left
(background jobs) is killed: only the supervisor and the sessions' interpreters outlive a
call. The files of the working directory are written and read by files.py.

`launch` mode (a host running as root; identity.py): the sandbox's user is mapped to an
unprivileged host uid, because RLIMIT_NPROC does not hold for processes of the host's
root. It makes a user namespace mapping uid 0 to root (bubblewrap's set-up needs it to
read the interpreter's files) and uid 1000 to the given uid, then runs bwrap in it; the
supervisor then drops to uid 1000 (its capabilities go with it; startup.py).
"""
