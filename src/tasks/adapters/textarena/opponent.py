"""The opponent's side of a TextArena game of two: its moves until it is the agent's turn,
each from the family's `opponent_function` or sampled from its `opponent` model on a chat
of the opponent's own (see task.py's module docstring for the settings)."""

from __future__ import annotations

from collections.abc import Callable

from src.language_models.chat_template import render_chat
from src.language_models.language_model import LanguageModel

OpponentFunction = Callable[[str], str]


class OpponentFailed(Exception):
    """The opponent's move raised: its function, its model, or the game on its move."""


class OpponentMoves:
    """The part of TextArenaEpisode (task.py) that plays the opponent: it uses the
    episode's game, random streams, agent's player and `_render`, and keeps the opponent's
    chat and sampling seed in the episode's `_opponent_chat` and `_opponent_seed`."""

    def _play_opponent(self) -> bool:
        """The opponent's moves until it is the agent's turn; whether the game ended.
        Raises OpponentFailed where a move of the opponent's raised."""
        while True:
            with self._streams.active():
                state = self._game.state
                if state.done:
                    return True
                if state.current_player_id == self._player:
                    return False
                opponent_id, messages = self._game.get_observation()
            try:
                move = self._opponent_move(self._render(messages, opponent_id))
                with self._streams.active():
                    done, _ = self._game.step(action=move)
            except Exception as error:  # noqa: BLE001 - the opponent's fault, not the agent's
                raise OpponentFailed(f"{type(error).__name__}: {error}") from error
            if done:
                return True

    def _opponent_move(self, observation: str) -> str:
        family = self.family
        if family.opponent_function is not None:
            return str(family.opponent_function(observation))
        model = family.opponent_model
        assert model is not None
        self._opponent_chat.append(("user", observation))
        prompt = self._opponent_prompt(model)
        self._opponent_seed = (self._opponent_seed * 1_000_003 + 7) % (2**31)
        generation = model.generate([prompt], family.opponent_sampling,
                                    seed=self._opponent_seed)[0][0]
        end_of_turn = set(model.end_of_turn_ids())
        ids = [token for token in generation.token_ids if token not in end_of_turn]
        move = model.tokenizer.decode(ids, skip_special_tokens=True)
        self._opponent_chat.append(("agent", move))
        return move

    def _opponent_prompt(self, model: LanguageModel) -> list[int]:
        """The opponent's chat rendered by its template: its first message and as many of
        the latest as fit its context with room for a move."""
        room = model.max_context_tokens - self.family.opponent_sampling.max_new_tokens
        chat = list(self._opponent_chat)
        while True:
            text = render_chat(model, None, chat, generation_prompt=True)
            ids = model.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) <= room or len(chat) <= 2:
                return ids[-room:]
            chat = [chat[0], *chat[3:]]  # drop the oldest exchange after the first message
