"""The output folder of a run: where it is, what it has committed, whether it may resume."""

from __future__ import annotations

import datetime
import glob
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict

from src.configuration.assignment import RESUME_SAFE_KEYS
from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.storage.files import (
    atomic_write_json,
    atomic_write_text,
    probe_writable,
    remove_stale_temporaries,
    storage_os_error,
)
from src.training.checkpoints import CheckpointStore

TIMESTAMP = "{TIMESTAMP}"
STATE_FILE = "run_state.json"
CONFIG_FILE = "config.yaml"
RUNS_LOG = "runs.jsonl"
METRICS_LOG = "metrics.jsonl"
TASK_STATE = "task_state"
AGENT_STATE = "agent_state"


class RunState(BaseModel):
    """The commit point: everything after these offsets belongs to an unfinished batch."""

    model_config = ConfigDict(extra="forbid")

    completed_batches: int = 0
    runs_bytes: int = 0
    metrics_bytes: int = 0
    finished: bool = False


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat or {prefix: {}}
    return {prefix: value}


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ, ignoring keys that do not change results."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    return sorted(key for key in flat_old.keys() | flat_new.keys()
                  if not _resume_safe(key) and flat_old.get(key) != flat_new.get(key))


def _resume_safe(key: str) -> bool:
    return any(key == safe or key.startswith(f"{safe}.") for safe in RESUME_SAFE_KEYS)


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.callback_state = path / "callback_state"

    @classmethod
    def resolve(cls, pattern: str, config: BaseModel, fresh: bool = False) -> RunDirectory:
        """A concrete folder for `pattern`.

        With `{TIMESTAMP}` in the pattern, the newest unfinished run of the same config
        is resumed (so re-running the same command continues it); otherwise, or with
        `fresh`, a new timestamped folder is made.
        """
        if TIMESTAMP not in pattern:
            return cls(Path(pattern))
        if not fresh:
            dump = config.model_dump(mode="json")
            candidates = sorted(glob.glob(glob.escape(pattern).replace(
                glob.escape(TIMESTAMP), "*")), reverse=True)
            for candidate in candidates:
                run = cls(Path(candidate))
                state = run.read_state()
                if state and not state.finished and not config_changes(run.stored_config(), dump):
                    return run
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S")
        return cls(Path(pattern.replace(TIMESTAMP, stamp)))

    def read_state(self) -> RunState | None:
        path = self.path / STATE_FILE
        if not path.is_file():
            return None
        return RunState.model_validate_json(path.read_text(encoding="utf-8"))

    def write_state(self, state: RunState) -> None:
        atomic_write_json(self.path / STATE_FILE, state.model_dump())

    def stored_config(self) -> dict[str, Any]:
        path = self.path / CONFIG_FILE
        return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def start(self, config: BaseModel, config_path: Path) -> RunState:
        """Create the folder, or check that a resumed run still has the same config."""
        self.path.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path)
        dump = config.model_dump(mode="json")
        state = self.read_state()
        if state is not None:
            changes = config_changes(self.stored_config(), dump)
            if changes:
                raise ConfigError(
                    f"{self.path} holds a run with a different config; changed: "
                    f"{', '.join(changes)}. Restore those keys to resume, or choose a new "
                    "output_dir.", file=str(config_path), key=changes[0])
            if not state.finished:
                self.check_committed_logs(state)
            return state
        atomic_write_text(self.path / CONFIG_FILE, yaml.safe_dump(dump, sort_keys=False))
        state = RunState()
        self.write_state(state)
        return state

    def check_committed_logs(self, state: RunState) -> None:
        """Refuse to resume when a log holds fewer bytes than the commit point recorded
        (restored from an older copy, cut by hand): the rows of committed batches are
        gone, and cutting the log "back" would pad it with NUL bytes. Checked before any
        weights load; the logs are left as they are."""
        for name, committed in ((RUNS_LOG, state.runs_bytes),
                                (METRICS_LOG, state.metrics_bytes)):
            path = self.path / name
            size = path.stat().st_size if path.is_file() else 0
            if size < committed:
                raise DamagedRunFolder(
                    f"{path} holds {size} bytes, but {self.path / STATE_FILE} committed "
                    f"{committed} of it (completed_batches {state.completed_batches}): rows "
                    "of committed batches are missing, so the run cannot resume. Restore "
                    "the file as it was and run the same command again, or start a new run "
                    f"(--new_run with {TIMESTAMP} in output_dir, or another output_dir).")

    def callback_store(self, callback_id: str) -> CheckpointStore:
        """callback_state/<callback_id>/: that callback's checkpoints and best/."""
        return CheckpointStore(self.callback_state / callback_id)

    def task_store(self) -> CheckpointStore:
        """task_state/: the task family's state (e.g. the econ few-shot memory)."""
        return CheckpointStore(self.path / TASK_STATE)

    def agent_store(self) -> CheckpointStore:
        """agent_state/: the agent's state, for agents that keep one (a replay memory)."""
        return CheckpointStore(self.path / AGENT_STATE)

    def announce(self, state: RunState, unit: str) -> bool:
        """Print where the run stands (`unit`: what `completed_batches` counts); False when
        it has already finished and there is nothing to do."""
        if state.finished:
            print(f"{self.path} is already finished; summary in {self.path / 'summary.json'}")
            return False
        print(f"output_dir: {self.path}" + (f" (resuming after {unit} {state.completed_batches})"
                                           if state.completed_batches else ""))
        return True

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_text(self.path / "summary.json", json.dumps(summary, indent=2) + "\n")


class DamagedRunFolder(ValueError):
    """The run folder no longer holds what its commit point says it committed."""


class StorageFailure(Exception):
    """A write into the run folder failed for want of space or permission. What the run had
    committed is untouched; the message says where it stands and how to resume."""


def _describe_storage_failure(folder: Path, cause: OSError) -> str:
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free_mib = shutil.disk_usage(existing).free / (1 << 20)
    where = cause.filename or existing
    state = RunDirectory(folder).read_state() if (folder / STATE_FILE).is_file() else None
    if state is None:
        committed = "nothing had been committed yet"
    else:
        committed = (f"the last committed state is kept ({folder / STATE_FILE}: "
                     f"completed_batches {state.completed_batches})")
    return (f"cannot write {where}: {cause.strerror} ({free_mib:.1f} MiB free on its file "
            f"system); {committed}. Free space or make the folder writable, then run the "
            "same command again to resume.")


@contextmanager
def storage_guard(folder: Path) -> Iterator[None]:
    """Turn a failed write into `StorageFailure` when the storage refused it: an OSError
    such as ENOSPC or EROFS behind the error, or (when a library hid the cause) a folder
    that fails a write probe. Any other error passes through unchanged."""
    try:
        yield
    except StorageFailure:
        raise
    except Exception as error:
        cause = storage_os_error(error, folder) or probe_writable(folder)
        if cause is None:
            raise
        raise StorageFailure(_describe_storage_failure(folder, cause)) from error


Config = TypeVar("Config", bound=BaseModel)


class Plan(Protocol):
    def describe(self) -> str: ...


def keyed_config(config_path: Path, key: str, load: Callable[[YamlSource], Config],
                 plan: Callable[[Config, YamlSource], Plan], output_dir: str | None
                 ) -> Callable[[], tuple[Config, Plan, str]]:
    """`start_run`'s `prepare` for a file whose one top-level section `key` holds an
    `output_dir` (which the command line's `output_dir` overrides)."""

    def prepare() -> tuple[Config, Plan, str]:
        source = YamlSource(config_path)
        config = load(source)
        section = getattr(config, key)
        if output_dir is not None:
            section = section.model_copy(update={"output_dir": output_dir})
            config = config.model_copy(update={key: section})
        return config, plan(config, source), section.output_dir

    return prepare


def start_run(prepare: Callable[[], tuple[BaseModel, Plan, str]], config_path: Path,
              dry_run: bool, new_run: bool, unit: str
              ) -> tuple[RunDirectory, RunState, Plan] | int:
    """The start-up every pipeline shares. `prepare` loads and checks the config and
    returns it with its plan and output_dir pattern. Returns the run folder, its state and
    the plan, or the command's exit status when there is nothing to train: 0 after a dry
    run or for a finished run, 2 for a config error (printed with file, line and key) or
    a run folder whose logs lost committed rows."""
    try:
        config, plan, output_dir = prepare()
        if dry_run:
            print(plan.describe())
            print("dry run: the config is valid")
            return 0
        run = RunDirectory.resolve(output_dir, config, fresh=new_run)
        with storage_guard(run.path):
            state = run.start(config, config_path)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    except DamagedRunFolder as error:
        print(f"run folder error: {error}", file=sys.stderr)
        return 2
    if not run.announce(state, unit):
        return 0
    return run, state, plan


LATEST = "{LATEST}"


class RunNotFound(ValueError):
    """No finished run matches a `{LATEST}` path."""


def resolve_latest(path: str) -> Path:
    """`path` itself, or with `{LATEST}` standing for a run folder: the newest finished run
    (folders are named by start time, so the name orders them) that holds the file."""
    if LATEST not in path:
        return Path(path)
    prefix, suffix = path.split(LATEST, 1)
    for folder in sorted(glob.glob(glob.escape(prefix) + "*"), reverse=True):
        state = RunDirectory(Path(folder)).read_state()
        candidate = Path(folder + suffix)
        if state is not None and state.finished and candidate.is_file():
            return candidate
    raise RunNotFound(f"no finished run matches {path}: run the experiment that writes it "
                      "first, or name a run folder instead of {LATEST}")
