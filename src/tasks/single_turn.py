"""A single-turn task from samples, a prompt and a rubric: the short way to write a task.

Most tasks ask one question and score one reply. `SingleTurnTask` is such a task written
as data: the samples of each split (mappings of fields, e.g. `question` and `answer`, with
an optional `category` for per-category figures), a prompt (a format string over the
fields, or an overridden `prompt`), a `Rubric` that scores the reply, and optionally an
oracle that gives the expert reply. Underneath it is an ordinary `Task` family handing out
`EpisodeEnv` episodes (one reply, then the episode ends), so the loop, evaluation, resumed
runs and configs treat it like any other task. Tasks of several rounds, or with state of
their own, implement `Task` and `EpisodeEnv` directly (src/tasks/task.py).

Either subclass it (a constructor of the task's own parameters that calls
`super().__init__`) or name it in a config with its parameters as they are: reward
functions and the oracle by dotted path, e.g.

    module: src.tasks.single_turn.SingleTurnTask
    parameters:
      samples: {train: [{question: "2 + 2", answer: "4"}], validation: [...]}
      prompt: "What is {question}? Reply with the number only."
      rubric: {my_package.rewards.exact: 1.0, my_package.rewards.brief: 0.2}

or, where a function takes settings (a judge model: src/tasks/model_rewards/), the rubric
as a list of `RewardTerm`s (src/tasks/rubric.py):

      rubric:
        - {function: my_package.rewards.exact, weight: 1.0}
        - function: src.tasks.model_rewards.judge.Judge
          weight: 0.5
          parameters: {name: helpful, base_url: "http://localhost:8000/v1", ...}

A rubric with such a function (one that scores many replies at once: a judge, a reward
model; `Rubric.scores_together`) scores the replies where their group has ended
(`_score_group`), the group's together, so that they reach the model in one call; the
step then ends the episode with reward 0, and the group's scoring gives the reward, the
figures and the outcome.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from src.configuration.components import COMPONENTS, import_dotted
from src.records.episode import Episode, Outcome, Sample
from src.tasks.reward_functions import RewardTerm
from src.tasks.reward_terms import score_last_replies
from src.tasks.rubric import Rubric
from src.tasks.task import (
    SPLITS,
    EpisodeEnv,
    EpisodeScore,
    StepOutcome,
    Task,
    parse_split_sample_id,
    split_sample_id,
    split_sample_ids,
)

OracleFunction = Callable[[Mapping[str, Any]], str]
# Weighted sums round (0.7 + 0.2 + 0.1 is 0.9999999999999999): a score this close below the
# threshold still reaches it.
_THRESHOLD_TOLERANCE = 1e-9


@COMPONENTS.register("single_turn")
class SingleTurnTask(Task["SingleTurnEpisode"]):
    """One prompt per sample, one reply, scored by a rubric. The reward is the rubric's
    score; the outcome is correct when the score reaches `threshold`. Each reward
    function's value is logged as `rollout/<name>` and `eval/<name>`."""

    def __init__(
        self,
        samples: Mapping[str, Sequence[Mapping[str, Any]]],  # split -> its samples' fields
        # or (a config) function path -> weight, or a list of reward terms with settings
        rubric: Rubric | Mapping[str, float] | Sequence[RewardTerm],
        prompt: str = "{question}",  # a format string over a sample's fields
        # the expert reply from a sample's fields (or its dotted path); None: the task has
        # no oracle, and the oracle agent and supervised warm-up cannot run on it
        oracle: OracleFunction | str | None = None,
        threshold: float = 1.0,  # the score from which a reply counts as correct
    ) -> None:
        super().__init__(max_round=1)
        unknown = sorted(set(samples) - set(SPLITS))
        if unknown:
            raise ValueError(f"samples: unknown splits {unknown} (splits: {', '.join(SPLITS)})")
        if isinstance(rubric, Mapping):
            rubric = Rubric(list(rubric), list(rubric.values()))
        elif not isinstance(rubric, Rubric):
            terms = [RewardTerm.model_validate(term) for term in rubric]
            rubric = Rubric([term.build() for term in terms], [term.weight for term in terms])
        self.rubric = rubric
        self.prompt_format = prompt
        self.oracle: OracleFunction | None = (
            import_dotted(oracle) if isinstance(oracle, str) else oracle)
        self.threshold = threshold
        self._samples = {split: tuple(_sample(split, index, fields)
                                      for index, fields in enumerate(rows))
                         for split, rows in samples.items()}
        needed = {"answer"} & self.rubric.arguments
        if type(self).prompt is SingleTurnTask.prompt:  # an overridden prompt reads its own
            needed |= format_fields(prompt)
        for rows in self._samples.values():
            for sample in rows:
                missing = sorted(needed - set(sample.data))
                if missing:
                    raise ValueError(f"sample {sample.sample_id} lacks {', '.join(missing)}, "
                                     "which the prompt or the rubric reads")

    def prompt(self, sample: Mapping[str, Any]) -> str:
        """The text that asks `sample` (its fields); override for more than a format."""
        return self.prompt_format.format_map(sample)

    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return split_sample_ids(split, len(self._samples.get(split, ())))

    def _get_sample(self, sample_id: str) -> Sample:
        split, index = parse_split_sample_id(sample_id)
        rows = self._samples.get(split, ())
        if index >= len(rows):
            raise KeyError(f"no sample '{sample_id}': split '{split}' has {len(rows)}")
        return rows[index]

    def new_episode(self) -> SingleTurnEpisode:
        return SingleTurnEpisode(self)

    def outcome_of_reward(self, reward: float) -> Outcome:
        """Correct from `threshold` on: the reply's rubric score, or the reward a
        subclass's group scoring made of it."""
        correct = reward >= self.threshold - _THRESHOLD_TOLERANCE
        return Outcome.CORRECT if correct else Outcome.INCORRECT

    def close(self) -> None:
        self.rubric.close()  # a reward model's Ray actor stops with the run's task
        super().close()

    def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        """The group's replies scored together, where the rubric scores them so (see the
        module docstring); else each episode keeps the reward its step gave."""
        if not self.rubric.scores_together:
            return super()._score_group(episodes)
        return [EpisodeScore(episode.reward) if scored is None else
                EpisodeScore(episode.reward + scored.score, scored.metrics(), scored.info())
                for episode, scored in zip(episodes, score_last_replies(self.rubric, episodes),
                                           strict=True)]


class SingleTurnEpisode(EpisodeEnv[SingleTurnTask]):
    """One prompt, one reply scored by the family's rubric; the episode then ends."""

    _prompt = ""
    last_reply: str | None = None  # the reply stepped (None before it)

    @property
    def prompt(self) -> str:
        return self._prompt

    def _reset(self, sample: Sample) -> str:
        self._prompt = self.family.prompt(sample.data)
        self.last_reply = None
        return self._prompt

    def _step(self, action: str) -> StepOutcome:
        assert self.sample is not None
        self.last_reply = action
        if self.family.rubric.scores_together:  # scored with its group: `_score_group`
            return StepOutcome("", terminated=True)
        scored = self.family.rubric.score(action, self.sample, self._prompt)
        return StepOutcome("", reward=scored.score, terminated=True,
                           outcome=self.family.outcome_of_reward(scored.score),
                           metrics=scored.metrics(), info=scored.info())

    def _oracle_reply(self) -> str:
        assert self.sample is not None
        if self.family.oracle is None:
            raise NotImplementedError(
                f"{type(self.family).__name__} has no oracle: give SingleTurnTask an "
                f"`oracle` (a function from a sample's fields to the expert reply)")
        return self.family.oracle(self.sample.data)


def _sample(split: str, index: int, fields: Mapping[str, Any]) -> Sample:
    """A sample record of one row: its fields as data, its `category` field (if any) as
    the category of the per-category figures."""
    if not isinstance(fields, Mapping):
        raise ValueError(f"samples['{split}'][{index}] is a {type(fields).__name__}, not a "
                         "mapping of fields")
    return Sample(sample_id=split_sample_id(split, index),
                  category=str(fields.get("category", "default")), data=dict(fields))


def format_fields(text: str) -> set[str]:
    """The sample fields a prompt format string reads ({question}, {row[0]}: question,
    row); ValueError for a positional field, which no sample can fill."""
    fields = set()
    for _, field, _, _ in string.Formatter().parse(text):
        if field is None:
            continue
        root = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not root or root.isdigit():
            raise ValueError(f"prompt {text!r:.80}: '{{{field}}}' is positional; name a "
                             "sample field, as in '{question}'")
        fields.add(root)
    return fields
