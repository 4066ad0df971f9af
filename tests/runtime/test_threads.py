"""The process's torch threads: from the cgroup CPU quota (v2 and v1 files written here),
the affinity mask, the environment's OMP_NUM_THREADS and a config's `num_threads`."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from src.runtime.threads import (
    HostCpus,
    affinity_cpus,
    cgroup_cpu_quota,
    choose_threads,
    host_cpus,
    set_threads,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def torch_threads() -> Iterator[None]:
    """Put torch's thread count back after a test that sets it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_dot_", ".")).write_text(text + "\n")


def test_cgroup_v2_quota_is_the_tightest_on_the_way_to_the_root(tmp_path: Path) -> None:
    _write(tmp_path, cpu_dot_max="max 100000")
    _write(tmp_path / "service", cpu_dot_max="150000 100000")
    _write(tmp_path / "service" / "job", cpu_dot_max="400000 100000")
    assert cgroup_cpu_quota(tmp_path, "0::/service/job\n") == 1.5
    assert cgroup_cpu_quota(tmp_path, "0::/\n") is None  # `max`: no quota
    # a cgroup path this mount does not show (a container's own cgroup as the root)
    assert cgroup_cpu_quota(tmp_path, "0::/elsewhere/job\n") is None


def test_cgroup_v1_quota_and_its_absence(tmp_path: Path) -> None:
    _write(tmp_path / "cpu,cpuacct", cpu_dot_cfs_quota_us="-1", cpu_dot_cfs_period_us="100000")
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc", cpu_dot_cfs_quota_us="250000",
           cpu_dot_cfs_period_us="100000")
    own = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n"
    assert cgroup_cpu_quota(tmp_path, own) == 2.5
    assert cgroup_cpu_quota(tmp_path, "4:cpu,cpuacct:/\n") is None  # -1: no quota


def test_no_cgroup_files_mean_no_quota(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path, "0::/\n") is None
    assert cgroup_cpu_quota(tmp_path, "") is None
    _write(tmp_path, cpu_dot_max="garbage")
    assert cgroup_cpu_quota(tmp_path, "") is None


def test_threads_fit_the_quota_and_the_affinity_mask() -> None:
    assert HostCpus(affinity=8, quota=None).usable == 8
    assert HostCpus(affinity=8, quota=2.5).usable == 2  # a thread more would be throttled
    assert HostCpus(affinity=2, quota=16.0).usable == 2
    assert HostCpus(affinity=8, quota=0.5).usable == 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity on this system")
def test_the_affinity_mask_is_what_counts_not_the_machine() -> None:
    mask = os.sched_getaffinity(0)
    assert affinity_cpus() == len(mask)
    try:
        os.sched_setaffinity(0, {min(mask)})
        assert host_cpus().affinity == 1
        assert choose_threads(None, environment={})[0] == 1
    finally:
        os.sched_setaffinity(0, mask)


def test_a_request_beats_the_environment_which_beats_the_host() -> None:
    host = HostCpus(affinity=4, quota=None)
    count, why = choose_threads(2, {"OMP_NUM_THREADS": "1"}, host)
    assert count == 2 and "OMP_NUM_THREADS=1 in the environment overridden" in why
    assert choose_threads(None, {"OMP_NUM_THREADS": "3"}, host) == (
        3, "OMP_NUM_THREADS=3 in the environment")
    assert choose_threads(0, {}, host) == (
        4, "from the host: 4 CPUs in the affinity mask, no CPU quota")
    count, why = choose_threads(None, {"OMP_NUM_THREADS": "many"}, host)
    assert count == 4 and "'many' is not a count" in why
    count, why = choose_threads(8, {}, HostCpus(affinity=4, quota=2.0))
    assert count == 8 and "more than the 2 the host allows" in why


def test_set_threads_sets_torch_and_says_why(torch_threads: None, caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with caplog.at_level(logging.INFO, logger="src.runtime.threads"):
        assert set_threads(None, "run") == 1
    assert torch.get_num_threads() == 1
    assert "run: 1 torch thread (OMP_NUM_THREADS=1 in the environment)" in caplog.text


def _assignment(tmp_path: Path, threads: str) -> Path:
    path = tmp_path / "assignment.yaml"
    path.write_text(f"import: {PROJECT_ROOT / 'configs/assignments/math_grpo_quickstart.yaml'}\n"
                    f"assignment_config:\n  output_dir: {tmp_path / 'run'}\n"
                    f"  num_threads: {threads}\n")
    return path


def test_the_config_overrides_the_environment(tmp_path: Path, torch_threads: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from src.run_experiment import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    assert main(["--config_path", str(_assignment(tmp_path, "2")), "--dry_run"]) == 0
    assert torch.get_num_threads() == 2


def test_a_thread_count_below_one_is_a_config_error_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from src.run_experiment import main

    path = _assignment(tmp_path, "0")
    assert main(["--config_path", str(path), "--dry_run"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"config error: {path}:4, key 'assignment_config.num_threads'")
