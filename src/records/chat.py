"""Chat messages exchanged between a task and an agent."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Role(StrEnum):
    USER = "user"  # the task speaking
    AGENT = "agent"  # the agent's reply


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    content: str
