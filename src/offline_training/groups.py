"""Scored groups: candidates of one prompt with fixed scores, read from files and tokenized.

Two sources:
- runs.jsonl of a finished online run: the episodes of one sample in one batch form a
  group; the prompt is the chat before the first agent reply, the candidate that reply,
  the score the episode's reward.
- rows `{prompt, candidates[], scores[]}` in a .jsonl (one row a line) or .json (a list
  of rows) file, with configurable key names.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from src.language_models.chat_template import probe_turn_boundary, render_chat
from src.language_models.language_model import LanguageModel
from src.records.chat import ChatMessage, Role
from src.records.episode import EpisodeRecord
from src.storage.files import (
    atomic_write_text,
    read_numbered_json_lines,
    read_validated_json_lines,
)

logger = logging.getLogger(__name__)

SNAPSHOT_FILE = "groups.jsonl"


class GroupFileError(ValueError):
    """A group file that cannot be read: names the file, the line (or row) and the key."""


class ScoredGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str
    prompt: list[ChatMessage]  # the chat up to the reply, roles user / agent
    candidates: list[str]
    scores: list[float]

    @model_validator(mode="after")
    def _one_score_per_candidate(self) -> ScoredGroup:
        if len(self.candidates) != len(self.scores):
            raise ValueError(f"{len(self.candidates)} candidates but {len(self.scores)} scores")
        return self


# ---- sources -----------------------------------------------------------------------------
def read_runs_jsonl(path: Path) -> list[ScoredGroup]:
    """Groups of a run log: episodes sharing (sample_id, batch_index), ordered by their
    group_index. Episodes with no agent reply (e.g. the prompt did not fit) are left out."""
    members: dict[tuple[str, int], list[tuple[int, list[ChatMessage], str, float, int]]] = {}
    try:
        records = read_validated_json_lines(path, EpisodeRecord)
    except ValueError as error:
        raise GroupFileError(str(error)) from error
    for line_number, record in records:
        replies = [index for index, message in enumerate(record.chat)
                   if message.role is Role.AGENT]
        if not replies:
            continue
        first_reply = replies[0]
        members.setdefault((record.sample_id, record.batch_index), []).append(
            (record.group_index, record.chat[:first_reply], record.chat[first_reply].content,
             record.reward, line_number))
    groups = []
    for (sample_id, batch_index), episodes in members.items():
        episodes.sort(key=lambda episode: episode[0])
        prompt = episodes[0][1]
        for _, other_prompt, _, _, line_number in episodes[1:]:
            if other_prompt != prompt:  # then the candidates answer different questions
                raise GroupFileError(
                    f"{path}:{line_number}: key 'chat': sample {sample_id} in batch "
                    f"{batch_index} has a different prompt than its group's first episode")
        groups.append(ScoredGroup(group_id=f"{sample_id}@{batch_index}", prompt=prompt,
                                  candidates=[episode[2] for episode in episodes],
                                  scores=[episode[3] for episode in episodes]))
    return groups


def read_scored_rows(path: Path, prompt_key: str = "prompt", candidates_key: str = "candidates",
                     scores_key: str = "scores", id_key: str | None = None) -> list[ScoredGroup]:
    """One group per row. The prompt is a string (one user message) or a list of
    {role, content} messages with roles user / agent; candidates are strings and scores
    numbers, as many as candidates. The group id is the row's `id_key`, or its place."""
    rows = _json_array(path) if path.suffix == ".json" else _json_lines(path)
    place = "{path}: row {number}" if path.suffix == ".json" else "{path}:{number}"
    groups = []
    for number, row in rows:
        where = place.format(path=path, number=number)
        if not isinstance(row, dict):
            raise GroupFileError(f"{where}: expected an object, got {type(row).__name__}")
        for key in (prompt_key, candidates_key, scores_key, id_key):
            if key is not None and key not in row:
                raise _row_error(where, key, "missing (the row has: "
                                 f"{', '.join(sorted(row)) or 'nothing'})")
        candidates, scores = row[candidates_key], row[scores_key]
        if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
            raise _row_error(where, candidates_key, "expected a list of strings")
        if not isinstance(scores, list) or not all(
                isinstance(s, int | float) and not isinstance(s, bool) for s in scores):
            raise _row_error(where, scores_key, "expected a list of numbers")
        if len(scores) != len(candidates):
            raise _row_error(where, scores_key, f"{len(scores)} scores for {len(candidates)} "
                             f"candidates (key '{candidates_key}')")
        group_id = str(row[id_key]) if id_key is not None else f"{path.name}:{number}"
        groups.append(ScoredGroup(group_id=group_id, prompt=_prompt(row[prompt_key], where,
                                                                    prompt_key),
                                  candidates=candidates, scores=[float(s) for s in scores]))
    return groups


def _prompt(value: Any, where: str, key: str) -> list[ChatMessage]:
    if isinstance(value, str):
        return [ChatMessage(role=Role.USER, content=value)]
    try:
        return [ChatMessage.model_validate(message) for message in value]
    except (TypeError, ValidationError) as error:
        raise _row_error(where, key, "expected a string or a list of {role, content} "
                         "messages with roles user / agent") from error


def _row_error(where: str, key: str, problem: str) -> GroupFileError:
    return GroupFileError(f"{where}: key '{key}': {problem}")


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed row) for each non-blank line."""
    if not path.is_file():
        raise GroupFileError(f"{path}: no such file")
    try:
        return read_numbered_json_lines(path)
    except ValueError as error:
        raise GroupFileError(str(error)) from error


def _json_array(path: Path) -> list[tuple[int, Any]]:
    """(row number from 1, row) for a file holding one JSON list."""
    if not path.is_file():
        raise GroupFileError(f"{path}: no such file")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise GroupFileError(f"{path}:{error.lineno}: invalid JSON: {error.msg}") from error
    if not isinstance(rows, list):
        raise GroupFileError(f"{path}: expected a list of rows, got {type(rows).__name__}")
    return list(enumerate(rows, start=1))


# ---- filtering and the run's own copy ------------------------------------------------------
@dataclass(frozen=True)
class GroupCounts:
    read: int
    too_small: int  # fewer than two candidates: nothing to compare
    equal_scores: int  # score spread below the minimum: no GRPO signal
    kept: int


def filter_groups(groups: Sequence[ScoredGroup],
                  min_score_spread: float) -> tuple[list[ScoredGroup], GroupCounts]:
    """Keep groups of two or more candidates whose max - min score reaches the minimum
    (with min_score_spread > 0, groups whose scores are all equal go)."""
    sized = [group for group in groups if len(group.candidates) >= 2]
    kept = [group for group in sized
            if max(group.scores) - min(group.scores) >= min_score_spread]
    return kept, GroupCounts(read=len(groups), too_small=len(groups) - len(sized),
                             equal_scores=len(sized) - len(kept), kept=len(kept))


def snapshot_groups(folder: Path, read: Callable[[], tuple[list[ScoredGroup], str]],
                    min_score_spread: float) -> list[ScoredGroup]:
    """The groups a run trains on, kept in folder/groups.jsonl: a resumed run reads them back,
    so that it trains on the same groups even if the source changed (or {LATEST} moved)."""
    snapshot = folder / SNAPSHOT_FILE
    if snapshot.is_file():
        with snapshot.open(encoding="utf-8") as stream:
            return [ScoredGroup.model_validate_json(line) for line in stream if line.strip()]
    groups, origin = read()
    kept, counts = filter_groups(groups, min_score_spread)
    logger.info("%s: %d groups; skipped %d with fewer than 2 candidates and %d with score "
                "spread below %g (no GRPO signal); training on %d", origin, counts.read,
                counts.too_small, counts.equal_scores, min_score_spread, counts.kept)
    if not kept:
        raise GroupFileError(f"{origin}: no group left to train on ({counts})")
    atomic_write_text(snapshot, "".join(group.model_dump_json() + "\n" for group in kept))
    return kept


# ---- tokens -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizedGroups:
    """Every candidate as one row: its prompt's ids then its own, the mask 1 on its own."""

    sequences: list[list[int]]
    masks: list[list[int]]
    rows_of_group: list[list[int]]
    group_ids: torch.Tensor  # [rows] index of the row's group
    scores: torch.Tensor  # [rows]

    @property
    def lengths(self) -> list[int]:
        return [len(sequence) for sequence in self.sequences]


def end_of_turn_token(language_model: LanguageModel, system_prompt: str | None) -> int:
    """The token that closes an agent turn in the chat template: the one the sampler stopped
    on, so that training also teaches the model where its reply ends."""
    return probe_turn_boundary(language_model, system_prompt).end_of_turn_id


def tokenize_groups(groups: Sequence[ScoredGroup], language_model: LanguageModel,
                    system_prompt: str | None) -> TokenizedGroups:
    """Render each prompt with the chat template and the generation prompt, as the agent
    does; a candidate is its reply's ids plus the end-of-turn token."""
    tokenizer = language_model.tokenizer
    end_of_turn = end_of_turn_token(language_model, system_prompt)
    sequences, masks, rows_of_group, group_ids, scores = [], [], [], [], []
    for index, group in enumerate(groups):
        prompt = render_chat(language_model, system_prompt,
                             [(message.role.value, message.content) for message in group.prompt],
                             generation_prompt=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        rows_of_group.append([])
        for candidate, score in zip(group.candidates, group.scores, strict=True):
            reply = tokenizer(candidate, add_special_tokens=False)["input_ids"] + [end_of_turn]
            rows_of_group[-1].append(len(sequences))
            sequences.append(prompt_ids + reply)
            masks.append([0] * len(prompt_ids) + [1] * len(reply))
            group_ids.append(index)
            scores.append(score)
    return TokenizedGroups(sequences, masks, rows_of_group, torch.tensor(group_ids),
                           torch.tensor(scores, dtype=torch.float32))
