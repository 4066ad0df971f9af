"""Reading scored groups: an online run's runs.jsonl, generic rows, the run's own copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
)
from src.offline_training.groups import (
    GroupFileError,
    ScoredGroup,
    filter_groups,
    read_runs_jsonl,
    read_scored_rows,
    snapshot_groups,
    tokenize_groups,
)
from src.records.chat import ChatMessage, Role
from src.records.episode import EpisodeRecord
from src.run.folder import RunDirectory, RunNotFound, RunState, resolve_latest


def episode(sample_id: str, group_index: int, batch_index: int, reward: float,
            chat: list[tuple[str, str]]) -> dict:
    return EpisodeRecord(
        sample_id=sample_id, group_index=group_index, batch_index=batch_index,
        category="default", status="completed", outcome="unknown", reward=reward, turns=1,
        prompt_tokens=10, completion_tokens=5,
        chat=[ChatMessage(role=role, content=content) for role, content in chat],
    ).model_dump(mode="json")


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_log(path: Path) -> Path:
    """Sample a in batches 0 and 1, b in batch 0 (alone), c with equal rewards; rows shuffled."""
    return write_jsonl(path, [
        episode("a", 1, 0, 0.0, [("user", "1+1?"), ("agent", "3"), ("user", "no"),
                                 ("agent", "2")]),
        episode("a", 0, 0, 1.0, [("user", "1+1?"), ("agent", "2")]),
        episode("b", 0, 0, 0.1, [("user", "2+2?"), ("agent", "5")]),
        episode("a", 0, 1, 0.1, [("user", "1+1?"), ("agent", "11")]),
        episode("a", 1, 1, 1.0, [("user", "1+1?"), ("agent", "2")]),
        episode("a", 2, 1, 0.0, [("user", "1+1?")]),  # no reply: the prompt did not fit
        episode("c", 0, 0, 0.5, [("user", "3+3?"), ("agent", "6")]),
        episode("c", 1, 0, 0.5, [("user", "3+3?"), ("agent", "six")]),
    ])


def test_runs_jsonl_groups_episodes_of_a_sample_in_a_batch(tmp_path: Path) -> None:
    groups = {group.group_id: group for group in read_runs_jsonl(run_log(tmp_path / "r.jsonl"))}
    assert sorted(groups) == ["a@0", "a@1", "b@0", "c@0"]
    first = groups["a@0"]
    assert first.prompt == [ChatMessage(role=Role.USER, content="1+1?")]
    assert first.candidates == ["2", "3"]  # by group_index; the first agent reply only
    assert first.scores == [1.0, 0.0]
    assert groups["a@1"].candidates == ["11", "2"] and groups["a@1"].scores == [0.1, 1.0]

    kept, counts = filter_groups(list(groups.values()), min_score_spread=1e-6)
    assert sorted(group.group_id for group in kept) == ["a@0", "a@1"]
    assert (counts.read, counts.too_small, counts.equal_scores, counts.kept) == (4, 1, 1, 2)
    kept, counts = filter_groups(list(groups.values()), min_score_spread=0.0)
    assert counts.equal_scores == 0 and counts.kept == 3


def test_runs_jsonl_bad_record_names_line_and_key(tmp_path: Path) -> None:
    rows = [episode("a", 0, 0, 1.0, [("user", "q"), ("agent", "x")]),
            episode("a", 1, 0, 0.0, [("user", "q"), ("agent", "y")])]
    del rows[1]["reward"]
    path = write_jsonl(tmp_path / "runs.jsonl", rows)
    with pytest.raises(GroupFileError, match=rf"{path}:2: key 'reward': Field required"):
        read_runs_jsonl(path)


def test_scored_rows_with_the_seed_key_names(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "beams.jsonl", [
        {"prompt": "2+3?", "id_list": ["5", "6", "23"], "score_list": [1.0, 0.0, -1]},
        {"prompt": [{"role": "user", "content": "hi"}, {"role": "agent", "content": "hello"},
                    {"role": "user", "content": "4*4?"}],
         "id_list": ["16", "8"], "score_list": [1, 0]},
    ])
    groups = read_scored_rows(path, candidates_key="id_list", scores_key="score_list")
    assert [group.group_id for group in groups] == ["beams.jsonl:1", "beams.jsonl:2"]
    assert groups[0].prompt == [ChatMessage(role=Role.USER, content="2+3?")]
    assert groups[0].candidates == ["5", "6", "23"] and groups[0].scores == [1.0, 0.0, -1.0]
    assert [message.role for message in groups[1].prompt] == [Role.USER, Role.AGENT, Role.USER]


def test_scored_rows_json_list_with_ids(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"q": "x?", "c": ["a", "b"], "s": [0, 1], "id": 7}]))
    [group] = read_scored_rows(path, "q", "c", "s", id_key="id")
    assert group.group_id == "7" and group.scores == [0.0, 1.0]


@pytest.mark.parametrize(("row", "key", "problem"), [
    ({"prompt": "q", "candidates": ["a"], "score_list": [1]}, "scores", "missing"),
    ({"prompt": "q", "candidates": ["a", 2], "scores": [1, 0]}, "candidates",
     "list of strings"),
    ({"prompt": "q", "candidates": ["a", "b"], "scores": [1, "x"]}, "scores",
     "list of numbers"),
    ({"prompt": "q", "candidates": ["a", "b"], "scores": [1]}, "scores",
     "1 scores for 2 candidates"),
    ({"prompt": [{"role": "robot", "content": "q"}], "candidates": ["a"], "scores": [1]},
     "prompt", "list of {role, content}"),
])
def test_bad_row_names_file_line_and_key(tmp_path: Path, row: dict, key: str,
                                         problem: str) -> None:
    good = {"prompt": "q", "candidates": ["a", "b"], "scores": [1, 0]}
    path = write_jsonl(tmp_path / "rows.jsonl", [good, row])
    with pytest.raises(GroupFileError) as error:
        read_scored_rows(path)
    assert str(error.value).startswith(f"{path}:2: key '{key}': ")
    assert problem in str(error.value)


def test_bad_json_and_a_non_object_row(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "q"}\n{oops\n')
    with pytest.raises(GroupFileError, match=rf"{path}:2: invalid JSON"):
        read_scored_rows(path)
    listed = tmp_path / "rows.json"
    listed.write_text('[{"prompt": "q", "candidates": [], "scores": []}, 3]')
    with pytest.raises(GroupFileError, match=rf"{listed}: row 2: expected an object"):
        read_scored_rows(listed)


def test_latest_means_the_newest_finished_run(tmp_path: Path) -> None:
    for name, finished in [("2026-01-01-00-00-00", True), ("2026-02-01-00-00-00", True),
                           ("2026-03-01-00-00-00", False)]:
        run = RunDirectory(tmp_path / name)
        run.path.mkdir()
        run.write_state(RunState(finished=finished))
        (run.path / "runs.jsonl").write_text("")
    pattern = f"{tmp_path}/{{LATEST}}/runs.jsonl"
    assert resolve_latest(pattern) == tmp_path / "2026-02-01-00-00-00" / "runs.jsonl"
    assert resolve_latest(str(tmp_path / "x.jsonl")) == tmp_path / "x.jsonl"
    with pytest.raises(RunNotFound, match="no finished run matches"):
        resolve_latest(f"{tmp_path}/{{LATEST}}/other.jsonl")


def test_the_run_keeps_its_own_copy_of_the_groups(tmp_path: Path) -> None:
    groups = [ScoredGroup(group_id="g", prompt=[ChatMessage(role=Role.USER, content="q")],
                          candidates=["a", "b"], scores=[1.0, 0.0]),
              ScoredGroup(group_id="flat", prompt=[ChatMessage(role=Role.USER, content="q")],
                          candidates=["a", "b"], scores=[1.0, 1.0])]
    reads = []

    def read() -> tuple[list[ScoredGroup], str]:
        reads.append(1)
        return groups, "source.jsonl"

    assert snapshot_groups(tmp_path, read, 1e-6) == groups[:1]
    assert snapshot_groups(tmp_path, read, 1e-6) == groups[:1]
    assert len(reads) == 1  # the second call read the run's groups.jsonl
    with pytest.raises(GroupFileError, match="no group left"):
        snapshot_groups(tmp_path / "other", lambda: (groups[1:], "flat.jsonl"), 1e-6)


def test_tokens_are_the_agent_prompt_then_the_reply_and_end_of_turn(
        tiny_model_path: Path) -> None:
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path), device="cpu")
    tokenizer = model.tokenizer
    group = ScoredGroup(group_id="g", prompt=[ChatMessage(role=Role.USER, content="1+1?")],
                        candidates=["2", "It is 3"], scores=[1.0, 0.0])
    data = tokenize_groups([group], model, system_prompt="Be brief.")
    assert data.rows_of_group == [[0, 1]] and data.scores.tolist() == [1.0, 0.0]
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
        tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for row, reply in enumerate(["2", "It is 3"]):
        reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [end_of_turn]
        assert data.sequences[row] == prompt_ids + reply_ids
        assert data.masks[row] == [0] * len(prompt_ids) + [1] * len(reply_ids)
