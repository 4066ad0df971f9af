"""The strict reading of a decision: `{"work": x, "consumption": y}` and nothing else.

Accepted: one JSON object with exactly the keys "work" and "consumption" (in any order, each
once), whose values are finite numbers (not booleans, not strings) in [0, 1], optionally
inside one ```json fence, with only whitespace around. Values snap to the 0.02 grid that
EconAgent asks for. Anything else is a `FormatFailure` naming the reason, never an exception
(EconAgent's eval() with a silent fallback to work 1, consumption 0.5 is what this replaces).
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass
from typing import Any

KEYS = ("work", "consumption")
GRID_STEPS = 50  # 0.02 steps over [0, 1]


def snap_to_grid(value: float) -> float:
    """The nearest grid value (k / GRID_STEPS) to a propensity in [0, 1]."""
    return round(value * GRID_STEPS) / GRID_STEPS


_FENCE_OPEN, _FENCE_CLOSE = "```json", "```"
# what a failure's reason shows of a reply's values and keys: a reason is logged with the
# episode, and a reply may be a megabyte
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 2, 5, 5


@dataclass(frozen=True)
class Decision:
    work: float
    consumption: float

    def to_json(self) -> str:
        return json.dumps({"work": self.work, "consumption": self.consumption})


@dataclass(frozen=True)
class FormatFailure:
    reason: str


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        duplicates: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                duplicates.add(key)
            seen.add(key)
        raise ValueError(f"duplicate keys {_SHORT.repr(sorted(duplicates))}")
    return data


def parse_decision(reply: str) -> Decision | FormatFailure:
    text = reply.strip()
    if text.startswith("```"):
        # a json fence opening the reply and a fence closing it; read with string tests, as
        # a regular expression backtracks over a long reply once for each of its spaces
        if not (text.startswith(_FENCE_OPEN) and text.endswith(_FENCE_CLOSE)):
            return FormatFailure("a code fence must be one ```json ... ``` block and nothing else")
        text = text[len(_FENCE_OPEN):-len(_FENCE_CLOSE)]
    try:
        data = json.loads(text, parse_constant=_reject_constant,
                          object_pairs_hook=_object_without_duplicates)
    except (ValueError, RecursionError) as error:
        return FormatFailure(f"not one JSON object: {error}")
    if not isinstance(data, dict):
        return FormatFailure(f"the JSON is a {type(data).__name__}, not an object")
    missing = [key for key in KEYS if key not in data]
    extra = sorted(set(data) - set(KEYS))
    if missing or extra:
        return FormatFailure(f"the object needs exactly the keys {list(KEYS)}; "
                             f"missing {missing}, unexpected {_SHORT.repr(extra)}")
    values = []
    for key in KEYS:
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return FormatFailure(f"'{key}' is {_SHORT.repr(value)}, not a number")
        # a NaN fails the comparison and an overflow (1e999) is infinite: both are outside
        if not 0.0 <= value <= 1.0:
            return FormatFailure(f"'{key}' is {_SHORT.repr(value)}, outside [0, 1]")
        values.append(snap_to_grid(value))
    return Decision(work=values[0], consumption=values[1])
