"""The output folder of a run: where it is, what it has committed, whether it may resume."""

from __future__ import annotations

import datetime
import glob
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from src.configuration.errors import ConfigError
from src.run.resume import (
    NEW_RUN,
    NO_CHANGES,
    TIMESTAMP,
    ResumeRules,
    Translate,
    _committed_rows,
    _differences,
    _episode_row,
    _metrics_row,
    _newest_common_step,
    config_changes,
    damaged_checkpoint,
    with_new_fields,
)
from src.storage.checkpoint_store import CheckpointStore, check_checkpoint
from src.storage.files import (
    DamagedRunFolder,
    atomic_write_json,
    atomic_write_text,
    read_json,
    remove_stale_temporaries,
    temporary_target,
)
from src.storage.run_layout import (
    CONFIG_FILE,
    EVALUATION_PREFIXES,
    LOCK_FILE,
    METRICS_LOG,
    RUNS_LOG,
    STATE_FILE,
    SUMMARY_FILE,
    evaluation_file,
)
from src.storage.run_lock import RunLock

TASK_STATE = "task_state"
AGENT_STATE = "agent_state"
TRAINING_STATE = "training_state"  # a supervised or offline trainer's store


class RunState(BaseModel):
    """The commit point: everything after these offsets belongs to an unfinished batch."""

    model_config = ConfigDict(extra="forbid")

    completed_batches: int = 0
    runs_bytes: int = 0
    metrics_bytes: int = 0
    finished: bool = False


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.callback_state = path / "callback_state"
        self.lock: RunLock | None = None  # held from `start` while this object lives

    @classmethod
    def resolve(cls, pattern: str, config: BaseModel, fresh: bool = False,
                rules: ResumeRules = NO_CHANGES) -> RunDirectory:
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
                stored = (with_new_fields(type(config), run.stored_config(rules.translate))[0]
                          if state else {})
                if (state and not state.finished
                        and not config_changes(stored, dump, rules.resume_safe)):
                    return run
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S")
        return cls(Path(pattern.replace(TIMESTAMP, stamp)))

    def read_state(self) -> RunState | None:
        """The commit point (None where no run was started here)."""
        path = self.path / STATE_FILE
        if not path.is_file():
            return None
        advice = ("It is the run's commit point (the last committed step and the logs' byte "
                  "offsets), which the run only ever replaces whole: put it back from a copy "
                  f"of the run folder, or {NEW_RUN}.")
        try:
            return RunState.model_validate(read_json(path))
        except DamagedRunFolder as error:
            raise DamagedRunFolder(f"{error}. {advice}") from error
        except ValidationError as error:
            first = error.errors()[0]
            key = ".".join(str(part) for part in first["loc"]) or "(top level)"
            raise DamagedRunFolder(f"{path}: key '{key}': {first['msg']}. {advice}") from error

    def write_state(self, state: RunState) -> None:
        atomic_write_json(self.path / STATE_FILE, state.model_dump())

    def stored_config(self, translate: Translate | None = None) -> dict[str, Any]:
        """The resolved config the run was started with ({} where no run was started), in
        today's spelling where `translate` rewrites an older one (a run started before kept
        LifelongAgentBench's flat names)."""
        path = self.path / CONFIG_FILE
        if path.is_file():
            stored = _read_stored_config(path)
            if translate is not None:
                translate(stored, path)
            return stored
        if (self.path / STATE_FILE).is_file():
            raise DamagedRunFolder(
                f"{path} is missing, but {self.path / STATE_FILE} says a run was started "
                "here: it is the resolved config the run was started with, which a resume "
                f"is checked against. Put it back from a copy of the run folder, or {NEW_RUN}.")
        return {}

    def start(self, config: BaseModel, config_path: Path,
              rules: ResumeRules = NO_CHANGES) -> RunState:
        """Create the folder, or check that a resumed run may go on with `config`.

        A folder that committed no batch starts afresh with `config`, whatever it was
        started with (a run that failed before its first commit, resumed with its config
        corrected). A change of a key the pipeline's `rules` call resume-safe (more
        batches, say) is written into the stored config.yaml, which then says what the
        run went on with; the stored config is read through the rules' `translate`. A
        folder that holds files but no run is refused untouched."""
        self._check_is_a_run_or_new(config_path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock = RunLock(self.path)  # before anything is read or written: one process
        remove_stale_temporaries(self.path)
        dump = config.model_dump(mode="json")
        state = self.read_state()
        if state is not None:
            stored, new_fields = with_new_fields(type(config), self.stored_config(rules.translate))
            changes = config_changes(stored, dump, rules.resume_safe)
            if changes and state.completed_batches == 0 and not state.finished:
                print(f"{self.path} committed no batch: starting afresh with {config_path} "
                      f"(changed: {', '.join(changes)})")
            elif changes:
                raise ConfigError(
                    f"{self.path} holds a run with a different config; changed: "
                    f"{', '.join(changes)}. Restore those keys to resume, or choose a new "
                    "output_dir.", file=str(config_path), key=changes[0])
            else:
                if not state.finished:
                    self.check_committed_logs(state)
                    state = self.check_checkpoints(state)
                    if new_fields:
                        atomic_write_text(self.path / CONFIG_FILE,
                                          yaml.safe_dump(stored, sort_keys=False))
                        print(f"{self.path} was started before these settings existed; the "
                              f"resume takes them at their defaults: {', '.join(new_fields)}")
                    self._record_resume_safe_changes(stored, dump)
                return state
        atomic_write_text(self.path / CONFIG_FILE, yaml.safe_dump(dump, sort_keys=False))
        state = RunState()
        self.write_state(state)
        return state

    def _check_is_a_run_or_new(self, config_path: Path) -> None:
        """Refuse a folder that holds files but no run: a run writes its files there and
        cleans what it left half-written, so another folder (`..`, `/`) would be written
        into. What a run writes before its commit point (config.yaml, the temporaries of
        the two) may be there: a kill between those writes."""
        if not self.path.exists() or (self.path / STATE_FILE).is_file():
            return
        if not self.path.is_dir():
            raise ConfigError(f"output_dir {self.path} is a file, not a folder: choose "
                              "another output_dir", file=str(config_path))
        foreign = sorted(entry.name for entry in self.path.iterdir()
                         if entry.name not in (CONFIG_FILE, LOCK_FILE)
                         and temporary_target(entry.name) not in (CONFIG_FILE, STATE_FILE))
        if foreign:
            named = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more"
                                              if len(foreign) > 5 else "")
            raise ConfigError(
                f"output_dir {self.path} holds files ({named}) but no run (no {STATE_FILE}): "
                "a run starts only in a new or empty folder, or resumes its own. Choose "
                "another output_dir.", file=str(config_path))

    def _record_resume_safe_changes(self, stored: dict[str, Any], dump: dict[str, Any]
                                    ) -> None:
        """Write the config a resume goes on with over the stored one, where it changed
        keys that may change on resume (max_batches, say), and say so."""
        changed = _differences(stored, dump)
        if not changed:
            return
        atomic_write_text(self.path / CONFIG_FILE, yaml.safe_dump(dump, sort_keys=False))
        print(f"{self.path / CONFIG_FILE} now records what this resume changed: "
              + ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changed.items()))

    def check_committed_logs(self, state: RunState) -> None:
        """Refuse to resume when a log holds fewer bytes than the commit point recorded
        (restored from an older copy, cut by hand): the rows of committed batches are
        gone, and cutting the log "back" would pad it with NUL bytes. Refuse too where a
        committed row does not parse (runs.jsonl and metrics.jsonl up to the commit point,
        the evaluation files whose figures metrics.jsonl committed): the resumed run and
        its report read them back, and would fail on them after the work, every time.
        Checked before any weights load; the logs are left as they are."""
        for name, committed in ((RUNS_LOG, state.runs_bytes),
                                (METRICS_LOG, state.metrics_bytes)):
            path = self.path / name
            size = path.stat().st_size if path.is_file() else 0
            if size < committed:
                raise DamagedRunFolder(
                    f"{path} holds {size} bytes, but {self.path / STATE_FILE} committed "
                    f"{committed} of it (completed_batches {state.completed_batches}): rows "
                    "of committed batches are missing, so the run cannot resume. Restore "
                    f"the file as it was and run the same command again, or {NEW_RUN}.")
        committed_by = (f"{self.path / STATE_FILE} committed its first {{bytes}} bytes "
                        f"(completed_batches {state.completed_batches})")
        for _ in _committed_rows(self.path / RUNS_LOG, state.runs_bytes, _episode_row,
                                 committed_by.format(bytes=state.runs_bytes)):
            pass
        evaluated: set[tuple[int, str]] = set()  # (step, split) of each committed evaluation
        for row in _committed_rows(self.path / METRICS_LOG, state.metrics_bytes, _metrics_row,
                                   committed_by.format(bytes=state.metrics_bytes)):
            evaluated |= {(row["step"], split) for split, prefix in EVALUATION_PREFIXES.items()
                          if any(key.startswith(prefix) for key in row)}
        for step, split in sorted(evaluated):
            path = evaluation_file(self.path, step, split)
            if path.is_file():
                for _ in _committed_rows(path, path.stat().st_size, _episode_row,
                                         f"{self.path / METRICS_LOG} committed its figures "
                                         f"(the evaluation at step {step})"):
                    pass

    def stores(self) -> list[CheckpointStore]:
        """Every checkpoint store the run has: each callback's, the task's, the agent's, a
        supervised or offline trainer's."""
        roots = (sorted(folder for folder in self.callback_state.iterdir() if folder.is_dir())
                 if self.callback_state.is_dir() else [])
        roots += [self.path / name for name in (TASK_STATE, AGENT_STATE, TRAINING_STATE)
                  if (self.path / name).is_dir()]
        return [CheckpointStore(root) for root in roots]

    def check_checkpoints(self, state: RunState) -> RunState:
        """The state to resume from, checked before anything loads from it.

        Each store's committed checkpoint is checked (`check_checkpoint`); a damaged one is
        refused, naming the file, the earlier checkpoints kept and how to resume from one:
        remove the damaged folder. A committed checkpoint missing from a store (removed so)
        takes the run back to the newest step every store still holds, or to the start:
        run_state.json is rewritten with that step and the logs' offsets at its commit,
        and the steps after it are redone."""
        committed = state.completed_batches
        stores = self.stores()
        if committed == 0 or not stores:
            return state
        missing = [store.path(committed) for store in stores
                   if not store.path(committed).is_dir()]
        step = _newest_common_step(stores, committed) if missing else committed
        for store in stores if step else []:
            try:
                check_checkpoint(store.path(step))
            except DamagedRunFolder as error:
                raise DamagedRunFolder(damaged_checkpoint(error, store, step, stores)
                                       ) from error
        if not missing:
            return state
        earlier = RunState(
            completed_batches=step,
            runs_bytes=self._log_bytes_through(RUNS_LOG, state.runs_bytes, step,
                                               lambda row: row["batch_index"] + 1),
            metrics_bytes=self._log_bytes_through(METRICS_LOG, state.metrics_bytes, step,
                                                  lambda row: row["step"]))
        self.write_state(earlier)
        print(f"{missing[0]} is missing: resuming from "
              f"{stores[0].path(step).name if step else 'the start'} (step {step}, the "
              "newest every checkpoint store holds); the steps after it are redone")
        return earlier

    def _log_bytes_through(self, name: str, committed: int, step: int,
                           step_of: Callable[[dict[str, Any]], int]) -> int:
        """How many of the first `committed` bytes of log `name` hold rows of steps up to
        `step` (each log's rows come in step order)."""
        path = self.path / name
        size = 0
        if committed == 0:
            return size
        with path.open("rb") as stream:
            for number, line in enumerate(stream, start=1):
                try:
                    row_step = step_of(json.loads(line))
                except (ValueError, KeyError, TypeError) as error:
                    raise DamagedRunFolder(f"{path}:{number}: not a row the run wrote "
                                           f"({error}); {NEW_RUN}") from error
                if size + len(line) > committed or row_step > step:
                    break
                size += len(line)
        return size

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
            print(f"{self.path} is already finished; summary in {self.path / SUMMARY_FILE}")
            return False
        print(f"output_dir: {self.path}" + (f" (resuming after {unit} {state.completed_batches})"
                                           if state.completed_batches else ""))
        return True

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_text(self.path / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")


def _read_stored_config(path: Path) -> dict[str, Any]:
    """A run folder's config.yaml, which the run wrote as plain YAML: a tag (which could
    ask a loader to build objects) means someone else wrote it, and is refused."""
    advice = f"Put back the file the run wrote from a copy of the run folder, or {NEW_RUN}."
    try:
        text = path.read_text(encoding="utf-8")
        for token in yaml.scan(text):
            if isinstance(token, yaml.TagToken):
                handle, suffix = token.value
                raise DamagedRunFolder(
                    f"{path}:{token.start_mark.line + 1}: a YAML tag ({handle or ''}{suffix}), "
                    f"which the plain YAML a run writes never holds. {advice}")
        data = yaml.safe_load(text)
    except UnicodeDecodeError as error:
        raise DamagedRunFolder(f"{path}: not UTF-8 text (at byte {error.start}). {advice}"
                               ) from error
    except yaml.YAMLError as error:
        raise DamagedRunFolder(f"{path}: not YAML ({error}). {advice}") from error
    if not isinstance(data, dict):
        raise DamagedRunFolder(f"{path}: holds no mapping of settings. {advice}")
    return data


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
