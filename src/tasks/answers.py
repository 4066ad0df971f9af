"""Pulling the final answer out of a reply: the last `\\boxed{}` or the last `<answer>` tag.

`final_answer` is what a reader would call the answer, in either form: the content after
the reasoning block, with the whitespace around it stripped (`\\boxed{ 42 }` and
`<answer>\n42\n</answer>` both answer "42", as reasoning-gym's own `extract_answer`
strips its tag's content), and an empty one is no answer. Scorers that compare text
exactly (most of reasoning-gym's) are given that.

Replies are untrusted text, so each extraction is one pass over the reply (a reply of
many unclosed `\\boxed{` costs no more than its length).
"""

from __future__ import annotations

import re
from typing import Literal

# Longer extracted answers score 0 without reaching a scorer: math-verify and some
# reasoning-gym scorers parse with sympy, whose time grows with what a policy writes.
MAX_ANSWER_CHARS = 2_000
_BOXED = re.compile(r"\\boxed\{")
_OPEN_TAG, _CLOSE_TAG = "<answer>", "</answer>"
AnswerFormat = Literal["boxed", "answer_tag"]


def last_boxed_content(text: str) -> str | None:
    """The content of the last `\\boxed{...}` whose braces balance, or None.

    One pass with a stack of open braces: the `}` that pops a boxed brace is the one that
    balances it, whatever came before; of the boxed braces that close, the last opened
    wins."""
    boxed_starts = {match.end() for match in _BOXED.finditer(text)}
    if not boxed_starts:
        return None
    open_braces: list[int] = []  # the position after each open `{`
    best: tuple[int, int] | None = None  # (start, end) of the last-opened closed box
    for position, character in enumerate(text):
        if character == "{":
            open_braces.append(position + 1)
        elif character == "}" and open_braces:
            start = open_braces.pop()
            if start in boxed_starts and (best is None or start > best[0]):
                best = (start, position)
    return None if best is None else text[best[0]:best[1]]


def last_answer_tag(text: str) -> str | None:
    """The content of the last `<answer>...</answer>`, as written, or None (reasoning-gym's
    and DeepSeek-R1-Zero's format).

    Tags pair left to right, each `<answer>` with the first `</answer>` after it, the next
    pair starting after that: what `re.findall(r"<answer>(.*?)</answer>")` pairs, found
    with `str.find` so that a reply of many unclosed tags is read once, not once a tag."""
    content = None
    position = 0
    while (start := text.find(_OPEN_TAG, position)) >= 0:
        end = text.find(_CLOSE_TAG, start + len(_OPEN_TAG))
        if end < 0:
            break
        content = text[start + len(_OPEN_TAG):end]
        position = end + len(_CLOSE_TAG)
    return content


def answer_part(completion: str) -> str:
    """The text after the reasoning block, where the final answer is expected."""
    return completion.split("</think>")[-1]


def final_answer(reply: str, answer_format: AnswerFormat) -> str | None:
    """The reply's final answer in `answer_format` as a reader takes it (see the module
    docstring): stripped of surrounding whitespace, None where there is none or it is
    empty."""
    text = answer_part(reply)
    content = last_boxed_content(text) if answer_format == "boxed" else last_answer_tag(text)
    if content is None:
        return None
    return content.strip() or None
