"""Turning `{name, module, parameters}` into classes with checked parameters."""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from typing import Any

from pydantic import ConfigDict, ValidationError, create_model

from src.configuration.flat_groups import flattened, gathered
from src.configuration.models import ComponentConfig, NestedComponentConfig
from src.configuration.registry import Registry
from src.configuration.yaml_source import YamlSource

# The classes a config may name by a short name (`name: math_problems`), each registered
# where it is defined, `@COMPONENTS.register("math_problems")` above the class, and found
# there when a config first names it (src/configuration/registry.py); a config names any
# other class by `module`.
COMPONENTS: Registry[type] = Registry("component", indexed_as="COMPONENTS")


def import_dotted(path: str) -> Any:
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise ImportError(f"'{path}' is not a dotted path 'package.module.Class'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError as error:
        raise ImportError(f"module '{module_name}' has no attribute '{attribute}'") from error


def import_component_class(path: str, expected_base: type) -> Any:
    """A class path, or a module path (LifelongAgentBench names a module file, the class
    implied): then the one concrete `expected_base` class the module defines or exports."""
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as error:
        if error.name != path:  # a missing package on the way, not a class path
            raise ImportError(str(error)) from error
        return import_dotted(path)
    except (ValueError, TypeError) as error:  # empty or relative: no path at all
        raise ImportError(f"'{path}' is not a dotted path 'package.module[.Class]'") from error
    # the classes it defines, and those it names in __all__ (a module kept at a path
    # configs name while the class moved)
    exported = set(getattr(module, "__all__", ()))
    candidates = sorted(
        {value for name, value in vars(module).items()
         if inspect.isclass(value) and issubclass(value, expected_base)
         and not inspect.isabstract(value)
         and (value.__module__ == module.__name__ or name in exported)},
        key=lambda cls: cls.__name__)
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ImportError(f"module '{path}' defines no {expected_base.__name__} class")
    raise ImportError(
        f"module '{path}' defines several {expected_base.__name__} classes "
        f"({', '.join(cls.__name__ for cls in candidates)}): name one as '{path}.<Class>'")


def resolve_class(spec: ComponentConfig | NestedComponentConfig,
                  key_path: tuple[str | int, ...], source: YamlSource,
                  expected_base: type) -> type:
    """The class `module` names, or else the one registered as `name`."""
    if spec.module:
        where, shown = (*key_path, "module"), spec.module
        try:
            cls = import_component_class(spec.module, expected_base)
        except ImportError as error:
            raise source.error(f"cannot import '{spec.module}': {error}", where) from error
    else:
        where = (*key_path, "name")
        try:
            cls = COMPONENTS.get(spec.name or "")
        except ImportError as error:
            raise source.error(f"cannot import '{spec.name}': {error}", where) from error
        if cls is None:
            raise source.error(
                f"'{spec.name}' is not a registered component and no 'module' is given "
                f"(registered: {', '.join(sorted(COMPONENTS.names()))})", where)
        shown = f"{cls.__module__}.{cls.__qualname__}"
    if not (inspect.isclass(cls) and issubclass(cls, expected_base)):
        raise source.error(f"'{shown}' is not a subclass of {expected_base.__name__}", where)
    return cls


def constructor_fields(cls: type) -> dict[str, tuple[Any, Any]]:
    """The constructor's parameters as pydantic field definitions."""
    hints = typing.get_type_hints(cls.__init__, include_extras=True)  # keeps Field bounds
    fields: dict[str, tuple[Any, Any]] = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (hints.get(name, Any), default)
    return fields


def referenced_class(annotation: Any) -> type | None:
    """The class of a parameter annotated with a class or an optional one (`LanguageModel`,
    `LanguageModel | None`); None for any other annotation."""
    if inspect.isclass(annotation):
        return annotation
    arguments = [argument for argument in typing.get_args(annotation)
                 if argument is not type(None)]
    if (typing.get_origin(annotation) in (typing.Union, types.UnionType)
            and len(arguments) == 1 and inspect.isclass(arguments[0])):
        return arguments[0]
    return None


def validate_parameters(cls: type, parameters: dict[str, Any], key_path: tuple[str | int, ...],
                        source: YamlSource, references: dict[str, type],
                        planned: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Check parameters against the constructor's type hints; unknown keys are errors.

    `references` maps a parameter type (e.g. LanguageModel) that a config names by
    string to that type: such parameters are checked as names and resolved later.
    `planned` parameters hold nested components, checked by their own plans: kept as given.
    A flat group's keys (src/configuration/flat_groups.py) are checked as parameters of
    their own and gathered into the group the constructor takes.
    """
    fields = constructor_fields(cls)
    referenced = {name: field for name, field in fields.items()
                  if (cls_ := referenced_class(field[0])) is not None
                  and any(issubclass(cls_, ref)
                                                       for ref in references.values())}
    for name in referenced:  # a name, or None where the parameter is optional
        fields[name] = (str if inspect.isclass(fields[name][0]) else str | None,
                        fields[name][1])
    for name in planned:
        fields[name] = (Any, fields[name][1])
    flat = flattened(fields)  # a flat group's keys are parameters of their own here
    model = create_model(f"{cls.__name__}Parameters",
                         __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
                         **flat)
    try:
        validated = model.model_validate(parameters)
        arguments = gathered(fields, {name: getattr(validated, name) for name in flat
                                      if name in fields or name in validated.model_fields_set})
    except ValidationError as error:
        first = error.errors()[0]
        location = (*key_path, "parameters", *first["loc"])
        messages = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        raise source.error(f"invalid parameters for {cls.__name__}: {messages}",
                           location) from error
    return arguments
