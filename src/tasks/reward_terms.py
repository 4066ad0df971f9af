"""Reward terms over a finished group: each episode's last reply scored by a rubric of
model rewards (a judge, a reward model) or any reward function, the group's replies
together, so that they reach a model in one call.

A family scores with them where its group has ended (`Task.score_group`), never as an
episode steps: a reply that the agent retried is not judged, and a judge's call serves
the whole group. Any family may be given them by a config (`reward_terms` among its
parameters: src/run/assembly.py adds them to a family whose constructor takes none,
`Task.add_reward_terms`); the math family and `SingleTurnTask` take them as parameters
of their own and place them in their rewards themselves.

An episode's last reply is what its environment last stepped where the environment keeps
it (a `RepliedEnvironment`), else its chat's last agent message; its prompt is the
environment's `prompt`, else the chat's first message; and its transcript (a rubric's
`transcript` argument) the whole chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from src.records.chat import Role
from src.records.episode import Episode
from src.tasks.reward_functions import RewardTerm, transcript_of
from src.tasks.rubric import Rubric, RubricScore


@runtime_checkable
class RepliedEnvironment(Protocol):
    """An episode environment that keeps the reply it last stepped (None before the first)
    and the prompt it asked, for its family to score where the group has ended."""

    last_reply: str | None

    @property
    def prompt(self) -> str: ...


def terms_rubric(terms: Sequence[RewardTerm]) -> Rubric | None:
    """The rubric of reward terms as a config gives them, built (None for none). Their
    failures are the reply's, recorded (`catch_errors`): a judge that is down or answers
    nonsense costs the reply that term's reward, never the run."""
    if not terms:
        return None
    return Rubric([term.build() for term in terms], [term.weight for term in terms])


def score_last_replies(rubric: Rubric, episodes: Sequence[Episode]
                       ) -> list[RubricScore | None]:
    """`rubric`'s scores of each episode's last reply, the group's scored together
    (`Rubric.score_group`); None for an episode without a reply (see the module
    docstring)."""
    replied = [(index, reply, prompt) for index, episode in enumerate(episodes)
               for reply, prompt in [_last_reply(episode)] if reply is not None]
    transcripts = ([transcript_of((message.role.value, message.content)
                                  for message in episodes[index].chat)
                    for index, _, _ in replied]
                   if "transcript" in rubric.arguments else None)  # written where read
    scored = rubric.score_group([reply for _, reply, _ in replied],
                                [episodes[index].sample for index, _, _ in replied],
                                [prompt for _, _, prompt in replied], transcripts)
    scores: list[RubricScore | None] = [None] * len(episodes)
    for (index, _, _), score in zip(replied, scored, strict=True):
        scores[index] = score
    return scores


def _last_reply(episode: Episode) -> tuple[str | None, str]:
    """The episode's last reply (None: none) and the prompt it answered."""
    environment = episode.environment
    if isinstance(environment, RepliedEnvironment):
        return environment.last_reply, environment.prompt
    replies = [message.content for message in episode.chat if message.role is Role.AGENT]
    return (replies[-1] if replies else None), (episode.chat[0].content if episode.chat
                                                 else "")
