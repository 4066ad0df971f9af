"""LifelongAgentBench's module path and name of the token-exact sampling agent (`module:
src.agents.instance.lora_rl_agent.LoRARLAgent` in its configs), which this project
defines as `TokenExactAgent` (src.agents.instance.token_exact_agent): configs and code
naming this path keep working."""

from src.agents.instance.token_exact_agent import TokenExactAgent

LoRARLAgent = TokenExactAgent

__all__ = ["LoRARLAgent"]
