"""Opponents for the TextArena tests: plain functions, as `opponent_function` names them."""

from __future__ import annotations

import re


def first_free_cell(observation: str) -> str:
    """TicTacToe: the first cell the board lists as available."""
    cells = re.findall(r"'\[(\d)\]'", observation.rsplit("Available Moves:", 1)[-1])
    return f"[{cells[0]}]" if cells else "[0]"


def nonsense(observation: str) -> str:
    """A move no game takes: the opponent loses by it where the game says so."""
    return "nonsense"


def broken(observation: str) -> str:
    """An opponent whose code raises, as one may on a board it did not expect."""
    raise KeyError("no such cell")
