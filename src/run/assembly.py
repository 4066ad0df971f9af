"""From a validated config to live components: checked fully before any weights load
(a task's parameters by its own `check_parameters` too).

Planning also decides which weights this process loads: a trained policy that every
component naming it uses only for its adapter (the agent samples from a rollout pool, the
RL callback's trainer workers score and update) is built without its base weights
(`base_weights: meta`, see `_choose_base_weights`).

A reward term in a component's parameters (a judge's settings: `RewardTerm`,
src/tasks/rubric.py) may name language models too: each must be listed and the term's
alone, and the term is given the live models when the component is built
(src.run.judge_models).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from src.agents.agent import Agent
from src.configuration.assignment import (
    ComponentConfig,
    ExperimentConfig,
    NestedComponentConfig,
)
from src.configuration.components import (
    constructor_fields,
    referenced_class,
    resolve_class,
    validate_parameters,
)
from src.configuration.errors import ConfigError
from src.configuration.flat_names import translate_flat_names
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import BASE_WEIGHTS, LanguageModel, NamesModels
from src.run.callbacks import Callback, EpisodeTrainer
from src.run.component_plan import ComponentPlan
from src.run.judge_models import (
    check_reward_term_models,
    unlisted_model,
    with_language_models,
)
from src.runtime.reproducibility import prepare_model_building
from src.storage.state import Stateful
from src.tasks.task import Task, TaskSettingError


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
        lines += [plan.describe() + (" (no base weights in this process: base_weights meta)"
                                     if plan.parameters.get(BASE_WEIGHTS) == "meta" else "")
                  for plan in self.language_models.values()]
        lines += [plan.describe() for plan in self.callbacks.values()]
        rollout = assignment.rollout
        lines.append(f"rollout: batch_size={rollout.batch_size} group_size={rollout.group_size} "
                     f"num_epochs={rollout.num_epochs} max_batches={rollout.max_batches} "
                     f"max_staleness={rollout.max_staleness}")
        lines.append(f"output_dir: {assignment.output_dir}")
        return "\n".join(lines)


def load_experiment_config(file: Path | YamlSource) -> tuple[ExperimentConfig, YamlSource]:
    """An RL assignment from its file (or the file already read), flat names translated."""
    source = file if isinstance(file, YamlSource) else YamlSource(file)
    if not isinstance(source.data, dict):
        raise ConfigError("the file must hold a mapping with key 'assignment_config'",
                          file=str(source.path))
    translate_flat_names(source.data, source)
    return source.validate(ExperimentConfig), source


def plan_component(spec: ComponentConfig | NestedComponentConfig,
                   key_path: tuple[str | int, ...], source: YamlSource, base: type,
                   language_models: Mapping[str, ComponentPlan]) -> ComponentPlan:
    """Resolve the class and check its parameters. A language-model parameter names one of
    `language_models`, or, left out, is the one of them that fits; a parameter given as
    `{module, parameters}` where the constructor takes a class is a nested component."""
    cls = resolve_class(spec, key_path, source, base)
    fields = constructor_fields(cls)
    given = dict(spec.parameters)
    nested: dict[str, ComponentPlan] = {}
    for name, value in given.items():
        component_type = _nested_component_type(fields.get(name, (None,))[0])
        if component_type is not None and isinstance(value, dict) and "module" in value:
            where = (*key_path, "parameters", name)
            nested[name] = plan_component(
                source.validate(NestedComponentConfig, value, where), where, source,
                component_type, language_models)
    for name, (annotation, default) in fields.items():
        if name not in given and default is ... and _is_language_model_type(annotation):
            given[name] = _only_fitting_model(annotation, language_models, source,
                                              (*key_path, "parameters", name))
    parameters = validate_parameters(cls, given, key_path, source,
                                     {"language_model": LanguageModel}, frozenset(nested))
    for name, value in parameters.items():
        if not _is_language_model_type(fields[name][0]) or value is None:
            continue
        if value not in language_models:
            raise unlisted_model(source, value, language_models,
                                  (*key_path, "parameters", name))
        wanted = referenced_class(fields[name][0])
        named = language_models[value].cls
        if wanted is not None and not issubclass(named, wanted):
            # a sampler (a rollout pool, a vLLM engine) where a model must score or train
            # in this process: refused here, before any weights load
            raise source.error(
                f"names language model '{value}', a {named.__name__}, but {cls.__name__}'s "
                f"{name} must be a {wanted.__name__}", (*key_path, "parameters", name))
    if issubclass(cls, Task):
        _check_task_settings(cls, parameters, key_path, source)
    return ComponentPlan(key_path, spec.name or cls.__name__, cls, {**parameters, **nested})


def _check_task_settings(cls: type[Task[Any]], parameters: dict[str, Any],
                         key_path: tuple[str | int, ...], source: YamlSource) -> None:
    """The task's own check that what its parameters name exists (a game, a dataset, an
    argument), before any weights load: its refusal as a config error at the key's line."""
    try:
        cls.check_parameters(parameters)
    except TaskSettingError as error:
        raise source.error(error.message, (*key_path, "parameters", *error.key)) from error


def _is_language_model_type(annotation: Any) -> bool:
    """A parameter that names a language model (or, optionally, none)."""
    cls = referenced_class(annotation)
    return cls is not None and issubclass(cls, LanguageModel)


def _only_fitting_model(annotation: type, language_models: Mapping[str, ComponentPlan],
                        source: YamlSource, key_path: tuple[str | int, ...]) -> str:
    """The name of the one listed language model whose class fits the parameter."""
    fitting = [name for name, plan in language_models.items()
               if issubclass(plan.cls, annotation)]
    if len(fitting) != 1:
        raise source.error(
            f"is required: {len(fitting)} language models in language_model_list are a "
            f"{annotation.__name__} ({', '.join(fitting) or 'none'}); name one", key_path)
    return fitting[0]


def _nested_component_type(annotation: Any) -> type | None:
    """The class of a parameter typed `X` or `X | None` where X is a component class (not
    a builtin, a collection, a pydantic record or a language model, named by string)."""
    options = (typing.get_args(annotation)
               if typing.get_origin(annotation) in (typing.Union, types.UnionType)
               else (annotation,))
    classes = [option for option in options
               if inspect.isclass(option) and option is not type(None)
               and option.__module__ not in ("builtins", "collections.abc", "pathlib")
               and not issubclass(option, (BaseModel, LanguageModel))]
    return classes[0] if len(classes) == 1 else None


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
            language_models)
    plan = ExperimentPlan(
        config=config,
        source=source,
        task=plan_component(assignment.task, (*root, "task"), source, Task, language_models),
        agent=plan_component(assignment.agent, (*root, "agent"), source, Agent,
                             language_models),
        language_models=language_models,
        callbacks={callback_id: plan_component(spec, (*root, "callback_dict", callback_id),
                                               source, Callback, language_models)
                   for callback_id, spec in assignment.callback_dict.items()},
    )
    _check_reward_term_models(plan)
    explicit = {spec.name for spec in assignment.language_model_list
                if BASE_WEIGHTS in spec.parameters}
    plan = replace(plan, language_models=_choose_base_weights(plan, explicit))
    if assignment.rollout.max_staleness > 0:
        _check_overlapped_rollouts(plan)
    if "selection" in assignment.evaluation.splits:
        check_selection_split(plan.task, source, (*root, "evaluation", "splits"))
    return plan


def check_selection_split(task_plan: ComponentPlan, source: YamlSource,
                          splits_key: tuple[str | int, ...]) -> None:
    """Evaluating a selection split needs a task that draws one: build the task (no model
    is loaded) and ask, before the run folder is made."""
    try:
        task = instantiate(task_plan, {})
    except (ValueError, TypeError, KeyError, OSError) as error:  # its own parameter checks
        raise source.error(f"the task cannot be built: {error}", task_plan.key_path) from error
    try:
        drawn = len(task.sample_ids("selection"))
    finally:
        task.close()
    if not drawn:
        raise source.error(
            f"names 'selection', but the task {task.__class__.__name__} draws no selection "
            "samples as configured (DB-bench's procedural source draws them: set its "
            "num_selection)", splits_key)


def _check_reward_term_models(plan: ExperimentPlan) -> None:
    """A model that a reward term names is listed and that term's alone
    (src.run.judge_models)."""
    components = (plan.task, plan.agent, *plan.language_models.values(),
                  *plan.callbacks.values())
    used_by: dict[str, str] = {}  # model -> the first place that names it otherwise
    for component in components:
        for user, parameter, model in _language_model_uses(component):
            used_by.setdefault(model, ".".join(map(str, (*user.key_path, "parameters",
                                                         parameter))))
    check_reward_term_models(components, used_by, plan.language_models, plan.source)


def _choose_base_weights(plan: ExperimentPlan, explicit: set[str]) -> dict[str, ComponentPlan]:
    """The language models' plans with `base_weights` chosen, where a class takes it:
    "meta" for a model that components name but none samples from or scores with in this
    process (each lists its parameter in `adapter_only_models`), so that no weights load
    here that nothing here runs; a value the config gives is kept, "meta" checked."""
    named: set[str] = set()
    needed: dict[str, str] = {}  # model -> a place that samples from or scores with it
    for component in (plan.task, plan.agent, *plan.language_models.values(),
                      *plan.callbacks.values()):
        for user, parameter, model in _language_model_uses(component):
            named.add(model)
            if parameter not in _adapter_only(user):
                needed.setdefault(model, ".".join(map(str, (*user.key_path, "parameters",
                                                            parameter))))
    chosen = dict(plan.language_models)
    for name, model_plan in plan.language_models.items():
        if BASE_WEIGHTS not in model_plan.parameters:
            continue
        if name in explicit:
            if model_plan.parameters[BASE_WEIGHTS] == "meta" and name in needed:
                raise plan.source.error(
                    f"is meta, but {needed[name]} samples from or scores with '{name}' in "
                    f"this process, which needs its base weights: set load, or leave it out "
                    f"and the run chooses", (*model_plan.key_path, "parameters", BASE_WEIGHTS))
        elif name in named and name not in needed:
            chosen[name] = replace(model_plan,
                                   parameters={**model_plan.parameters, BASE_WEIGHTS: "meta"})
    return chosen


def _language_model_uses(component: ComponentPlan
                         ) -> typing.Iterator[tuple[ComponentPlan, str, str]]:
    """(component, parameter, language model) for each model that `component` or a
    component nested in it names."""
    fields = constructor_fields(component.cls)
    for parameter, value in component.parameters.items():
        if isinstance(value, ComponentPlan):
            yield from _language_model_uses(value)
        elif isinstance(value, str) and _is_language_model_type(fields[parameter][0]):
            yield component, parameter, value


def _adapter_only(component: ComponentPlan) -> frozenset[str]:
    if issubclass(component.cls, NamesModels):
        return component.cls.adapter_only_models(component.parameters)
    return frozenset()  # an agent or a task samples from the models it names


def _check_overlapped_rollouts(plan: ExperimentPlan) -> None:
    """With rollout.max_staleness > 0 the next batch is sampled while the trainer's weights
    change: the agent must sample from a copy of the policy (a rollout pool) and keep no
    state of its own, and a callback that drops stale samples must keep those one update
    old."""
    staleness = plan.config.assignment_config.rollout.max_staleness
    fields = constructor_fields(plan.agent.cls)
    samplers = [plan.agent.parameters[name] for name in fields
                if _is_language_model_type(fields[name][0])
                and plan.agent.parameters.get(name) is not None]
    in_process = [name for name in samplers
                  if not plan.language_models[name].cls.holds_policy_copy]
    if not samplers or in_process:
        raise plan.source.error(
            f"is {staleness}: the next batch is sampled while the trainer updates, so the "
            f"agent must sample from a rollout pool (a copy of the policy in other "
            f"processes); it samples from {in_process or 'no language model of this run'}",
            ("assignment_config", "rollout", "max_staleness"))
    for name in samplers:
        # a pool that syncs itself at a smaller lag would move the batch sampled ahead to
        # the new policy whenever the update ends first: a batch of mixed, timing-made
        # versions, and a run that does not repeat itself
        model = plan.language_models[name]
        pool_fields = constructor_fields(model.cls)
        if "max_staleness" in pool_fields:
            lag = model.parameters.get("max_staleness", pool_fields["max_staleness"][1])
            if isinstance(lag, int) and lag < staleness:
                raise plan.source.error(
                    f"is {staleness}, but language model '{name}' syncs to the trainer "
                    f"whenever it lags more than max_staleness={lag} updates, so the batch "
                    f"sampled ahead would take the new policy whenever the update ends "
                    f"first; give '{name}' max_staleness: {staleness}",
                    ("assignment_config", "rollout", "max_staleness"))
    if issubclass(plan.agent.cls, Stateful):
        raise plan.source.error(
            f"is {staleness}, but agent '{plan.agent.name}' keeps state learnt from episodes "
            f"(it saves state with each batch), and the batch sampled ahead would reach it "
            f"before its batch is committed; use max_staleness 0 with this agent",
            ("assignment_config", "rollout", "max_staleness"))
    for callback_id, callback in plan.callbacks.items():
        if not issubclass(callback.cls, EpisodeTrainer):
            continue
        kept = callback.cls.oldest_trained(callback.parameters)
        if kept is not None and kept < staleness:
            raise plan.source.error(
                f"train only on episodes at most {kept} updates old, below "
                f"rollout.max_staleness={staleness}: every sample of an overlapped batch "
                f"would be dropped; let the trainer keep episodes {staleness} updates old "
                f"(RLTrainingCallback: max_policy_staleness {staleness}, or null)",
                ("assignment_config", "callback_dict", callback_id, "parameters"))


@dataclass
class Components:
    make_task: Callable[[], Task]
    agent: Agent
    language_models: dict[str, LanguageModel]
    callbacks: dict[str, Callback]


def instantiate(component: ComponentPlan, language_models: dict[str, LanguageModel]) -> Any:
    """Build a planned component (its nested components first), passing the live language
    models it names."""
    fields = constructor_fields(component.cls)
    arguments = {}
    for name, value in component.parameters.items():
        if isinstance(value, ComponentPlan):
            arguments[name] = instantiate(value, language_models)
        elif _is_language_model_type(fields[name][0]):
            arguments[name] = None if value is None else language_models[value]
        else:
            arguments[name] = with_language_models(value, language_models)
    return component.cls(**arguments)


def build_language_models(plan: ExperimentPlan,
                          built: dict[str, LanguageModel] | None = None
                          ) -> dict[str, LanguageModel]:
    """The run's language models in the config's order, each given those before it; into
    `built` if given, so that a caller can close the ones made before a failure."""
    assignment = plan.config.assignment_config
    prepare_model_building(assignment.reproducible, assignment.random_seed)
    language_models = {} if built is None else built
    for name, language_model_plan in plan.language_models.items():
        language_models[name] = instantiate(language_model_plan, language_models)
    return language_models


def build_components(plan: ExperimentPlan) -> Components:
    language_models = build_language_models(plan)
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
