"""The call batcher: a group submitted together is answered alone, in calls of max_batch
in its order, joined by no request submitted alone; requests submitted alone join each
other within the first one's window; a call that fails is each of its requests'
failure."""

from __future__ import annotations

import threading

import pytest

from src.tasks.model_rewards.batching import CallBatcher


class Answers:
    """An `answer` that records each call's requests; a request "fail" fails its call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, batch: list[str]) -> list[str | BaseException]:
        with self.lock:
            self.calls.append(list(batch))
        if "fail" in batch:
            raise RuntimeError("the model is gone")
        return [ValueError(request) if request.startswith("bad") else f"{request}!"
                for request in batch]


def test_a_group_is_answered_alone_in_calls_of_max_batch_in_its_order() -> None:
    answers = Answers()
    batcher: CallBatcher[str, str] = CallBatcher(answers, "test")
    # the first waits for others submitted alone: the group behind it never joins it,
    # nor does what is submitted alone after the group join the group's calls
    first = batcher.submit("a", window_s=0.3, max_batch=8)
    group = batcher.submit_many(["g1", "g2", "bad3", "g4", "g5"], max_batch=2)
    last = batcher.submit("b", window_s=0.0, max_batch=8)
    assert first.result(timeout=5) == "a!" and last.result(timeout=5) == "b!"
    assert [reply.result(timeout=5) for index, reply in enumerate(group) if index != 2] == [
        "g1!", "g2!", "g4!", "g5!"]
    with pytest.raises(ValueError, match="bad3"):
        group[2].result(timeout=5)
    assert answers.calls == [["a"], ["g1", "g2"], ["bad3", "g4"], ["g5"], ["b"]]


def test_requests_submitted_alone_join_within_the_window_and_share_a_failure() -> None:
    answers = Answers()
    batcher: CallBatcher[str, str] = CallBatcher(answers, "test")
    replies = [batcher.submit(request, window_s=0.5, max_batch=3)
               for request in ("x", "y", "fail", "z")]
    assert replies[3].result(timeout=5) == "z!"
    for reply in replies[:3]:
        with pytest.raises(RuntimeError, match="the model is gone"):
            reply.result(timeout=5)
    assert answers.calls == [["x", "y", "fail"], ["z"]]
    failed = batcher.submit_many(["fail", "w"], max_batch=2)
    with pytest.raises(RuntimeError, match="the model is gone"):
        failed[1].result(timeout=5)
