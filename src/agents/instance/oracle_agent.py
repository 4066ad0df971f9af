"""An agent that replies from each sample's reference solution: validates tasks end to end."""

from __future__ import annotations

from collections.abc import Sequence

from src.agents.agent import Agent, AgentReply
from src.configuration.components import COMPONENTS
from src.records.episode import Episode


@COMPONENTS.register("oracle_agent")
class OracleAgent(Agent):
    def __init__(self) -> None:
        super().__init__()

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        return [AgentReply(episode.environment.oracle_reply()) for episode in episodes]
