"""The sandbox's user on a host running as root: the launch that maps it to an
unprivileged host uid, and the supervisor's leaving of root inside."""

from __future__ import annotations

import ctypes
import os
import sys

SANDBOX_UID = 1000
CLONE_NEWUSER = 0x10000000


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def leave_root() -> None:
    """After the root host's launch: leave uid 0 of the namespace, and every capability
    with it."""
    os.setgroups([])
    os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)


def launch(host_uid: int, argv: list[str]) -> None:
    """Run `argv` (bwrap) in a new user namespace mapping uid 0 to root and SANDBOX_UID to
    `host_uid` (a root host only: writing such maps needs CAP_SETUID)."""
    ready_read, ready_write = os.pipe()
    mapped_read, mapped_write = os.pipe()
    parent = os.getpid()
    helper = os.fork()
    if helper == 0:  # still outside: maps the parent's new namespace, then leaves
        os.close(ready_write)
        os.close(mapped_read)
        os.read(ready_read, 1)
        for kind in ("uid", "gid"):
            with open(f"/proc/{parent}/{kind}_map", "w") as mapping:
                mapping.write(f"0 0 1\n{SANDBOX_UID} {host_uid} 1\n")
        os.write(mapped_write, b"x")
        os._exit(0)
    os.close(ready_read)
    os.close(mapped_write)
    if libc().unshare(CLONE_NEWUSER) != 0:
        sys.exit(f"sandbox launch: unshare(CLONE_NEWUSER) failed: "
                 f"{os.strerror(ctypes.get_errno())}")
    os.write(ready_write, b"x")
    if os.read(mapped_read, 1) != b"x":
        sys.exit("sandbox launch: the user namespace's uid map could not be written")
    os.waitpid(helper, 0)
    os.execv(argv[0], argv)
