"""Math problems: a question, an answer in `\\boxed{}`, scored by weighted reward functions.

`MathProblemsTask` is the family (the problems, the rubric of one reply's rewards, the
group rewards); `MathEpisode` is one episode. With `max_round` > 1 a wrong answer earns a
short feedback message and another try (a multi-turn episode); the reward is that of the
last answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from src.configuration.components import COMPONENTS
from src.records.chat import Role
from src.records.episode import Episode, EpisodeStatus, Outcome, Sample
from src.tasks.instance.math_problems.problems import (
    WORKED_EXAMPLE_OPERANDS,
    load_rows,
    procedural_sample,
)
from src.tasks.instance.math_problems.rewards import (
    ALWAYS_REPORTED,
    GROUP_REWARDS,
    TEXT_REWARDS,
    CosineScaling,
    length_rewards,
    text_rubric,
    z_normalise,
)
from src.tasks.instance.math_problems.verification import start_verifier
from src.tasks.instance.math_problems.verl_reward import (
    CUSTOM,
    CustomReward,
    CustomRewardFunction,
)
from src.tasks.reward_functions import RewardTerm
from src.tasks.reward_terms import score_last_replies, terms_rubric
from src.tasks.rubric import RubricScore
from src.tasks.splits import Splits
from src.tasks.task import (
    EpisodeEnv,
    EpisodeScore,
    Rounds,
    StepOutcome,
    Task,
    parse_split_sample_id,
    split_sample_ids,
)

_A, _B = WORKED_EXAMPLE_OPERANDS
WORKED_EXAMPLE = (f"Example:\nQuestion: What is {_A} + {_B}?\nAnswer: {_A} + {_B} = {_A + _B}. "
                  f"The answer is \\boxed{{{_A + _B}}}.\n\n")


@COMPONENTS.register("math_problems")
class MathProblemsTask(Task["MathEpisode"]):
    """A question; the reply's last `\\boxed{}` is the answer, checked with math-verify
    (gold first). The reward is the weighted sum of `reward_weights` (accuracy alone by
    default): `accuracy`, `boxed_number` (a numeric boxed answer, right or wrong),
    `boxed_answer` (any non-empty one), `format2` (Fast-Math-R1: boxed before
    `</think>`), `cosine` (length-scaled correctness), `length` (Kimi 1.5, within each
    group) and `custom`, plus the `reward_terms` (a judge: its verdict trains, while
    `accuracy` is still reported and decides the outcome, so that a judged run is measured
    by the verifier; they score each episode's last reply where its group has ended, the
    group's replies asked together). Evaluation logs `eval/accuracy`, `eval/boxed_answer`
    (the format rate) and `eval/completions/mean_length`."""

    def __init__(
        self,
        # procedural: seeded arithmetic; gsm8k: GSM8K rows (the answer after `####`);
        # file: any jsonl or parquet file or Hugging Face dataset
        source: Literal["procedural", "gsm8k", "file"] = "procedural",
        # a jsonl or parquet file, or a Hugging Face dataset (a local dataset folder or a
        # hub name such as `openai/gsm8k`, with `dataset_config` and `dataset_split`)
        data_path: str | None = None,
        question_key: str = "question",  # the row keys (Fast-Math-R1: problem, solution)
        answer_key: str = "answer",
        dataset_config: str | None = None,
        dataset_split: str = "train",
        # procedural difficulty, taken in turn: 1 single-digit sums (default), 2 two-digit
        # sums and differences, 3 products, 4 word problems. About a fifth of the facts
        # (swapped operands alike) are asked only in validation, never in train
        levels: list[int] | None = None,
        # procedural: `seed` draws the problems; a file: its last num_validation rows are
        # validation, all the others train (num_train and seed unused)
        splits: Splits = Splits(),
        instruction: str = "Put your final answer in \\boxed{}.",  # after the question
        worked_example: bool = True,  # a solved sum (3 + 4) before the question
        max_round: Rounds = 1,  # > 1: a wrong answer gets `retry_message` and another try
        retry_message: str = "That is not correct. Try again.",
        reward_weights: dict[str, float] | None = None,  # reward name -> weight
        cosine: CosineScaling | None = None,  # the `cosine` reward's settings
        normalize_rewards: bool = False,  # z-score the weighted sum within each group
        # a verl `compute_score(data_source, solution_str, ground_truth, extra_info)` file,
        # unchanged: its float, or its dict's `score`, is the `custom` reward (weight 1
        # unless given); other numeric keys are logged as `custom/<key>`
        custom_reward_function: CustomRewardFunction | None = None,
        # reward functions with settings (a judge of the reply, a reward model:
        # src/tasks/model_rewards/), each added at its term's weight; a reply they fail
        # on (a judge that is down or unreadable) scores that function 0 with
        # `<name>/error` 1 and goes on. `accuracy` (the verifier) still decides the outcome
        reward_terms: list[RewardTerm] | None = None,
    ) -> None:
        super().__init__(max_round=max_round)
        self.source = source
        self.levels = tuple(levels or [1])
        self.splits = splits
        self.instruction = instruction
        self.worked_example = worked_example
        self.retry_message = retry_message
        self.reward_weights = dict(reward_weights or {"accuracy": 1.0})
        # model_validate also takes the plain dicts of direct Python construction
        self.cosine = CosineScaling.model_validate(cosine or {})
        self.normalize_rewards = normalize_rewards
        self.data_source = source if source != "file" else str(data_path)
        custom = None
        if custom_reward_function is not None:
            custom = CustomReward(CustomRewardFunction.model_validate(custom_reward_function),
                                  self.data_source)
            self.reward_weights.setdefault(CUSTOM, 1.0)
        available = set(TEXT_REWARDS) | set(GROUP_REWARDS) | ({CUSTOM} if custom else set())
        unknown = set(self.reward_weights) - available
        if unknown:
            raise ValueError(f"reward_weights: unknown reward functions {sorted(unknown)}; "
                             f"available: {sorted(available)}")
        self.rubric = text_rubric(self.reward_weights, custom)
        # their own rubric: failures are the reply's, recorded, where the task's raise
        self.model_rubric = terms_rubric([RewardTerm.model_validate(term)
                                          for term in reward_terms or ()])
        clashing = sorted(set(self.model_rubric.names if self.model_rubric else ())
                          & (available | set(ALWAYS_REPORTED)))
        if clashing:
            raise ValueError(f"reward_terms: {clashing} are the task's own reward names; "
                             "give the functions other names")
        # runs.jsonl lists one reply's rewards by name, `custom` (and its details) last,
        # whatever order the weighted sum adds them in
        self.reported_rewards = tuple(sorted(self.rubric.names,
                                             key=lambda name: (name == CUSTOM, name)))
        self._rows: tuple[tuple[str, str], ...] = ()
        if source != "procedural":
            if data_path is None:
                raise ValueError(f"source '{source}' needs data_path")
            self._rows = load_rows(data_path, question_key, answer_key, source == "gsm8k",
                                   dataset_config, dataset_split)
            if len(self._rows) <= splits.num_validation:
                raise ValueError(f"{data_path} has {len(self._rows)} rows, not more than "
                                 f"num_validation={splits.num_validation}")
        start_verifier()  # not within the first step's time limit

    # Validation takes the last rows of a file; procedural splits use their own seeds. No
    # selection split: the procedural one would ask the validation split's held-out facts.
    def sample_ids(self, split: str = "train") -> Sequence[str]:
        if self.source == "procedural":
            return self.splits.sample_ids(split)
        return split_sample_ids(split, {"train": len(self._rows) - self.splits.num_validation,
                                        "validation": self.splits.num_validation}.get(split, 0))

    def _get_sample(self, sample_id: str) -> Sample:
        split, index = parse_split_sample_id(sample_id)
        if self.source == "procedural":
            return procedural_sample(self.splits.seed, split, index, self.levels)
        offset = 0 if split == "train" else len(self._rows) - self.splits.num_validation
        question, answer = self._rows[offset + index]
        return Sample(sample_id=sample_id, category=self.source,
                      data={"question": question, "answer": answer})

    def new_episode(self) -> MathEpisode:
        return MathEpisode(self)

    def close(self) -> None:
        if self.model_rubric is not None:
            self.model_rubric.close()
        super().close()

    # ---- rewards -------------------------------------------------------------------
    def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        """Add the reward terms' (`_judged`), then the length-aware rewards (`cosine`,
        `length`), then z-normalise if asked.

        Lengths are completion tokens as sampled (the agent's trajectory); an agent that
        records no tokens (the oracle) is measured in characters.
        """
        judged = self._judged(episodes)
        lengths = [episode.trajectory.completion_token_count if episode.trajectory
                   else sum(len(m.content) for m in episode.chat if m.role is Role.AGENT)
                   for episode in episodes]
        correct = [episode.metrics.get("accuracy", 0.0) > 0 for episode in episodes]
        added = {name: [0.0] * len(episodes) for name in GROUP_REWARDS
                 if name in self.reward_weights}
        if "cosine" in added:
            added["cosine"] = [self.cosine(c, n) for c, n in zip(correct, lengths, strict=True)]
        if "length" in added:
            added["length"] = length_rewards(correct, lengths)
        scores = []
        for index, episode in enumerate(episodes):
            reward, metrics, info = episode.reward, {}, {}
            terms = judged[index]
            if terms is not None:
                # the reply that ended the episode earns its terms' reward; one that the
                # agent's context cut after a retry keeps its figures, as its accuracy
                if episode.status is EpisodeStatus.COMPLETED:
                    reward += terms.score
                metrics, info = terms.metrics(), terms.info()
            group = {name: values[index] for name, values in added.items()}
            for name, value in group.items():
                reward += self.reward_weights[name] * value
            scores.append(EpisodeScore(reward, metrics | group, info))
        if self.normalize_rewards:
            normalised = z_normalise([score.reward for score in scores])
            scores = [EpisodeScore(value, score.metrics,
                                   {**score.info, "reward_before_normalisation": score.reward})
                      for score, value in zip(scores, normalised, strict=True)]
        return scores

    def _judged(self, episodes: Sequence[Episode]) -> list[RubricScore | None]:
        """The reward terms' scores of each episode's last reply (None: no terms, or no
        reply stepped), the group's replies asked together (one judge call for them all).
        Scored where the group has ended, so that a retried reply is never judged."""
        if self.model_rubric is None:
            return [None] * len(episodes)
        return score_last_replies(self.model_rubric, episodes)


class MathEpisode(EpisodeEnv[MathProblemsTask]):
    """One episode; the family's reward terms judge its `last_reply` where its group has
    ended (`MathProblemsTask._judged`)."""

    _prompt = ""
    last_reply: str | None = None  # the reply last stepped (None before the first)

    @property
    def prompt(self) -> str:
        return self._prompt

    def _reset(self, sample: Sample) -> str:
        family = self.family
        prefix = WORKED_EXAMPLE if family.worked_example else ""
        self._prompt = f"{prefix}Question: {sample.data['question']}\n{family.instruction}"
        self.last_reply = None
        return self._prompt

    def _step(self, action: str) -> StepOutcome:
        assert self.sample is not None
        family = self.family
        self.last_reply = action
        scored = family.rubric.score(action, self.sample, self._prompt)
        correct = scored.values["accuracy"] > 0
        metrics = {name: scored.values[name] for name in family.reported_rewards}
        metrics |= scored.details
        if not correct and self.round_index < family.max_round:
            return StepOutcome(observation=family.retry_message, metrics=metrics)
        return StepOutcome(observation="", reward=scored.score, terminated=True,
                           outcome=Outcome.CORRECT if correct else Outcome.INCORRECT,
                           metrics=metrics)

    def _oracle_reply(self) -> str:
        assert self.sample is not None
        return f"The answer is \\boxed{{{self.sample.data['answer']}}}."
