from src.records.episode import EpisodeRecord, EpisodeStatus, Outcome, count_successes


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
