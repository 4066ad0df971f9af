"""Language models that reward terms name (a judge's): found in a component's parameters,
checked at planning, and handed to the terms when the component is built.

A model a reward term names must be listed in `language_model_list` and be that term's
alone: the judge calls it from the episode steps' threads, and a model that the agent
samples from, that a trainer changes or scores with, or that a pool copies, would be called
from two places at once (and a policy would judge its own replies as it trains).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import LanguageModel
from src.run.component_plan import ComponentPlan
from src.tasks.reward_functions import RewardTerm

KeyPath = tuple[str | int, ...]


def unlisted_model(source: YamlSource, name: str, language_models: Mapping[str, Any],
                   key_path: KeyPath) -> ConfigError:
    return source.error(f"names language model '{name}', which is not in language_model_list "
                        f"(have: {', '.join(sorted(language_models)) or 'none'})", key_path)


def reward_term_models(component: ComponentPlan) -> Iterator[tuple[KeyPath, str]]:
    """(where, language model) for each model that a reward term in `component`'s
    parameters, or in a component nested in them, names (a judge's)."""

    def walk(value: Any, where: KeyPath) -> Iterator[tuple[KeyPath, str]]:
        if isinstance(value, ComponentPlan):
            yield from reward_term_models(value)
        elif isinstance(value, RewardTerm):
            for parameter, model in value.language_model_names().items():
                yield (*where, "parameters", parameter), model
        elif isinstance(value, Mapping):
            for key, item in value.items():
                yield from walk(item, (*where, key))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                yield from walk(item, (*where, index))

    yield from walk(component.parameters, (*component.key_path, "parameters"))
    yield from walk(list(component.added_terms),
                    (*component.key_path, "parameters", "reward_terms"))


def check_reward_term_models(components: Iterable[ComponentPlan], used_by: Mapping[str, str],
                             language_models: Mapping[str, Any], source: YamlSource) -> None:
    """ConfigError for a model a reward term names that is not listed, or that another
    place (`used_by`: model -> the key that names it) uses too."""
    for component in components:
        for where, model in reward_term_models(component):
            if model not in language_models:
                raise unlisted_model(source, model, language_models, where)
            if model in used_by:
                raise source.error(
                    f"names language model '{model}', which {used_by[model]} uses too: a "
                    f"judge's model must be its own (the policy would judge its own replies "
                    f"as it trains, and two places would call one model at once); list a "
                    f"frozen copy under a name of its own (the same model_name_or_path, or "
                    f"a trained adapter_path)", where)


def with_language_models(value: Any, language_models: dict[str, LanguageModel]) -> Any:
    """`value` with each reward term in it that names language models given those it
    names (of `language_models`: one missing is the term's error when it is built)."""
    if isinstance(value, RewardTerm):
        named = set(value.language_model_names().values())
        return value.with_language_models({name: language_models[name]
                                           for name in named & set(language_models)})
    if type(value) in (list, tuple):  # exactly: a named tuple is built otherwise
        return type(value)(with_language_models(item, language_models) for item in value)
    if type(value) is dict:
        return {key: with_language_models(item, language_models)
                for key, item in value.items()}
    return value
