"""A run's checkpoint as folders other tools load as they are: the PEFT adapter, and the
base model with the adapter merged into its weights (weights, tokenizer with its chat
template, generation config), which transformers and vLLM load like any model.

Checkpoints are found in the run's checkpoint stores (`callback_state/<id>/` of an online
run, `training_state/` of an offline one): `best`, `latest` (the newest committed one) or
a step. Only committed checkpoints are offered: a checkpoint of the batch in flight when a
run was killed is not a result.

An export replaces `adapter/` and `merged/` in its target folder whole, so the target is
checked first: never the run folder, inside it or above it, and when not empty, an earlier
export, recognised by its layout: only `adapter/` and `merged/` folders, each holding the
`export.json` an export writes last into it (and the `.adapter.*.tmp` / `.merged.*.tmp`
folders an export killed mid-write leaves).
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from src.language_models.embedded_model import resolve_model_path
from src.run.folder import TRAINING_STATE, RunDirectory
from src.storage.checkpoint_store import BEST, CheckpointStore, check_checkpoint, marked_step
from src.storage.files import DamagedRunFolder, atomic_directory, read_json
from src.training.training_state import ADAPTER

EXPORT_RECORD = "export.json"
EXPORTED = ("adapter", "merged")  # the folders an export writes into its target
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ExportError(ValueError):
    """The run folder does not hold what was asked for; the message says what it holds."""


@dataclass(frozen=True)
class FoundAdapter:
    path: Path  # a PEFT adapter folder
    store: Path
    checkpoint: str  # "best" or the step
    base_model: str  # as the adapter records it

    def describe(self) -> dict[str, str]:
        return {"adapter": str(self.path), "store": str(self.store),
                "checkpoint": self.checkpoint, "base_model": self.base_model}


def checkpoint_stores(output_dir: Path) -> dict[str, Path]:
    """The run's stores by name: each callback's id, or `training_state`."""
    stores = {}
    callbacks = RunDirectory(output_dir).callback_state
    if callbacks.is_dir():
        stores = {folder.name: folder for folder in sorted(callbacks.iterdir())
                  if folder.is_dir() and (CheckpointStore(folder).steps()
                                          or (folder / BEST).is_dir())}
    if (output_dir / TRAINING_STATE).is_dir():
        stores[TRAINING_STATE] = output_dir / TRAINING_STATE
    return stores


def find_adapter(output_dir: Path, checkpoint: str = "best",
                 store_name: str | None = None) -> FoundAdapter:
    state = RunDirectory(output_dir).read_state()
    if state is None:
        raise ExportError(f"{output_dir} is not a run folder (no run_state.json)")
    stores = checkpoint_stores(output_dir)
    if store_name is None:
        if len(stores) != 1:
            raise ExportError(f"{output_dir} has {len(stores)} checkpoint stores "
                              f"({', '.join(stores) or 'none'}): choose one with --callback")
        store_name = next(iter(stores))
    if store_name not in stores:
        raise ExportError(f"no checkpoint store '{store_name}' in {output_dir} "
                          f"(have: {', '.join(stores) or 'none'})")
    store = CheckpointStore(stores[store_name])
    committed = [step for step in store.steps() if step <= state.completed_batches]
    if checkpoint == "best":
        record = store.best_record()
        if record is None:
            raise ExportError(f"{store.root} has no best checkpoint yet (committed "
                              f"checkpoints: {committed or 'none'}); use --checkpoint latest")
        step = marked_step(record, store.best_mark)
        if step > state.completed_batches:
            raise DamagedRunFolder(
                f"{store.best_mark}: names step {step}, but the run committed "
                f"{state.completed_batches}: best/ is not a checkpoint of this run; choose "
                f"another with --checkpoint (committed: {committed or 'none'})")
        folder = store.root / BEST / ADAPTER
    else:
        if checkpoint == "latest":
            if not committed:
                raise ExportError(f"{store.root} has no committed checkpoint")
            step = committed[-1]
        elif checkpoint.isdigit() and int(checkpoint) in committed:
            step = int(checkpoint)
        else:
            raise ExportError(f"checkpoint '{checkpoint}' is not best, latest or one of the "
                              f"committed steps {committed} in {store.root}")
        checkpoint, folder = str(step), store.path(step) / ADAPTER
    try:
        check_checkpoint(folder.parent, within=ADAPTER)
    except DamagedRunFolder as error:
        raise ExportError(f"{error}: checkpoint {checkpoint} of {store.root} is damaged; "
                          f"choose another with --checkpoint (committed: {committed or 'none'}"
                          + (", best" if store.best_mark.is_file() else "") + ")") from error
    config = read_json(folder / "adapter_config.json")
    return FoundAdapter(folder, store.root, checkpoint, str(config["base_model_name_or_path"]))


def check_target(output_dir: Path, target_dir: Path) -> None:
    """Refuse a target whose export would delete what it should not: the run itself (a
    run folder named `adapter` exported into its parent would be replaced by its own
    adapter), or a non-empty folder that is not an earlier export."""
    run, target = output_dir.resolve(), target_dir.resolve()
    for problem, applies in (("is the run folder", target == run),
                             ("is inside the run folder", target.is_relative_to(run)),
                             ("holds the run folder", run.is_relative_to(target))):
        if applies:
            raise ExportError(f"--target_dir {target_dir} {problem} {output_dir}: an export "
                              "replaces the target's adapter/ and merged/ whole; choose a "
                              "folder outside the run")
    if target.exists() and not target.is_dir():
        raise ExportError(f"--target_dir {target_dir} is a file, not a folder")
    foreign = _not_exported(target) if target.is_dir() else []
    if foreign:
        raise ExportError(f"--target_dir {target_dir} is not empty and not an earlier export "
                          f"(it holds {', '.join(foreign)}); choose an empty or new folder")


def _not_exported(folder: Path) -> list[str]:
    """What in `folder` an export did not write, each named."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name in EXPORTED:
            if not (entry / EXPORT_RECORD).is_file():
                found.append(f"{entry.name}/ without {EXPORT_RECORD}")
        elif not any(fnmatch.fnmatch(entry.name, f".{name}.*.tmp") for name in EXPORTED):
            found.append(entry.name)
    return found


def export_adapter(found: FoundAdapter, target: Path) -> Path:
    """Copy the PEFT adapter folder (it names its base model in adapter_config.json)."""
    with atomic_directory(target) as folder:
        shutil.copytree(found.path, folder, dirs_exist_ok=True)
        (folder / EXPORT_RECORD).write_text(json.dumps(found.describe(), indent=2) + "\n")
    return target


def export_merged(found: FoundAdapter, target: Path, base_model: str | None = None,
                  dtype: Literal["float32", "bfloat16", "float16"] = "float32") -> Path:
    """The base model with the adapter merged in (merged in float32, then saved in
    `dtype`), its tokenizer and chat template, and its generation config."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_path = resolve_model_path(base_model or found.base_model)
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, str(found.path)).merge_and_unload()
    merged.to(DTYPES[dtype])
    with atomic_directory(target) as folder:
        merged.save_pretrained(folder)
        AutoTokenizer.from_pretrained(base_path).save_pretrained(folder)
        (folder / EXPORT_RECORD).write_text(json.dumps(
            found.describe() | {"base_model": str(base_path), "dtype": dtype}, indent=2) + "\n")
    return target
