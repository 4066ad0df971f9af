"""Rollout throughput: multi-turn episodes stepped in lockstep versus one at a time.

Both modes run the experiment loop's own rollout (src.experiment.rollout) on the same
episodes: math problems with retries (a wrong answer gets feedback and another try, up
to --rounds turns), sampled at temperature 1 from the embedded model. Lockstep sends
every running episode's turn to the model in one batched call, as LifelongAgentBench
does; sequential runs each episode to its end before starting the next.

python bench/rollout_throughput.py [--episodes 16] [--rounds 3] [--new_tokens 48]
    [--dtype float32|bfloat16] [--no_prefix_caching]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from src.agents.instance.lora_rl_agent import LoRARLAgent  # noqa: E402
from src.experiment.rollout import roll_out_lockstep  # noqa: E402
from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
)
from src.records.episode import Episode  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402


def make_task(rounds: int) -> MathProblemsTask:
    return MathProblemsTask(levels=[2, 3, 4], max_round=rounds)


def measure(name: str, run) -> tuple[float, list[Episode]]:
    torch.manual_seed(0)
    start = time.perf_counter()
    episodes = run()
    seconds = time.perf_counter() - start
    tokens = sum(e.trajectory.completion_token_count for e in episodes)
    turns = [e.turns for e in episodes]
    print(f"{name:>10}: {len(episodes)} episodes, {sum(turns)} turns "
          f"(mean {statistics.fmean(turns):.2f}), {tokens} generated tokens in {seconds:.1f} s "
          f"-> {tokens / seconds:.1f} tokens/s")
    return tokens / seconds, episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new_tokens", type=int, default=48)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--no_prefix_caching", action="store_true",
                        help="prefill each turn's whole prompt instead of only its new tokens")
    arguments = parser.parse_args()
    model = HuggingfaceLoRALanguageModel(dtype=arguments.dtype,
                                         prefix_caching=not arguments.no_prefix_caching)
    agent = LoRARLAgent(model, temperature=1.0, max_new_tokens=arguments.new_tokens)
    template = make_task(arguments.rounds)
    samples = [(template.get_sample(sample_id), 0)
               for sample_id in template.sample_ids("train")[: arguments.episodes]]
    tasks = [make_task(arguments.rounds) for _ in samples]
    print(f"config: embedded SmolLM2-135M, {arguments.dtype}, CPU threads "
          f"{torch.get_num_threads()}, {arguments.episodes} episodes of math with retries "
          f"(max {arguments.rounds} turns), temperature 1.0, max {arguments.new_tokens} new "
          f"tokens per turn, LoRA r=16 all-linear, prefix caching {model.prefix_caching}")
    roll_out_lockstep(samples[:2], tasks[:2], agent, 0, [0, 1])  # warm-up, not timed

    lockstep, _ = measure("lockstep", lambda: roll_out_lockstep(
        samples, tasks, agent, 0, list(range(len(samples)))))
    sequential, _ = measure("sequential", lambda: [
        episode for index, (pair, task) in enumerate(zip(samples, tasks, strict=True))
        for episode in roll_out_lockstep([pair], [task], agent, 0, [index])])
    print(f"lockstep / sequential throughput: {lockstep / sequential:.2f}x")


if __name__ == "__main__":
    main()
