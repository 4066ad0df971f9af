"""Pulling the final answer out of a reply: the last `\\boxed{}` or the last `<answer>` tag.

Replies are untrusted text, so each extraction is one pass over the reply (a reply of
many unclosed `\\boxed{` costs no more than its length).
"""

from __future__ import annotations

import re

# Longer extracted answers score 0 without reaching a scorer: math-verify and some
# reasoning-gym scorers parse with sympy, whose time grows with what a policy writes.
MAX_ANSWER_CHARS = 2_000
_BOXED = re.compile(r"\\boxed\{")
_OPEN_TAG, _CLOSE_TAG = "<answer>", "</answer>"


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
    """The stripped content of the last `<answer>...</answer>`, or None (reasoning-gym's
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
    return None if content is None else content.strip()


def answer_part(completion: str) -> str:
    """The text after the reasoning block, where the final answer is expected."""
    return completion.split("</think>")[-1]
