"""The task contract on the README's example: a family built once, thin episode environments,
the final methods' invariants, the one sample-id scheme, and the rollout's use of them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from src.agents.instance.oracle_agent import OracleAgent
from src.records.episode import Episode, EpisodeStatus, Outcome, Sample
from src.run.rollout import roll_out_lockstep
from src.tasks.task import (
    EpisodeEnv,
    EpisodeScore,
    StepOutcome,
    Task,
    parse_split_sample_id,
    split_sample_ids,
)


class EchoTask(Task["EchoEpisode"]):
    def __init__(self, max_round: int = 1) -> None:
        super().__init__(max_round=max_round)
        self.handed_out: list[EchoEpisode] = []
        self.groups: list[list[str]] = []

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return split_sample_ids(split, 10)

    def _get_sample(self, sample_id: str) -> Sample:
        return Sample(sample_id=sample_id, data={"word": sample_id})

    def new_episode(self) -> EchoEpisode:
        self.handed_out.append(EchoEpisode(self))
        return self.handed_out[-1]

    def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        self.groups.append([episode.sample.sample_id for episode in episodes])
        return super()._score_group(episodes)


class EchoEpisode(EpisodeEnv[EchoTask]):
    closed = False

    def _reset(self, sample: Sample) -> str:
        return f"Repeat exactly: {sample.data['word']}"

    def _step(self, action: str) -> StepOutcome:
        assert self.sample is not None
        correct = action.strip() == self.sample.data["word"]
        return StepOutcome("", reward=float(correct), terminated=correct,
                           outcome=Outcome.CORRECT if correct else Outcome.INCORRECT,
                           metrics={"length": len(action)}, info={"echoed": action})

    def _oracle_reply(self) -> str:
        assert self.sample is not None
        return str(self.sample.data["word"])

    def close(self) -> None:
        self.closed = True


def test_one_id_scheme_for_numbered_splits() -> None:
    assert split_sample_ids("validation", 2) == ["validation-000000", "validation-000001"]
    assert parse_split_sample_id("train-000012") == ("train", 12)
    assert parse_split_sample_id("selection-000003") == ("selection", 3)
    for malformed in ("test-000001", "train-x", "train"):
        with pytest.raises(KeyError, match="malformed sample id"):
            parse_split_sample_id(malformed)
    with pytest.raises(ValueError, match="unknown split"):
        split_sample_ids("test", 1)


def test_episode_status_round_limit_and_oracle() -> None:
    task = EchoTask(max_round=2)
    environment = task.new_episode()
    with pytest.raises(RuntimeError, match="before reset"):
        environment.step("x")
    with pytest.raises(RuntimeError, match="before reset"):
        environment.oracle_reply()
    observation, info = environment.reset(options={"sample_id": "train-000003"})
    assert observation == "Repeat exactly: train-000003"
    assert info == {"sample_id": "train-000003", "category": "default"}
    *_, terminated, truncated, info = environment.step("no")
    assert info == {"status": EpisodeStatus.RUNNING, "outcome": Outcome.INCORRECT,
                    "metrics": {"length": 2.0}, "extras": {"echoed": "no"}}
    assert (terminated, truncated) == (False, False)
    _, reward, terminated, truncated, info = environment.step("still no")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert (info["status"], info["outcome"]) == (EpisodeStatus.TASK_LIMIT_REACHED,
                                                 Outcome.INCORRECT)
    environment.reset(options={"sample": task.get_sample("train-000001")})
    _, reward, terminated, _, info = environment.step(environment.oracle_reply())
    assert (reward, terminated, info["status"]) == (1.0, True, EpisodeStatus.COMPLETED)


def test_family_invariants() -> None:
    with pytest.raises(ValueError, match="max_round"):
        EchoTask(max_round=0)

    class Renaming(EchoTask):
        def _get_sample(self, sample_id: str) -> Sample:
            return Sample(sample_id="other")

    with pytest.raises(ValueError, match="asked for sample 'train-000000', got 'other'"):
        Renaming().get_sample("train-000000")
    task = EchoTask()
    running = Episode(task.get_sample("train-000000"), 0, 0, task.new_episode())
    with pytest.raises(RuntimeError, match="still running"):
        task.score_group([running])

    class Dropping(EchoTask):
        def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
            return []

    running.status = EpisodeStatus.COMPLETED
    with pytest.raises(ValueError, match="gave 0 scores for 1 episodes"):
        Dropping().score_group([running])


def test_a_metric_that_is_not_a_number_is_refused() -> None:
    class Texting(EchoEpisode):
        def _step(self, action: str) -> StepOutcome:
            return StepOutcome("", metrics={"verdict": "fine"})  # type: ignore[dict-item]

    environment = Texting(EchoTask())
    environment.reset(options={"sample_id": "train-000000"})
    with pytest.raises(TypeError, match="numeric metrics"):
        environment.step("x")


def test_rollout_hands_each_slot_a_new_environment_and_closes_them() -> None:
    task = EchoTask()
    samples = [(task.get_sample(sample_id), group) for sample_id in task.sample_ids()[:3]
               for group in range(2)]
    episodes = roll_out_lockstep(samples, task, OracleAgent(), batch_index=0,
                                 seeds=list(range(len(samples))))
    assert len(task.handed_out) == 6 and len({id(e) for e in task.handed_out}) == 6
    assert [episode.environment for episode in episodes] == task.handed_out
    assert all(environment.closed for environment in task.handed_out)
    assert all(episode.outcome is Outcome.CORRECT for episode in episodes)
    assert task.groups == [["train-000000"] * 2, ["train-000001"] * 2, ["train-000002"] * 2]
    assert episodes[0].metrics == {"length": 12.0}
    assert episodes[0].info["echoed"] == "train-000000"
    # each slot's seed reached its own environment
    assert [env.np_random_seed for env in task.handed_out] == list(range(6))


def test_the_rollout_gives_each_episode_its_group_score() -> None:
    class Ranking(EchoTask):
        def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
            return [EpisodeScore(episode.reward + index, metrics={"rank": float(index)},
                                 info={"ranked": True})
                    for index, episode in enumerate(episodes)]

    task = Ranking()
    sample = task.get_sample("train-000000")
    episodes = roll_out_lockstep([(sample, 0), (sample, 1)], task, OracleAgent(),
                                 batch_index=0, seeds=[0, 1])
    assert [episode.reward for episode in episodes] == [1.0, 2.0]
    assert [episode.metrics for episode in episodes] == [{"length": 12.0, "rank": 0.0},
                                                         {"length": 12.0, "rank": 1.0}]
    assert all(episode.info["ranked"] for episode in episodes)


def test_an_environment_failing_in_reset_or_step_fails_its_episode_not_the_batch() -> None:
    """A broken data row once raised out of `reset` and ended the whole batch."""

    class BrokenRows(EchoTask):
        def new_episode(self) -> EchoEpisode:
            self.handed_out.append(BrokenRowEpisode(self))
            return self.handed_out[-1]

    class BrokenRowEpisode(EchoEpisode):
        def _reset(self, sample: Sample) -> str:
            if sample.sample_id == "train-000001":
                raise ValueError("reference SQL failed")
            return super()._reset(sample)

        def _step(self, action: str) -> StepOutcome:
            if action == "train-000002":
                raise RuntimeError("sandbox lost")
            return super()._step(action)

    task = BrokenRows()
    samples = [(task.get_sample(sample_id), group) for sample_id in task.sample_ids()[:3]
               for group in range(2)]
    episodes = roll_out_lockstep(samples, task, OracleAgent(), batch_index=0,
                                 seeds=list(range(len(samples))))
    assert [e.status for e in episodes] == [EpisodeStatus.COMPLETED] * 2 + [
        EpisodeStatus.TASK_ERROR] * 4
    assert all(e.error.startswith("reset:") for e in episodes[2:4])
    assert "reference SQL failed" in episodes[2].error
    assert all(e.error.startswith("step:") for e in episodes[4:])
    assert task.groups == [["train-000000"] * 2]  # failed episodes have nothing to score
    assert all(environment.closed for environment in task.handed_out)


def test_a_group_term_that_changes_a_reward_changes_the_outcome_with_it() -> None:
    """The outcome follows the final reward by the task's own rule: success rates and the
    best checkpoint read the outcome, so one decided before the group was judged would
    count a reward the group term took away."""

    class FirstCorrectCounts(EchoTask):
        def outcome_of_reward(self, reward: float) -> Outcome:
            return Outcome.CORRECT if reward >= 1.0 else Outcome.INCORRECT

        def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
            # only the group's first correct echo is rewarded
            return [EpisodeScore(episode.reward if index == 0 else 0.0)
                    for index, episode in enumerate(episodes)]

    task = FirstCorrectCounts()
    sample = task.get_sample("train-000000")
    episodes = roll_out_lockstep([(sample, 0), (sample, 1)], task, OracleAgent(),
                                 batch_index=0, seeds=[0, 1])
    assert [e.reward for e in episodes] == [1.0, 0.0]
    assert [e.outcome for e in episodes] == [Outcome.CORRECT, Outcome.INCORRECT]


def test_a_score_may_set_the_outcome_and_a_task_without_a_rule_keeps_its_own() -> None:
    class Judged(EchoTask):
        def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
            return [EpisodeScore(0.5, outcome=Outcome.INCORRECT if index else None)
                    for index, _ in enumerate(episodes)]

    task = Judged()
    sample = task.get_sample("train-000000")
    episodes = roll_out_lockstep([(sample, 0), (sample, 1)], task, OracleAgent(),
                                 batch_index=0, seeds=[0, 1])
    # no rule from reward to outcome: the first keeps the outcome its step decided
    assert [e.outcome for e in episodes] == [Outcome.CORRECT, Outcome.INCORRECT]


class FloodEpisode(EpisodeEnv["FloodTask"]):
    """An environment that answers with far more text than any model reads."""

    def _reset(self, sample: Sample) -> str:
        return "x" * 300_000

    def _step(self, action: str) -> StepOutcome:
        return StepOutcome("y" * 300_000, reward=0.0)

    def _oracle_reply(self) -> str:
        return "z"


class FloodTask(EchoTask):
    def new_episode(self) -> FloodEpisode:  # type: ignore[override]
        return FloodEpisode(self)  # type: ignore[arg-type]


def test_a_huge_observation_is_cut_before_any_agent_reads_it_with_a_note() -> None:
    task = FloodTask(max_round=3)
    episode = task.new_episode()
    first, _ = episode.reset(options={"sample_id": "train-000000"})
    following, *_ = episode.step("go on")
    for observation, kept in ((first, "x"), (following, "y")):
        assert observation.startswith(kept * task.max_observation_chars)
        assert observation.endswith("[... the observation was cut here: 300000 characters; "
                                    "the first 20000 are kept]")
        assert len(observation) < task.max_observation_chars + 100
    bounded = FloodTask()
    bounded.max_observation_chars = 50
    episode = bounded.new_episode()
    assert len(episode.reset(options={"sample_id": "train-000000"})[0]) < 150
