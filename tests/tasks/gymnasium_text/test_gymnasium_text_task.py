"""Gymnasium environments of text as tasks: by id or entry point, seeded per sample, the
environment's reward and end, clear errors; the recipe trains 2 batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium
import pytest

from src.records.episode import EpisodeStatus, Outcome
from src.tasks.instance.gymnasium_text.task import GymnasiumTextTask
from tests.conftest import requires_embedded_model
from tests.run_folders import jsonl_rows, run_recipe_cut

ENTRY_POINT = "examples.gymnasium_text.number_guess:NumberGuess"


def play(task: GymnasiumTextTask, sample_id: str, replies: list[str]) -> list[tuple]:
    episode = task.new_episode()
    steps = [episode.reset(seed=0, options={"sample_id": sample_id})]
    for reply in replies:
        steps.append(episode.step(reply))
        if steps[-1][2] or steps[-1][3]:
            break
    episode.close()
    return steps


def secret_of(task: GymnasiumTextTask, sample_id: str) -> int:
    for guess in range(1, 11):
        if play(task, sample_id, [str(guess)])[-1][2]:
            return guess
    raise AssertionError("no guess from 1 to 10 was right")


def test_an_entry_point_plays_seeded_per_sample_with_the_environments_reward() -> None:
    task = GymnasiumTextTask(entry_point=ENTRY_POINT, num_train=8, num_validation=2,
                             max_turns=4)
    secrets = [secret_of(task, f"train-{index:06d}") for index in range(8)]
    assert len(set(secrets)) > 1
    assert secrets == [secret_of(task, f"train-{index:06d}") for index in range(8)]
    observation, reward, terminated, _, info = play(task, "train-000000",
                                                    [f"it is {secrets[0]}"])[-1]
    assert terminated and reward == 1.0 and info["outcome"] is Outcome.CORRECT
    assert info["metrics"] == {"return": 1.0, "truncated": 0.0, "environment_error": 0.0}


def test_the_environments_own_truncation_ends_the_episode() -> None:
    task = GymnasiumTextTask(entry_point=ENTRY_POINT, env_kwargs={"max_guesses": 2},
                             num_train=2, num_validation=1, max_turns=10)
    secret = secret_of(task, "train-000001")
    wrong = [str(guess) for guess in range(1, 11) if guess != secret][:2]
    steps = play(task, "train-000001", wrong)
    _, reward, terminated, truncated, info = steps[-1]
    assert len(steps) == 3 and terminated and not truncated
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["metrics"]["truncated"] == 1.0 and reward == 0.0


def test_a_number_past_pythons_int_limit_is_out_of_range() -> None:
    task = GymnasiumTextTask(entry_point=ENTRY_POINT, num_train=2, num_validation=1)
    observation, reward, terminated, _, info = play(task, "train-000000", ["9" * 5_000])[-1]
    assert observation == "That is not a number from 1 to 10."
    assert not terminated and reward == 0.0 and info["metrics"]["environment_error"] == 0.0


class JsonActions(gymnasium.Env[str, str]):
    """Reads each reply as JSON, as code written for well-formed actions does: a reply
    that is not JSON raises."""

    observation_space = action_space = gymnasium.spaces.Text(max_length=1_000)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "Reply with the JSON number 1.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        correct = json.loads(action) == 1
        return "Not 1.", float(correct), correct, False, {}


def test_an_environment_that_raises_on_a_reply_ends_the_episode_scored() -> None:
    task = GymnasiumTextTask(entry_point=f"{__name__}:JsonActions", num_train=2,
                             num_validation=1)
    steps = play(task, "train-000000", ["2", "not JSON", "1"])
    assert [step[4]["metrics"]["environment_error"] for step in steps[1:]] == [0.0, 1.0]
    observation, reward, terminated, _, info = steps[-1]
    assert terminated and observation == "" and reward == 0.0
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["extras"]["environment_error"].startswith("JSONDecodeError: Expecting value")


def test_a_registered_id_with_kwargs() -> None:
    gymnasium.register("NumberGuessForTests-v0", entry_point=ENTRY_POINT)
    task = GymnasiumTextTask(env_id="NumberGuessForTests-v0", env_kwargs={"high": 3},
                             num_train=2, num_validation=1)
    first = play(task, "validation-000000", [])[0][0]
    assert first.startswith("I am thinking of a whole number from 1 to 3.")
    assert task.get_sample("validation-000000").category == "NumberGuessForTests-v0"


def test_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="one of the two"):
        GymnasiumTextTask()
    with pytest.raises(ValueError, match="not text"):
        GymnasiumTextTask(env_id="CartPole-v1")
    with pytest.raises(gymnasium.error.Error):
        GymnasiumTextTask(env_id="NoSuchEnvironment-v0")


@pytest.mark.slow
@requires_embedded_model
def test_the_recipe_trains_two_batches(tmp_path: Path) -> None:
    run = run_recipe_cut(tmp_path, "gymnasium_text_number_guess.yaml", """\
  rollout: {max_batches: 2, batch_size: 2}
  evaluation: {max_samples: 4}
""")
    episodes = jsonl_rows(run / "runs.jsonl")
    assert len(episodes) == 16
    assert all(episode["chat"][0]["content"].startswith("I am thinking") for episode in episodes)
    assert all(episode["status"] == "completed" for episode in episodes)
