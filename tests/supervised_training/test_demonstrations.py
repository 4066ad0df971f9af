"""Oversampling: which demonstrations repeat, how often, and the config's checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from src.supervised_training.config import DemonstrationsConfig, OversampledDemonstrations
from src.supervised_training.demonstrations import Demonstration, oversampled


def _demonstration(name: str, reply: str, category: str = "default") -> Demonstration:
    return Demonstration(source=name, category=category,
                         chat=[("user", "state"), ("agent", reply)])


def test_matching_demonstrations_repeat_in_place_the_rest_once() -> None:
    rest = _demonstration("a", '{"work": 0.0, "consumption": 0.5}')
    work = _demonstration("b", '{"work": 1.0, "consumption": 0.2}')
    rule = OversampledDemonstrations(reply_pattern=r'"work": 0(\.0)?\b', times=3)
    assert [d.source for d in oversampled([work, rest, work], [rule])] == [
        "b", "a", "a", "a", "b"]


def test_the_last_agent_turn_is_matched_and_a_category_narrows_it() -> None:
    early = Demonstration(source="early", category="low",
                          chat=[("user", "q"), ("agent", "REST"), ("user", "r"),
                                ("agent", "work")])
    late = Demonstration(source="late", category="low",
                         chat=[("user", "q"), ("agent", "work"), ("user", "r"), ("agent", "REST")])
    other = Demonstration(source="other", category="high", chat=[("user", "q"), ("agent", "REST")])
    rule = OversampledDemonstrations(reply_pattern="REST", category="low", times=2)
    assert [d.source for d in oversampled([early, late, other], [rule])] == [
        "early", "late", "late", "other"]


def test_a_demonstration_two_rules_match_takes_the_larger_times() -> None:
    both = _demonstration("both", "REST", category="low")
    rules = [OversampledDemonstrations(category="low", times=2),
             OversampledDemonstrations(reply_pattern="REST", times=4)]
    assert len(oversampled([both], rules)) == 4
    assert oversampled([both], []) == [both]


@pytest.mark.parametrize(("rule", "message"), [
    ({"times": 3}, "give reply_pattern, category or both"),
    ({"reply_pattern": "(", "times": 3}, "is not a regular expression"),
    ({"category": "low", "times": 1}, "greater than or equal to 2"),
    ({"category": "low", "times": 2, "weight": 1}, "Extra inputs are not permitted"),
])
def test_a_bad_oversample_rule_is_refused_with_its_reason(rule: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as error:
        DemonstrationsConfig.model_validate({"chats_jsonl": {"path": "chats.jsonl"},
                                             "oversample": [rule]})
    assert "oversample" in str(error.value)
