"""A judge model as a reward, against a real HTTP server in the test that speaks the OpenAI
chat-completions protocol: good verdicts read as scores and labels, garbage, a hang past
the bound, 5xx and 429 tried again, connection refused and other refusals each end as a
recorded outcome of the rubric (never a crash), verdicts cached by request, a group's
replies sent at once (batch_size at a time, each distinct one once, each failure its
own, within one bound from the group's asking), and a SingleTurnTask judged through
src/run_experiment.py finishing with the judge's prompt and verdict beside its
episodes."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from src.records.episode import Sample
from src.run_experiment import main
from src.tasks.model_rewards.judge import Judge, JudgeError
from src.tasks.rubric import ERRORS_KEY, TEXTS_KEY, Rubric
from tests.tasks.model_rewards.capitals_config import capitals_config
from tests.tasks.model_rewards.judge_server import GARBLED, HANG, Answer, JudgeServer

pytest.importorskip("openai", reason="the judge's client: pip install -e '.[openai]'")

SAMPLE = Sample(sample_id="train-000003", data={"question": "France", "answer": "Paris"})
TEMPLATE = "Question: {question}\nReference: {answer}\nReply: {reply}\nGrade it 0-10."
def judge(server: JudgeServer | str, **settings: Any) -> Judge:
    base_url = server if isinstance(server, str) else server.base_url
    return Judge(**{"name": "graded", "base_url": base_url, "model": "judge-7b",
                    "template": TEMPLATE, "score_range": (0, 10), "backoff_s": 0.01,
                    **settings})


def test_a_score_verdict_is_normalised_and_kept_beside_the_episode(
        serve: Callable[..., JudgeServer], monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve("Some thoughts about the reply.\n**Score:** 7")
    monkeypatch.setenv("JUDGE_KEY", "secret-123")
    graded = judge(server, api_key_variable="JUDGE_KEY", system="You grade answers.")
    scored = Rubric([graded]).score("It is Paris.", SAMPLE, "What is the capital of France?")
    assert scored.values == {"graded": 0.7} and scored.metrics()["graded/error"] == 0.0
    message = "Question: France\nReference: Paris\nReply: It is Paris.\nGrade it 0-10."
    assert scored.info() == {TEXTS_KEY: {"graded": {
        "prompt": message, "verdict": "Some thoughts about the reply.\n**Score:** 7"}}}
    [request] = server.requests
    assert request["model"] == "judge-7b" and request["messages"] == [
        {"role": "system", "content": "You grade answers."},
        {"role": "user", "content": message}]
    assert server.keys == ["Bearer secret-123"]  # the key from the environment


def test_a_label_verdict_is_worth_its_value(serve: Callable[..., JudgeServer]) -> None:
    server = serve("Checking... the final \\boxed{ Incorrect }, no: \\boxed{Correct}")
    graded = judge(server, score_range=None, labels={"correct": 1.0, "incorrect": -0.5})
    assert graded("Paris", "asked", SAMPLE.data, SAMPLE.sample_id).value == 1.0
    server.answer = lambda _: "\\boxed{INCORRECT}"
    assert graded("Lyon", "asked", SAMPLE.data, SAMPLE.sample_id).value == -0.5
    server.answer = lambda _: "\\boxed{maybe}"
    with pytest.raises(JudgeError, match="label 'maybe' is none of"):
        graded("Nice", "asked", SAMPLE.data, SAMPLE.sample_id)


@pytest.mark.parametrize(("answer", "message"), [
    ("I would rather not grade this.", "no match of"),
    ("Score: 11", "score 11 outside \\[0, 10\\]"),
    (GARBLED, "an answer without a message: .*a proxy's error page"),
    ("", "no match of"),
])
def test_an_unreadable_verdict_scores_zero_with_an_error_and_is_not_asked_again(
        serve: Callable[..., JudgeServer], answer: str, message: str) -> None:
    server = serve(answer)
    scored = Rubric([judge(server)]).score("Paris", SAMPLE, "asked")
    assert scored.values == {"graded": 0.0} and scored.metrics()["graded/error"] == 1.0
    assert scored.info()[ERRORS_KEY]["graded"].startswith("JudgeError: ")
    assert re.search(message, scored.errors["graded"])
    assert len(server.requests) == 1


def test_a_hanging_judge_is_given_up_within_its_bound(serve: Callable[..., JudgeServer]) -> None:
    server = serve(HANG)
    started = time.monotonic()
    scored = Rubric([judge(server, request_timeout_s=0.5, total_timeout_s=1.2)]).score(
        "Paris", SAMPLE, "asked")
    assert time.monotonic() - started < 5.0
    assert scored.values == {"graded": 0.0}
    assert re.match("JudgeError: no answer within total_timeout_s=1.2 .*APITimeoutError",
                    scored.errors["graded"])
    assert 2 <= len(server.requests) <= 3  # tried again while the total bound allowed


@pytest.mark.parametrize("failures", [[500, 503], [429]])
def test_a_server_error_or_a_rate_limit_is_tried_again(serve: Callable[..., JudgeServer],
                                                       failures: list[int]) -> None:
    server = serve(*failures, "Score: 10")
    scored = Rubric([judge(server)]).score("Paris", SAMPLE, "asked")
    assert scored.values == {"graded": 1.0} and scored.errors == {}
    assert len(server.requests) == len(failures) + 1


def test_retries_end_and_a_refusal_is_not_tried_again(serve: Callable[..., JudgeServer]
                                                      ) -> None:
    server = serve(500)
    with pytest.raises(JudgeError, match="no answer after 3 tries: InternalServerError"):
        judge(server, retries=2)("Paris", "asked", SAMPLE.data, SAMPLE.sample_id)
    assert len(server.requests) == 3
    server = serve(400)
    with pytest.raises(JudgeError, match="refused or garbled.*BadRequestError"):
        judge(server)("Paris", "asked", SAMPLE.data, SAMPLE.sample_id)
    assert len(server.requests) == 1


def test_a_judge_that_refuses_connections_scores_zero_with_an_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    graded = judge(f"http://127.0.0.1:{port}/v1", retries=2)
    scored = Rubric([graded]).score("Paris", SAMPLE, "asked")
    assert scored.values == {"graded": 0.0} and scored.metrics()["graded/error"] == 1.0
    assert scored.errors["graded"].startswith(
        "JudgeError: no answer after 3 tries: APIConnectionError")


def test_verdicts_are_cached_by_the_whole_request(serve: Callable[..., JudgeServer]) -> None:
    server = serve("Score: 5")
    graded = judge(server)
    for reply in ("Paris", "Paris", "Lyon", "Paris"):
        graded(reply, "asked", SAMPLE.data, SAMPLE.sample_id)
    assert len(server.requests) == 2
    uncached = judge(server, cache_size=0)
    for _ in range(2):
        uncached("Paris", "asked", SAMPLE.data, SAMPLE.sample_id)
    assert len(server.requests) == 4
    server.answer = lambda _: 502  # a failure is not kept: the next ask goes to the server
    with pytest.raises(JudgeError):
        judge(server, retries=0)("Nice", "asked", SAMPLE.data, SAMPLE.sample_id)
    assert len(server.requests) == 5


def test_a_groups_replies_are_sent_at_once_batch_size_at_a_time_each_failure_its_own(
        serve: Callable[..., JudgeServer]) -> None:
    lock = threading.Lock()
    in_flight, most, asked = [0], [0], []

    def answer(body: dict[str, Any]) -> Answer:
        reply = body["messages"][-1]["content"].split("Reply: ")[1].split("\n")[0]
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            asked.append(reply)
        time.sleep(0.2)
        with lock:
            in_flight[0] -= 1
        if reply == "Lyon":
            return 400  # a refusal: not asked again
        if reply == "Nice" and asked.count("Nice") == 1:
            return 503  # the transport: tried again
        return "Score: 10" if reply == "Paris" else "Score: 2"

    server = serve(by=answer)
    replies = ["Paris", "Lyon", "Nice", "Paris", "Lille", "Brest"]
    scored = Rubric([judge(server, batch_size=2)]).score_group(replies, [SAMPLE] * 6,
                                                                ["asked"] * 6)
    assert [score.values["graded"] for score in scored] == [1.0, 0.0, 0.2, 1.0, 0.2, 0.2]
    assert [index for index, score in enumerate(scored) if score.errors] == [1]
    assert scored[1].errors["graded"].startswith("JudgeError: the judge refused or garbled")
    assert sorted(asked) == ["Brest", "Lille", "Lyon", "Nice", "Nice", "Paris"]
    assert most[0] == 2
    # one bound for the group: a request still waiting when it has passed is not sent
    server = serve(HANG)
    late = judge(server, batch_size=1, retries=0, request_timeout_s=0.5,
                 total_timeout_s=0.5).many([
                     {"reply": reply, "prompt": "asked", "sample": SAMPLE.data,
                      "sample_id": SAMPLE.sample_id} for reply in ("Paris", "Lyon")])
    assert [type(error) for error in late] == [JudgeError, JudgeError]
    assert "not asked, the group's other requests took the time" in str(late[1])
    assert len(server.requests) == 1


def test_long_fields_are_cut_before_the_judge_and_in_the_episode(
        serve: Callable[..., JudgeServer]) -> None:
    server = serve("Score: 3" + " and more" * 100)
    graded = judge(server, max_field_chars=20, stored_chars=30)
    result = graded("x" * 1000, "asked", SAMPLE.data, SAMPLE.sample_id)
    sent = server.requests[0]["messages"][0]["content"]
    assert f"Reply: {'x' * 20}[... 980 characters cut]\n" in sent
    assert result.texts["prompt"] == sent[:30] + f"[... {len(sent) - 30} characters cut]"
    assert result.texts["verdict"].startswith("Score: 3 and more")
    assert len(result.texts["verdict"]) < 70


def test_settings_that_cannot_work_are_refused_when_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_JUDGE_KEY", raising=False)
    refused = [
        ({"temprature": 0.5}, "temprature"),
        ({"labels": {"yes": 1.0}}, "one of score_range"),
        ({"score_range": None}, "one of score_range"),
        ({"score_range": (10, 0)}, "low must be below high"),
        ({"score_range": None, "labels": {"Yes": 1.0, "yes ": 0.0}}, "distinct labels"),
        ({"pattern": "Score: \\d+"}, "no group"),
        ({"pattern": "Score: (\\d+"}, "missing \\)"),
        ({"template": "Grade the answer to {question}."}, "never reads \\{reply\\}"),
        ({"template": "Grade {0}: {reply}"}, "positional"),
        ({"name": "my judge"}, "not an identifier"),
    ]
    for settings, message in refused:
        with pytest.raises(ValidationError, match=message):
            judge("http://127.0.0.1:9/v1", **settings)
    with pytest.raises(ValueError, match="NO_SUCH_JUDGE_KEY .* holds no API key"):
        judge("http://127.0.0.1:9/v1", api_key_variable="NO_SUCH_JUDGE_KEY")
    graded = judge("http://127.0.0.1:9/v1", template="{reply} against {reference}")
    with pytest.raises(ValueError, match="template reads 'reference', which sample"):
        graded("Paris", "asked", SAMPLE.data, SAMPLE.sample_id)


def test_a_single_turn_task_judged_from_a_config_runs_to_its_end(
        tmp_path: Path, serve: Callable[..., JudgeServer], capsys: pytest.CaptureFixture[str]
) -> None:
    # Chad's verdicts are unreadable: those episodes score the judge 0 with an error
    server = serve(by=lambda request: "no idea" if "Chad" in json.dumps(request)
                   else "Score: 10")
    config = tmp_path / "config.yaml"
    judge_settings = {"base_url": server.base_url, "model": "judge-7b",
                      "template": '"' + TEMPLATE.replace("\n", "\\n") + '"',
                      "score_range": "[0, 10]", "backoff_s": "0.01"}
    config.write_text(capitals_config(tmp_path / "run", 3, 3, judge_settings))
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    [rollout] = [row for row in rows if "rollout/helpful" in row]
    assert rollout["rollout/helpful"] == pytest.approx(2 / 3)
    assert rollout["rollout/helpful/error"] == pytest.approx(1 / 3)
    [evaluation] = [row for row in rows if "eval/helpful" in row]
    assert evaluation["eval/reward"] == 1.5 and evaluation["eval/success_rate"] == 1.0
    episodes = [json.loads(line) for line in (tmp_path / "run" / "runs.jsonl").open()]
    assert len(episodes) == 6 and all(episode["status"] == "completed" for episode in episodes)
    for episode in episodes:
        info = episode["info"]
        if episode["sample_id"] == "train-000002":  # Chad
            assert episode["reward"] == 1.0 and episode["outcome"] == "incorrect"
            assert info[ERRORS_KEY]["helpful"].startswith("JudgeError: unreadable verdict")
        else:
            assert episode["reward"] == 1.5 and episode["outcome"] == "correct"
            assert info[TEXTS_KEY]["helpful"]["verdict"] == "Score: 10"
            assert "Reply: " in info[TEXTS_KEY]["helpful"]["prompt"]
    # a group's identical replies are judged once: 3 train samples and 1 validation one
    assert len(server.requests) == 4
    # a mistaken judge setting is found by the dry run, before anything runs
    config.write_text(capitals_config(tmp_path / "refused", 3, 3, judge_settings)
                      .replace("backoff_s:", "backof_s:"))
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    assert "backof_s: Extra inputs are not permitted" in capsys.readouterr().err
