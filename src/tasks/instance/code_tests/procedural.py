"""Small Python functions for a small model: seeded variants of seven kinds, with tests.

Each kind has variants (a constant, a character, a twist); a variant is a function's
name, its parameter, a description, and its reference solution (the oracle's answer: the
tests' expected values are what it returns, computed on the host). A sample is one
variant with `num_tests` test inputs drawn from the sample's seed.

Held out: of each kind's variants, a fifth (at least one) chosen by a stream seeded with
the task's seed is asked only in validation, so validation measures functions never
trained on (every kind has at least two variants).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from src.tasks.task import derived_seed

Kind = Literal["add_constant", "multiply_constant", "reverse_string", "count_char",
               "max_of_list", "is_even", "sum_twist"]
KINDS: tuple[Kind, ...] = ("add_constant", "multiply_constant", "reverse_string",
                           "count_char", "max_of_list", "is_even", "sum_twist")
HELD_OUT_SHARE = 5  # a fifth of each kind's variants are asked only in validation
Draw = Callable[[random.Random], tuple[Any, ...]]  # one test's arguments


@dataclass(frozen=True)
class Variant:
    kind: Kind
    name: str  # the function's name; unique across variants
    parameter: str
    description: str  # completes "... that <description>"
    body: str  # the reference solution's return expression
    draw: Draw

    @property
    def solution(self) -> str:
        return f"def {self.name}({self.parameter}):\n    return {self.body}\n"

    def reference(self) -> Callable[..., Any]:
        """The reference solution as a function (host code of this module, trusted)."""
        namespace: dict[str, Any] = {}
        exec(self.solution, namespace)  # this module's own text, never model output
        return namespace[self.name]


def _integer(rng: random.Random) -> tuple[int]:
    return (rng.randint(-50, 50),)


def _numbers(minimum: int) -> Draw:
    return lambda rng: ([rng.randint(-20, 20) for _ in range(rng.randint(minimum, 7))],)


def _text(alphabet: str) -> Draw:
    return lambda rng: ("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))),)


def _sentence(rng: random.Random) -> tuple[str]:
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 5)))
             for _ in range(rng.randint(1, 5))]
    return (" ".join(words),)


def _multiples(k: int) -> Draw:
    """Integers, half of them multiples of k, so both answers are tested."""
    return lambda rng: (rng.randint(-20, 20) * k if rng.random() < 0.5
                        else rng.randint(-50, 50),)


def _variants() -> dict[Kind, tuple[Variant, ...]]:
    count_alphabet = "abcdefghijklmnopqrstuvwxyz"
    return {
        "add_constant": tuple(
            Variant("add_constant", f"add_{c}", "x", f"returns the integer x plus {c}",
                    f"x + {c}", _integer) for c in range(1, 21)),
        "multiply_constant": tuple(
            Variant("multiply_constant", f"times_{c}", "x",
                    f"returns the integer x multiplied by {c}", f"x * {c}", _integer)
            for c in range(2, 13)),
        "reverse_string": (
            Variant("reverse_string", "reverse_text", "s", "returns the string s reversed",
                    "s[::-1]", _text(string.ascii_lowercase)),
            Variant("reverse_string", "reverse_upper", "s",
                    "returns the string s reversed and in upper case", "s[::-1].upper()",
                    _text(string.ascii_letters)),
            Variant("reverse_string", "reverse_lower", "s",
                    "returns the string s reversed and in lower case", "s[::-1].lower()",
                    _text(string.ascii_letters)),
            Variant("reverse_string", "reverse_words", "s",
                    "returns the words of the string s (separated by single spaces) in "
                    "reverse order, joined by single spaces", "' '.join(s.split(' ')[::-1])",
                    _sentence),
            Variant("reverse_string", "reverse_each_word", "s",
                    "returns the string s with each word (words are separated by single "
                    "spaces) reversed in place", "' '.join(w[::-1] for w in s.split(' '))",
                    _sentence),
        ),
        "count_char": tuple(
            Variant("count_char", f"count_{letter}", "s",
                    f"returns how many times the letter '{letter}' appears in the string s",
                    f"s.count({letter!r})",
                    _text(letter * 4 + "".join(sorted(set(count_alphabet) - {letter}))[:6]))
            for letter in count_alphabet),
        "max_of_list": (
            Variant("max_of_list", "largest", "xs",
                    "returns the largest number in the non-empty list xs", "max(xs)",
                    _numbers(1)),
            Variant("max_of_list", "smallest", "xs",
                    "returns the smallest number in the non-empty list xs", "min(xs)",
                    _numbers(1)),
            Variant("max_of_list", "spread", "xs",
                    "returns the largest number minus the smallest number of the non-empty "
                    "list xs", "max(xs) - min(xs)", _numbers(1)),
            Variant("max_of_list", "largest_magnitude", "xs",
                    "returns the largest absolute value of the numbers in the non-empty list "
                    "xs", "max(abs(x) for x in xs)", _numbers(1)),
        ),
        "is_even": (
            Variant("is_even", "is_even", "x",
                    "returns True if the integer x is even, otherwise False", "x % 2 == 0",
                    _multiples(2)),
            Variant("is_even", "is_odd", "x",
                    "returns True if the integer x is odd, otherwise False", "x % 2 == 1",
                    _multiples(2)),
            *(Variant("is_even", f"is_multiple_of_{k}", "x",
                      f"returns True if the integer x is a multiple of {k}, otherwise False",
                      f"x % {k} == 0", _multiples(k)) for k in range(3, 10)),
        ),
        "sum_twist": (
            Variant("sum_twist", "sum_even", "xs",
                    "returns the sum of the even numbers in the list xs",
                    "sum(x for x in xs if x % 2 == 0)", _numbers(0)),
            Variant("sum_twist", "sum_odd", "xs",
                    "returns the sum of the odd numbers in the list xs",
                    "sum(x for x in xs if x % 2 == 1)", _numbers(0)),
            Variant("sum_twist", "sum_squares", "xs",
                    "returns the sum of the squares of the numbers in the list xs",
                    "sum(x * x for x in xs)", _numbers(0)),
            *(Variant("sum_twist", f"sum_times_{c}", "xs",
                      f"returns the sum of the numbers in the list xs multiplied by {c}",
                      f"sum(xs) * {c}", _numbers(0)) for c in range(2, 6)),
            *(Variant("sum_twist", f"sum_above_{c}", "xs",
                      f"returns the sum of the numbers in the list xs that are greater than "
                      f"{c}", f"sum(x for x in xs if x > {c})", _numbers(0))
              for c in range(0, 6)),
        ),
    }


VARIANTS: dict[Kind, tuple[Variant, ...]] = _variants()


def split_variants(kind: Kind, seed: int) -> dict[str, tuple[Variant, ...]]:
    """The variants of `kind` asked in each split: a fifth (at least one) held out."""
    variants = sorted(VARIANTS[kind], key=lambda variant: variant.name)
    random.Random(derived_seed("code_tests", "held_out", seed, kind)).shuffle(variants)
    held_out = max(1, len(variants) // HELD_OUT_SHARE)
    return {"validation": tuple(variants[:held_out]), "train": tuple(variants[held_out:])}


@dataclass(frozen=True)
class Problem:
    variant: Variant
    arguments: tuple[tuple[Any, ...], ...]  # one tuple per test
    expected: tuple[Any, ...]

    @property
    def signature(self) -> str:
        return f"{self.variant.name}({self.variant.parameter})"

    def call_text(self, index: int) -> str:
        return f"{self.variant.name}({', '.join(map(repr, self.arguments[index]))})"

    def test_statements(self) -> tuple[str, ...]:
        return tuple(f"assert candidate({', '.join(map(repr, arguments))}) == {expected!r}"
                     for arguments, expected in zip(self.arguments, self.expected, strict=True))


def problem(kind: Kind, split: str, seed: int, index: int, num_tests: int) -> Problem:
    """Sample `index` of `split`: a variant of `kind` asked in that split and its tests,
    drawn from a stream of the sample's own."""
    rng = random.Random(derived_seed("code_tests", seed, split, index))
    variant = rng.choice(split_variants(kind, seed)[split])
    arguments = tuple(variant.draw(rng) for _ in range(num_tests))
    reference = variant.reference()
    return Problem(variant, arguments, tuple(reference(*args) for args in arguments))
