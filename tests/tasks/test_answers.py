"""Answer extraction: one pass over the reply, the same answers as the plain definition."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from src.tasks.answers import final_answer, last_answer_tag, last_boxed_content


def boxed_by_definition(text: str) -> str | None:
    """The definition, scan by scan: for each `\\boxed{` from the last, the content up to
    the brace that balances it; the first that closes wins."""
    for match in reversed(list(re.finditer(r"\\boxed\{", text))):
        depth = 1
        for position in range(match.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[position], 0)
            if depth == 0:
                return text[match.end():position]
    return None


def test_nested_braces_and_the_last_closed_box() -> None:
    assert last_boxed_content("\\boxed{\\frac{1}{2}} and \\boxed{a{b}}") == "a{b}"
    assert last_boxed_content("\\boxed{7} then \\boxed{unclosed") == "7"
    assert last_boxed_content("no box") is None
    assert last_boxed_content("}}\\boxed{1}}") == "1"


@given(st.lists(st.sampled_from(["\\boxed{", "{", "}", "a", "7", " "]), max_size=40))
def test_the_one_pass_gives_the_definitions_answer(parts: list[str]) -> None:
    text = "".join(parts)
    assert last_boxed_content(text) == boxed_by_definition(text)


def test_many_unclosed_boxes_are_read_in_one_pass() -> None:
    text = "\\boxed{" * 30_000 + "\\boxed{5}"
    assert last_boxed_content(text) == "5"  # the definition scans 30,000 times 210,000


def test_answer_tags() -> None:
    assert last_answer_tag("<answer> 3 </answer> then <answer>\n12\n</answer>") == "\n12\n"
    assert last_answer_tag("<answer>unclosed") is None


def test_the_final_answer_is_normalised_the_same_in_both_formats() -> None:
    for answer_format, reply in [("boxed", "so \\boxed{ 42 }"), ("boxed", "\\boxed{\n42\t}"),
                                 ("answer_tag", "<answer> 42\n</answer>"),
                                 ("answer_tag", "<think>\\boxed{1}</think><answer>42</answer>")]:
        assert final_answer(reply, answer_format) == "42"
    # the reasoning block is not the answer; an empty one is none
    assert final_answer("<think>\\boxed{42}</think> so", "boxed") is None
    assert final_answer("\\boxed{ }", "boxed") is None
    assert final_answer("<answer>\n</answer>", "answer_tag") is None
    assert final_answer("\\boxed{a { b } }", "boxed") == "a { b }"


def answer_tag_by_definition(text: str) -> str | None:
    """The definition: the last of the regular expression's non-overlapping matches."""
    matches = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    return matches[-1] if matches else None


@given(st.lists(st.sampled_from(["<answer>", "</answer>", "a", "7", " ", "\n"]), max_size=40))
def test_the_answer_tag_scan_gives_the_definitions_answer(parts: list[str]) -> None:
    text = "".join(parts)
    assert last_answer_tag(text) == answer_tag_by_definition(text)


def test_many_unclosed_answer_tags_are_read_in_one_pass() -> None:
    # the definition's regular expression scans to the end from each of them: about a
    # minute here, and growing with the square of the reply
    text = "<answer>" * 20_000 + "<answer>5</answer>" + "<answer>" * 20_000
    started = time.monotonic()
    assert last_answer_tag(text) == "<answer>" * 19_999 + "<answer>5"
    assert time.monotonic() - started < 2.0
