"""The resume check's rules: which changes of the config a resumed run refuses, whether
the rows that the commit point covers still parse, which checkpoint every store still holds,
and the advice (NEW_RUN) that a refusal ends with. RunDirectory (folder.py) applies them
when a run starts in a folder that holds one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from src.records.episode import EpisodeRecord
from src.storage.checkpoint_store import CheckpointStore
from src.storage.files import DamagedRunFolder

# In output_dir: a new run's start time, or the newest unfinished run of the same config
# (RunDirectory.resolve); here because NEW_RUN names it.
TIMESTAMP = "{TIMESTAMP}"
NEW_RUN = f"start a new run (--new_run with {TIMESTAMP} in output_dir, or another output_dir)"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat or {prefix: {}}
    return {prefix: value}


def _differences(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (old value, new value), for each key whose value differs."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    return {key: (flat_old.get(key), flat_new.get(key))
            for key in sorted(flat_old.keys() | flat_new.keys())
            if flat_old.get(key) != flat_new.get(key)}


def with_new_fields(model: type[BaseModel], stored: dict[str, Any]
                    ) -> tuple[dict[str, Any], list[str]]:
    """The stored config with the fields the code has gained since it was written, at
    their defaults, and those fields' dotted keys: a field new to the code is not a change
    of the run's config, but a resume says which it takes at their defaults. A stored
    config the current models refuse is returned as it is (its differences are named)."""
    try:
        filled = model.model_validate(stored).model_dump(mode="json")
    except ValidationError:
        return stored, []
    stored_keys = _flatten(stored).keys()
    return filled, sorted(key for key in _flatten(filled) if key not in stored_keys)


# Rewrites a config as read (in place) into today's spelling; the path names where it was
# read, for errors.
Translate = Callable[[Any, Path], None]


@dataclass(frozen=True)
class ResumeRules:
    """How a pipeline's runs resume: the file's dotted keys a resume may change (and every
    key under them: those that do not change what the run computes), and how a config
    stored in an older spelling is read (None: as it is)."""

    resume_safe: frozenset[str] = frozenset()
    translate: Translate | None = None


NO_CHANGES = ResumeRules()  # every change refused, the stored config read as it is


def config_changes(old: dict[str, Any], new: dict[str, Any],
                   resume_safe: frozenset[str]) -> list[str]:
    """Dotted keys whose values differ, ignoring `resume_safe` keys (and every key under
    them): those that do not change results."""
    return [key for key in _differences(old, new)
            if not any(key == safe or key.startswith(f"{safe}.") for safe in resume_safe)]


Row = TypeVar("Row")


def _episode_row(line: bytes) -> EpisodeRecord:
    """A line of runs.jsonl or of an evaluation file, as its readers take it."""
    return EpisodeRecord.model_validate_json(line)


def _metrics_row(line: bytes) -> dict[str, Any]:
    row = json.loads(line)
    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
        raise ValueError("not a mapping with an integer 'step'")
    return row


def _committed_rows(path: Path, committed: int, parse: Callable[[bytes], Row],
                    committed_by: str) -> Iterator[Row]:
    """Each row of the first `committed` bytes of the jsonl file `path`, parsed; a row
    that does not parse, or one the commit point cuts, is refused naming its line."""
    if committed == 0:
        return
    read = 0
    with path.open("rb") as stream:
        for number, line in enumerate(stream, start=1):
            read += len(line)
            try:
                if read > committed or not line.endswith(b"\n"):
                    raise ValueError("the commit point falls inside the row")
                yield parse(line)
            except ValueError as error:  # ValidationError and JSONDecodeError too
                raise DamagedRunFolder(
                    f"{path}:{number}: a committed row that does not parse "
                    f"({_parse_problem(error)}); "
                    f"{committed_by}, which the resumed run reads back. To resume, restore "
                    f"the file from a copy of the run folder; or {NEW_RUN}.") from error
            if read == committed:
                return


def _parse_problem(error: ValueError) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        return f"{key}: {first['msg']}" if key else first["msg"]
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON: {error.msg.removesuffix(' at')}, column {error.colno}"
    return str(error)


def _newest_common_step(stores: list[CheckpointStore], at_most: int) -> int:
    """The newest step up to `at_most` whose checkpoint every store holds (0: none)."""
    common = set.intersection(*(set(store.steps()) for store in stores))
    return max((step for step in common if step <= at_most), default=0)


def damaged_checkpoint(error: DamagedRunFolder, store: CheckpointStore, step: int,
                       stores: list[CheckpointStore]) -> str:
    folder = store.path(step)
    kept = [store.path(earlier).name for earlier in store.steps() if earlier < step]
    back_to = _newest_common_step(stores, step - 1)
    return (f"{error}: the checkpoint {folder} cannot be resumed from. "
            + (f"The earlier checkpoints kept in {store.root} are {', '.join(kept)}. "
               if kept else f"{store.root} keeps no earlier checkpoint. ")
            + f"To resume from {store.path(back_to).name if back_to else 'the start'}, "
            f"remove {folder} and run the same command again: the logs are cut back to that "
            "step and the steps after it are redone (remove more checkpoints to go further "
            "back). Or put the file back from a copy of the run folder.")
