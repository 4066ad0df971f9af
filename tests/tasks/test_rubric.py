"""The rubric: weighted reward functions given only the arguments they name, added in
their order, whose failures on a reply score 0 with an error metric instead of ending the
run (or, for a task's own functions, raise)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from src.records.episode import Sample
from src.sandboxes.bounded_call import ScorerUnavailable
from src.tasks.reward_functions import DetailedReward, RewardTerm
from src.tasks.rubric import ERRORS_KEY, SCORER_TIMEOUTS_KEY, TEXTS_KEY, Rubric

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
                                "brief": 1.0, "brief/error": 0.0, "scorer_timeout": 0.0}
    assert scored.info() == {}
    assert rubric.score("It is Lyon, I think", SAMPLE, "").score == 0.0
    assert Rubric([exact, brief]).score("Paris", SAMPLE, "").score == 2.0  # weights 1


def everything(**given: Any) -> DetailedReward:
    """What it was given, as figures (a function runs in the scoring process, so it tells
    what it saw through its value)."""
    try:
        given["sample"]["answer"] = "Lyon"
        writable = 1.0
    except TypeError:  # the sample is read-only to reward functions
        writable = 0.0
    return DetailedReward(0.5, {
        "given": float(sorted(given) == ["answer", "prompt", "reply", "sample", "sample_id",
                                         "transcript"]),
        "seen": float((given["reply"], given["answer"], given["prompt"], given["sample_id"],
                       dict(given["sample"]), given["transcript"])
                      == ("Paris", "Paris", "asked", "train-000007", FIELDS,
                          "user: asked\n\nagent: Paris")),
        "writable": writable})


def fields(sample: Mapping[str, Any], prompt: str, scale: float = 2.0) -> DetailedReward:
    return DetailedReward(0.0, {"seen": float((dict(sample), prompt, scale)
                                              == (FIELDS, "asked", 2.0))})


def test_each_function_gets_only_the_arguments_it_names() -> None:
    rubric = Rubric([everything, fields], weights=[-2.0, 1.0])
    assert rubric.arguments == {"reply", "answer", "sample", "sample_id", "prompt",
                                "transcript"}
    scored = rubric.score("Paris", SAMPLE, "asked")
    assert scored.score == -1.0  # negative weights penalise
    # a default of its own is left alone
    assert scored.details == {"everything/given": 1.0, "everything/seen": 1.0,
                              "everything/writable": 0.0, "fields/seen": 1.0}


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


def odd(reply: str) -> Any:
    return {"none": None, "text": "1", "nan": float("nan"), "inf": float("inf"),
            "bool": True}[reply]


@pytest.mark.parametrize("value", ["none", "text", "nan", "inf", "bool"])
def test_a_value_that_is_not_a_finite_number_is_an_error(value: str) -> None:
    scored = Rubric([odd]).score(value, SAMPLE, "")
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


def verified(reply: str) -> DetailedReward:
    return DetailedReward(0.5, {"hit": True, "length": 5})


def clashing(reply: str) -> DetailedReward:
    return DetailedReward(1.0, {"error": 0.0})  # would overwrite clashing/error


def unbounded(reply: str) -> DetailedReward:
    return DetailedReward(1.0, {"margin": float("nan")})  # a figure no mean survives


def test_details_are_reported_beside_the_value_and_not_added() -> None:
    scored = Rubric([verified, brief], weights=[2.0, 1.0]).score("Paris", SAMPLE, "")
    assert scored.score == 2.0 and scored.details == {"verified/hit": 1.0, "verified/length": 5.0}
    assert scored.metrics() == {"verified": 0.5, "verified/error": 0.0, "brief": 1.0,
                                "brief/error": 0.0, "scorer_timeout": 0.0,
                                "verified/hit": 1.0, "verified/length": 5.0}
    scored = Rubric([clashing]).score("Paris", SAMPLE, "")
    assert scored.score == 0.0 and scored.metrics() == {"clashing": 0.0, "clashing/error": 1.0,
                                                        "scorer_timeout": 0.0}
    scored = Rubric([unbounded]).score("Paris", SAMPLE, "")
    assert scored.score == 0.0 and scored.metrics() == {"unbounded": 0.0,
                                                        "unbounded/error": 1.0,
                                                        "scorer_timeout": 0.0}


def endless(reply: str) -> float:
    while reply:  # a pure-Python loop on what the reply says
        pass
    return 1.0


def test_a_function_past_its_bound_scores_zero_with_a_timeout_metric() -> None:
    started = time.monotonic()
    scored = Rubric([endless, brief], timeout_s=1.0).score("Paris", SAMPLE, "")
    assert time.monotonic() - started < 30.0
    assert scored.score == 1.0 and scored.values == {"endless": 0.0, "brief": 1.0}
    assert scored.metrics() == {"endless": 0.0, "endless/error": 1.0, "brief": 1.0,
                                "brief/error": 0.0, "scorer_timeout": 1.0}
    assert scored.info()[SCORER_TIMEOUTS_KEY] == ["endless"]
    assert scored.info()[ERRORS_KEY] == {"endless": "BoundExceeded: endless ran past 1 s"}
    # a task's own functions: scored 0 too, not raised (a reply did it, not the task)
    trusted = Rubric([endless, brief], timeout_s=1.0, catch_errors=False).score(
        "Paris", SAMPLE, "")
    assert trusted.score == 1.0 and trusted.metrics() == {"endless": 0.0, "brief": 1.0}
    assert trusted.info() == {SCORER_TIMEOUTS_KEY: ["endless"]}
    assert Rubric([endless, brief]).score("", SAMPLE, "").score == 2.0  # the worker is back


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

    def local(reply: str) -> float:
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
        (([local],), "'local' cannot be sent .* module level"),
    ]
    for arguments, message in refused:
        with pytest.raises(ValueError, match=message):
            Rubric(*arguments)
    with pytest.raises(ImportError):
        Rubric(["tests.tasks.test_rubric.no_such_function"])


class UnloadableScorer:
    """A scorer whose set-up fails in the scoring process (a dependency missing there)."""

    __name__ = "unloadable"

    def __init__(self) -> None:
        self.dependency = "missing_dependency"

    def __setstate__(self, state: dict[str, str]) -> None:
        raise ImportError(f"no module named {state['dependency']!r}")

    def __call__(self, reply: str) -> float:
        return 1.0


def test_a_scorer_that_cannot_be_loaded_is_raised_not_scored_zero() -> None:
    # the host's failure: scoring the reply 0 would teach the policy from a broken scorer
    rubric = Rubric([UnloadableScorer()])
    with pytest.raises(ScorerUnavailable, match="unloadable.*missing_dependency"):
        rubric.score("42", SAMPLE, "prompt")


class InCaller:
    """A reward function that runs in the calling process: it holds what could not cross
    to the worker (a lock), and says which process it ran in."""

    runs_in_caller = True

    def __init__(self, name: str = "in_caller") -> None:
        self.__name__ = name
        self.lock = threading.Lock()

    def __call__(self, reply: str) -> DetailedReward:
        with self.lock:
            if not reply:
                raise ValueError("no reply")
            return DetailedReward(1.0, {"pid": float(os.getpid())}, texts={"said": reply})


class InWorker(InCaller):
    runs_in_caller = False


def test_a_function_that_runs_in_the_caller_is_called_there() -> None:
    rubric = Rubric([InCaller(), brief])
    scored = rubric.score("Paris", SAMPLE, "")
    assert scored.values == {"in_caller": 1.0, "brief": 1.0}
    assert scored.details == {"in_caller/pid": float(os.getpid())}
    assert scored.info() == {TEXTS_KEY: {"in_caller": {"said": "Paris"}}}
    failed = rubric.score("", SAMPLE, "")  # its failures are scored as any function's
    assert failed.score == 1.0 and failed.metrics()["in_caller/error"] == 1.0
    assert failed.info() == {ERRORS_KEY: {"in_caller": "ValueError: no reply"}}
    with pytest.raises(ValueError, match="'in_worker' cannot be sent"):
        Rubric([InWorker("in_worker")])  # unmarked, it goes to the worker


def said(reply: str) -> DetailedReward:
    return DetailedReward(0.5, texts={"said": reply, "length": str(len(reply))})


def said_a_number(reply: str) -> DetailedReward:
    return DetailedReward(0.5, texts={"length": len(reply)})  # type: ignore[dict-item]


def test_texts_are_kept_in_the_info_and_must_be_strings() -> None:
    scored = Rubric([said, brief]).score("Paris", SAMPLE, "")  # from the worker too
    assert scored.score == 1.5
    assert scored.info() == {TEXTS_KEY: {"said": {"said": "Paris", "length": "5"}}}
    assert scored.metrics()["said/error"] == 0.0
    scored = Rubric([said_a_number]).score("Paris", SAMPLE, "")
    assert scored.values == {"said_a_number": 0.0}
    assert scored.errors["said_a_number"].startswith("TypeError: returned texts")


def test_a_reward_term_names_a_function_or_builds_one_from_its_parameters() -> None:
    assert RewardTerm(function="tests.tasks.test_rubric.exact").build() is exact
    term = RewardTerm.model_validate({"function": "tests.tasks.test_rubric.InCaller",
                                      "parameters": {"name": "judged"}, "weight": 0.5})
    built = term.build()
    assert isinstance(built, InCaller) and built.__name__ == "judged" and term.weight == 0.5
    with pytest.raises(ValidationError, match="weigth"):
        RewardTerm.model_validate({"function": "tests.tasks.test_rubric.exact", "weigth": 2})
    # read from a config: the path is imported and the settings checked at once
    with pytest.raises(ValidationError, match="has no attribute 'no_such_function'"):
        RewardTerm(function="tests.tasks.test_rubric.no_such_function")
    with pytest.raises(ValidationError, match="temprature"):
        RewardTerm(function="src.tasks.model_rewards.judge.Judge", parameters={
            "base_url": "http://127.0.0.1:9/v1", "model": "judge", "template": "{reply}",
            "score_range": [0, 1], "temprature": 0.0})


class Together(InCaller):
    """A function that scores many replies at once: `many` gives each reply's value, its
    failure as an exception in the place of its value, and records each call's replies
    (and the read-only sample each got); `broken` makes the whole call raise."""

    def __init__(self, name: str = "together") -> None:
        super().__init__(name)
        self.calls: list[list[str]] = []
        self.samples: list[Mapping[str, Any]] = []
        self.broken = False

    def many(self, arguments: list[dict[str, Any]]) -> list[float | DetailedReward | Exception]:
        self.calls.append([given["reply"] for given in arguments])
        self.samples += [given["sample"] for given in arguments]
        if self.broken:
            raise ConnectionError("the model is gone")
        return [ValueError("no reply") if not given["reply"] else
                DetailedReward(len(given["reply"]) / 10, texts={"said": given["reply"]})
                for given in arguments]

    def __call__(self, reply: str, sample: Mapping[str, Any]) -> DetailedReward:
        [result] = self.many([{"reply": reply, "sample": sample}])
        if isinstance(result, Exception):
            raise result
        return result


def test_a_group_is_scored_as_one_by_one_a_function_of_many_asked_once() -> None:
    together = Together()
    rubric = Rubric([exact, together, brief], weights=[1.0, 0.5, 0.25])
    assert rubric.scores_together and not Rubric([exact, InCaller()]).scores_together
    replies = ["Paris", "", "It is Paris, I think", "Lyon"]
    prompts = [f"prompt {index}" for index in range(4)]
    scored = rubric.score_group(replies, [SAMPLE] * 4, prompts)
    assert together.calls == [replies]  # once, the replies in their order
    assert all(isinstance(sample, Mapping) and not isinstance(sample, dict)
               for sample in together.samples)  # read-only, as a call's
    alone = [Rubric([exact, Together(), brief], weights=[1.0, 0.5, 0.25]).score(*asked)
             for asked in zip(replies, [SAMPLE] * 4, prompts, strict=True)]
    assert scored == alone
    assert scored[0].score == 1.0 + 0.5 * 0.5 + 0.25
    assert scored[1].errors == {"together": "ValueError: no reply"}
    assert scored[1].metrics()["together/error"] == 1.0 and scored[1].values["together"] == 0.0
    assert scored[2].info() == {TEXTS_KEY: {"together": {"said": "It is Paris, I think"}}}
    # a call that fails as a whole is each reply's failure
    together.broken = True
    failed = rubric.score_group(replies[:2], [SAMPLE] * 2, prompts[:2])
    assert [score.errors for score in failed] == [
        {"together": "ConnectionError: the model is gone"}] * 2
    assert [score.score for score in failed] == [1.25, 0.25]
    with pytest.raises(ValueError, match="2 replies, 1 samples, 2 prompts and 2 transcripts"):
        rubric.score_group(replies[:2], [SAMPLE], prompts[:2])
    with pytest.raises(ValueError, match="2 replies, 2 samples, 2 prompts and 1 transcripts"):
        rubric.score_group(replies[:2], [SAMPLE] * 2, prompts[:2], ["user: a"])


def test_a_tasks_own_function_of_many_raises_its_failure() -> None:
    rubric = Rubric([Together()], catch_errors=False)
    assert rubric.score_group(["Paris"], [SAMPLE], [""])[0].values == {"together": 0.5}
    with pytest.raises(ValueError, match="no reply"):
        rubric.score_group(["Paris", ""], [SAMPLE] * 2, ["", ""])
