"""Reading a finished verifiers rollout: its failures, its figures, its transcript."""

from __future__ import annotations

import json
import math
from typing import Any

MAX_MESSAGE_CHARS = 2_000  # of one message's content in the kept transcript


def model_failure(episode: Any) -> str | None:
    """Why the rollout's model calls failed, or None where they did not."""
    errors = [error for trace in episode.traces for call in trace.calls
              if (error := call.error) is not None]
    if not errors:
        return None
    return "; ".join(f"{error.type}: {error.message}" for error in errors)[:2_000]


def check_trace(episode: Any) -> None:
    """Raise where the environment itself failed (its code, a tool server, a reward)."""
    errors = [*episode.errors, *(error for trace in episode.traces for error in trace.errors)]
    if errors:
        raise RuntimeError("the verifiers rollout failed: " + "; ".join(
            f"{error.type}: {error.message}" for error in errors)[:2_000])
    if len(episode.traces) != 1:
        raise RuntimeError(f"the verifiers env ran {len(episode.traces)} agents in one "
                           "episode; this task trains one agent per episode (its group is "
                           "the G episodes of a sample): configure the env to run one")


def trace_metrics(trace: Any) -> dict[str, float]:
    """Each reward term's score and each metric by its name, `truncated` and
    `model_calls`; terms without a finite value (a failed reward function) are left out."""
    values: dict[str, Any] = {name: reward.score for name, reward in trace.rewards.items()
                              if reward is not None}
    values.update(trace.metrics)
    metrics = {name: float(value) for name, value in values.items()
               if isinstance(value, int | float) and math.isfinite(value)}
    metrics["truncated"] = float(trace.is_truncated)
    metrics["model_calls"] = float(trace.num_turns)
    return metrics


def transcript(trace: Any, max_chars: int) -> list[dict[str, Any]]:
    """The rollout's messages (tool calls and results included), each cut to
    MAX_MESSAGE_CHARS, and only as many as fit `max_chars` in all (then a count of the
    rest)."""
    kept: list[dict[str, Any]] = []
    used = 0
    messages = trace.messages
    for index, message in enumerate(messages):
        entry: dict[str, Any] = {"role": message.role,
                                 "content": _text(message.content)[:MAX_MESSAGE_CHARS]}
        calls = getattr(message, "tool_calls", None)
        if calls:
            entry["tool_calls"] = [{"name": call.name, "arguments": call.arguments[
                :MAX_MESSAGE_CHARS]} for call in calls]
        size = len(json.dumps(entry))
        if used + size > max_chars:
            kept.append({"role": "omitted", "content": f"{len(messages) - index} more "
                                                       "messages"})
            break
        kept.append(entry)
        used += size
    return kept


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(getattr(part, "text", "") or "" for part in content)
