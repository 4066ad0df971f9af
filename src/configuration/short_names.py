"""A component's short name as its one spelling: a `module` that names the very class its
`name` is registered for is dropped (set to None) as a config is read.

A config may name a registered component both ways (`name: rl_training` with `module:
src.callbacks.instance.rl_training_callback.RLTrainingCallback`, as LifelongAgentBench's
configs and this project's older recipes do); both name one class. Read with the module
dropped, the file with the module line and the file without it are one config: a run
started from one resumes from the other (the resume check compares configs key by key),
and the run folder's config.yaml says `name` alone. A `module` naming another class (a
subclass, a class of the user's) is kept: it is what the entry builds.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from src.configuration.components import COMPONENTS, import_component_class
from src.configuration.models import ComponentConfig


def short_names(model: type[BaseModel]) -> Callable[[Any, object], None]:
    """A pipeline's reading of a file (as read, and where: a path or the source) into
    short names, for a document of `model`."""

    def translate(data: Any, origin: object) -> None:
        drop_registered_modules(data, model)

    return translate


def drop_registered_modules(data: Any, model: type[BaseModel]) -> None:
    """Drop (set to None), in `data` (a document read for `model`, changed in place),
    each component entry's `module` that names the class registered as its `name`. What does not fit
    the model is left as it is: validation reports it."""
    if not isinstance(data, dict):
        return
    for key, field in model.model_fields.items():
        if key in data:
            _walk(data[key], field.annotation)


def _walk(value: Any, annotation: Any) -> None:
    """Visit `value`, written for `annotation`: a component entry, a model, or a list,
    mapping or union of them."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for argument in arguments:
            _walk(value, argument)
    elif origin is list and isinstance(value, list) and arguments:
        for item in value:
            _walk(item, arguments[0])
    elif origin is dict and isinstance(value, dict) and len(arguments) == 2:
        for item in value.values():
            _walk(item, arguments[1])
    elif annotation is ComponentConfig:
        _drop_if_registered(value)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        drop_registered_modules(value, annotation)


def _drop_if_registered(entry: Any) -> None:
    if not isinstance(entry, dict):
        return
    name, module = entry.get("name"), entry.get("module")
    if not isinstance(name, str) or not isinstance(module, str):
        return
    try:
        registered = COMPONENTS.get(name)
        named = registered and import_component_class(module, registered)
    except ImportError:  # planning reports what does not import
        return
    if registered is not None and named is registered:
        # None, not removed: a stored config read so has the key, which no resume takes
        # for a setting new to the code
        entry["module"] = None
