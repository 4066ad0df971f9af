"""Settings groups that a config writes flat, among a constructor's other parameters.

A constructor parameter typed with a `FlatGroup` (the splits every task family shares:
src/tasks/splits.py) is one typed object in code, while a config writes the group's keys
beside the constructor's other parameters (`parameters: {num_train: 40, seed: 42}`). The
config check takes each key as a parameter of its own (`flattened`), so that an unknown
key or a wrong value is named at its own line, and `gathered` builds the group the
constructor receives. A key a config leaves out keeps the value of the parameter's
default group, so a family states its own defaults once, in the group it declares.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

# a constructor's parameters as pydantic field definitions: name -> (annotation, default)
Fields = Mapping[str, tuple[Any, Any]]


class FlatGroup(BaseModel):
    """A settings group whose keys a config writes flat (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def flat_groups(fields: Fields) -> dict[str, FlatGroup]:
    """The flat groups among a constructor's parameters, with their default groups."""
    groups = {}
    for name, (annotation, default) in fields.items():
        if inspect.isclass(annotation) and issubclass(annotation, FlatGroup):
            if not isinstance(default, annotation):
                raise TypeError(f"parameter '{name}', a {annotation.__name__}, needs a "
                                f"default {annotation.__name__} (the values of the keys a "
                                "config leaves out)")
            groups[name] = default
    return groups


def flattened(fields: Fields) -> dict[str, tuple[Any, Any]]:
    """`fields` with each flat group's keys in its place, each defaulting to the value in
    the parameter's default group."""
    groups = flat_groups(fields)
    flat: dict[str, tuple[Any, Any]] = {}
    for name, field in fields.items():
        if name not in groups:
            flat[name] = field
            continue
        group = groups[name]
        for key, info in type(group).model_fields.items():
            if key in fields:
                raise TypeError(f"'{key}' is both a parameter and a key of the parameter "
                                f"'{name}' ({type(group).__name__}), which a config writes "
                                "flat")
            flat[key] = (info.annotation,
                         FieldInfo.merge_field_infos(info, default=getattr(group, key)))
    return flat


def gathered(fields: Fields, values: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor's arguments from `values` keyed as a config writes them: each flat
    group built from its default group with the keys `values` gives changed (and checked
    by the group), the other values as they are."""
    groups = flat_groups(fields)
    keys = {key for group in groups.values() for key in type(group).model_fields}
    arguments = {name: value for name, value in values.items() if name not in keys}
    for name, group in groups.items():
        changed = {key: values[key] for key in type(group).model_fields if key in values}
        # the default group's own settings stay set, so a group can tell them from defaults
        arguments[name] = type(group).model_validate(
            {**group.model_dump(include=group.model_fields_set), **changed}) if changed else group
    return arguments
