"""TextArena games as episodes: only what is new each turn, the game's own reward and end,
games replayed exactly whatever else draws from `random`, opponents for games of two; the
recipes train 2 batches on the embedded model."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from src.records.episode import EpisodeStatus, Outcome
from src.tasks.instance.textarena.task import TextArenaTask
from tests.conftest import requires_embedded_model
from tests.run_folders import jsonl_rows, run_recipe_cut

OPPONENT = "tests.tasks.textarena.opponents.first_free_cell"


def guess_task(**parameters: object) -> TextArenaTask:
    return TextArenaTask("GuessTheNumber-v0", num_train=8, num_validation=4, max_turns=12,
                         **parameters)


def started(task: TextArenaTask, sample_id: str, seed: int = 0):
    episode = task.new_episode()
    observation, _ = episode.reset(seed=seed, options={"sample_id": sample_id})
    return episode, observation


def secret_of(task: TextArenaTask, sample_id: str) -> int:
    """Binary search through the game's own hints."""
    episode, _ = started(task, sample_id)
    low, high = 1, 20
    while True:
        guess = (low + high) // 2
        observation, _, terminated, _, info = episode.step(f"[{guess}]")
        if terminated:
            assert info["outcome"] is Outcome.CORRECT
            return guess
        if "higher" in observation:
            low = guess + 1
        else:
            high = guess - 1


def test_each_turn_shows_only_what_is_new() -> None:
    episode, first = started(guess_task(), "train-000000")
    assert first.startswith("You are Player 0. You are playing Guess The Number.")
    observation, reward, terminated, _, info = episode.step("I say [1]")
    assert not terminated and reward == 0.0 and info["status"] is EpisodeStatus.RUNNING
    # the game's hint alone: neither the prompt again nor the agent's own move
    assert observation in ("[GAME] The target number is higher.", "")
    observation, *_ = episode.step("no number")
    assert observation.startswith("[GAME] You attempted an invalid move.")
    assert "Guess The Number" not in observation


def test_a_win_is_correct_and_a_partial_credit_loss_is_not() -> None:
    task = guess_task()
    secret = secret_of(task, "train-000003")
    episode, _ = started(task, "train-000003")
    _, reward, terminated, _, info = episode.step(f"[{secret}]")
    assert terminated and reward == 1.0 and info["outcome"] is Outcome.CORRECT
    assert info["metrics"]["won"] == 1.0 and info["metrics"]["lost"] == 0.0

    # a wrong guess, then two invalid moves: the game ends on the second with its
    # partial-completion credit (above 0), a lost game however TextArena scores it
    episode, _ = started(task, "train-000003")
    wrong = 1 if secret != 1 else 2
    episode.step(f"[{wrong}]")
    episode.step("nothing")
    _, reward, terminated, _, info = episode.step("nothing again")
    assert terminated and 0.0 < reward < 1.0
    assert info["outcome"] is Outcome.INCORRECT
    assert info["metrics"] | {"game_reward": 0} == {
        "won": 0.0, "drawn": 0.0, "lost": 1.0, "invalid_move": 1.0, "invalid_moves": 1.0,
        "game_reward": 0, "turn_limit": 0.0}


def test_a_move_the_game_raises_on_loses_it_as_an_invalid_move() -> None:
    # GuessTheNumber reads a guess with int(), which refuses more than 4,300 digits: the
    # move is the model's, so the episode is scored (TextArena's loss by an invalid move),
    # not failed as an error of the environment
    episode, _ = started(guess_task(), "train-000000")
    observation, reward, terminated, _, info = episode.step("[" + "9" * 5_000 + "]")
    assert terminated and observation == "" and reward == -1.0
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["metrics"] == {
        "won": 0.0, "drawn": 0.0, "lost": 1.0, "invalid_move": 1.0, "invalid_moves": 0.0,
        "game_reward": -1.0, "turn_limit": 0.0}
    assert info["extras"]["game_end"].startswith("the game failed on the move: ValueError")


def test_samples_are_different_games_and_each_the_same_every_time() -> None:
    task = guess_task()
    secrets = [secret_of(task, f"train-{index:06d}") for index in range(8)]
    assert len(set(secrets)) > 1
    assert secrets == [secret_of(task, f"train-{index:06d}") for index in range(8)]


def test_games_in_lockstep_draw_as_alone_and_leave_the_process_streams_alone() -> None:
    # Blackjack deals a card from `random` at every hit: two episodes of one game,
    # stepped in turn with another game and with draws of the process's own, get the
    # same cards; the process's streams move only by its own draws
    task = TextArenaTask("Blackjack-v0", num_train=4, num_validation=1, max_turns=20)
    random.seed(5)
    np.random.seed(5)
    numpy_before = np.random.get_state()[1].copy()
    first, first_deal = started(task, "train-000002")
    other, _ = started(task, "train-000001")
    second, second_deal = started(task, "train-000002")
    seen: tuple[list[str], list[str]] = ([first_deal], [second_deal])
    for _ in range(3):
        seen[0].append(first.step("[Hit]")[0])
        random.random()
        other.step("[Hit]")
        seen[1].append(second.step("[Hit]")[0])
    assert seen[0] == seen[1]
    draws = random.getstate()
    random.seed(5)
    for _ in range(3):
        random.random()
    assert random.getstate() == draws
    assert np.array_equal(np.random.get_state()[1], numpy_before)


def test_the_turn_limit_ends_the_episode_with_reward_zero() -> None:
    task = TextArenaTask("GuessTheNumber-v0", num_train=2, num_validation=1, max_turns=2)
    episode, _ = started(task, "train-000000")
    secret = secret_of(guess_task(), "train-000000")
    wrong = [guess for guess in (1, 2, 3) if guess != secret]
    episode.step(f"[{wrong[0]}]")
    _, reward, terminated, truncated, info = episode.step(f"[{wrong[1]}]")
    assert truncated and not terminated and reward == 0.0
    assert info["status"] is EpisodeStatus.TASK_LIMIT_REACHED
    assert info["metrics"]["turn_limit"] == 1.0


def test_a_game_of_two_plays_the_opponent_and_shows_its_moves() -> None:
    task = TextArenaTask("TicTacToe-v0", num_train=4, num_validation=2, max_turns=9,
                         player="alternate", opponent_function=OPPONENT)
    assert [task.get_sample(f"train-{i:06d}").data["player"] for i in range(4)] == [0, 1, 0, 1]
    # as player 1 the opponent (player 0) has already moved when the episode starts
    episode, first = started(task, "train-000001")
    assert "As Player 1" in first and "[Player 0] [0]" in first
    turns = 0
    observation = first
    while True:
        cells = re.findall(r"'\[(\d)\]'", observation.rsplit("Available Moves:", 1)[-1])
        observation, reward, terminated, truncated, info = episode.step(f"[{cells[-1]}]")
        turns += 1
        if terminated or truncated:
            break
        assert "[Player 0]" in observation  # the opponent's reply, as the game reports it
    metrics = info["metrics"]
    assert metrics["won"] + metrics["lost"] + metrics["drawn"] == 1.0
    assert reward == {1.0: 1.0, 0.0: -1.0}.get(metrics["won"], reward)


def test_configuration_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="needs `opponent` or `opponent_function`"):
        TextArenaTask("TicTacToe-v0")
    with pytest.raises(ValueError, match="not found in registry"):
        TextArenaTask("NoSuchGame-v0")


@pytest.mark.slow
@requires_embedded_model
def test_guess_the_number_trains_two_batches(tmp_path: Path) -> None:
    run = run_recipe_cut(tmp_path, "textarena_guess_the_number.yaml", """\
  rollout: {max_batches: 2, batch_size: 2}
  evaluation: {max_samples: 4, every_n_batches: null}
  task: {parameters: {max_turns: 4}}
""")
    episodes = jsonl_rows(run / "runs.jsonl")
    assert len(episodes) == 16
    for episode in episodes:
        assert episode["chat"][0]["content"].startswith("You are Player 0.")
        assert episode["turns"] == sum(m["role"] == "agent" for m in episode["chat"])
        assert "won" in episode["metrics"] and "invalid_moves" in episode["metrics"]


@pytest.mark.slow
@requires_embedded_model
@pytest.mark.parametrize("opponent", ["start_policy", "policy"])
def test_tictactoe_against_a_frozen_copy_and_in_self_play(tmp_path: Path,
                                                          opponent: str) -> None:
    run = run_recipe_cut(tmp_path, "textarena_tictactoe.yaml", f"""\
  rollout: {{max_batches: 2, batch_size: 2, group_size: 2}}
  evaluation: {{at_start: false, max_samples: 2}}
  task: {{parameters: {{opponent: {opponent}, max_turns: 5}}}}
""")
    episodes = jsonl_rows(run / "runs.jsonl")
    assert len(episodes) == 8
    for episode in episodes:
        user_turns = [m["content"] for m in episode["chat"] if m["role"] == "user"]
        agent_turns = [m for m in episode["chat"] if m["role"] == "agent"]
        player = 0 if "As Player 0" in user_turns[0] else 1
        if player == 1:  # the opponent (player 0) moved first, as the game reports it
            assert "[Player 0]" in user_turns[0]
        # the agent's replies are the trained tokens: one sampled turn per agent message
        assert episode["turns"] == len(agent_turns) and episode["completion_tokens"] > 0
        assert sum(episode["metrics"][key] for key in ("won", "lost", "drawn")) <= 1.0
