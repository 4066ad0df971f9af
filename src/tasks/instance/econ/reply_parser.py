"""The strict reading of a decision: `{"work": x, "consumption": y}` and nothing else.

Accepted: one JSON object with exactly the keys "work" and "consumption" (in any order, each
once), whose values are finite numbers (not booleans, not strings) in [0, 1], optionally
inside one ```json fence, with only whitespace around. Values snap to the 0.02 grid that
EconAgent asks for. Anything else is a `FormatFailure` naming the reason, never an exception
(EconAgent's eval() with a silent fallback to work 1, consumption 0.5 is what this replaces).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

KEYS = ("work", "consumption")
GRID_STEPS = 50  # 0.02 steps over [0, 1]


def snap_to_grid(value: float) -> float:
    """The nearest grid value (k / GRID_STEPS) to a propensity in [0, 1]."""
    return round(value * GRID_STEPS) / GRID_STEPS
_FENCE = re.compile(r"```json\s*(.*)```", re.DOTALL)


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
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"duplicate keys {duplicates}")
    return dict(pairs)


def parse_decision(reply: str) -> Decision | FormatFailure:
    text = reply.strip()
    if text.startswith("```"):
        fence = _FENCE.fullmatch(text)
        if fence is None:
            return FormatFailure("a code fence must be one ```json ... ``` block and nothing else")
        text = fence.group(1)
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
                             f"missing {missing}, unexpected {extra}")
    values = []
    for key in KEYS:
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return FormatFailure(f"'{key}' is {value!r}, not a number")
        # a NaN fails the comparison and an overflow (1e999) is infinite: both are outside
        if not 0.0 <= value <= 1.0:
            return FormatFailure(f"'{key}' is {value}, outside [0, 1]")
        values.append(snap_to_grid(value))
    return Decision(work=values[0], consumption=values[1])
