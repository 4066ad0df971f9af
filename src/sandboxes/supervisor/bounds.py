"""A call's bounds: the resource limits its processes start with, and the classification
of an ended call by the bound it hit."""

from __future__ import annotations

import os
import re
import resource
import signal

from .protocol import encode

# what a process prints when a bound made a system call fail, by the bound's status
MARKERS = {
    "memory_limit": re.compile(rb"MemoryError|Cannot allocate memory|[Oo]ut of memory|bad_alloc"),
    "process_limit": re.compile(rb"Resource temporarily unavailable|BlockingIOError|"
                                rb"can't start new thread|fork: retry"),
    "disk_limit": re.compile(rb"No space left on device"),
    # how a shell reports a child killed by SIGXCPU / SIGXFSZ
    "cpu_limit": re.compile(rb"CPU time limit exceeded"),
    # (Python ignores SIGXFSZ: its write fails with EFBIG instead)
    "file_size_limit": re.compile(rb"File size limit exceeded|File too large"),
}


def preexec(limits: dict, cpu_bound: bool = True) -> None:
    """In the child before exec: its own session and the call's resource limits
    (without the CPU one for a session's interpreter: its CPU is bounded per call)."""
    os.setsid()
    if cpu_bound:
        cpu = max(1, int(limits["cpu_time_s"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def classify(config: dict, seen: dict, code: int | None, wall: float, cpu: float,
             timeout: float) -> dict:
    """Classify: the bound the supervisor enforced, then a bound's signal, then a
    bound's message on a failed exit, then the exit status."""
    limits = config["limits"]
    signal_number = -code if code is not None and code < 0 else None
    exit_code = code if code is not None and code >= 0 else None
    bound = seen["bound"]
    details = {
        "timeout": f"killed after the wall-time bound of {timeout:g} s",
        "output_limit": f"killed after printing more than "
                        f"{limits['output_limit_bytes']} bytes",
        "process_limit": f"killed at the bound of {limits['max_processes']} "
                         f"processes",
        "cpu_limit": f"killed after the CPU-time bound of {limits['cpu_time_s']:g} s",
        "memory_limit": f"an allocation failed under the memory bound of "
                        f"{limits['memory_bytes']} bytes per process",
        "file_size_limit": f"a file reached the bound of {limits['max_file_bytes']} "
                           f"bytes",
        "disk_limit": f"the working directory is full "
                      f"({config['workdir_bytes']} bytes)",
    }
    if bound is None:
        if signal_number == signal.SIGXCPU:
            bound = "cpu_limit"
        elif signal_number == signal.SIGXFSZ:
            bound = "file_size_limit"
        elif code != 0:
            for name, marker in MARKERS.items():
                if marker.search(seen["stderr"]) or marker.search(seen["stdout"][-4096:]):
                    bound = name
                    break
    status = bound or ("ok" if code == 0 else "error_exit")
    return {"status": status, "exit_code": exit_code, "signal": signal_number,
            "stdout": encode(seen["stdout"]), "stderr": encode(seen["stderr"]),
            "truncated": seen["truncated"], "printed": seen["printed"],
            "wall_s": wall, "cpu_s": cpu, "detail": details.get(bound, "")}
