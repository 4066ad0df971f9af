"""Gymnasium environments of text as tasks: by id or entry point, seeded per sample, the
environment's reward and end, clear errors; the recipe trains 2 batches."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium
import pytest

from src.agents.agent import Agent, AgentReply
from src.configuration.models import FaultPolicy
from src.records.episode import Episode, EpisodeStatus, Outcome
from src.run.rollout import hung_calls, roll_out_lockstep
from src.tasks.adapters.gymnasium_text.task import GymnasiumTextTask
from src.tasks.splits import SplitsWithSelection
from src.tasks.task import TaskSettingError
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
    task = GymnasiumTextTask(entry_point=ENTRY_POINT,
                             splits=SplitsWithSelection(num_train=8, num_validation=2),
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
                             splits=SplitsWithSelection(num_train=2, num_validation=1),
                             max_turns=10)
    secret = secret_of(task, "train-000001")
    wrong = [str(guess) for guess in range(1, 11) if guess != secret][:2]
    steps = play(task, "train-000001", wrong)
    _, reward, terminated, truncated, info = steps[-1]
    assert len(steps) == 3 and terminated and not truncated
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["metrics"]["truncated"] == 1.0 and reward == 0.0


def test_a_number_past_pythons_int_limit_is_out_of_range() -> None:
    task = GymnasiumTextTask(entry_point=ENTRY_POINT,
                             splits=SplitsWithSelection(num_train=2, num_validation=1))
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
    task = GymnasiumTextTask(entry_point=f"{__name__}:JsonActions",
                             splits=SplitsWithSelection(num_train=2, num_validation=1))
    steps = play(task, "train-000000", ["2", "not JSON", "1"])
    assert [step[4]["metrics"]["environment_error"] for step in steps[1:]] == [0.0, 1.0]
    observation, reward, terminated, _, info = steps[-1]
    assert terminated and observation == "" and reward == 0.0
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["extras"]["environment_error"].startswith("JSONDecodeError: Expecting value")


def test_a_registered_id_with_kwargs() -> None:
    gymnasium.register("NumberGuessForTests-v0", entry_point=ENTRY_POINT)
    task = GymnasiumTextTask(env_id="NumberGuessForTests-v0", env_kwargs={"high": 3},
                             splits=SplitsWithSelection(num_train=2, num_validation=1))
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


class DrawnWhenMade(gymnasium.Env[str, str]):
    """Draws its secret from the global `random` when made, as hand-written environments
    do; one reply ends it."""

    observation_space = action_space = gymnasium.spaces.Text(max_length=1_000)

    def __init__(self) -> None:
        self.secret = random.randint(0, 10**9)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return f"The secret is {self.secret}.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 1.0, True, False, {}


def test_an_environment_made_for_each_episode_draws_on_the_episodes_streams() -> None:
    # the task's own check at construction and each episode's environment draw from
    # streams of their own: the episodes of a group meet one start, and the process's
    # streams are left as they were
    random.seed(4)
    process = random.getstate()
    task = GymnasiumTextTask(entry_point=f"{__name__}:DrawnWhenMade",
                             splits=SplitsWithSelection(num_train=2, num_validation=1))
    firsts = [play(task, "train-000000", [])[0][0] for _ in range(4)]
    assert random.getstate() == process
    assert len(set(firsts)) == 1 and firsts[0] != play(task, "train-000001", [])[0][0]


class OddReward(gymnasium.Env[str, str]):
    """Ends on the first reply with the reward `reward`."""

    observation_space = action_space = gymnasium.spaces.Text(max_length=1_000)

    def __init__(self, reward: Any = "1") -> None:
        self.reward = reward

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "Say anything.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", self.reward, True, False, {"is_success": True}


@pytest.mark.parametrize("reward", ["1", None, float("nan"), float("inf"), [1.0]])
def test_a_reward_that_is_no_finite_number_is_the_environments_error(reward: Any) -> None:
    task = GymnasiumTextTask(entry_point=f"{__name__}:OddReward",
                             env_kwargs={"reward": reward},
                             splits=SplitsWithSelection(num_train=1, num_validation=1))
    observation, scored, terminated, _, info = play(task, "train-000000", ["hello"])[-1]
    assert terminated and observation == "" and scored == 0.0
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["metrics"]["environment_error"] == 1.0
    assert info["extras"]["environment_error"].startswith(
        f"{__name__}:OddReward gave the reward {reward!r}")


class HangsOnStep(gymnasium.Env[str, str]):
    """Every reply ends the episode with reward 1, drawing from `random`; the reply
    "hang" waits, as a stuck call does, until `RELEASE` is set."""

    observation_space = action_space = gymnasium.spaces.Text(max_length=1_000)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "Reply.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == "hang":
            RELEASE.wait(60)
        return "", float(random.random() < 2), True, False, {}


RELEASE = threading.Event()


class Scripted(Agent):
    """Replies "hang" in the episodes of the given sample ids, "ok" elsewhere."""

    def __init__(self, hang: set[str]) -> None:
        self.hang = hang

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        return [AgentReply("hang" if e.sample.sample_id in self.hang else "ok")
                for e in episodes]


def test_a_hung_step_ends_its_own_episode_only() -> None:
    task = GymnasiumTextTask(entry_point=f"{__name__}:HangsOnStep",
                             splits=SplitsWithSelection(num_train=8, num_validation=1))
    samples = [(task.get_sample(f"train-{index:06d}"), 0) for index in range(8)]
    RELEASE.clear()
    started = time.monotonic()
    try:
        episodes = roll_out_lockstep(samples, task, Scripted({"train-000000"}), 0,
                                     list(range(8)), faults=FaultPolicy(step_timeout_s=1.0))
    finally:
        RELEASE.set()
    # one step's timeout in all, not one for each episode after the hung one
    assert time.monotonic() - started < 4.0
    assert episodes[0].status is EpisodeStatus.TASK_ERROR
    assert "step_timeout_s=1.0" in (episodes[0].error or "")
    assert [e.status for e in episodes[1:]] == [EpisodeStatus.COMPLETED] * 7
    assert all(e.outcome is Outcome.CORRECT for e in episodes[1:])


def test_hung_calls_past_the_cap_end_new_episodes_with_a_clear_error() -> None:
    task = GymnasiumTextTask(entry_point=f"{__name__}:HangsOnStep",
                             splits=SplitsWithSelection(num_train=4, num_validation=1))
    RELEASE.clear()
    try:
        # other tests' hung calls may end meanwhile: this one's stays hung until RELEASE,
        # so a cap of 1 refuses the next episode whatever theirs do
        hung = roll_out_lockstep([(task.get_sample("train-000000"), 0)], task,
                                 Scripted({"train-000000"}), 0, [0],
                                 faults=FaultPolicy(step_timeout_s=0.5, max_hung_calls=10_000))
        assert hung[0].status is EpisodeStatus.TASK_ERROR and hung_calls() >= 1
        refused = roll_out_lockstep([(task.get_sample("train-000001"), 0)], task,
                                    Scripted(set()), 1, [1],
                                    faults=FaultPolicy(step_timeout_s=0.5, max_hung_calls=1))
    finally:
        RELEASE.set()
    assert refused[0].status is EpisodeStatus.TASK_ERROR
    assert "max_hung_calls" in (refused[0].error or "")


def test_check_parameters_names_a_wrong_id_entry_point_or_argument() -> None:
    GymnasiumTextTask.check_parameters({"entry_point": ENTRY_POINT,
                                        "env_kwargs": {"high": 5}})
    GymnasiumTextTask.check_parameters({"env_id": "CartPole-v1",
                                        "env_kwargs": {"max_episode_steps": 5}})
    cases = [
        ({"env_id": "CartPoel-v1"}, ("env_id",), "'CartPole-v1'"),
        ({"env_id": "no_such_module:Thing-v0"}, ("env_id",), "no_such_module"),
        ({"entry_point": "examples.gymnasium_text.number_guess:NumberGues"},
         ("entry_point",), "NumberGues"),
        ({"entry_point": ENTRY_POINT, "env_kwargs": {"hihg": 5}},
         ("env_kwargs", "hihg"), "'high'"),
        ({"env_id": "CartPole-v1", "env_kwargs": {"sutton_barto": True}},
         ("env_kwargs", "sutton_barto"), "'sutton_barto_reward'"),
    ]
    for parameters, key, hint in cases:
        with pytest.raises(TaskSettingError) as error:
            GymnasiumTextTask.check_parameters(parameters)
        assert error.value.key == key and hint in error.value.message, parameters


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
