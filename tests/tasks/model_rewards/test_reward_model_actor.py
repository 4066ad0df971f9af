"""A reward model in a Ray actor, on a real local Ray cluster and the tiny random Llama
classifier of test_reward_model.py: its scores are the ones the model gives in this
process, a group's concurrent requests reach the actor as one call (a group scored
together, as a call of its own), a killed or overrunning actor gives recorded
reward-function errors (then a fresh actor scores), and the task's close stops the
actor."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from src.tasks.model_rewards.reward_model import RewardModel
from src.tasks.reward_functions import RewardTerm
from src.tasks.rubric import Rubric, RubricScore
from src.tasks.single_turn import SingleTurnTask
from tests.conftest import requires_embedded_model
from tests.tasks.model_rewards.test_reward_model import PROMPT, REPLIES, SAMPLE, save_llama

ray = pytest.importorskip("ray")

pytestmark = requires_embedded_model
GROUP = [*REPLIES, "Marseille, surely.", "Paris is the capital."]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_llama(tmp_path_factory.mktemp("reward-llama"), labels=1)


@pytest.fixture(scope="module")
def direct(llama: Path) -> dict[str, float]:
    """Each reply of GROUP scored alone by the model in this process."""
    rubric = Rubric([RewardModel(name="preference", model=str(llama))])
    scores = {reply: rubric.score(reply, SAMPLE, PROMPT).values["preference"]
              for reply in GROUP}
    assert min(abs(a - b) for a in scores.values() for b in scores.values() if a != b) > 1e-2
    return scores


def in_actor(llama: Path, **actor: Any) -> RewardModel:
    return RewardModel(name="preference", model=str(llama), placement="ray_actor",
                       actor=actor)


def stopped(handle: Any) -> bool:
    """Whether the actor is dead within a minute (`ray.kill` takes effect in its own time:
    a call sent at once may still be answered)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(handle.stats.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.1)
    return False


def score_together(rubric: Rubric, replies: list[str]) -> list[RubricScore]:
    """Each reply scored in its own thread, all threads let go at once."""
    start = threading.Barrier(len(replies))
    scored: list[RubricScore | None] = [None] * len(replies)

    def score(index: int) -> None:
        start.wait()
        scored[index] = rubric.score(replies[index], SAMPLE, PROMPT)

    threads = [threading.Thread(target=score, args=(index,)) for index in range(len(replies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(result is not None for result in scored)
    return [result for result in scored if result is not None]


def test_through_the_actor_a_reply_and_a_concurrent_group_score_as_in_this_process(
        ray_cluster, llama: Path, direct: dict[str, float]) -> None:
    # built from a config's reward term, as a run builds it; the task's close stops it
    scorer = RewardTerm(function="src.tasks.model_rewards.reward_model.RewardModel",
                        parameters={"name": "preference", "model": str(llama),
                                    "placement": "ray_actor",
                                    "actor": {"batch_wait_s": 1.0}}).build()
    assert isinstance(scorer, RewardModel) and scorer.actor is not None
    task = SingleTurnTask(samples={"train": [{"question": "France"}]},
                          rubric=Rubric([scorer]), prompt=PROMPT)
    try:
        one = task.rubric.score(GROUP[0], SAMPLE, PROMPT)
        assert one.values["preference"] == pytest.approx(direct[GROUP[0]], abs=1e-6)
        assert one.metrics()["preference/error"] == 0.0
        before = scorer.actor.stats()
        assert before["calls"] == 1 and before["pid"] != os.getpid()

        together = score_together(task.rubric, GROUP)
        # the group is one padded batch, which the model here scores as one too
        here = RewardModel(name="preference", model=str(llama))
        assert [scored.values["preference"] for scored in together] == pytest.approx(
            here.scores([here.text_of(reply, PROMPT, SAMPLE.data, SAMPLE.sample_id)
                         for reply in GROUP]), abs=1e-6)
        assert not any(scored.errors for scored in together)
        after = scorer.actor.stats()
        assert (after["calls"] - before["calls"], after["texts"] - before["texts"]) == (
            1, len(GROUP))
        # scored together, the group is one call of its own
        grouped = task.rubric.score_group(GROUP, [SAMPLE] * len(GROUP), [PROMPT] * len(GROUP))
        assert [scored.values["preference"] for scored in grouped] == pytest.approx(
            [scored.values["preference"] for scored in together], abs=1e-6)
        last = scorer.actor.stats()
        assert (last["calls"] - after["calls"], last["texts"] - after["texts"]) == (
            1, len(GROUP))
        handle = scorer.actor.handle
    finally:
        task.close()
    assert scorer.actor.handle is None
    assert stopped(handle)


def test_a_killed_actor_gives_the_next_reply_a_recorded_error_then_a_fresh_actor_scores(
        ray_cluster, llama: Path, direct: dict[str, float]) -> None:
    scorer = in_actor(llama, max_restarts=1)
    rubric = Rubric([scorer])
    try:
        assert rubric.score(GROUP[1], SAMPLE, PROMPT).values["preference"] == pytest.approx(
            direct[GROUP[1]], abs=1e-6)
        ray.kill(scorer.actor.handle, no_restart=True)
        failed = rubric.score(GROUP[1], SAMPLE, PROMPT)
        assert failed.values["preference"] == 0.0
        assert failed.metrics()["preference/error"] == 1.0
        assert "the actor died" in failed.errors["preference"]
        # the next reply starts a fresh actor, which scores as before
        again = rubric.score(GROUP[2], SAMPLE, PROMPT)
        assert again.values["preference"] == pytest.approx(direct[GROUP[2]], abs=1e-6)
        assert again.errors == {}
        # with its one restart used, a second death leaves every later reply an error
        ray.kill(scorer.actor.handle, no_restart=True)
        assert "the actor died" in rubric.score(GROUP[2], SAMPLE, PROMPT).errors["preference"]
        assert "max_restarts=1" in rubric.score(GROUP[2], SAMPLE, PROMPT).errors["preference"]
    finally:
        scorer.close()


def test_an_actor_past_its_bound_is_stopped_and_the_reply_gets_a_recorded_error(
        ray_cluster, llama: Path) -> None:
    # bounds too short for the actor to load its model: the first call overruns them
    scorer = in_actor(llama, start_timeout_s=0.001, request_timeout_s=0.001, max_restarts=0)
    rubric = Rubric([scorer])
    try:
        handle = scorer.actor.handle
        overran = rubric.score(GROUP[0], SAMPLE, PROMPT)
        assert overran.values["preference"] == 0.0
        assert "no scores within 0.002 s" in overran.errors["preference"]
        assert scorer.actor.handle is None
        assert stopped(handle)
        assert "max_restarts=0" in rubric.score(GROUP[0], SAMPLE, PROMPT).errors["preference"]
    finally:
        scorer.close()


def test_actor_settings_that_cannot_work_are_refused(llama: Path) -> None:
    refused = [
        ({"actor": {"num_cpus": 2}}, "actor applies to placement: ray_actor"),
        ({"placement": "ray_actor", "device": "cuda"}, "needs actor.num_gpus above 0"),
        ({"placement": "ray_actor", "actor": {"num_gpus": 1}}, "never uses"),
        ({"placement": "ray_actor", "actor": {"gpus": 1}}, "gpus"),
        ({"placement": "elsewhere"}, "placement"),
    ]
    for settings, message in refused:
        with pytest.raises(ValidationError, match=message):
            RewardModel(model=str(llama), **settings)
