"""Math reward functions (open-r1 / Fast-Math-R1), each a small named function.

Text rewards look at one reply (and the gold answer): reward functions of a `Rubric`,
which `text_rubric` weighs with `reward_weights` from the config. `cosine` also needs the
reply's length in tokens, and `length` (Kimi 1.5) the lengths of the whole group, so the
task adds those two, with their weights, once a group has finished, and can z-normalise
the sum per prompt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field

from src.maths.groups import group_zscore
from src.tasks.answers import MAX_ANSWER_CHARS, answer_part, last_boxed_content
from src.tasks.instance.math_problems.verification import verify_bounded
from src.tasks.instance.math_problems.verl_reward import CUSTOM
from src.tasks.reward_functions import RewardFunction
from src.tasks.rubric import Rubric

_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?\s*$")


def is_correct(completion: str, gold: str) -> bool:
    """math-verify on the last boxed answer, bounded in time (an answer it cannot settle
    within the bound, or longer than MAX_ANSWER_CHARS, is wrong)."""
    boxed = last_boxed_content(answer_part(completion))
    if boxed is None or not boxed.strip() or len(boxed) > MAX_ANSWER_CHARS:
        return False
    return verify_bounded(gold, boxed)


def accuracy(reply: str, answer: str) -> float:
    return 1.0 if is_correct(reply, answer) else 0.0


def boxed_number(reply: str) -> float:
    """1.0 for a well-formed numeric boxed answer, right or wrong (a small format credit)."""
    boxed = last_boxed_content(answer_part(reply))
    return 1.0 if boxed is not None and _NUMBER.match(boxed) else 0.0


def boxed_answer(reply: str) -> float:
    """1.0 if the answer part holds a non-empty `\\boxed{}` (the format rate of evaluation)."""
    boxed = last_boxed_content(answer_part(reply))
    return 1.0 if boxed is not None and boxed.strip() else 0.0


def format2(reply: str) -> float:
    """Fast-Math-R1's format reward: a boxed answer before `</think>`."""
    head, separator, _ = reply.partition("</think>")
    return 1.0 if separator and last_boxed_content(head) is not None else 0.0


class CosineScaling(BaseModel):
    """Length-scaled correctness (open-r1's cosine reward); L counts completion tokens.

    p = min(1, L/max_len) if clip_len else L/max_len; c = cos(pi p);
    correct: min_c + (max_c - min_c)(1 + c)/2; wrong: max_w + (min_w - max_w)(1 + c)/2.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_value_correct: float = 1.0
    min_value_correct: float = 0.1
    max_value_wrong: float = -0.1
    min_value_wrong: float = -1.0
    max_len: int = Field(default=30000, gt=0)
    clip_len: bool = True

    def __call__(self, correct: bool, length: int) -> float:
        progress = length / self.max_len
        if self.clip_len:
            progress = min(1.0, progress)
        cosine = math.cos(math.pi * progress)
        if correct:
            return self.min_value_correct + 0.5 * (
                self.max_value_correct - self.min_value_correct) * (1.0 + cosine)
        return self.max_value_wrong + 0.5 * (
            self.min_value_wrong - self.max_value_wrong) * (1.0 + cosine)


def length_rewards(correct: Sequence[bool], lengths: Sequence[int]) -> list[float]:
    """Kimi 1.5 over one group: lambda = 0.5 - (L - L_min)/(L_max - L_min);
    correct -> lambda, wrong -> min(0, lambda); all lengths equal -> 0 for all."""
    shortest, longest = min(lengths), max(lengths)
    if shortest == longest:
        return [0.0] * len(lengths)
    rewards = []
    for is_correct, length in zip(correct, lengths, strict=True):
        scale = 0.5 - (length - shortest) / (longest - shortest)
        rewards.append(scale if is_correct else min(0.0, scale))
    return rewards


def z_normalise(values: Sequence[float]) -> list[float]:
    """Per-prompt z-score (R - mean_g) / (std_g + eps): GRPO's advantage over one group,
    so the same formula (unbiased std, a group of one left as is) serves both."""
    rewards = torch.tensor(values, dtype=torch.float64)
    return group_zscore(rewards, torch.zeros(len(values), dtype=torch.long)).tolist()


TEXT_REWARDS: dict[str, RewardFunction] = {
    "accuracy": accuracy,
    "boxed_number": boxed_number,
    "boxed_answer": boxed_answer,
    "format2": format2,
}
GROUP_REWARDS = ("cosine", "length")  # need token lengths, and for `length` the group
# Reported whatever the weights: the outcome's correctness and the format rate.
ALWAYS_REPORTED = ("accuracy", "boxed_answer")


def text_rubric(reward_weights: Mapping[str, float], custom: RewardFunction | None) -> Rubric:
    """The rubric of one reply: the text rewards and `custom` that `reward_weights` names,
    in its order (so the weighted sum adds them in that order), then those of
    `ALWAYS_REPORTED` it leaves out, at weight 0 (adding 0.0 leaves the sum as it was).
    The functions are the task's own: a failure raises (`catch_errors=False`)."""
    functions = TEXT_REWARDS | ({CUSTOM: custom} if custom is not None else {})
    weighted = [name for name in reward_weights if name in functions]
    reported = [name for name in ALWAYS_REPORTED if name not in weighted]
    return Rubric([functions[name] for name in weighted + reported],
                  [reward_weights[name] for name in weighted] + [0.0] * len(reported),
                  catch_errors=False)
