"""Judge chats from train-split replies, labelled by the verifier."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.model_rewards.judge_chats import judge_chat, main
from src.online_training.plan import load_online_config, plan_online_training
from src.records.chat import ChatMessage, Role
from src.records.episode import EpisodeRecord, EpisodeStatus, Outcome
from src.run.assembly import instantiate
from src.tasks.model_rewards.judge_settings import JudgeSettings

RECIPE = Path(__file__).resolve().parents[2] / "configs/assignments/math_judged_grpo.yaml"


def record(sample_id: str, reply: str) -> EpisodeRecord:
    return EpisodeRecord(sample_id=sample_id, group_index=0, batch_index=0, category="c",
                         status=EpisodeStatus.COMPLETED, outcome=Outcome.INCORRECT,
                         reward=0.0, turns=1, prompt_tokens=1, completion_tokens=1,
                         chat=[ChatMessage(role=Role.USER, content="Question: 2 + 2?"),
                               ChatMessage(role=Role.AGENT, content=reply)])


def test_a_chat_is_the_judges_prompt_answered_with_the_label() -> None:
    settings = JudgeSettings(language_model="judge", system="Be strict.",
                             template="Answer: {answer}\nReply: {reply}\n\\boxed{{yes}}?",
                             labels={"yes": 1.0, "no": 0.0})
    chat = judge_chat(settings, record("train-000001", "\\boxed{4}"), "4", "yes")
    assert chat == {"messages": [
        {"role": "system", "content": "Be strict."},
        {"role": "user", "content": "Answer: 4\nReply: \\boxed{4}\n\\boxed{yes}?"},
        {"role": "assistant", "content": "The verdict is \\boxed{yes}."}]}


def test_held_out_replies_are_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs.jsonl"
    runs.write_text(record("validation-000001", "\\boxed{4}").model_dump_json() + "\n")
    with pytest.raises(SystemExit, match="validation problem"):
        main([str(runs), "--config", str(RECIPE), "--output", str(tmp_path / "chats.jsonl")])


def test_the_classes_are_balanced_by_the_verifier(tmp_path: Path) -> None:
    config, source = load_online_config(RECIPE)
    plan = plan_online_training(config, source).task
    task = instantiate(replace(plan, parameters={**plan.parameters, "reward_terms": None}), {})
    answers = [task.get_sample(f"train-{index:06d}").data["answer"] for index in range(4)]
    task.close()
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(
        record(f"train-{index:06d}", f"\\boxed{{{answer}}}").model_dump_json() + "\n"
        + record(f"train-{index:06d}", "\\boxed{-99}").model_dump_json() + "\n"
        for index, answer in enumerate(answers)))
    chats = tmp_path / "chats.jsonl"
    assert main([str(runs), "--config", str(RECIPE), "--output", str(chats),
                 "--watch_fraction", "0"]) == 0
    verdicts = [json.loads(line)["messages"][-1]["content"]
                for line in chats.read_text().splitlines()]
    assert sorted(verdicts) == ["The verdict is \\boxed{no}."] * 4 + \
        ["The verdict is \\boxed{yes}."] * 4
