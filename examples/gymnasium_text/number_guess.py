"""A Gymnasium environment of text: guess a secret number with higher/lower hints.

Observations and actions are strings (`gymnasium.spaces.Text`); a guess is the first
integer in the reply. Reward 1 for the right number (terminated, `is_success` True); a
reply without a number, or out of range, costs the turn. Seeded through `reset(seed=...)`
like any Gymnasium environment.
"""

from __future__ import annotations

import re
import string
from typing import Any

import gymnasium

_INTEGER = re.compile(r"-?\d+")
# a guess of more digits is out of range however it reads (and int() refuses past 4,300)
_MAX_DIGITS = 20


class NumberGuess(gymnasium.Env[str, str]):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, low: int = 1, high: int = 10, max_guesses: int = 4) -> None:
        self.low, self.high, self.max_guesses = low, high, max_guesses
        self.observation_space = gymnasium.spaces.Text(max_length=1_000,
                                                       charset=string.printable)
        self.action_space = gymnasium.spaces.Text(max_length=100_000,
                                                  charset=string.printable)
        self._secret = low
        self._guesses = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._secret = int(self.np_random.integers(self.low, self.high + 1))
        self._guesses = 0
        return (f"I am thinking of a whole number from {self.low} to {self.high}. You have "
                f"{self.max_guesses} guesses. Reply with one number."), {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._guesses += 1
        match = _INTEGER.search(action)
        guess = int(match.group()) if match and len(match.group()) <= _MAX_DIGITS else None
        out_of_guesses = self._guesses >= self.max_guesses
        if guess == self._secret:
            return "Correct!", 1.0, True, False, {"is_success": True}
        if guess is None or not self.low <= guess <= self.high:
            hint = f"That is not a number from {self.low} to {self.high}."
        else:
            hint = "Higher." if guess < self._secret else "Lower."
        return hint, 0.0, False, out_of_guesses, {"is_success": False} if out_of_guesses else {}
