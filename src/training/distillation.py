"""On-policy distillation: a teacher model grades every token the student sampled.

The student samples as in RL; the teacher scores exactly those token rows (the trainer's
batch: packed, micro-batched, no gradient, at the sampling temperature). Token t of an
agent reply gets the advantage

    A_t = weight x (log pi_teacher(y_t) - log pi_student(y_t)) + reward_weight x A_task

the first term the negative of the per-token estimate of the reverse KL(student ||
teacher) on the student's own samples: the policy gradient of that advantage lowers the
reverse KL. The student's log-prob is the PPO ratio's "old" (the sampled policy's), a
constant: no gradient flows through the advantage. Only tokens of the loss mask (the
agent's replies, never the prompt, an environment's observations or padding) get one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from src.configuration.errors import ConfigError
from src.language_models.language_model import LanguageModel, TrainableLanguageModel
from src.training.learner import Learner
from src.training.settings import DistillationSettings
from src.training.token_rows import TokenRows

REVERSE_KL = "distillation/reverse_kl"


def describe(model: LanguageModel) -> str:
    """A model as an error names it: its class and, where it has one, what it loads."""
    loads = getattr(model, "model_name_or_path", None)
    return type(model).__name__ + (f" of '{loads}'" if loads else "")


def check_same_tokenizer(student: LanguageModel, teacher: LanguageModel) -> None:
    """ConfigError unless both map every token to the same id: the teacher scores the
    student's ids, which must mean the same text to it. Vocabularies are compared, not
    tokenizer objects (two loads of one tokenizer are equal)."""
    student_vocabulary = student.tokenizer.get_vocab()
    teacher_vocabulary = teacher.tokenizer.get_vocab()
    if student_vocabulary == teacher_vocabulary:
        return
    differing = sorted(token for token in student_vocabulary.keys() | teacher_vocabulary.keys()
                       if student_vocabulary.get(token) != teacher_vocabulary.get(token))
    raise ConfigError(
        f"the teacher ({describe(teacher)}, {len(teacher_vocabulary)} tokens) and the student "
        f"({describe(student)}, {len(student_vocabulary)} tokens) tokenize differently "
        f"({len(differing)} tokens differ in id or presence, e.g. {differing[:3]}): the teacher "
        "scores the student's token ids, so it needs the student's tokenizer",
        key="teacher")


@dataclass(frozen=True)
class Graded:
    """What grading a batch measured: the teacher's log-probs of the student's tokens and
    the batch's distillation figures."""

    teacher_logprobs: torch.Tensor  # [rows, length], 0 off the loss mask
    metrics: dict[str, float]


class Teacher:
    """A frozen model of the run that scores the student's rows: nothing of it is trained
    or saved (a resumed run builds it again from its own config)."""

    def __init__(self, model: TrainableLanguageModel, student: TrainableLanguageModel,
                 settings: DistillationSettings) -> None:
        check_same_tokenizer(student, model)
        self.model = model
        self.settings = settings

    @classmethod
    def of(cls, model: TrainableLanguageModel | None, student: TrainableLanguageModel,
           settings: DistillationSettings | None, trainer_workers: int,
           zero_std_groups: str) -> Teacher | None:
        """The RL trainer's teacher (None without one), its settings checked against the
        trainer's: ConfigError naming the setting that cannot work with it."""
        if model is None:
            if settings is not None:
                raise ConfigError("distillation settings are given, but no teacher: name "
                                  "the teacher's language model", key="teacher")
            return None
        if model is student:
            raise ConfigError("the teacher is the trained model itself (its reverse KL is 0 "
                              "at every token): name a second language model", key="teacher")
        if trainer_workers >= 2:
            raise ConfigError(f"a teacher is scored in this process, not in trainer workers: "
                              f"set trainer_workers.count to 1 (it is {trainer_workers}) or "
                              "drop the teacher", key="trainer_workers.count")
        if zero_std_groups == "drop":
            raise ConfigError("advantage.zero_std_groups drop leaves out groups whose task "
                              "returns are equal, but the teacher grades their tokens too: "
                              "use keep with a teacher", key="advantage.zero_std_groups")
        return cls(model, student, settings or DistillationSettings())

    def grade(self, learner: Learner, rows: TokenRows, temperature: float) -> Graded:
        """Score the rows with the teacher, in the learner's micro-batches, and set their
        advantages: the task's (`rows.advantages`) times reward_weight, and on the loss
        mask A_t = weight x (teacher - student) as `rows.token_advantages`.

        Figures, means per agent token: `distillation/reverse_kl` (student - teacher
        log-prob, the reverse KL's estimate), `distillation/teacher_logprob`,
        `distillation/advantage_abs_mean` (|A_t| of the distillation term)."""
        assert rows.old_logprobs is not None and rows.advantages is not None
        teacher = learner.score(rows, temperature=temperature, model=self.model)
        mask = rows.batch.loss_mask
        student_minus_teacher = (rows.old_logprobs - teacher) * mask
        rows.token_advantages = -self.settings.weight * student_minus_teacher
        rows.advantages = self.settings.reward_weight * rows.advantages
        tokens = float(mask.sum().clamp(min=1.0))
        return Graded(teacher, {
            REVERSE_KL: float(student_minus_teacher.sum()) / tokens,
            "distillation/teacher_logprob": float((teacher * mask).sum()) / tokens,
            "distillation/advantage_abs_mean": float(rows.token_advantages.abs().sum()) / tokens,
        })
