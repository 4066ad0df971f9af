"""Checking an environment's keyword arguments against its constructor, without calling it."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from src.tasks.task import TaskSettingError, unknown_name


def check_keyword_arguments(constructor: Callable[..., Any], arguments: Mapping[str, Any],
                            owner: str, also: Iterable[str] = (),
                            key: str = "env_kwargs") -> None:
    """TaskSettingError((key, name), ...) with the closest names for an argument that
    `constructor` does not take, nor its maker (`also`: `gymnasium.make`'s own keywords).
    Any name passes where the constructor takes `**kwargs` or shows no signature."""
    try:
        parameters = inspect.signature(constructor).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: its own call checks
        return
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return
    taken = {parameter.name for parameter in parameters
             if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}
    known = sorted((taken | set(also)) - {"self"})
    for name in arguments:
        if name not in known:
            raise TaskSettingError((key, name),
                                   unknown_name(f"argument of {owner}", str(name), known))
