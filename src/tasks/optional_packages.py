"""Importing the package behind an optional task adapter, or saying how to install it.

An adapter for another package's environments (reasoning-gym, TextArena, verifiers)
imports that package through `import_optional`: where it is missing, the config that
names the adapter stops with a clear error (exit 2) carrying the pip command, instead of
a bare ModuleNotFoundError from deep inside the import.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def import_optional(module: str, extra: str) -> ModuleType:
    """`module`, imported; ModuleNotFoundError naming the project's extra `extra` that
    installs it where it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != module and not (error.name or "").startswith(f"{module}."):
            raise  # the package is there but something it needs is not: say that
        raise ModuleNotFoundError(
            f"this task needs the package '{module}', which is not installed: run "
            f"pip install -e '.[{extra}]' (or scripts/install.sh --dev, which installs "
            f"every adapter's package)", name=module) from error
