"""DAPO's dynamic sampling (arXiv 2503.14476): groups whose task rewards are all equal (all
right or all wrong) carry no group-relative signal, so they are left out of the update and
the batch is refilled with groups of further samples, up to a limit of extra rounds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from src.records.episode import Episode

DROPPED = "dynamic_sampling_dropped"  # episode info key: left out of the update


def groups_of(episodes: Sequence[Episode]) -> list[list[Episode]]:
    """Episodes grouped by sample, in first-seen order."""
    groups: dict[str, list[Episode]] = {}
    for episode in episodes:
        groups.setdefault(episode.sample.sample_id, []).append(episode)
    return list(groups.values())


def has_spread(group: Sequence[Episode]) -> bool:
    return len({episode.reward for episode in group}) > 1


@dataclass
class FilledBatch:
    episodes: list[Episode] = field(default_factory=list)  # every episode drawn, in order
    kept: list[Episode] = field(default_factory=list)  # the ones the update sees
    rounds: int = 0  # extra generation rounds taken

    def metrics(self, batch_size: int) -> dict[str, float]:
        drawn = len(groups_of(self.episodes))
        kept = len(groups_of(self.kept))
        return {"dynamic_sampling/rounds": float(self.rounds),
                "dynamic_sampling/groups_drawn": float(drawn),
                "dynamic_sampling/groups_dropped": float(drawn - kept),
                "dynamic_sampling/groups_short": float(max(batch_size - kept, 0))}


def fill_batch_with_spread(first: list[Episode], batch_size: int, max_rounds: int,
                           draw: Callable[[int, set[str]], list[Episode]]) -> FilledBatch:
    """Keep at most `batch_size` groups with reward spread: those of `first`, then those of
    `draw(missing, sample ids already used)` for up to `max_rounds` extra rounds. Groups
    left out are marked in their episodes' info (they are still logged)."""
    result = FilledBatch(episodes=list(first))
    kept_groups = [group for group in groups_of(first) if has_spread(group)][:batch_size]
    while len(kept_groups) < batch_size and result.rounds < max_rounds:
        result.rounds += 1
        used = {episode.sample.sample_id for episode in result.episodes}
        drawn = draw(batch_size - len(kept_groups), used)
        if not drawn:
            break  # no samples left to draw from
        result.episodes += drawn
        kept_groups += [group for group in groups_of(drawn)
                        if has_spread(group)][:batch_size - len(kept_groups)]
    kept_ids = {id(episode) for group in kept_groups for episode in group}
    result.kept = [episode for episode in result.episodes if id(episode) in kept_ids]
    for episode in result.episodes:
        if id(episode) not in kept_ids:
            episode.info[DROPPED] = True
    return result
