"""Reading YAML with real numbers and a map from key paths to line numbers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from src.configuration.errors import ConfigError

Model = TypeVar("Model", bound=BaseModel)


class _NumberAwareLoader(yaml.SafeLoader):
    """SafeLoader that reads `1e-5` as a float (YAML 1.1 demands a dot: `1.0e-5`)."""


_NumberAwareLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _line_map(node: yaml.Node, path: tuple[str, ...], lines: dict[tuple[str, ...], int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = (*path, str(key_node.value))
            _line_map(value_node, child, lines)
            lines[child] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, (*path, str(index)), lines)


class YamlSource:
    """A parsed YAML document that remembers where each key was written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        text = path.read_text(encoding="utf-8")
        try:
            node = yaml.compose(text, Loader=_NumberAwareLoader)
            self.data: Any = yaml.load(text, Loader=_NumberAwareLoader)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            raise ConfigError(f"invalid YAML: {error}", file=str(path),
                              line=mark.line + 1 if mark else None) from error
        except ValueError as error:  # a scalar that resolves to a type it cannot be
            raise ConfigError(f"invalid YAML value: {error}", file=str(path)) from error
        self.lines: dict[tuple[str, ...], int] = {}
        if node is not None:
            _line_map(node, (), self.lines)

    def line_of(self, key_path: tuple[str | int, ...]) -> int | None:
        """The line of the deepest written key on this path."""
        parts = tuple(str(part) for part in key_path)
        while parts:
            if parts in self.lines:
                return self.lines[parts]
            parts = parts[:-1]
        return None

    def error(self, problem: str, key_path: tuple[str | int, ...]) -> ConfigError:
        return ConfigError(problem, file=str(self.path),
                           key=".".join(str(part) for part in key_path) or None,
                           line=self.line_of(key_path))

    def validate(self, model: type[Model], data: Any = None,
                 key_path: tuple[str | int, ...] = ()) -> Model:
        """The document (or `data`, written at `key_path` in it) as `model`; a validation
        error names the first bad key and its line."""
        try:
            return model.model_validate(self.data if data is None else data)
        except ValidationError as error:
            first = error.errors()[0]
            messages = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                 for e in error.errors())
            raise self.error(messages, (*key_path, *first["loc"])) from error


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=_NumberAwareLoader)


def declares_top_level_key(path: Path, key: str) -> bool:
    """Whether the file's top-level mapping has `key` (which pipeline runs it). An
    unreadable file answers False: the assignment path then reports what is wrong."""
    try:
        data = YamlSource(path).data
    except ConfigError:
        return False
    return isinstance(data, dict) and key in data


def validate_keyed(source: YamlSource, key: str, model: type[Model]) -> Model:
    """The file as `model`, whose one field is `key`."""
    if not isinstance(source.data, dict):
        raise ConfigError(f"the file must hold a mapping with key '{key}'",
                          file=str(source.path))
    return source.validate(model)
