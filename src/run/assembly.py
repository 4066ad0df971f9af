"""From a validated config to live components: checked fully before any weights load
(a task's parameters by its own `check_parameters` too).

Planning also decides which weights this process loads: a trained policy that every
component naming it uses only for its adapter (the agent samples from a rollout pool, the
RL trainer's trainer workers score and update) is built without its base weights
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
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from src.configuration.components import (
    constructor_fields,
    referenced_class,
    resolve_class,
    validate_parameters,
)
from src.configuration.models import ComponentConfig, NestedComponentConfig, StrictModel
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import LanguageModel, NamesModels
from src.run.component_plan import ComponentPlan
from src.run.judge_models import unlisted_model, with_language_models
from src.tasks.reward_functions import RewardTerm
from src.tasks.reward_terms import terms_rubric
from src.tasks.task import Task, TaskSettingError

# a task family's reward terms (a judge, a reward model) in its parameters: the family's
# own where its constructor takes them, else added to it (`Task.add_reward_terms`)
ADDED_TERMS = "reward_terms"


def plan_component(spec: ComponentConfig | NestedComponentConfig,
                   key_path: tuple[str | int, ...], source: YamlSource, base: type,
                   language_models: Mapping[str, ComponentPlan]) -> ComponentPlan:
    """Resolve the class and check its parameters. A language-model parameter names one of
    `language_models`, or, left out, is the one of them that fits; a parameter given as
    `{module, parameters}` where the constructor takes a class is a nested component."""
    cls = resolve_class(spec, key_path, source, base)
    fields = constructor_fields(cls)
    given = dict(spec.parameters)
    added_terms = _added_terms(cls, fields, given, key_path, source)
    nested: dict[str, ComponentPlan] = {}
    for name, value in given.items():
        component_type = _nested_component_type(fields.get(name, (None,))[0])
        if component_type is not None and isinstance(value, dict) and "module" in value:
            where = (*key_path, "parameters", name)
            nested[name] = plan_component(
                source.validate(NestedComponentConfig, value, where), where, source,
                component_type, language_models)
    for name, (annotation, default) in fields.items():
        if name not in given and default is ... and is_language_model_type(annotation):
            given[name] = _only_fitting_model(annotation, language_models, source,
                                              (*key_path, "parameters", name))
    parameters = validate_parameters(cls, given, key_path, source,
                                     {"language_model": LanguageModel}, frozenset(nested))
    for name, value in parameters.items():
        if not is_language_model_type(fields[name][0]) or value is None:
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
    return ComponentPlan(key_path, spec.name or cls.__name__, cls, {**parameters, **nested},
                         added_terms)


class _AddedTerms(StrictModel):
    reward_terms: list[RewardTerm]


def _added_terms(cls: type, fields: dict[str, Any], given: dict[str, Any],
                 key_path: tuple[str | int, ...], source: YamlSource
                 ) -> tuple[RewardTerm, ...]:
    """A task's `reward_terms`, taken out of `given`, where its constructor takes none:
    any family scores with them (`Task.add_reward_terms`)."""
    if not issubclass(cls, Task) or ADDED_TERMS in fields or ADDED_TERMS not in given:
        return ()
    terms = source.validate(_AddedTerms, {ADDED_TERMS: given.pop(ADDED_TERMS)},
                            (*key_path, "parameters"))
    return tuple(terms.reward_terms)


def _check_task_settings(cls: type[Task[Any]], parameters: dict[str, Any],
                         key_path: tuple[str | int, ...], source: YamlSource) -> None:
    """The task's own check that what its parameters name exists (a game, a dataset, an
    argument), before any weights load: its refusal as a config error at the key's line."""
    try:
        cls.check_parameters(parameters)
    except TaskSettingError as error:
        raise source.error(error.message, (*key_path, "parameters", *error.key)) from error


def is_language_model_type(annotation: Any) -> bool:
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


def check_selection_split(task_plan: ComponentPlan, source: YamlSource,
                          splits_key: tuple[str | int, ...]) -> None:
    """Evaluating a selection split needs a task that draws one: build the task (no model
    is loaded) and ask, before the run folder is made."""
    try:  # without the reward terms added to it: a judge's model is not loaded here
        task = instantiate(replace(task_plan, added_terms=()), {})
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


def language_model_uses(component: ComponentPlan
                         ) -> typing.Iterator[tuple[ComponentPlan, str, str]]:
    """(component, parameter, language model) for each model that `component` or a
    component nested in it names."""
    fields = constructor_fields(component.cls)
    for parameter, value in component.parameters.items():
        if isinstance(value, ComponentPlan):
            yield from language_model_uses(value)
        elif isinstance(value, str) and is_language_model_type(fields[parameter][0]):
            yield component, parameter, value


def adapter_only(component: ComponentPlan) -> frozenset[str]:
    if issubclass(component.cls, NamesModels):
        return component.cls.adapter_only_models(component.parameters)
    return frozenset()  # an agent or a task samples from the models it names


def instantiate(component: ComponentPlan, language_models: dict[str, LanguageModel]) -> Any:
    """Build a planned component (its nested components first), passing the live language
    models it names."""
    fields = constructor_fields(component.cls)
    arguments = {}
    for name, value in component.parameters.items():
        if isinstance(value, ComponentPlan):
            arguments[name] = instantiate(value, language_models)
        elif is_language_model_type(fields[name][0]):
            arguments[name] = None if value is None else language_models[value]
        else:
            arguments[name] = with_language_models(value, language_models)
    built = component.cls(**arguments)
    added = terms_rubric([with_language_models(term, language_models)
                          for term in component.added_terms])
    if added is not None:
        built.add_reward_terms(added)
    return built


