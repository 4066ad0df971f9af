"""Tools over a sandbox's persistent sessions, as an agent's tool call names them.

A tool has a `name`, a `description`, the JSON schema of its arguments (`parameters`, the
shape of an OpenAI-style function's "parameters") and `call(arguments) -> str`: the text
observation handed back to the model. `call` never raises for anything the model wrote:
arguments of the wrong shape, code that fails, a bound hit, a dead sandbox - each comes
back as text saying so.

The observation: stdout, then stderr (under a "[stderr]" line) when there is any, the
whole cut to `max_observation_chars` keeping its head and its tail with a note of how many
characters were cut; then, when the call was not ok, a line "[status: <status>] <detail>"
(with the exit code for an error exit); a call that printed nothing and was ok says
"[no output]".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from src.sandboxes.contract import CallResult, CallStatus, Sandbox, SessionKind


def cut_text(text: str, max_chars: int) -> str:
    """`text` cut to about `max_chars` characters, its head and tail kept, a note between
    saying how many were cut."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail:]}"


def observation(result: CallResult, max_chars: int) -> str:
    """A call's result as the model reads it (see the module docstring)."""
    text = result.stdout
    if result.stderr:
        text += ("" if not text or text.endswith("\n") else "\n") + "[stderr]\n" + result.stderr
    text = cut_text(text, max_chars)
    lines = [text] if text else []
    if result.output_truncated:
        lines.append(f"[output cut: {result.output_bytes} bytes printed, the rest not kept]")
    if result.session_restarted:
        lines.append("[the session was restarted before this call: earlier state is lost]")
    if result.status is CallStatus.ERROR_EXIT:
        ending = f"exit code {result.exit_code}" if result.exit_code is not None \
            else f"signal {result.signal}"
        lines.append(f"[status: error_exit] {ending}")
    elif result.status is not CallStatus.OK:
        lines.append(f"[status: {result.status.value}] {result.detail}".rstrip())
    if not lines:
        return "[no output]"
    return "\n".join(line.rstrip("\n") for line in lines)


class SessionTool:
    """A tool running its one string argument in a sandbox's persistent session."""

    def __init__(self, sandbox: Sandbox, kind: SessionKind, name: str, argument: str,
                 description: str, max_observation_chars: int = 8000) -> None:
        if max_observation_chars < 100:
            raise ValueError(f"{name} tool: max_observation_chars must be at least 100, "
                             f"got {max_observation_chars}")
        self.sandbox = sandbox
        self.kind: SessionKind = kind
        self.name = name
        self.argument = argument
        self.description = description
        self.max_observation_chars = max_observation_chars

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments: one required string."""
        return {"type": "object",
                "properties": {self.argument: {"type": "string",
                                               "description": self.description}},
                "required": [self.argument], "additionalProperties": False}

    def schema(self) -> dict[str, Any]:
        """The tool as an OpenAI-style function definition."""
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": self.parameters}}

    def call(self, arguments: Mapping[str, Any]) -> str:
        """Run the argument in the session; the observation text (never raises for what
        the model wrote)."""
        return self.run(arguments)[0]

    def run(self, arguments: Mapping[str, Any]) -> tuple[str, CallResult | None]:
        """`call`'s observation text and the call's result (its status for the caller's
        figures and retries); None where the arguments were refused and nothing ran."""
        if not isinstance(arguments, Mapping) or set(arguments) != {self.argument} \
                or not isinstance(arguments[self.argument], str):
            got = sorted(arguments) if isinstance(arguments, Mapping) else type(arguments).__name__
            return (f"[invalid arguments] the {self.name} tool takes exactly one string "
                    f"argument {self.argument!r}; got {got}"), None
        if not self.sandbox.alive:
            closed = CallResult(status=CallStatus.SANDBOX_DIED, detail="the sandbox is closed")
            return observation(closed, self.max_observation_chars), closed
        result = self.sandbox.session(self.kind).call(arguments[self.argument])
        return observation(result, self.max_observation_chars), result


class PythonTool(SessionTool):
    """`python` {"code": str}: Python in a persistent interpreter (state lasts between
    calls; the value of a last bare expression is printed)."""

    def __init__(self, sandbox: Sandbox, max_observation_chars: int = 8000) -> None:
        super().__init__(sandbox, "python", "python", "code",
                         "Python code run in a persistent interpreter: variables, imports "
                         "and functions last between calls; the value of a last bare "
                         "expression is printed. No network.", max_observation_chars)


class BashTool(SessionTool):
    """`bash` {"command": str}: a script in a persistent bash shell (variables and the
    current folder last between calls)."""

    def __init__(self, sandbox: Sandbox, max_observation_chars: int = 8000) -> None:
        super().__init__(sandbox, "bash", "bash", "command",
                         "A bash script run in a persistent shell: variables and the current "
                         "folder last between calls. No network.", max_observation_chars)
