"""Opponents for the TextArena tests: plain functions, as `opponent_function` names them."""

from __future__ import annotations

import re


def first_free_cell(observation: str) -> str:
    """TicTacToe: the first cell the board lists as available."""
    cells = re.findall(r"'\[(\d)\]'", observation.rsplit("Available Moves:", 1)[-1])
    return f"[{cells[0]}]" if cells else "[0]"
