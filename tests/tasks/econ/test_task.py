"""The econ task: samples, replies, same-sample determinism, the oracle, few-shot memory
and its saved state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from src.records.episode import EpisodeStatus, Outcome
from src.tasks.instance.econ.prompt import money
from src.tasks.instance.econ.rule_policy import expected_cash_on_hand
from src.tasks.instance.econ.task import EconDecisionTask
from src.tasks.splits import Splits
from tests.tasks.stepping import recorded_episode as run

SMALL = {"splits": Splits(num_train=12, num_validation=4), "num_economies": 2,
         "num_households": 30, "months": 60}


def test_samples_are_deterministic_and_splits_differ() -> None:
    first, second = EconDecisionTask(**SMALL), EconDecisionTask(**SMALL)
    assert first.get_sample("train-000003") == second.get_sample("train-000003")
    train = first.get_sample("train-000000").data["economy_seed"]
    assert train != first.get_sample("validation-000000").data["economy_seed"]
    assert 1 <= first.get_sample("train-000005").data["month"] < SMALL["months"]
    with pytest.raises(KeyError, match="beyond the train split"):
        first.get_sample("train-000012")
    with pytest.raises(KeyError, match="malformed"):
        first.get_sample("test-1")


def test_the_prompt_shows_the_household_and_asks_for_json() -> None:
    observation, info = EconDecisionTask(**SMALL).new_episode().reset(
        options={"sample_id": "train-000000"})
    assert info["category"] in {"low_skill", "middle_skill", "high_skill"}
    for part in ("-year-old", "income", "tax", "redistribution",
                 "savings", "cost", "a year on them", '"work"', '"consumption"'):
        assert part in observation


def test_same_sample_same_action_same_reward_across_instances() -> None:
    reply = '{"work": 0.6, "consumption": 0.3}'
    rewards = [run(EconDecisionTask(**SMALL), "train-000004", [reply]).reward for _ in range(3)]
    assert rewards[0] == rewards[1] == rewards[2]
    other = run(EconDecisionTask(**SMALL), "train-000004", ['{"work": 0.6, "consumption": 0.5}'])
    assert other.reward != rewards[0]


def test_format_failure_scores_minus_one_with_metrics() -> None:
    episode = run(EconDecisionTask(**SMALL), "train-000001", ["I will work hard."])
    assert episode.reward == -1.0 and episode.outcome is Outcome.INCORRECT
    assert episode.status is EpisodeStatus.COMPLETED
    assert episode.metrics["json_parse_success"] == 0.0
    assert episode.metrics["format_failure"] == 1.0
    assert "work" not in episode.metrics  # decision means cover parsed replies only


def test_parsed_reply_metrics() -> None:
    episode = run(EconDecisionTask(**SMALL), "train-000001", ['{"work": 0.4, "consumption": 0.2}'])
    assert -1.0 < episode.reward < 1.0
    metrics = episode.metrics
    assert (metrics["json_parse_success"], metrics["format_failure"]) == (1.0, 0.0)
    assert (metrics["work"], metrics["consumption"]) == (0.4, 0.2)
    assert metrics["valid_reward"] == episode.reward


def test_oracle_beats_constant_actions_on_average() -> None:
    task = EconDecisionTask(**SMALL)
    ids = list(task.sample_ids("train"))
    oracle = []
    for sample_id in ids:
        environment = task.new_episode()
        environment.reset(options={"sample_id": sample_id})
        episode = run(task, sample_id, [environment.oracle_reply()])
        assert episode.outcome is Outcome.CORRECT and episode.metrics["reward_vs_rule"] == 0
        oracle.append(episode.reward)
    for silly in ('{"work": 0.5, "consumption": 0.5}', '{"work": 0.0, "consumption": 1.0}',
                  '{"work": 1.0, "consumption": 0.0}'):
        constant = [run(task, sample_id, [silly]).reward for sample_id in ids]
        assert np.mean(oracle) > np.mean(constant)


def test_several_households_are_asked_in_turn() -> None:
    task = EconDecisionTask(**SMALL, households_per_sample=3)
    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000002"})
    replies = []
    for _ in range(3):
        replies.append(environment.oracle_reply())
        _, _, terminated, truncated, info = environment.step(replies[-1])
        assert not truncated
    assert terminated and len(info["extras"]["econ/decisions"]) == 3
    assert len({d["household"] for d in info["extras"]["econ/decisions"]}) == 3
    failed = run(task, "train-000002", [replies[0], "{}"])
    assert failed.reward == -1.0 and len(failed.chat) == 4  # ended at the second reply


def first_prompt(task: EconDecisionTask, sample_id: str = "train-000000") -> str:
    return task.new_episode().reset(options={"sample_id": sample_id})[0]


def test_few_shot_memory_fills_from_training_groups_only() -> None:
    task = EconDecisionTask(**{**SMALL, "splits": Splits(num_train=12, num_validation=4, seed=91)},
                            few_shot_examples=2, few_shot_capacity=3)
    assert task.memory is not None
    assert "worked out well" not in first_prompt(task)
    group = [run(task, "train-000000", [reply])
             for reply in ('{"work": 1, "consumption": 0.2}', '{"work": 1, "consumption": 0.2}',
                           '{"work": 0, "consumption": 0.9}')]
    scores = task.score_group(group)
    assert [score.reward for score in scores] == [episode.reward for episode in group]
    assert len(task.memory) == 3
    task.score_group([run(task, "validation-000000", ['{"work": 1, "consumption": 0.2}'])])
    assert len(task.memory) == 3
    prompt = first_prompt(task)
    shown = prompt.split("worked out well")[1]
    assert shown.count('{"work": 1.0, "consumption": 0.2}') == 1  # duplicates shown once
    assert prompt == first_prompt(task)
    task.score_group(group)  # the capacity bounds the memory
    assert len(task.memory) == 3


def test_families_do_not_share_a_memory() -> None:
    """Two families of the same settings (two runs in one process) learn apart."""
    settings = {**SMALL, "few_shot_examples": 2}
    learning, fresh = EconDecisionTask(**settings), EconDecisionTask(**settings)
    learning.score_group([run(learning, "train-000000", ['{"work": 1, "consumption": 0.2}'])])
    assert "worked out well" in first_prompt(learning)
    assert "worked out well" not in first_prompt(fresh)


def test_memory_survives_save_and_restore_in_a_new_family(tmp_path: Path) -> None:
    settings = {**SMALL, "few_shot_examples": 2, "few_shot_capacity": 5}
    task = EconDecisionTask(**settings)
    for index, reply in enumerate(('{"work": 1, "consumption": 0.2}',
                                   '{"work": 0.3, "consumption": 0.7}',
                                   '{"work": 0.6, "consumption": 0.4}')):
        task.score_group([run(task, f"train-{index:06d}", [reply]),
                          run(task, f"train-{index:06d}", ['{"work": 0.5, "consumption": 0.5}'])])
    assert task.memory is not None and len(task.memory) == 5  # the oldest went first
    task.save_state(tmp_path)

    resumed = EconDecisionTask(**settings)
    resumed.restore_state(tmp_path)
    assert resumed.memory is not None and len(resumed.memory) == 5
    for sample_id in ("train-000000", "train-000004", "validation-000001"):
        assert first_prompt(resumed, sample_id) == first_prompt(task, sample_id)
    # the history goes on alike: the capacity keeps dropping the same oldest entries
    for family in (task, resumed):
        family.score_group([run(family, "train-000005", ['{"work": 0.9, "consumption": 0.1}'])])
    assert first_prompt(resumed, "train-000005") == first_prompt(task, "train-000005")


def test_without_few_shot_examples_there_is_no_state(tmp_path: Path) -> None:
    task = EconDecisionTask(**SMALL)
    task.save_state(tmp_path)
    assert list(tmp_path.iterdir()) == []
    EconDecisionTask(**SMALL).restore_state(tmp_path)


def test_show_cash_on_hand_states_the_rules_money_in_dollars_and_goods() -> None:
    assert "to spend or keep" not in first_prompt(EconDecisionTask(**SMALL))
    task = EconDecisionTask(**SMALL, show_cash_on_hand=True)
    sample = task.get_sample("train-000003")
    state, household = task.sample_state(sample), sample.data["households"][0]
    if_working, if_resting = (float(expected_cash_on_hand(state, works)[household])
                              for works in (1.0, 0.0))
    assert if_working > if_resting > 0.0
    prompt = first_prompt(task, "train-000003")
    for amount in (if_working, if_resting):
        assert f"{money(amount)} " in prompt
        assert f"enough for {amount / state.price:,.0f} goods" in prompt
    # the line comes before the question, which stays the prompt's end
    assert prompt.index("to spend or keep") < prompt.index("how willing are you")


def test_compact_prompt_keeps_the_price_the_money_and_the_question_and_drops_the_rest() -> None:
    full = EconDecisionTask(**SMALL, show_cash_on_hand=True)
    compact = EconDecisionTask(**SMALL, show_cash_on_hand=True, compact_prompt=True)
    sample = compact.get_sample("train-000003")
    state = compact.sample_state(sample)
    long_prompt, short_prompt = (first_prompt(task, "train-000003") for task in (full, compact))
    cash_line = next(line for line in long_prompt.splitlines() if "to spend or keep" in line)
    assert cash_line in short_prompt.splitlines()
    assert f"Essential goods cost {money(state.price)} each." in short_prompt
    assert "tax" not in short_prompt.replace("after tax", "")  # no brackets, no history
    assert short_prompt.endswith('{"work": 0.8, "consumption": 0.4}')
    assert len(short_prompt) < len(long_prompt) / 2
    # the replies are read and scored as with the full prompt
    reply = '{"work": 1.0, "consumption": 0.2}'
    assert (run(compact, "train-000003", [reply]).reward
            == run(full, "train-000003", [reply]).reward)


def test_compact_prompt_without_the_cash_on_hand_line_is_refused() -> None:
    with pytest.raises(ValueError, match="compact_prompt.*show_cash_on_hand"):
        EconDecisionTask(**SMALL, compact_prompt=True)
