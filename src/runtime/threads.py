"""How many threads torch's CPU kernels use in this process: as many as the CPUs it may
actually run on.

torch's default is what OpenMP counts (the cores of the machine or of the affinity mask),
blind to a container's CPU quota and to other jobs on the host. More threads than CPUs costs far more than
it saves: OpenMP threads wait for each other by spinning, so on a host whose CPUs are
shared, a spinning thread holds a CPU that the thread it waits for needs. Measured on a
2-core host shared with other jobs: a quickstart rollout took 35 s with one thread per
process, and with two threads per process it had not finished its first batch after
12 minutes.

The choice, made by `choose_threads` for the run's process (src/run_experiment.py) and
for every worker process (src/runtime/worker_process.py), first that applies:

1. the count asked for: a config's `num_threads`; a worker's CPUs (a trainer worker's
   `cpus_per_worker`, an engine's `cpus_per_engine`: what Ray reserved for it);
2. `OMP_NUM_THREADS` in the environment, the user's: kept (torch and OpenMP read it when
   they start, and it stays what they use). This is how a command line's own choice is
   respected; a config's `num_threads` is the one thing that overrides it;
3. the CPUs the process may use: those of its affinity mask (`os.sched_getaffinity`),
   fewer where its cgroup's CPU quota is less (cgroup v2 `cpu.max`, v1
   `cpu.cfs_quota_us` / `cpu.cfs_period_us`, the tightest of its cgroup and the
   cgroups above it), at least 1; never `os.cpu_count()`, the machine's CPUs.

A log line says what was chosen and why.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
OWN_CGROUPS = Path("/proc/self/cgroup")
THREADS_VARIABLE = "OMP_NUM_THREADS"


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, own_cgroups: str | None = None) -> float | None:
    """The CPUs (a fraction allowed) this process's cgroups let it use, or None without a
    quota. `own_cgroups`: the text of /proc/self/cgroup (read when None). Each line
    `id:controllers:path` names a cgroup: the v2 one (id 0, no controllers) under `root`,
    the v1 one with the `cpu` controller under `root`/cpu. A cgroup path that is not under
    `root` (a container that mounts its own cgroup as the root) is skipped; the quota of
    every directory from the process's cgroup up to `root` counts, the least wins."""
    if own_cgroups is None:
        try:
            own_cgroups = OWN_CGROUPS.read_text()
        except OSError:
            own_cgroups = ""
    quotas = []
    for line in own_cgroups.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            quotas += [_v2_quota(folder) for folder in _folders(root, path)]
        elif "cpu" in controllers.split(","):
            mount = next((root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")
                          if (root / name).is_dir()), root / "cpu")
            quotas += [_v1_quota(folder) for folder in _folders(mount, path)]
    if not own_cgroups.strip():  # nothing known of the process's cgroups: the root's
        quotas += [_v2_quota(root), _v1_quota(root / "cpu")]
    known = [quota for quota in quotas if quota is not None]
    return min(known) if known else None


def _folders(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder under `mount` and every folder above it, up to `mount`."""
    parts = [part for part in path.split("/") if part]
    return [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_quota(folder: Path) -> float | None:
    """cpu.max: `max PERIOD` (no quota) or `QUOTA PERIOD` in microseconds."""
    fields = _read(folder / "cpu.max").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(folder: Path) -> float | None:
    """cpu.cfs_quota_us (-1: no quota) over cpu.cfs_period_us."""
    return _ratio(_read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us"))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _ratio(quota: str, period: str) -> float | None:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def affinity_cpus() -> int:
    """The CPUs this process may be scheduled on (all of the machine's where the system
    cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class HostCpus:
    affinity: int  # CPUs in the process's affinity mask
    quota: float | None  # CPUs its cgroup's quota allows (None: no quota)

    @property
    def usable(self) -> int:
        """Threads that fit: a thread more than a fractional quota would be throttled."""
        limit = self.affinity if self.quota is None else min(self.affinity,
                                                             math.floor(self.quota))
        return max(1, limit)

    def describe(self) -> str:
        quota = "no CPU quota" if self.quota is None else f"a CPU quota of {self.quota:g}"
        return f"{self.affinity} CPUs in the affinity mask, {quota}"


def host_cpus() -> HostCpus:
    return HostCpus(affinity_cpus(), cgroup_cpu_quota())


def choose_threads(requested: int | None, environment: Mapping[str, str] | None = None,
                   host: HostCpus | None = None) -> tuple[int, str]:
    """The thread count (in the order of the module's docstring) and why. `requested` None
    or 0: none asked for."""
    environment = os.environ if environment is None else environment
    given = environment.get(THREADS_VARIABLE, "").strip()
    host = host or host_cpus()
    if requested:
        notes = [f"{THREADS_VARIABLE}={given} in the environment overridden"
                 if given and given != str(requested) else "",
                 f"more than the {host.usable} the host allows ({host.describe()}): expect "
                 "threads to wait for CPUs" if requested > host.usable else ""]
        return requested, "; ".join(["asked for", *filter(None, notes)])
    if given.isdigit() and int(given) >= 1:
        return int(given), f"{THREADS_VARIABLE}={given} in the environment"
    unusable = f"; {THREADS_VARIABLE}={given!r} is not a count" if given else ""
    return host.usable, f"from the host: {host.describe()}{unusable}"


def set_threads(requested: int | None, process: str) -> int:
    """Set torch's intra-op threads to `choose_threads`'s count, log it; the count."""
    count, why = choose_threads(requested)
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    logger.info("%s: %d torch thread%s (%s)", process, count, "" if count == 1 else "s", why)
    return count
