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


IMPORT_KEY = "import"
REPLACE_TAG = "!replace"


class _Replace(dict[Any, Any]):
    """A mapping tagged `!replace`: while merging over the imported documents it replaces
    the imported mapping under its key instead of merging into it."""


class _MisplacedReplace(yaml.YAMLError):
    def __init__(self, line: int) -> None:
        super().__init__(f"{REPLACE_TAG} marks a mapping, which then replaces the imported "
                         "one instead of merging into it; any other value replaces the "
                         "imported one already: drop the tag")
        self.line = line


def _construct_replace(loader: yaml.SafeLoader, node: yaml.Node) -> _Replace:
    if not isinstance(node, yaml.MappingNode):
        raise _MisplacedReplace(node.start_mark.line + 1)
    return _Replace(loader.construct_mapping(node, deep=True))


_NumberAwareLoader.add_constructor(REPLACE_TAG, _construct_replace)

# Aliases repeat what they name without copying it in the file: a few lines of anchors on
# anchors stand for millions of values once merged. A config is small; past this many
# values (aliases counted as what they stand for) it is refused.
MAX_VALUES = 100_000
# Reading, merging and writing a config back walk it recursively, a few Python frames a
# level; a config is a few levels deep, so one nested past this (as written, or once its
# aliases stand for what they name) is refused before any of those walks.
MAX_DEPTH = 64
# A config is a few kB; a larger file is refused after reading this much of it, not read
# whole.
MAX_FILE_BYTES = 4 * 2**20


class _Refused(yaml.YAMLError):
    """A document refused for its shape, at `line` (None: the whole file)."""

    def __init__(self, problem: str, line: int | None = None) -> None:
        super().__init__(problem)
        self.line = line


def _too_deep(line: int) -> _Refused:
    return _Refused(f"values nested deeper than {MAX_DEPTH} levels (aliases counted as "
                    "what they stand for): refused, a config is a few levels deep", line)


def _check_written_depth(text: str) -> None:
    """Refuse nesting past MAX_DEPTH from the parser's events, which it makes without
    recursion, before the recursive composer builds the nodes."""
    depth = 0
    for event in yaml.parse(text, Loader=_NumberAwareLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep(event.start_mark.line + 1)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document that stands for more than MAX_VALUES values or is nested deeper
    than MAX_DEPTH with every alias expanded, or holds an alias inside the value it names
    (a value that holds itself). Each node is measured once, with a stack of its own (a
    chain of aliases nests far deeper than the file does), so nothing is expanded."""
    measured: dict[int, tuple[int, int]] = {}  # node -> (values, depth) it stands for
    open_nodes: set[int] = set()  # entered, their children not all measured yet
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_measured = stack.pop()
        children = _children(node)
        if children_measured:
            open_nodes.discard(id(node))
            values = 1 + sum(measured[id(child)][0] for child in children)
            depth = (1 if isinstance(node, yaml.CollectionNode) else 0) + max(
                (measured[id(child)][1] for child in children), default=0)
            if values > MAX_VALUES:
                raise _Refused(f"the file stands for more than {MAX_VALUES:,} values once its "
                               "aliases are expanded: refused (aliases of aliases multiply)")
            if depth > MAX_DEPTH:
                raise _too_deep(node.start_mark.line + 1)
            measured[id(node)] = (values, depth)
            continue
        if id(node) in open_nodes:
            raise _Refused("an alias inside the value it names: the value would hold "
                           "itself, without end", node.start_mark.line + 1)
        if id(node) in measured:
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"key '{key}' is written twice in one mapping (first at line "
                         f"{first_line}): YAML would keep the last silently")
        self.line = line


def _check_keys_once(node: yaml.Node, seen: set[int] | None = None) -> None:
    """Raise _DuplicateKey for a mapping that writes a key twice (each node once)."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
            if key == "<<":  # a merge key may repeat; it merges, it does not set
                continue
            if key in first:
                raise _DuplicateKey(key, key_node.start_mark.line + 1, first[key])
            first[key] = key_node.start_mark.line + 1
            _check_keys_once(value_node, seen)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_keys_once(item, seen)


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


def _merged(base: Any, override: Any) -> Any:
    """`override` written over `base`: mappings merge key by key unless `override` is
    marked `!replace`; any other value (a list too) replaces the one below it."""
    if isinstance(override, _Replace):
        return override
    if isinstance(base, dict) and isinstance(override, dict):
        return {**base, **{key: _merged(base[key], value) if key in base else value
                           for key, value in override.items()}}
    return override


def _without_marks(data: Any) -> Any:
    """`data` with its `!replace` mappings as plain dicts: the marks matter only while the
    file that wrote them merges over its imports."""
    if isinstance(data, dict):
        return {key: _without_marks(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_without_marks(item) for item in data]
    return data


def _key_paths(data: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            paths += _key_paths(value, (*path, str(key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            paths += _key_paths(value, (*path, str(index)))
    return paths


def _read_config_text(path: Path) -> str:
    """The file's text; a file past MAX_FILE_BYTES is refused having read no more than
    that (a config file is a few kB: a huge one is a wrong path or an attack)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    with path.open("rb") as stream:
        data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"the file holds more than {MAX_FILE_BYTES // 2**20} MiB, the cap on "
                          "a config file: refused unread (a config is a few kB)",
                          file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"not UTF-8 text ({error.reason} at byte {error.start})",
                          file=str(path)) from error


class YamlSource:
    """A parsed YAML document that remembers where each key was written.

    A top-level `import:` (a file or a list of files, relative to the importing file)
    writes a config as another with a few keys changed: the imported documents are merged
    in order, then this file's own keys over them. A mapping of this file tagged
    `!replace` takes the place of the imported one under its key whole (where nothing is
    imported under that key it is an ordinary mapping). Each key remembers the file and
    line that wrote the value it holds, so an error names the imported file where it lies."""

    def __init__(self, path: Path, importing: tuple[Path, ...] = ()) -> None:
        self.path = path
        text = _read_config_text(path)
        try:
            _check_written_depth(text)
            node = yaml.compose(text, Loader=_NumberAwareLoader)
            if node is not None:
                _check_keys_once(node)
                _check_expansion(node)  # a file refused here is never constructed
            data: Any = yaml.load(text, Loader=_NumberAwareLoader)
        except (_MisplacedReplace, _DuplicateKey, _Refused) as error:
            raise ConfigError(str(error), file=str(path), line=error.line) from error
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            raise ConfigError(f"invalid YAML: {error}", file=str(path),
                              line=mark.line + 1 if mark else None) from error
        except ValueError as error:  # a scalar that resolves to a type it cannot be
            raise ConfigError(f"invalid YAML value: {error}", file=str(path)) from error
        if isinstance(data, _Replace):
            raise ConfigError(f"{REPLACE_TAG} marks a mapping under a key; the file's top "
                              "level always merges over its imports", file=str(path),
                              line=node.start_mark.line + 1)
        lines: dict[tuple[str, ...], int] = {}
        if node is not None:
            _line_map(node, (), lines)
        own_places = {key_path: (path, line) for key_path, line in lines.items()}
        self.data: Any = data
        self.places: dict[tuple[str, ...], tuple[Path, int]] = own_places
        if isinstance(data, dict) and IMPORT_KEY in data:
            self._import(data, own_places, (*importing, path.resolve()))
        self.data = _without_marks(self.data)

    def _import(self, own: dict[Any, Any], own_places: dict[tuple[str, ...], tuple[Path, int]],
                importing: tuple[Path, ...]) -> None:
        layers: list[dict[tuple[str, ...], tuple[Path, int]]] = []
        merged: Any = {}
        for key_path, file in self._imported_files(own[IMPORT_KEY]):
            if file.resolve() in importing:
                chain = " -> ".join(str(step) for step in (*importing, file.resolve()))
                raise self.error(f"import cycle: {chain}", key_path)
            if not file.is_file():
                raise self.error(f"imported config file not found: {file}", key_path)
            imported = YamlSource(file, importing)
            if not isinstance(imported.data, dict):
                raise self.error(f"imported file {file} does not hold a mapping", key_path)
            merged = _merged(merged, imported.data)
            layers.append(imported.places)
        own_keys = {key: value for key, value in own.items() if key != IMPORT_KEY}
        self.data = _merged(merged, own_keys)
        layers.append(own_places)
        # each key's place is that of the last layer that wrote it (a replaced value's whole
        # subtree comes from the layer that replaced it)
        self.places = {}
        for key_path in _key_paths(self.data):
            for places in reversed(layers):
                if key_path in places:
                    self.places[key_path] = places[key_path]
                    break
        self.places[(IMPORT_KEY,)] = own_places[(IMPORT_KEY,)]

    def _imported_files(self, value: Any) -> list[tuple[tuple[str | int, ...], Path]]:
        """Each imported file with the key path of the `import` entry that names it."""
        named = (list(enumerate(value)) if isinstance(value, list) else [(None, value)])
        files: list[tuple[tuple[str | int, ...], Path]] = []
        for index, name in named:
            where = (IMPORT_KEY,) if index is None else (IMPORT_KEY, index)
            if not isinstance(name, str) or not name:
                raise self.error("an import names a file (a path relative to this file) or a "
                                 "list of files", where)
            files.append((where, self.path.parent / name))
        return files

    def place_of(self, key_path: tuple[str | int, ...]) -> tuple[Path, int | None]:
        """The file and line of the deepest written key on this path."""
        parts = tuple(str(part) for part in key_path)
        while parts:
            if parts in self.places:
                return self.places[parts]
            parts = parts[:-1]
        return self.path, None

    def error(self, problem: str, key_path: tuple[str | int, ...]) -> ConfigError:
        file, line = self.place_of(key_path)
        return ConfigError(problem, file=str(file),
                           key=".".join(str(part) for part in key_path) or None, line=line)

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


def validate_keyed(source: YamlSource, key: str, model: type[Model]) -> Model:
    """The file as `model`, whose one field is `key`."""
    if not isinstance(source.data, dict):
        raise ConfigError(f"the file must hold a mapping with key '{key}'",
                          file=str(source.path))
    return source.validate(model)
