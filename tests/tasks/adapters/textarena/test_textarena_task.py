"""TextArena games as episodes: only what is new each turn, the game's own reward and end,
games replayed exactly whatever else draws from `random`, opponents for games of two; the
recipes train 2 batches on the embedded model."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from src.agents.agent import Agent, AgentReply
from src.configuration.models import FaultPolicy
from src.records.episode import Episode, EpisodeStatus, Outcome
from src.run.metrics import episode_statistics
from src.run.rollout import roll_out_lockstep
from src.tasks.adapters.textarena.task import TextArenaTask
from src.tasks.splits import SplitsWithSelection
from src.tasks.task import TaskSettingError
from tests.conftest import requires_embedded_model
from tests.run_folders import jsonl_rows, run_recipe_cut
from tests.tasks.adapters.textarena.opponents import first_free_cell

OPPONENT = "tests.tasks.adapters.textarena.opponents.first_free_cell"
NONSENSE = "tests.tasks.adapters.textarena.opponents.nonsense"
BROKEN = "tests.tasks.adapters.textarena.opponents.broken"


def guess_task(**parameters: object) -> TextArenaTask:
    return TextArenaTask("GuessTheNumber-v0",
                         splits=SplitsWithSelection(num_train=8, num_validation=4), max_turns=12,
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
        "game_reward": 0, "turn_limit": 0.0, "environment_error": 0.0}


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
        "game_reward": -1.0, "turn_limit": 0.0, "environment_error": 0.0}
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
    task = TextArenaTask("Blackjack-v0", splits=SplitsWithSelection(num_train=4, num_validation=1),
                         max_turns=20)
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
    task = TextArenaTask("GuessTheNumber-v0",
                         splits=SplitsWithSelection(num_train=2, num_validation=1), max_turns=2)
    episode, _ = started(task, "train-000000")
    secret = secret_of(guess_task(), "train-000000")
    wrong = [guess for guess in (1, 2, 3) if guess != secret]
    episode.step(f"[{wrong[0]}]")
    _, reward, terminated, truncated, info = episode.step(f"[{wrong[1]}]")
    assert truncated and not terminated and reward == 0.0
    assert info["status"] is EpisodeStatus.TASK_LIMIT_REACHED
    assert info["metrics"]["turn_limit"] == 1.0


def test_a_game_of_two_plays_the_opponent_and_shows_its_moves() -> None:
    task = TextArenaTask("TicTacToe-v0", splits=SplitsWithSelection(num_train=4, num_validation=2),
                         max_turns=9, player="alternate", opponent_function=OPPONENT)
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


class FirstFreeCell(Agent):
    """Plays the first free cell of the board the agent was last shown; counts its calls."""

    def __init__(self) -> None:
        self.acted_in: list[str] = []

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        self.acted_in += [f"{e.sample.sample_id}/{e.group_index}" for e in episodes]
        return [AgentReply(first_free_cell(e.chat[-1].content)) for e in episodes]


DRAWN_COUNTDOWN = {"numbers": None, "target": None}  # Countdown-v0 fixes them by default


def test_games_that_draw_when_made_are_the_same_game_in_every_episode_of_a_group() -> None:
    # Countdown without given numbers draws them and its target in its constructor: the
    # episodes of a group play one game, whatever the process drew in between, and the
    # process's streams are left as they were
    task = TextArenaTask("Countdown-v0", env_kwargs=DRAWN_COUNTDOWN,
                         splits=SplitsWithSelection(num_train=2, num_validation=1))
    random.seed(3)
    process = random.getstate()
    games = []
    for _ in range(4):
        games.append(started(task, "train-000000")[1])
        random.random()
    assert len(set(games)) == 1
    assert games[0] != started(task, "train-000001")[1]
    random.setstate(process)
    for _ in range(4):
        random.random()
    after = random.getstate()
    random.setstate(process)
    TextArenaTask("Countdown-v0", env_kwargs=DRAWN_COUNTDOWN,
                  splits=SplitsWithSelection(num_train=2, num_validation=1))
    started(task, "train-000000")
    assert random.getstate() == process
    assert after != process


def test_a_reward_that_is_no_number_is_the_games_error_scored_as_a_loss() -> None:
    # Countdown 0.7.4 passes set_invalid_move its arguments swapped: a second invalid
    # operation (100 / 75 of its fixed numbers) ends the game with its reason text as the
    # reward
    episode, _ = started(TextArenaTask("Countdown-v0",
                                       splits=SplitsWithSelection(num_train=1, num_validation=1)),
                         "train-000000")
    episode.step("[0 1 /]")
    observation, reward, terminated, _, info = episode.step("[0 1 /]")
    assert terminated and observation == "" and reward == 0.0
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["metrics"]["environment_error"] == 1.0 and info["metrics"]["lost"] == 1.0
    assert info["extras"]["environment_error"].startswith("Countdown-v0: the reward 'Invalid")


def test_a_game_decided_before_the_agent_moves_is_neither_trained_nor_counted() -> None:
    # ConnectFour, the agent second: the opponent's invalid first move ends the game
    # before the agent's turn; the episode is recorded as such, the agent never asked
    task = TextArenaTask("ConnectFour-v0",
                         splits=SplitsWithSelection(num_train=2, num_validation=1), player=1,
                         opponent_function=NONSENSE)
    agent = FirstFreeCell()
    sample = task.get_sample("train-000000")
    [episode] = roll_out_lockstep([(sample, 0)], task, agent, 0, [0])
    assert agent.acted_in == [] and episode.trajectory is None and episode.turns == 0
    assert episode.status is EpisodeStatus.NO_AGENT_TURN
    assert episode.outcome is Outcome.UNKNOWN and episode.reward == 0.0
    assert "invalid" in episode.info["ended_before_agent"].lower()
    assert "[Player 0] [nonsense]" in episode.chat[0].content
    # in no success rate: one won game of TicTacToe and this one are 1 of 1
    won = roll_out_lockstep([(task_tictactoe().get_sample("train-000000"), 0)],
                            task_tictactoe(), FirstFreeCell(), 0, [0])[0]
    records = [episode.to_record(), won.to_record()]
    statistics = episode_statistics(records)
    assert statistics["episodes"] == 1.0 and statistics["status/no_agent_turn"] == 0.5
    assert statistics["success_rate"] == float(won.outcome is Outcome.CORRECT)


def task_tictactoe() -> TextArenaTask:
    return TextArenaTask("TicTacToe-v0", splits=SplitsWithSelection(num_train=2, num_validation=1),
                         opponent_function=OPPONENT)


def test_an_opponent_that_raises_is_the_games_error_not_a_task_error() -> None:
    # on its first move (the agent second): the game never reached the agent
    task = TextArenaTask("TicTacToe-v0", splits=SplitsWithSelection(num_train=2, num_validation=1),
                         player=1, opponent_function=BROKEN)
    [episode] = roll_out_lockstep([(task.get_sample("train-000000"), 0)], task,
                                  FirstFreeCell(), 0, [0], faults=FaultPolicy())
    assert episode.status is EpisodeStatus.NO_AGENT_TURN
    assert "KeyError" in episode.info["ended_before_agent"]
    # after the agent's move: the episode ends there, scored 0, the error recorded
    task = TextArenaTask("TicTacToe-v0", splits=SplitsWithSelection(num_train=2, num_validation=1),
                         opponent_function=BROKEN)
    episode, _ = started(task, "train-000000")
    observation, reward, terminated, _, info = episode.step("[4]")
    assert terminated and observation == "" and reward == 0.0
    assert info["status"] is EpisodeStatus.COMPLETED and info["outcome"] is Outcome.INCORRECT
    assert info["metrics"]["environment_error"] == 1.0 and info["metrics"]["won"] == 0.0
    assert info["extras"]["environment_error"].startswith(
        "TicTacToe-v0: the opponent failed: KeyError")


def test_a_share_of_the_hands_at_the_success_threshold_is_won() -> None:
    # Blackjack pays the share of hands won: 1 of 2 is 0.5, lost at the default
    # threshold (a whole win), won at 0.5
    def stand(threshold: float) -> dict:
        task = TextArenaTask("Blackjack-v0", env_kwargs={"num_hands": 2},
                             splits=SplitsWithSelection(num_train=8, num_validation=1),
                             success_threshold=threshold)
        episode, _ = started(task, "train-000007")
        while True:
            _, reward, terminated, _, info = episode.step("[Stand]")
            if terminated:
                assert reward == 0.5
                return info
    assert stand(1.0)["outcome"] is Outcome.INCORRECT
    info = stand(0.5)
    assert info["outcome"] is Outcome.CORRECT and info["metrics"]["won"] == 1.0


def test_alternate_gives_the_episodes_of_a_group_both_sides() -> None:
    task = TextArenaTask("TicTacToe-v0", splits=SplitsWithSelection(num_train=4, num_validation=1),
                         max_turns=1, player="alternate", opponent_function=OPPONENT)
    samples = [(task.get_sample("train-000002"), group) for group in range(4)]
    episodes = roll_out_lockstep(samples, task, FirstFreeCell(), 0, list(range(4)))
    sides = [0 if "As Player 0" in e.chat[0].content else 1 for e in episodes]
    assert sides == [0, 1, 0, 1]


def test_check_parameters_names_a_wrong_id_or_argument() -> None:
    TextArenaTask.check_parameters({"env_id": "Blackjack-v0", "env_kwargs": {"num_hands": 2}})
    with pytest.raises(TaskSettingError) as error:
        TextArenaTask.check_parameters({"env_id": "BlackJack-v0"})
    assert error.value.key == ("env_id",)
    assert "'BlackJack-v0'" in error.value.message and "'Blackjack-v0'" in error.value.message
    with pytest.raises(TaskSettingError) as error:
        TextArenaTask.check_parameters({"env_id": "Blackjack-v0",
                                        "env_kwargs": {"num_hand": 2}})
    assert error.value.key == ("env_kwargs", "num_hand")
    assert "'num_hands'" in error.value.message


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
        if episode["status"] == "no_agent_turn":  # the opponent lost on its opening
            assert player == 1 and episode["turns"] == episode["completion_tokens"] == 0
            continue
        # the agent's replies are the trained tokens: one sampled turn per agent message
        assert episode["turns"] == len(agent_turns) and episode["completion_tokens"] > 0
        assert sum(episode["metrics"][key] for key in ("won", "lost", "drawn")) <= 1.0
