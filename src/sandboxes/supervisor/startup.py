"""The supervisor process's own set-up before it serves: its user, its protection from the
model's code, and its ties to the host."""

from __future__ import annotations

import os
import signal

from .identity import SANDBOX_UID, leave_root, libc
from .server import Supervisor

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def serve(config: dict) -> None:
    call = libc()
    if os.getuid() == 0 and config["drop_to_uid"]:
        os.chown(config["workdir"], SANDBOX_UID, SANDBOX_UID)
        leave_root()
    call.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    call.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # die with the parent (bwrap, or the host process): bwrap's own setting is cleared by
    # the change of uid above. Should the parent be gone already, the end of our input
    # ends us after the call in progress.
    call.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.makedirs(os.path.join(config["workdir"], ".tmp"), exist_ok=True)
    # no handler for SIGTERM or SIGINT (Python's own raises KeyboardInterrupt): process 1
    # of a pid namespace gets, from inside it, only the signals it handles, so the model's
    # `kill -TERM 1` would otherwise end the sandbox; the host ends it with SIGKILL
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    Supervisor(config).serve()
