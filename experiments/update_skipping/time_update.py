"""What a step without a forward saves: the learner's update of one quickstart-shaped
mini-batch, scored (forward and backward) and skipped (every advantage 0: the optimiser
steps on zero gradients), each timed `--repeats` times, the median printed.

The model and objective are the GRPO quickstart's (configs/assignments/
math_grpo_quickstart.yaml: SmolLM2-135M in bf16 where native, LoRA r 16 on every linear
layer, token-level TIS against the update's own forward); the rows are its batch's shape
(8 groups of 4 episodes, each group's 87 prompt tokens shared, ~25 reply tokens, as its
runs.jsonl records), with random token ids: the time of a forward depends on the shapes,
not the words.

    OMP_NUM_THREADS=1 python -m experiments.update_skipping.time_update
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.training.learner import Learner
from src.training.mismatch import MismatchCorrection
from src.training.objectives import PolicyObjective
from src.training.policy_losses import POLICY_LOSSES
from src.training.settings import OptimizerSettings
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows


class ScoredObjective(PolicyObjective):
    """The same objective, never skipped: the scored step to compare with."""

    def vanishes(self, rows: TokenRows, indices: list[int]) -> bool:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--group_size", type=int, default=4)
    parser.add_argument("--prompt_tokens", type=int, default=87)
    parser.add_argument("--reply_tokens", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    torch.manual_seed(0)
    model = HuggingfaceLoRALanguageModel(
        "embedded:smollm2-135m", dtype="bfloat16_where_native",
        lora_config=LoRASettings(r=16, lora_alpha=32, target_modules="all-linear"))
    length = arguments.prompt_tokens + arguments.reply_tokens
    # each group's replies share its prompt, which the update trains once (shared prefix)
    prompts = torch.randint(100, 40000, (arguments.rows // arguments.group_size,
                                         arguments.prompt_tokens)).repeat_interleave(
        arguments.group_size, dim=0)
    replies = torch.randint(100, 40000, (arguments.rows, arguments.reply_tokens))
    ids = torch.cat([prompts, replies], dim=1).tolist()
    masks = [[0] * arguments.prompt_tokens + [1] * arguments.reply_tokens] * arguments.rows
    rows = TokenRows.from_sequences(ids, masks, pad_id=model.pad_id)
    rows.advantages = torch.zeros(arguments.rows)
    rows.sampler_logprobs = rows.old_logprobs = torch.zeros_like(rows.batch.loss_mask)
    learner = Learner(model, OptimizerSettings(learning_rate=2e-4))
    learner.schedule(2 * arguments.repeats + 1)
    correction = MismatchCorrection("tis", "token", 2.0)
    seconds: dict[str, list[float]] = {"scored": [], "skipped": []}
    for repeat in range(arguments.repeats + 1):  # the first round warms up, not counted
        for kind, objective_type in (("scored", ScoredObjective),
                                     ("skipped", PolicyObjective)):
            objective = objective_type(POLICY_LOSSES["ppo_clip"](), "token-mean",
                                       old_from_forward=correction)
            started = time.perf_counter()
            learner.update(rows, range(arguments.rows), objective, TokenMetrics())
            if repeat:
                seconds[kind].append(time.perf_counter() - started)
    scored, skipped = (statistics.median(seconds[kind]) for kind in ("scored", "skipped"))
    print(f"{arguments.rows} rows x {length} tokens (groups of {arguments.group_size}), {torch.get_num_threads()} threads, "
          f"{model.model.dtype}: scored update {scored:.3f} s, skipped {skipped:.4f} s "
          f"(median of {arguments.repeats}); a skipped update saves {scored - skipped:.3f} s")


if __name__ == "__main__":
    main()
