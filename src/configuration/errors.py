"""The one error type for bad configuration: it names the file, the key path and the line."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem located by file, dotted key path and (when known) line."""

    def __init__(self, problem: str, *, file: str | None = None, key: str | None = None,
                 line: int | None = None) -> None:
        self.problem = problem
        self.file = file
        self.key = key
        self.line = line
        place = []
        if file:
            place.append(f"{file}:{line}" if line else file)
        if key:
            place.append(f"key '{key}'")
        super().__init__(f"{', '.join(place)}: {problem}" if place else problem)
