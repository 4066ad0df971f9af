"""TextArena games as multi-turn tasks: one game per episode, the game's own rewards.

`TextArenaTask` makes the game `env_id` (with `env_kwargs`) for every episode and plays
it: the game's observations are the user turns, each new turn only what is new since the
agent's last move (TextArena's observation wrappers, which repeat the whole history, are
taken off; its action wrappers stay); the agent's reply is the move. The reward is the
game's own reward for the agent's player (TextArena's: 1 a win, 0 a draw, -1 a loss in
games of two; in games of one a share, such as Blackjack's hands won out of all); the
outcome is correct when the game was won: its reward reaches `success_threshold` (1, a
whole win, by default; 0.5 takes Blackjack's 3 hands of 5) without an invalid move.
Metrics, each the episode's 0 or 1 unless said:
- `won`: correct, as above; `drawn`: a game of two whose players got equal rewards;
  `lost`: ended, neither won nor drawn (a share below the threshold is lost);
- `invalid_move`: the game ended on the agent's invalid move, or on a move its code
  raised on: lost, reward -1 (TextArena's); `invalid_moves`: how many of the agent's
  invalid moves the game let it retry;
- `turn_limit`: `max_turns` replies without an end (reward 0);
- `environment_error`: the game or its opponent failed, not the agent's move: the game's
  reward for the agent is not a finite number (Countdown of TextArena 0.7.4 passes its
  reason as the reward of an invalid operation), or the opponent raised (its function, its
  model, or the game on its move). The episode ends there, lost, reward 0 (neither the
  win a broken opponent would hand an agent that learnt to break it, nor the loss of a
  move the agent did not make); its info's `environment_error` names the game and the
  error, and the first one of a family is logged with its traceback;
- `game_reward`: the game's reward.
An episode whose game ended before the agent's first turn (the opponent, moving first,
lost by an invalid move or failed) has status `no_agent_turn`: the agent is not asked,
nothing is trained, and it counts in no success rate; its info's `ended_before_agent`
says why.

A sample is a game: its seed comes from the task's seed and the sample id, so every
episode of a group plays the same game, and a resumed run replays the same games.
TextArena draws from Python's global `random` (and some games from NumPy's), in their
constructors too (Countdown's numbers, UsedCarNegotiation's reservation value): every call
into the game, its construction included, runs on the episode's own streams
(`src.tasks.random_streams`), so that games stepped in lockstep, or in a resumed run, draw
exactly what they would alone.

A call into the game that hangs is cut by the rollout's `rollout.faults.step_timeout_s`:
its episode alone ends as `task_error`, the others go on. The call itself cannot be
stopped (Python cannot kill a thread): it keeps its thread, its memory and, while it
computes in Python, a share of the interpreter's lock until it returns, and
`rollout.faults.max_hung_calls` bounds how many such threads pile up.

Two-player games need an opponent for the other player:
- `opponent`: a language model of `language_model_list` by name, sampling the opponent's
  moves from its own chat (rendered afresh each move; its tokens are never trained). A
  second entry of the start policy that no trainer names is a frozen copy; the trained
  policy's own name is self-play, where the policy plays both sides but only the agent's
  player's replies (`player`) are trained on; the opponent's moves reach the agent's chat
  as the game reports them;
- `opponent_function`: a plain function `f(observation: str) -> str` by dotted path.
`player` is the agent's side: 0, 1, or `alternate`: the episodes of a group take turns
(the first of a group plays 0 on even sample indices, 1 on odd ones; the next the other).
"""

from __future__ import annotations

import logging
import math
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from src.configuration.components import COMPONENTS, import_dotted
from src.language_models.language_model import (
    LanguageModel,
    NewTokens,
    SamplingParams,
    Temperature,
)
from src.records.episode import Outcome, Sample
from src.tasks.adapters.keyword_arguments import check_keyword_arguments
from src.tasks.adapters.textarena.opponent import OpponentFailed, OpponentFunction, OpponentMoves
from src.tasks.optional_packages import import_optional
from src.tasks.random_streams import RandomStreams
from src.tasks.splits import SplitsWithSelection
from src.tasks.task import (
    EpisodeEnv,
    Rounds,
    StepOutcome,
    Task,
    TaskSettingError,
    counted_sample,
    derived_seed,
    unknown_name,
)

textarena = import_optional("textarena", "textarena")
logger = logging.getLogger(__name__)

GAME_ID = -1  # TextArena's sender id of the game's own messages
# TextArena's reward for a game lost by an invalid move (its states' `set_invalid_move`)
INVALID_MOVE_REWARD = -1.0


@COMPONENTS.register("textarena")
class TextArenaTask(Task["TextArenaEpisode"]):
    """A TextArena game per episode, the game's own reward for the agent's side (see the
    module docstring). Outcome: correct when the game is won (its reward reaches
    `success_threshold`, no invalid move). Metrics (0 or 1 each): `won`; `drawn` (equal
    rewards in a game of two); `lost` (ended, neither won nor drawn: a share below the
    threshold is lost); `invalid_move` (lost on the agent's invalid move, or a move the
    game raised on: reward -1); `turn_limit` (`max_turns` replies without an end: reward
    0); `environment_error` (the game's reward was no finite number, or the opponent
    raised: lost, reward 0); and `invalid_moves` (the agent's invalid moves the game let it
    retry) and `game_reward` (the game's reward). A game over before the agent's first
    turn (an opponent moving first lost or failed) is status `no_agent_turn`: not asked,
    not trained, in no success rate."""

    def __init__(
        self,
        env_id: str,  # a registered TextArena id, e.g. GuessTheNumber-v0, TicTacToe-v0
        env_kwargs: dict[str, Any] | None = None,  # passed to textarena.make
        # a sample is a game, its seed drawn from `seed` and the sample id
        splits: SplitsWithSelection = SplitsWithSelection(),
        max_turns: Rounds = 30,  # the agent's replies before the episode is cut (reward 0)
        # the game's reward that is a win (outcome correct, metric `won`): 1, a whole
        # win; less where the game pays a share (Blackjack's hands won out of all)
        success_threshold: float = 1.0,
        # the agent's side in a game of two; alternate: the episodes of a group take turns
        player: Literal[0, 1, "alternate"] = 0,
        opponent: LanguageModel | None = None,  # see the module docstring
        opponent_function: str | None = None,
        opponent_temperature: Temperature = 1.0,
        opponent_max_new_tokens: NewTokens = 64,
        instruction: str = "",  # added after the game's first message
    ) -> None:
        super().__init__(max_round=max_turns)
        if opponent is not None and opponent_function is not None:
            raise ValueError("give opponent (a language model) or opponent_function, not both")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.splits = splits
        self.success_threshold = success_threshold
        self.player = player
        self.opponent_model = opponent
        self.opponent_function: OpponentFunction | None = (
            import_dotted(opponent_function) if opponent_function else None)
        self.opponent_sampling = SamplingParams(temperature=opponent_temperature,
                                                max_new_tokens=opponent_max_new_tokens)
        self.instruction = instruction
        self.num_players = 2 if opponent is not None or opponent_function else 1
        self.logged_failed_move = False  # the first move the game raised on is logged
        self.logged_environment_error = False  # and the first failure of the game's own
        self._check_game()

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """A game id TextArena does not register, or an `env_kwargs` key its game's
        constructor does not take, is a TaskSettingError (no game is made)."""
        env_id = parameters.get("env_id")
        if not isinstance(env_id, str):
            return  # a missing or mistyped id is the constructor's types' error
        registry = textarena.envs.registration.ENV_REGISTRY
        if env_id not in registry:
            raise TaskSettingError(("env_id",),
                                   unknown_name("TextArena game", env_id, sorted(registry)))
        env_kwargs = parameters.get("env_kwargs")
        if isinstance(env_kwargs, Mapping):
            check_keyword_arguments(_game_class(registry[env_id]), env_kwargs, env_id)

    def _check_game(self) -> None:
        """Make and reset one game now, so that a wrong id, argument or player count is a
        configuration error, not every episode's failure (on streams of its own: the
        process's are left as they were)."""
        try:
            with RandomStreams(0).active():
                game = make_game(self.env_id, self.env_kwargs)
                game.reset(num_players=self.num_players, seed=0)
        except AssertionError as error:  # TextArena checks the player count so
            raise ValueError(
                f"{self.env_id} cannot be played by {self.num_players} player(s): {error} "
                f"(a game of two needs `opponent` or `opponent_function`)") from error
        except ValueError as error:
            raise ValueError(f"textarena.make('{self.env_id}', **{self.env_kwargs}) failed: "
                             f"{error}") from error

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return self.splits.sample_ids(split)

    def _get_sample(self, sample_id: str) -> Sample:
        _, index = counted_sample(sample_id, self.splits.counts)
        game_seed = derived_seed("textarena", self.splits.seed, sample_id)
        player = index % 2 if self.player == "alternate" else self.player
        if self.num_players == 1:
            player = 0
        return Sample(sample_id=sample_id, category=self.env_id,
                      data={"game_seed": game_seed, "player": player})

    def new_episode(self) -> TextArenaEpisode:
        return TextArenaEpisode(self)


def _game_class(spec: Any) -> Any:
    """The class (or function) a TextArena registry entry makes its game with."""
    entry_point = spec.entry_point
    if isinstance(entry_point, str):
        module, _, name = entry_point.partition(":")
        return import_dotted(f"{module}.{name}")
    return entry_point


def make_game(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    """`textarena.make(env_id, **env_kwargs)` with its observation wrappers unlinked (they
    repeat the whole history each turn); action wrappers stay."""
    game = textarena.make(env_id, **env_kwargs)
    while isinstance(game, textarena.ObservationWrapper):
        game = game.env
    layer = game
    while isinstance(layer, textarena.Wrapper):
        while isinstance(layer.env, textarena.ObservationWrapper):
            layer.env = layer.env.env
        layer = layer.env
    return game


class TextArenaEpisode(OpponentMoves, EpisodeEnv[TextArenaTask]):
    """One game, the agent playing `sample.data['player']` (the other side on odd group
    indices where `player` is `alternate`)."""

    def __init__(self, family: TextArenaTask) -> None:
        super().__init__(family)
        self._game: Any = None
        self._streams = RandomStreams(0)
        self._player = 0
        self._invalid_moves = 0
        self._opponent_chat: list[tuple[str, str]] = []  # (role, text) of the opponent
        self._opponent_seed = 0

    def _reset(self, sample: Sample) -> str:
        family = self.family
        self._player = sample.data["player"]
        if family.player == "alternate" and family.num_players == 2:
            self._player = (self._player + self.group_index) % 2
        self._invalid_moves = 0
        self._opponent_chat = []
        self._streams = RandomStreams(sample.data["game_seed"])
        # the rollout's seed for this episode slot: the opponent's sampling
        self._opponent_seed = int(self.np_random.integers(2**31))
        with self._streams.active():
            self._game = make_game(family.env_id, family.env_kwargs)
            self._game.reset(num_players=family.num_players, seed=sample.data["game_seed"])
        try:
            if self._play_opponent():
                with self._streams.active():
                    _, game_info = self._game.close()
                reason = (game_info or {}).get(self._player, {}).get("reason", "")
                self.ended_before_agent = f"the game ended: {reason}"[:500]
        except OpponentFailed as failure:
            self.ended_before_agent = self._log_environment_error(
                f"the opponent failed: {failure}")
        observation = self._observation()
        return f"{observation}\n{family.instruction}" if family.instruction else observation

    def _step(self, action: str) -> StepOutcome:
        with self._streams.active():
            errors_before = getattr(self._game.state, "error_count", 0)
            try:
                done, _ = self._game.step(action=action)
            except Exception as error:  # noqa: BLE001 - the game failed on the model's text
                return self._failed_move(error)
            if not done and getattr(self._game.state, "error_count", 0) > errors_before:
                self._invalid_moves += 1
        if not done:
            try:
                done = self._play_opponent()
            except OpponentFailed as failure:
                return self._environment_error(f"the opponent failed: {failure}")
        if done:
            return self._end()
        metrics = self._metrics(0.0, won=False, drawn=False, invalid=False, ended=False)
        metrics["turn_limit"] = float(self.round_index >= self.family.max_round)
        return StepOutcome(observation=self._observation(), metrics=metrics)

    def _oracle_reply(self) -> str:
        raise NotImplementedError("a TextArena game has no reference moves to replay")

    def close(self) -> None:
        self._game = None

    # ---- the game ------------------------------------------------------------------
    def _observation(self) -> str:
        """What is new for the agent since its last move, its own moves left out."""
        with self._streams.active():
            _, messages = self._game.get_observation()
        return self._render(messages, self._player)

    def _render(self, messages: Sequence[tuple[int, str, Any]], player: int) -> str:
        roles = getattr(self._game.state, "role_mapping", {}) or {}
        lines = []
        for sender, text, kind in messages:
            if sender == player and kind == textarena.ObservationType.PLAYER_ACTION:
                continue  # the player's own move: already its reply in the chat
            if kind == textarena.ObservationType.PROMPT:
                lines.append(str(text).strip("\n"))
            else:
                name = "GAME" if sender == GAME_ID else roles.get(sender, f"Player {sender}")
                lines.append(f"[{name}] {str(text).strip(chr(10))}")
        return "\n".join(lines)

    def _end(self) -> StepOutcome:
        family = self.family
        with self._streams.active():
            rewards, game_info = self._game.close()
        rewards = rewards or {}
        given = rewards.get(self._player, 0.0)
        if not (isinstance(given, numbers.Real) and math.isfinite(given)):
            return self._environment_error(f"the reward {given!r:.200} for player "
                                           f"{self._player} is not a finite number")
        reward = float(given)
        info = (game_info or {}).get(self._player, {})
        invalid = bool(info.get("invalid_move", False))
        won = reward >= family.success_threshold and not invalid
        drawn = family.num_players > 1 and len(set(rewards.values())) == 1 and not invalid
        return StepOutcome(observation="", reward=reward, terminated=True,
                           outcome=Outcome.CORRECT if won else Outcome.INCORRECT,
                           metrics=self._metrics(reward, won=won, drawn=drawn, invalid=invalid,
                                                 ended=True) | {"turn_limit": 0.0},
                           info={"game_end": str(info.get("reason", ""))[:500]})

    def _failed_move(self, error: Exception) -> StepOutcome:
        """The end of a game whose code raised on the agent's move (GuessTheNumber's int()
        on a number of 5,000 digits): the move is the model's text, so the game counts as
        lost by an invalid move, scored, not failed as an error of the environment. The
        first such failure of a family is logged with its traceback, where a bug of the
        game itself would show."""
        family = self.family
        if not family.logged_failed_move:
            family.logged_failed_move = True
            logger.warning("%s raised on an agent's move: the game counts as lost by an "
                           "invalid move (later ones are only in their episode's info)",
                           family.env_id, exc_info=True)
        metrics = self._metrics(INVALID_MOVE_REWARD, won=False, drawn=False, invalid=True,
                                ended=True)
        return StepOutcome(observation="", reward=INVALID_MOVE_REWARD, terminated=True,
                           outcome=Outcome.INCORRECT, metrics=metrics | {"turn_limit": 0.0},
                           info={"game_end": f"the game failed on the move: "
                                             f"{type(error).__name__}: {error}"[:500]})

    def _environment_error(self, what: str) -> StepOutcome:
        """The end of a game that failed itself (see the module docstring): lost, reward
        0, the error in the episode's info."""
        error = self._log_environment_error(what)
        metrics = self._metrics(0.0, won=False, drawn=False, invalid=False, ended=True)
        return StepOutcome(observation="", reward=0.0, terminated=True,
                           outcome=Outcome.INCORRECT,
                           metrics=metrics | {"turn_limit": 0.0, "environment_error": 1.0},
                           info={"environment_error": error})

    def _log_environment_error(self, what: str) -> str:
        """`what` went wrong in the game, named with it; the family's first is logged
        (with the traceback of the exception being handled, if any)."""
        family = self.family
        error = f"{family.env_id}: {what}"[:500]
        if not family.logged_environment_error:
            family.logged_environment_error = True
            logger.warning("%s (later ones are only in their episode's info)", error,
                           exc_info=sys.exc_info()[0] is not None)
        return error

    def _metrics(self, reward: float, *, won: bool, drawn: bool, invalid: bool,
                 ended: bool) -> dict[str, float]:
        return {"won": float(won), "drawn": float(drawn),
                "lost": float(ended and not won and not drawn),
                "invalid_move": float(invalid), "invalid_moves": float(self._invalid_moves),
                "game_reward": reward, "environment_error": 0.0}
