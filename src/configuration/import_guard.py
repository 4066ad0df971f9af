"""Importing only the project's and the installed packages' code while a run folder's
config is read back (the evaluate and export commands).

A config names code to import (`module:` paths, agent functions, reward functions,
opponents). A run folder may come from anyone, and a module path can reach into one: with
the folder under the working directory, `outputs.run.payload` is its payload.py. While
`confined_imports` is active every new import is located first and refused, before any of
its code runs, where it lies inside a run folder (one of `run_folders`, or any folder
holding `state_file`) or outside the project and the installed packages.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import site
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RefusedImport(ImportError):
    """A module whose code lies where a config read back from a run folder may not reach."""


def installed_roots() -> list[Path]:
    """The project and the folders installed packages and the standard library live in."""
    folders = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib",
                                                      "platlib")}
    folders |= {*site.getsitepackages(), site.getusersitepackages()}
    return [PROJECT_ROOT, *(Path(folder).resolve() for folder in folders if folder)]


class _ConfinedFinder(importlib.abc.MetaPathFinder):
    """Finds a module as the finders after it do, then refuses it by where it lies."""

    def __init__(self, run_folders: Sequence[Path], state_file: str) -> None:
        self.run_folders = [folder.resolve() for folder in run_folders]
        self.state_file = state_file
        self.roots = installed_roots()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        places = list(spec.submodule_search_locations or [])
        if spec.has_location and spec.origin:
            places.append(spec.origin)
        for place in places:
            self._check(fullname, Path(place).resolve())
        return spec

    def _check(self, fullname: str, place: Path) -> None:
        for folder in (place, *place.parents):
            if folder in self.run_folders or (folder / self.state_file).is_file():
                raise RefusedImport(
                    f"refused to import '{fullname}' from {place}: it lies inside the run "
                    f"folder {folder}, whose code is not run (a run folder may come from "
                    "anyone); name a module of the project or of an installed package")
        if not any(place.is_relative_to(root) for root in self.roots):
            raise RefusedImport(
                f"refused to import '{fullname}' from {place}: it lies outside the project "
                f"({PROJECT_ROOT}) and the installed packages; install it as a package, or "
                "put it in the project")


@contextmanager
def confined_imports(run_folders: Sequence[Path], state_file: str) -> Iterator[None]:
    """Within it, a new import from inside `run_folders` or any folder holding
    `state_file`, or from outside the project and the installed packages, raises
    RefusedImport before the module's code runs. Modules imported before are untouched."""
    finder = _ConfinedFinder(run_folders, state_file)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
