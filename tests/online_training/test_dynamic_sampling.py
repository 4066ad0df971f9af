"""DAPO dynamic sampling: groups without reward spread are left out and refilled."""

from __future__ import annotations

from src.online_training.dynamic_sampling import DROPPED, fill_batch_with_spread, groups_of
from src.records.episode import Episode, Sample


def group(sample_id: str, rewards: list[float]) -> list[Episode]:
    episodes = []
    for index, reward in enumerate(rewards):
        episode = Episode(Sample(sample_id=sample_id), index, 0, environment=None)  # type: ignore[arg-type]
        episode.reward = reward
        episodes.append(episode)
    return episodes


def test_refills_until_the_batch_has_spread_and_marks_the_dropped() -> None:
    first = group("a", [1.0, 1.0]) + group("b", [0.0, 1.0]) + group("c", [0.0, 0.0])
    pool = [group("d", [0.5, 0.5]), group("e", [1.0, 0.0]), group("f", [0.0, 1.0])]
    calls = []

    def draw(missing: int, used: set[str]) -> list[Episode]:
        calls.append((missing, sorted(used)))
        return [episode for _ in range(missing) for episode in pool.pop(0)]

    filled = fill_batch_with_spread(first, batch_size=3, max_rounds=3, draw=draw)
    assert [g[0].sample.sample_id for g in groups_of(filled.kept)] == ["b", "e", "f"]
    assert calls == [(2, ["a", "b", "c"]), (1, ["a", "b", "c", "d", "e"])]
    assert filled.metrics(3) == {"dynamic_sampling/rounds": 2.0,
                                 "dynamic_sampling/groups_drawn": 6.0,
                                 "dynamic_sampling/groups_dropped": 3.0,
                                 "dynamic_sampling/groups_short": 0.0}
    dropped = {e.sample.sample_id for e in filled.episodes if e.info.get(DROPPED)}
    assert dropped == {"a", "c", "d"}


def test_stops_at_the_round_limit_with_a_short_batch() -> None:
    first = group("a", [1.0, 1.0])
    filled = fill_batch_with_spread(first, batch_size=2, max_rounds=2,
                                    draw=lambda missing, used: group(f"x{len(used)}", [0.0, 0.0]))
    assert filled.rounds == 2 and filled.kept == []
    assert filled.metrics(2)["dynamic_sampling/groups_short"] == 2.0
