"""Peak RSS of one GRPO step (rollout + update) on the embedded model.

python bench/grpo_step_memory.py [--prompts 4] [--samples 4] [--new_tokens 128]
    [--micro_batch_max_tokens 512 | 0 for one micro-batch] [--gradient_checkpointing]
    [--dtype float32|bfloat16|bfloat16_where_native]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from src.agents.instance.lora_rl_agent import LoRARLAgent  # noqa: E402
from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
)
from src.online_training.trainer import RLTrainingCallback  # noqa: E402
from src.records.chat import Role  # noqa: E402
from src.records.episode import Episode  # noqa: E402
from src.run.callbacks import BatchContext, TrainingSchedule  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402
from src.training.settings import (  # noqa: E402
    AdvantageSettings,
    KLSettings,
    MismatchSettings,
    OptimizerSettings,
)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--micro_batch_max_tokens", type=int, default=512)
    parser.add_argument("--gradient_checkpointing", action="store_true")
    parser.add_argument("--dtype", default="float32",
                        choices=["float32", "bfloat16", "bfloat16_where_native"])
    arguments = parser.parse_args()
    torch.manual_seed(0)
    model = HuggingfaceLoRALanguageModel(gradient_checkpointing=arguments.gradient_checkpointing,
                                         dtype=arguments.dtype)
    exact = model.dtype == torch.float32
    agent = LoRARLAgent(model, max_new_tokens=arguments.new_tokens)
    # the callback's other settings at their defaults; it scores at the temperature the
    # agent recorded in each trajectory (the agent's default, 1.0)
    callback = RLTrainingCallback(
        model, advantage=AdvantageSettings(estimator="grpo"), kl=KLSettings(coef=0.01),
        optimizer=OptimizerSettings(
            learning_rate=1e-5, micro_batch_max_tokens=arguments.micro_batch_max_tokens or None),
        mismatch=MismatchSettings() if exact else MismatchSettings(
            old_logprobs="trainer", correction="tis"))
    callback.prepare(TrainingSchedule(1, arguments.prompts * arguments.samples))
    print(f"after loading: peak RSS {peak_rss_gib():.2f} GiB")
    task = MathProblemsTask(levels=[4], worked_example=False,
                            instruction="Explain your reasoning step by step in detail.")
    episodes = []
    for index in range(arguments.prompts * arguments.samples):
        env = task.new_episode()
        observation, _ = env.reset(options={"sample_id": f"train-{index // arguments.samples:06d}"})
        assert env.sample is not None
        episode = Episode(env.sample, index % arguments.samples, 0, task=env)
        episode.add_message(Role.USER, observation)
        agent.start_episode(episode)
        episodes.append(episode)
    start = time.perf_counter()
    for episode, reply in zip(episodes, agent.act(episodes), strict=True):
        episode.add_message(Role.AGENT, reply.content)
        _, episode.reward, _, _, _ = episode.task.step(reply.content)
    rollout = time.perf_counter() - start
    rollout_peak = peak_rss_gib()
    start = time.perf_counter()
    metrics = callback.train(BatchContext(0, episodes, arguments.samples))
    update = time.perf_counter() - start
    lengths = [episode.trajectory.completion_token_count for episode in episodes]
    print(f"config: {arguments.prompts} prompts x {arguments.samples} samples x "
          f"{arguments.new_tokens} new tokens max, {model.dtype} CPU, LoRA r=16 all-linear, "
          f"KL k3 on, shared-prefix training {model.packs_shared_prefixes}, "
          f"micro_batch_max_tokens={arguments.micro_batch_max_tokens or None}, "
          f"gradient_checkpointing={arguments.gradient_checkpointing}")
    print(f"completion tokens: mean {sum(lengths) / len(lengths):.1f}, max {max(lengths)}")
    print(f"peak RSS after the rollout: {rollout_peak:.2f} GiB")
    print(f"rollout {rollout:.1f} s, update {update:.1f} s, loss {metrics['loss']:.4f}")
    print(f"peak RSS of the GRPO step: {peak_rss_gib():.2f} GiB")


if __name__ == "__main__":
    main()
