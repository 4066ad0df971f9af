"""The rubric: weighted reward functions given only the arguments they name, added in
their order, whose failures on a reply score 0 with an error metric instead of ending the
run (or, for a task's own functions, raise)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from src.records.episode import Sample
from src.tasks.rubric import ERRORS_KEY, DetailedReward, Rubric

FIELDS = {"question": "France", "answer": "Paris", "category": "europe"}
SAMPLE = Sample(sample_id="train-000007", category="europe", data=FIELDS)


def exact(reply: str, answer: str) -> float:
    return float(reply.strip() == answer)


def brief(reply: str) -> float:
    return float(len(reply.split()) <= 3)


def divides(reply: str) -> float:
    return 1.0 / len(reply)  # raises on an empty reply


def test_the_score_is_the_weighted_sum_and_each_value_a_metric() -> None:
    rubric = Rubric([exact, brief], weights=[1.0, 0.25])
    scored = rubric.score("Paris", SAMPLE, "What is the capital of France?")
    assert scored.score == 1.25 and scored.values == {"exact": 1.0, "brief": 1.0}
    assert scored.metrics() == {"exact": 1.0, "exact/error": 0.0,
                                "brief": 1.0, "brief/error": 0.0}
    assert scored.info() == {}
    assert rubric.score("It is Lyon, I think", SAMPLE, "").score == 0.0
    assert Rubric([exact, brief]).score("Paris", SAMPLE, "").score == 2.0  # weights 1


def test_each_function_gets_only_the_arguments_it_names() -> None:
    seen: dict[str, Any] = {}

    def everything(**given: Any) -> float:
        seen.update(given)
        return 0.5

    def fields(sample: Mapping[str, Any], prompt: str, scale: float = 2.0) -> float:
        seen["fields"] = (dict(sample), prompt, scale)
        return 0.0

    rubric = Rubric([everything, fields], weights=[-2.0, 1.0])
    assert rubric.arguments == {"reply", "answer", "sample", "sample_id", "prompt"}
    assert rubric.score("Paris", SAMPLE, "asked").score == -1.0  # negative weights penalise
    assert seen["reply"] == "Paris" and seen["answer"] == "Paris" and seen["prompt"] == "asked"
    assert seen["sample_id"] == "train-000007"
    assert seen["fields"] == (FIELDS, "asked", 2.0)  # a default of its own is left alone
    with pytest.raises(TypeError):  # the sample is read-only to reward functions
        seen["sample"]["answer"] = "Lyon"


def test_a_function_that_raises_scores_zero_with_an_error_metric(caplog) -> None:
    rubric = Rubric([divides, brief], weights=[1.0, 1.0])
    with caplog.at_level(logging.WARNING, logger="src.tasks.rubric"):
        first = rubric.score("", SAMPLE, "")
        second = rubric.score("", SAMPLE, "")
    assert first.score == 1.0 and first.values == {"divides": 0.0, "brief": 1.0}
    metrics = first.metrics()
    assert metrics["divides/error"] == 1.0 and metrics["brief/error"] == 0.0
    assert first.info()[ERRORS_KEY] == {"divides": "ZeroDivisionError: float division by zero"}
    assert second.errors == first.errors
    # logged with its traceback once, so that a bug in the function is seen
    assert [record.exc_info is not None for record in caplog.records] == [True]
    assert ERRORS_KEY not in rubric.score("Paris", SAMPLE, "").info()


@pytest.mark.parametrize("value", [None, "1", float("nan"), float("inf"), True])
def test_a_value_that_is_not_a_finite_number_is_an_error(value: Any) -> None:
    def odd(reply: str) -> Any:
        return value

    scored = Rubric([odd]).score("Paris", SAMPLE, "")
    assert scored.score == 0.0 and scored.metrics()["odd/error"] == 1.0


def one(reply: str) -> float:
    return 1.0


def another(reply: str) -> float:
    return 1.0


def test_the_sum_adds_the_functions_in_their_order() -> None:
    # floating-point addition is not associative: (0.1 + 0.2) + 0.3 != (0.3 + 0.2) + 0.1
    assert Rubric([one, another, brief], [0.1, 0.2, 0.3]).score("Paris", SAMPLE, "").score == (
        0.1 + 0.2) + 0.3 != 0.6
    assert Rubric([brief, another, one], [0.3, 0.2, 0.1]).score("Paris", SAMPLE, "").score == 0.6


def test_details_are_reported_beside_the_value_and_not_added() -> None:
    def verified(reply: str) -> DetailedReward:
        return DetailedReward(0.5, {"hit": True, "length": 5})

    scored = Rubric([verified, brief], weights=[2.0, 1.0]).score("Paris", SAMPLE, "")
    assert scored.score == 2.0 and scored.details == {"verified/hit": 1.0, "verified/length": 5.0}
    assert scored.metrics() == {"verified": 0.5, "verified/error": 0.0, "brief": 1.0,
                                "brief/error": 0.0, "verified/hit": 1.0, "verified/length": 5.0}

    def clashing(reply: str) -> DetailedReward:
        return DetailedReward(1.0, {"error": 0.0})  # would overwrite clashing/error

    scored = Rubric([clashing]).score("Paris", SAMPLE, "")
    assert scored.score == 0.0 and scored.metrics() == {"clashing": 0.0, "clashing/error": 1.0}

    def unbounded(reply: str) -> DetailedReward:
        return DetailedReward(1.0, {"margin": float("nan")})  # a figure no mean survives

    scored = Rubric([unbounded]).score("Paris", SAMPLE, "")
    assert scored.score == 0.0 and scored.metrics() == {"unbounded": 0.0,
                                                        "unbounded/error": 1.0}


def test_a_rubric_of_a_tasks_own_functions_raises_and_counts_no_errors() -> None:
    trusted = Rubric([exact, divides], weights=[1.0, 1.0], catch_errors=False)
    scored = trusted.score("Paris", SAMPLE, "")
    assert scored.score == 1.2 and scored.metrics() == {"exact": 1.0, "divides": 0.2}
    with pytest.raises(ZeroDivisionError):
        trusted.score("", SAMPLE, "")


def test_functions_by_dotted_path_as_a_config_names_them() -> None:
    rubric = Rubric(["tests.tasks.test_rubric.exact", "tests.tasks.test_rubric.brief"],
                    weights=[1.0, 0.5])
    assert rubric.names == ("exact", "brief")
    assert rubric.score("Paris", SAMPLE, "").score == 1.5


def test_a_rubric_that_cannot_work_is_refused_when_built() -> None:
    def wants_more(reply: str, question: str) -> float:
        return 0.0

    def reward(reply: str) -> float:
        return 0.0

    def positional_only(reply: str, /) -> float:
        return 0.0

    def more_and_the_rest(reply: str, question: str, **kwargs: Any) -> float:
        return 0.0

    refused = [
        (([],), "at least one"),
        (([exact, brief], [1.0]), "2 reward functions but 1 weights"),
        (([exact, exact],), "two reward functions are named 'exact'"),
        (([lambda reply: 0.0],), "write it as a def"),
        (([wants_more],), "takes 'question', which a rubric cannot give"),
        (([positional_only],), "takes 'reply'"),
        (([more_and_the_rest],), "takes 'question', which a rubric cannot give"),
        (([reward],), "the loop reports its own 'reward'"),
        (([exact], [float("nan")]), "not finite"),
    ]
    for arguments, message in refused:
        with pytest.raises(ValueError, match=message):
            Rubric(*arguments)
    with pytest.raises(ImportError):
        Rubric(["tests.tasks.test_rubric.no_such_function"])
