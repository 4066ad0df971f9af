"""From a validated config to live components: checked fully before any weights load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from src.agents.agent import Agent
from src.callbacks.callback import Callback
from src.configuration.assignment import ComponentConfig, ExperimentConfig
from src.configuration.components import (
    constructor_fields,
    resolve_class,
    validate_parameters,
)
from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import LanguageModel
from src.tasks.task import Task


@dataclass(frozen=True)
class ComponentPlan:
    key_path: tuple[str | int, ...]
    name: str
    cls: type
    parameters: dict[str, Any]

    def describe(self) -> str:
        return f"{'.'.join(map(str, self.key_path))}: {self.cls.__module__}.{self.cls.__qualname__}"


@dataclass(frozen=True)
class ExperimentPlan:
    """Every component resolved and its parameters checked; nothing built yet."""

    config: ExperimentConfig
    source: YamlSource
    task: ComponentPlan
    agent: ComponentPlan
    language_models: dict[str, ComponentPlan]
    callbacks: dict[str, ComponentPlan]

    def describe(self) -> str:
        assignment = self.config.assignment_config
        lines = [f"assignment: {self.source.path}", self.task.describe(), self.agent.describe()]
        lines += [plan.describe() for plan in self.language_models.values()]
        lines += [plan.describe() for plan in self.callbacks.values()]
        rollout = assignment.rollout
        lines.append(f"rollout: batch_size={rollout.batch_size} group_size={rollout.group_size} "
                     f"num_epochs={rollout.num_epochs} max_batches={rollout.max_batches}")
        lines.append(f"output_dir: {assignment.output_dir}")
        return "\n".join(lines)


def load_experiment_config(path: Path) -> tuple[ExperimentConfig, YamlSource]:
    source = YamlSource(path)
    if not isinstance(source.data, dict):
        raise ConfigError("the file must hold a mapping with key 'assignment_config'",
                          file=str(path))
    return source.validate(ExperimentConfig), source


def plan_component(spec: ComponentConfig, key_path: tuple[str | int, ...], source: YamlSource,
                   base: type, language_model_names: set[str]) -> ComponentPlan:
    """Resolve the class and check its parameters; a language-model parameter must name
    one of `language_model_names`."""
    cls = resolve_class(spec, key_path, source, base)
    parameters = validate_parameters(cls, spec.parameters, key_path, source,
                                     {"language_model": LanguageModel})
    for name, value in parameters.items():
        if _is_language_model_reference(cls, name) and value not in language_model_names:
            raise source.error(
                f"names language model '{value}', which is not in language_model_list "
                f"(have: {', '.join(sorted(language_model_names)) or 'none'})",
                (*key_path, "parameters", name))
    return ComponentPlan(key_path, spec.name, cls, parameters)


def _is_language_model_reference(cls: type, parameter: str) -> bool:
    annotation = constructor_fields(cls).get(parameter, (None,))[0]
    return isinstance(annotation, type) and issubclass(annotation, LanguageModel)


def plan_experiment(config: ExperimentConfig, source: YamlSource) -> ExperimentPlan:
    assignment = config.assignment_config
    root = ("assignment_config",)
    language_models: dict[str, ComponentPlan] = {}
    for index, spec in enumerate(assignment.language_model_list):
        if spec.name in language_models:
            raise source.error(f"duplicate language model name '{spec.name}'",
                               (*root, "language_model_list", index, "name"))
        # a language model may name those listed before it (a rollout pool its trainer)
        language_models[spec.name] = plan_component(
            spec, (*root, "language_model_list", index), source, LanguageModel,
            set(language_models))
    names = set(language_models)
    return ExperimentPlan(
        config=config,
        source=source,
        task=plan_component(assignment.task, (*root, "task"), source, Task, names),
        agent=plan_component(assignment.agent, (*root, "agent"), source, Agent, names),
        language_models=language_models,
        callbacks={callback_id: plan_component(spec, (*root, "callback_dict", callback_id),
                                               source, Callback, names)
                   for callback_id, spec in assignment.callback_dict.items()},
    )


@dataclass
class Components:
    make_task: Callable[[], Task]
    agent: Agent
    language_models: dict[str, LanguageModel]
    callbacks: dict[str, Callback]


def instantiate(component: ComponentPlan, language_models: dict[str, LanguageModel]) -> Any:
    """Build a planned component, passing the live language models it names."""
    arguments = {
        name: language_models[value] if _is_language_model_reference(component.cls, name)
        else value
        for name, value in component.parameters.items()
    }
    return component.cls(**arguments)


def build_components(plan: ExperimentPlan) -> Components:
    # LoRA A matrices are drawn at construction: seed so that two runs start alike.
    torch.manual_seed(plan.config.assignment_config.random_seed)
    language_models: dict[str, LanguageModel] = {}
    for name, language_model_plan in plan.language_models.items():
        language_models[name] = instantiate(language_model_plan, language_models)
    callbacks: dict[str, Callback] = {}
    for callback_id, callback_plan in plan.callbacks.items():
        callback = instantiate(callback_plan, language_models)
        callback.callback_id = callback_id
        callbacks[callback_id] = callback
    return Components(
        make_task=lambda: instantiate(plan.task, language_models),
        agent=instantiate(plan.agent, language_models),
        language_models=language_models,
        callbacks=callbacks,
    )
