"""Answer and table grading, as references.md section 3 states it."""

from __future__ import annotations

from src.tasks.instance.db_bench.grading import (
    answers_match,
    format_final_answer,
    parse_final_answer,
    tables_match,
)


def test_final_answer_formats() -> None:
    assert parse_final_answer('["ANSWER1", "ANSWER2"]') == ["ANSWER1", "ANSWER2"]
    assert parse_final_answer("[('Alice', 3), ('Bob', 4.5)]") == ["Alice", 3, "Bob", 4.5]
    assert parse_final_answer("[(Decimal('12.50'),)]") == [12.5]
    assert parse_final_answer("[Checco D'Angelo]") == ["Checco D'Angelo"]
    assert parse_final_answer("42") == [42]
    assert parse_final_answer("[]") == []
    assert parse_final_answer("") == []


def test_values_compare_with_tolerance_quotes_and_nulls() -> None:
    assert answers_match(["1"], ["1.0"], ordered=False)
    assert answers_match([21000], ["21000.0"], ordered=False)
    assert answers_match([0.1 + 0.2], [0.3], ordered=False)
    assert answers_match([1.0000004], [1.0], ordered=False)
    assert not answers_match([1.00001], [1.0], ordered=False)
    assert answers_match(["'March 19, 1998'"], ["March 19, 1998"], ordered=False)
    assert answers_match([' "x" '], ["x"], ordered=False)
    assert answers_match([None], ["none"], ordered=False)
    assert answers_match(["NULL"], [None], ordered=False)
    assert not answers_match(["62,129"], [62129], ordered=False)
    assert not answers_match(["abc"], ["ABC"], ordered=False)
    assert not answers_match(["a", "b"], ["a"], ordered=False)


def test_an_integer_past_the_floats_compares_without_raising() -> None:
    """A model's answer of a 400-digit integer: float() of it raises OverflowError."""
    huge = parse_final_answer("[1" + "0" * 400 + "]")
    assert not answers_match(huge, [10], ordered=False)
    assert answers_match(huge, ["1e400"], ordered=False)  # both read as infinite
    assert not answers_match([-int("9" * 400)], ["1e400"], ordered=False)


def test_order_counts_only_when_asked() -> None:
    assert answers_match(["b", "a", 2], [2, "a", "b"], ordered=False)
    assert not answers_match(["b", "a"], ["a", "b"], ordered=True)
    assert answers_match(["a", "b"], ["a", "b"], ordered=True)
    assert not answers_match(["a", "a", "b"], ["a", "b", "b"], ordered=False)  # a multiset


def test_oracle_answers_read_back_to_their_values() -> None:
    values = ["O'Neil", 'say "hi"', 3, 2.5, None, "Zürich\n"]
    assert parse_final_answer(format_final_answer(values)) == values


def test_tables_compare_as_multisets_of_rows() -> None:
    assert tables_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")])
    assert not tables_match([(1, "a")], [(1, "a"), (1, "a")])
    assert not tables_match(None, [])
