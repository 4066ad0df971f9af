from src.records.episode import (
    Episode,
    EpisodeRecord,
    EpisodeStatus,
    Outcome,
    Sample,
    count_successes,
)


def _record(outcome: Outcome) -> EpisodeRecord:
    return EpisodeRecord(sample_id="s", group_index=0, batch_index=0, category="c",
                         status=EpisodeStatus.COMPLETED, outcome=outcome, reward=0.0, turns=1,
                         prompt_tokens=1, completion_tokens=1, chat=[])


def test_only_a_correct_outcome_counts_as_a_success() -> None:
    records = [_record(Outcome.CORRECT), _record(Outcome.INCORRECT),
               _record(Outcome.UNKNOWN), _record(Outcome.CORRECT)]
    assert count_successes(records) == 2
    assert count_successes(iter(records)) == 2  # any iterable, read once
    assert count_successes([]) == 0


def test_a_record_carries_the_episodes_metrics_and_error_apart_from_its_info() -> None:
    episode = Episode(Sample(sample_id="s"), 0, 0, environment=None,  # type: ignore[arg-type]
                      status=EpisodeStatus.TASK_ERROR, error="step: sandbox lost")
    episode.metrics["length"] = 3.0
    episode.info["note"] = "kept"
    record = episode.to_record()
    assert (record.metrics, record.error, record.info) == (
        {"length": 3.0}, "step: sandbox lost", {"note": "kept"})
    assert EpisodeRecord.model_validate_json(record.model_dump_json()) == record
