"""Names for the pieces a config chooses, each registered where it is defined.

    POLICY_LOSSES: Registry[type[PolicyLossFunction]] = Registry("policy loss")

    @POLICY_LOSSES.register("gspo")
    class GSPO(PolicyLossFunction): ...

`registry[name]` is the piece, an unknown name an `UnknownName` that lists the known
ones; `names()` lists them. A setting whose value is such a name is typed
`Annotated[str, RegisteredName(registry)]`: it accepts what is registered when the config
is read, its error and JSON schema are those of the `Literal` of the names, and
docs/reference.md lists them; so a new policy loss is its class and its decorator, and
nothing else names it.

The components a config names by a short name (`name: math_problems`) are defined on
the floors above this one, in modules too heavy to import all at once (all of them:
about 15 s and 10,000 modules; one run's four: 6 s). This module may not import them
(layers import downward) and names none of them (a table of their paths here would be a
second place to write each, out of reach of the import-layer test). So a registry built
with `indexed_as` finds its registrations in the project's source: the modules whose
text decorates a class with `@<indexed_as>.register("<name>")`, read once (about 0.1 s
for the 250 files) when a name is asked for that no module imported so far registered;
then only the module registering that name is imported. tests/configuration/
test_registry.py checks that this index and the registrations agree.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

T = TypeVar("T")

PROJECT_PACKAGE = __name__.split(".")[0]
SOURCE_ROOT = Path(__file__).resolve().parents[1]  # the folder of PROJECT_PACKAGE


class UnknownName(LookupError):
    """A name nothing registers; the message lists the names that are."""


class Registry(Generic[T]):
    """Things of one kind by name (`kind` words the errors: "policy loss")."""

    def __init__(self, kind: str, indexed_as: str | None = None) -> None:
        self.kind = kind
        self._indexed_as = indexed_as  # the name modules register through (module docstring)
        self._registered: dict[str, T] = {}
        self._index: dict[str, str] | None = None  # name -> module, read when first needed

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator: `thing` is this registry's `name`."""
        def add(thing: T) -> T:
            if self._registered.get(name, thing) is not thing:
                raise ValueError(f"{self.kind} '{name}' is registered twice: "
                                 f"{self._registered[name]!r} and {thing!r}")
            self._registered[name] = thing
            return thing
        return add

    def unregister(self, name: str) -> None:
        """`name` is no longer registered (a test's piece, registered for the test)."""
        del self._registered[name]

    def names(self) -> tuple[str, ...]:
        """In the order they were registered, then those the index finds in modules not
        imported yet."""
        return (*self._registered,
                *(name for name in self.index() if name not in self._registered))

    def index(self) -> dict[str, str]:
        """The module registering each name, read from the source (empty without
        `indexed_as`)."""
        if self._index is None:
            self._index = ({} if self._indexed_as is None
                           else registrations_in_source(self._indexed_as))
        return self._index

    def get(self, name: str) -> T | None:
        """The thing registered as `name`, its module imported first where it is one the
        index names; None for a name nothing registers. An ImportError of that module
        propagates."""
        if name not in self._registered and name in self.index():
            importlib.import_module(self.index()[name])
        return self._registered.get(name)

    def __getitem__(self, name: str) -> T:
        thing = self.get(name)
        if thing is None:
            raise UnknownName(f"'{name}' is not a registered {self.kind} "
                              f"(registered: {', '.join(self.names())})")
        return thing

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def registrations_in_source(indexed_as: str) -> dict[str, str]:
    """name -> module for each class or function of the project's source decorated with
    `@<indexed_as>.register("<name>")`; a name registered in two modules is an error."""
    marker = f"{indexed_as}.register("
    found: dict[str, str] = {}
    for path in sorted(SOURCE_ROOT.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if marker not in text:  # most files: no parse
            continue
        parts = path.relative_to(SOURCE_ROOT).with_suffix("").parts
        module = ".".join((PROJECT_PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)))
        for node in ast.walk(ast.parse(text)):
            for decorator in getattr(node, "decorator_list", ()):
                name = _registered_name(decorator, indexed_as)
                if name is None:
                    continue
                if found.get(name, module) != module:
                    raise ValueError(f"'{name}' is registered in {found[name]} and in {module}")
                found[name] = module
    return found


def _registered_name(decorator: ast.expr, indexed_as: str) -> str | None:
    """The name a decorator `@<indexed_as>.register("<name>")` registers; None for any
    other decorator."""
    if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "register"
            and isinstance(decorator.func.value, ast.Name)
            and decorator.func.value.id == indexed_as and len(decorator.args) == 1
            and isinstance(decorator.args[0], ast.Constant)
            and isinstance(decorator.args[0].value, str)):
        return None
    return decorator.args[0].value


@dataclass(frozen=True)
class RegisteredName:
    """`Annotated[str, RegisteredName(registry)]`: a setting naming one of `registry`'s
    things. Checked against what is registered when it is read (a piece registered later,
    a test's, is accepted from then on); a wrong value gets the error of a `Literal` of the
    names, as its JSON schema is the Literal's."""

    registry: Registry[Any]

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self._checked)

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"enum": list(self.registry.names()), "type": "string"}

    def _checked(self, value: Any) -> str:
        if isinstance(value, str) and value in self.registry:
            return value
        names = [repr(name) for name in self.registry.names()]
        expected = (" or ".join(names) if len(names) <= 2
                    else f"{', '.join(names[:-1])} or {names[-1]}")
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": expected})
