"""Math problems: one question, one answer in `\\boxed{}`, scored by weighted reward functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import gymnasium

from src.records.episode import Outcome, Sample
from src.tasks.instance.math_problems.problems import load_rows, procedural_sample
from src.tasks.instance.math_problems.rewards import TEXT_REWARDS, accuracy
from src.tasks.task import StepOutcome, Task

WORKED_EXAMPLE = ("Example:\nQuestion: What is 3 + 4?\nAnswer: 3 + 4 = 7. The answer is "
                  "\\boxed{7}.\n\n")


class MathProblemsTask(Task):
    def __init__(
        self,
        source: Literal["procedural", "gsm8k", "file"] = "procedural",
        data_path: str | None = None,
        question_key: str = "question",
        answer_key: str = "answer",
        levels: list[int] | None = None,
        num_train: int = 256,
        num_validation: int = 64,
        seed: int = 0,
        instruction: str = "Put your final answer in \\boxed{}.",
        worked_example: bool = True,
        reward_weights: dict[str, float] | None = None,
    ) -> None:
        super().__init__(max_round=1)
        self.source = source
        self.levels = tuple(levels or [1])
        self.num_train = num_train
        self.num_validation = num_validation
        self.seed = seed
        self.instruction = instruction
        self.worked_example = worked_example
        self.reward_weights = dict(reward_weights or {"accuracy": 1.0})
        unknown = set(self.reward_weights) - set(TEXT_REWARDS)
        if unknown:
            raise ValueError(f"unknown reward functions {sorted(unknown)}; "
                             f"available: {sorted(TEXT_REWARDS)}")
        self._rows: tuple[tuple[str, str], ...] = ()
        if source != "procedural":
            if data_path is None:
                raise ValueError(f"source '{source}' needs data_path")
            self._rows = load_rows(data_path, question_key, answer_key, source == "gsm8k")
            if len(self._rows) <= num_validation:
                raise ValueError(f"{data_path} has {len(self._rows)} rows, not more than "
                                 f"num_validation={num_validation}")

    # Validation takes the last rows of a file; procedural splits use their own seeds.
    def sample_ids(self, split: str = "train") -> Sequence[str]:
        if self.source == "procedural":
            count = self.num_train if split == "train" else self.num_validation
        else:
            count = (len(self._rows) - self.num_validation if split == "train"
                     else self.num_validation)
        return [f"{split}-{index:06d}" for index in range(count)]

    def _get_sample(self, sample_id: str) -> Sample:
        split, _, number = sample_id.rpartition("-")
        if split not in ("train", "validation") or not number.isdigit():
            raise KeyError(f"malformed math sample id '{sample_id}'")
        index = int(number)
        if self.source == "procedural":
            return procedural_sample(self.seed, split, index, self.levels)
        offset = 0 if split == "train" else len(self._rows) - self.num_validation
        question, answer = self._rows[offset + index]
        return Sample(sample_id=sample_id, category=self.source,
                      data={"question": question, "answer": answer})

    def _reset(self, sample: Sample) -> str:
        prefix = WORKED_EXAMPLE if self.worked_example else ""
        return f"{prefix}Question: {sample.data['question']}\n{self.instruction}"

    def _step(self, action: str) -> StepOutcome:
        assert self.sample is not None
        gold = self.sample.data["answer"]
        scores = {name: TEXT_REWARDS[name](action, gold) for name in self.reward_weights}
        correct = scores["accuracy"] > 0 if "accuracy" in scores else accuracy(action, gold) > 0
        reward = sum(weight * scores[name] for name, weight in self.reward_weights.items())
        info = {f"metric/{name}": value for name, value in scores.items()}
        info["metric/accuracy"] = 1.0 if correct else 0.0
        return StepOutcome(observation="", reward=reward, terminated=True,
                           outcome=Outcome.CORRECT if correct else Outcome.INCORRECT, info=info)

    def _oracle_reply(self) -> str:
        assert self.sample is not None
        return f"The answer is \\boxed{{{self.sample.data['answer']}}}."


gymnasium.register(id="math/MathProblems-v0",
                   entry_point="src.tasks.instance.math_problems.task:MathProblemsTask")
