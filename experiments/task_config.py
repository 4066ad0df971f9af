"""The task parameters of a saved config, for tools that rebuild a run's task family
without its model (held-out headroom, train/validation overlap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from src.configuration.components import constructor_fields
from src.configuration.flat_groups import gathered
from src.configuration.yaml_source import YamlSource

TaskT = TypeVar("TaskT")


def task_parameters_from_config(config_path: Path, task_name: str) -> dict[str, Any]:
    """The `task.parameters` of an assignment or supervised config (or a run's saved
    config.yaml) whose one task section is named `task_name`, its imports resolved."""
    document = YamlSource(config_path).data
    sections = [value for value in (document.values() if isinstance(document, dict) else [])
                if isinstance(value, dict) and isinstance(value.get("task"), dict)]
    if len(sections) != 1 or sections[0]["task"].get("name") != task_name:
        raise ValueError(f"{config_path}: expected one config section whose task is "
                         f"{task_name}")
    return dict(sections[0]["task"].get("parameters") or {})


def task_built_from_config(config_path: Path, task_name: str, cls: type[TaskT]) -> TaskT:
    """The task family `cls` built from a saved config's task parameters, each settings
    group a config writes flat (the splits) gathered as the constructor takes it."""
    return cls(**gathered(constructor_fields(cls), task_parameters_from_config(config_path,
                                                                              task_name)))
