"""The token-exact record of an episode: what the policy was fed and what it sampled."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Trajectory:
    """Token ids in the order the model saw them.

    `loss_mask[t]` is 1 only for tokens the policy sampled; `sampling_logprobs[t]` is
    the sampler's log-prob of token t (0.0 where the mask is 0). The next turn's
    prompt is always `token_ids` itself: turns are appended, never re-rendered.
    """

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    sampling_logprobs: list[float] = field(default_factory=list)
    # Per sampled turn: (start, end) positions in token_ids and its finish reason.
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    policy_version: int | None = None
    prompt_token_count: int = 0  # tokens fed but not sampled (prompt + observations)
    # How the sampled turns were drawn: the trainer scores under the same distribution.
    sampling_temperature: float = 1.0
    sampling_top_p: float = 1.0
    max_new_tokens: int | None = None  # per sampled turn
    # The agent's own bookkeeping, kept with the episode it belongs to: how many chat
    # messages are already in token_ids, and the turns rendered before the chat (earlier
    # solved episodes shown to an experience-replay agent)
    messages_fed: int = 0
    turns_before: list[tuple[str, str]] = field(default_factory=list)

    def append_context(self, ids: list[int]) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.sampling_logprobs.extend([0.0] * len(ids))
        self.prompt_token_count += len(ids)

    def append_sampled(self, ids: list[int], logprobs: list[float], finish_reason: str,
                       policy_version: int, temperature: float = 1.0, top_p: float = 1.0,
                       max_new_tokens: int | None = None) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} log-probs")
        if self.turn_spans and (temperature, top_p) != (self.sampling_temperature,
                                                        self.sampling_top_p):
            raise ValueError("the turns of one trajectory were sampled with different "
                             "temperature or top_p")
        self.sampling_temperature, self.sampling_top_p = temperature, top_p
        self.max_new_tokens = max_new_tokens
        start = len(self.token_ids)
        self.token_ids.extend(ids)
        self.loss_mask.extend([1] * len(ids))
        self.sampling_logprobs.extend(logprobs)
        self.turn_spans.append((start, len(self.token_ids)))
        self.finish_reasons.append(finish_reason)
        # The oldest policy that contributed a token bounds the trajectory's staleness.
        if self.policy_version is None or policy_version < self.policy_version:
            self.policy_version = policy_version

    @property
    def completion_token_count(self) -> int:
        return sum(self.loss_mask)

    @property
    def truncated(self) -> bool:
        """Whether the last sampled turn hit the new-token limit."""
        return bool(self.finish_reasons) and self.finish_reasons[-1] == "length"
