"""Reading the agent's reply: `Action: Operation` + a ```sql block, or `Action: Answer` + `Final Answer:`.

As in AgentBench, the first `Action:` decides and the first ```sql block is the one run.
Anything else is a `FormatFailure` with the reason, never an exception. Several
statements in one block are not a format failure: the sandbox refuses them with an error
observation, as a MySQL server would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ACTION = re.compile(r"Action:\s*([A-Za-z]+)")
_SQL_BLOCK = re.compile(r"```sql[ \t]*\n?(.*?)```", re.IGNORECASE | re.DOTALL)
_FINAL_ANSWER = re.compile(r"Final Answer:[ \t]*(.*)")


@dataclass(frozen=True)
class Operation:
    sql: str


@dataclass(frozen=True)
class Answer:
    text: str  # what follows "Final Answer:" on its line


@dataclass(frozen=True)
class FormatFailure:
    reason: str


Reply = Operation | Answer | FormatFailure


def parse_reply(reply: str) -> Reply:
    action = _ACTION.search(reply)
    if action is None:
        return FormatFailure("no 'Action: Operation' or 'Action: Answer' line")
    name = action.group(1)
    if name == "Operation":
        block = _SQL_BLOCK.search(reply, action.end())
        if block is None:
            return FormatFailure("'Action: Operation' without a ```sql code block after it")
        sql = block.group(1).strip()
        if not sql:
            return FormatFailure("the ```sql code block is empty")
        return Operation(sql)
    if name == "Answer":
        final = _FINAL_ANSWER.search(reply, action.end())
        if final is None:
            return FormatFailure("'Action: Answer' without a 'Final Answer: [...]' line after it")
        return Answer(final.group(1).strip())
    return FormatFailure(f"unknown action '{name}'; use 'Operation' or 'Answer'")
