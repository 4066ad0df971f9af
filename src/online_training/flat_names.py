"""LifelongAgentBench's flat names for the RL trainer's settings, translated once, as a
config is read.

LifelongAgentBench writes the RL trainer's settings flat (`algorithm: reinforce`,
`learning_rate: 1e-5` beside the other parameters); here every setting has one spelling,
its key in a settings group, and the outcome rewards are the task's own settings (the
trainer takes the task's reward, times `reward.weight`). `translate_flat_names` rewrites
the parameters of every callback whose class is (or derives from) the RL trainer by
FLAT_NAMES (rendered in docs/reference.md, "Flat names") before anything is validated,
so that planning and the run folder's config.yaml see the grouped spelling only (a
config.yaml written before is read the same way before the resume check compares it): `algorithm: reinforce` is read as `advantage: {estimator: reinforce}`,
`reward_correct: 2.0` as the task's own `reward_correct: 2.0` (DB-bench's), an error
where the task takes no such parameter.

The same setting given both ways with different values is an error naming the flat
name's line; with one value it is one setting. A translated key keeps the flat name's
line, so that a later error about its value points there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.configuration.components import COMPONENTS, constructor_fields, import_component_class
from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.tasks.task import Task

# The trainer whose flat names these are, by its short name: its module is imported only
# for a config that has callbacks.
RL_TRAINER = "rl_training"
TRAINER, TASK = "trainer", "task"  # whose parameters a flat name moves into

# flat name -> (whose parameters, key path there)
FLAT_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "algorithm": (TRAINER, ("advantage", "estimator")),
    "learning_rate": (TRAINER, ("optimizer", "learning_rate")),
    "optimizer_class": (TRAINER, ("optimizer", "optimizer_class")),
    "gradient_accumulation_steps": (TRAINER, ("optimizer", "gradient_accumulation_steps")),
    "reward_weight": (TRAINER, ("reward", "weight")),
    "num_trainer_workers": (TRAINER, ("trainer_workers", "count")),
    "cpus_per_trainer_worker": (TRAINER, ("trainer_workers", "cpus_per_worker")),
    "gpus_per_trainer_worker": (TRAINER, ("trainer_workers", "gpus_per_worker")),
    "reward_correct": (TASK, ("reward_correct",)),
    "reward_incorrect": (TASK, ("reward_incorrect",)),
    "reward_timeout": (TASK, ("reward_timeout",)),
}

KeyPath = tuple[str, ...]
ASSIGNMENT: KeyPath = ("assignment_config",)
# Where the data was read: a config file (its errors name the line, and a translated key
# keeps the flat name's line), or a file read as plain YAML, such as a run folder's
# config.yaml (its errors name the file).
Origin = YamlSource | Path


def translate_flat_names(data: Any, origin: Origin) -> None:
    """Rewrite `data` (an assignment file as read, changed in place) so that the RL
    trainer's flat names stand where FLAT_NAMES puts them. A document of another shape is
    left as it is: validation reports what is wrong with it."""
    assignment = data.get(ASSIGNMENT[0]) if isinstance(data, dict) else None
    callbacks = assignment.get("callback_dict") if isinstance(assignment, dict) else None
    if not isinstance(callbacks, dict):
        return
    for callback_id, spec in callbacks.items():
        parameters = spec.get("parameters") if isinstance(spec, dict) else None
        if not isinstance(parameters, dict) or _named_class(spec, COMPONENTS[RL_TRAINER]) is None:
            continue
        where = (*ASSIGNMENT, "callback_dict", str(callback_id), "parameters")
        for flat in [name for name in parameters if name in FLAT_NAMES]:
            owner, path = FLAT_NAMES[flat]
            flat_where = (*where, flat)
            if owner == TRAINER:
                into, into_where, shown = parameters, where, ".".join(path)
            else:
                into = _task_parameters(origin, assignment, flat, flat_where)
                into_where = (*ASSIGNMENT, "task", "parameters")
                shown = ".".join(("task", "parameters", *path))
            _move(origin, parameters.pop(flat), flat_where, into, into_where, path, shown)


def _named_class(spec: dict[Any, Any], base: type) -> type | None:
    """The class a component entry names when it is `base` or derives from it; None
    otherwise, or when the entry names nothing importable (planning says why)."""
    name, module = spec.get("name"), spec.get("module")
    try:
        cls = (import_component_class(module, base) if isinstance(module, str)
               else COMPONENTS.get(name) if isinstance(name, str) else None)
    except ImportError:
        return None
    return cls if isinstance(cls, type) and issubclass(cls, base) else None


def _task_parameters(origin: Origin, assignment: dict[Any, Any], flat: str,
                     flat_where: KeyPath) -> dict[Any, Any]:
    """The task's parameters, where an outcome reward given to the trainer goes; an error
    when the task takes no parameter of that name."""
    task = assignment.get("task")
    if not isinstance(task, dict):
        raise _error(origin, f"'{flat}' is an outcome reward, a setting of the task, and "
                             "the assignment names no task", flat_where)
    cls = _named_class(task, Task)
    if cls is not None and flat not in constructor_fields(cls):
        raise _error(origin, f"'{flat}' is an outcome reward, a setting of the task, and "
                             f"{cls.__name__} takes no '{flat}': the trainer learns from the "
                             "task's own reward (times reward.weight); remove it here",
                     flat_where)
    if task.get("parameters") is None:
        task["parameters"] = {}
    if not isinstance(task["parameters"], dict):
        raise _error(origin, f"'{flat}' goes into the task's parameters, which are not a "
                             "mapping", (*ASSIGNMENT, "task", "parameters"))
    return task["parameters"]


def _move(origin: Origin, value: Any, flat_where: KeyPath, into: dict[Any, Any],
          into_where: KeyPath, path: KeyPath, shown: str) -> None:
    """Write a flat name's value at `path` under `into` (`into_where` in the file; `shown`
    names it in messages), making the mappings on the way where missing; a different value
    already there is an error."""
    flat = flat_where[-1]
    node, where = into, into_where
    for key in path[:-1]:
        where = (*where, key)
        if node.get(key) is None:
            node[key] = {}
            _keep_place(origin, where, flat_where)
        if not isinstance(node[key], dict):
            raise _error(origin, f"'{flat}' is '{shown}', but '{key}' here is not a mapping",
                         where)
        node = node[key]
    key, where = path[-1], (*where, path[-1])
    if key not in node:
        node[key] = value
        _keep_place(origin, where, flat_where)
    elif node[key] != value:
        written = (" ({}:{})".format(*origin.place_of(where))
                   if isinstance(origin, YamlSource) else "")
        raise _error(origin, f"'{flat}' is {value!r}, but '{shown}'{written} is "
                             f"{node[key]!r}: they are one setting (the first is "
                             "LifelongAgentBench's name); set it in one place", flat_where)


def _error(origin: Origin, problem: str, key_path: KeyPath) -> ConfigError:
    if isinstance(origin, YamlSource):
        return origin.error(problem, key_path)
    return ConfigError(problem, file=str(origin), key=".".join(key_path))


def _keep_place(origin: Origin, key_path: KeyPath, flat_where: KeyPath) -> None:
    """A translated key is where its flat name was written."""
    if isinstance(origin, YamlSource):
        origin.places[key_path] = origin.place_of(flat_where)
