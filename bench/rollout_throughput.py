"""Rollout throughput: multi-turn episodes stepped in lockstep versus one at a time.

Both modes run the experiment loop's own rollout (src.run.rollout) on the same
episodes (same samples, same task seeds), sampled (temperature 1 unless --temperature)
from the embedded model. Lockstep sends every running episode's turn to the model in
one batched call, as LifelongAgentBench does; sequential runs each episode to its end
before starting the next. The tasks (--task):
- math: problems of levels 2-4 with retries (a wrong answer gets feedback and another
  try, up to --rounds turns);
- db_bench: DB-bench single-skill problems (procedural, any of the skills) answered with
  SQL run in a private in-memory SQLite database, up to --rounds replies;
- econ: EconAgent household decisions, --rounds households asked in turn per episode
  (an unparseable reply ends the episode).
An episode ends as soon as its task says so (DB-bench and econ end it on a malformed
reply, which the untrained embedded model often writes), so the mean number of turns
(printed) tells how multi-turn the measured work really was.

python bench/rollout_throughput.py [--task math|db_bench|econ] [--episodes N] [--rounds 3]
    [--new_tokens N] [--temperature 1.0] [--dtype float32|bfloat16] [--no_prefix_caching]
    [--seed 0] [--out result.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from src.agents.instance.token_exact_agent import TokenExactAgent  # noqa: E402
from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
)
from src.records.episode import Episode  # noqa: E402
from src.run.rollout import roll_out_lockstep  # noqa: E402
from src.storage.files import atomic_write_json  # noqa: E402
from src.tasks.instance.db_bench.task_single_skill import DBBenchSplits
from src.tasks.splits import Splits
from src.tasks.task import Task  # noqa: E402

# Per task: (episodes, new tokens per turn) when not given on the command line. DB-bench
# replies explain, then act (AgentBench's rules), so they get more room.
DEFAULTS = {"math": (16, 48), "db_bench": (8, 128), "econ": (8, 48)}


def make_task(name: str, rounds: int) -> Task[Any]:
    if name == "math":
        from src.tasks.instance.math_problems.task import MathProblemsTask

        return MathProblemsTask(levels=[2, 3, 4], max_round=rounds)
    if name == "db_bench":
        from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill

        return DBBenchSingleSkill(source="procedural", splits=DBBenchSplits(seed=42),
                                  max_round=rounds, sandbox={"url": "sqlite://"})
    if name == "econ":
        from src.tasks.instance.econ.task import EconDecisionTask

        return EconDecisionTask(splits=Splits(seed=0), num_households=100, months=120,
                                households_per_sample=rounds)
    raise ValueError(f"unknown task '{name}'")


def describe_task(name: str, rounds: int) -> str:
    return {
        "math": f"math with retries (levels 2-4, max {rounds} turns)",
        "db_bench": f"DB-bench single-skill on SQLite (procedural, all skills, max {rounds} "
                    f"replies)",
        "econ": f"econ household decisions ({rounds} households per episode, 100 households, "
                f"120 months)",
    }[name]


def measure(name: str, model: HuggingfaceLoRALanguageModel, run) -> dict[str, float]:
    model.mark_updated()  # an empty prefix cache: neither mode inherits the other's
    torch.manual_seed(0)
    start = time.perf_counter()
    episodes: list[Episode] = run()
    seconds = time.perf_counter() - start
    tokens = sum(e.trajectory.completion_token_count for e in episodes)
    turns = [e.turns for e in episodes]
    result = {"episodes": len(episodes), "turns": sum(turns),
              "mean_turns": statistics.fmean(turns), "generated_tokens": tokens,
              "seconds": seconds, "tokens_per_s": tokens / seconds,
              "episodes_per_s": len(episodes) / seconds,
              "mean_reward": statistics.fmean(e.reward for e in episodes)}
    print(f"{name:>10}: {len(episodes)} episodes, {sum(turns)} turns "
          f"(mean {result['mean_turns']:.2f}), {tokens} generated tokens in {seconds:.1f} s "
          f"-> {result['tokens_per_s']:.1f} tokens/s, {result['episodes_per_s']:.3f} "
          f"episodes/s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="math", choices=sorted(DEFAULTS))
    parser.add_argument("--episodes", type=int, default=None,
                        help="episodes per mode (default: 16 math, 8 db_bench and econ)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="most turns per episode (econ: households asked per episode)")
    parser.add_argument("--new_tokens", type=int, default=None,
                        help="most new tokens per turn (default: 48 math and econ, "
                             "128 db_bench)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--no_prefix_caching", action="store_true",
                        help="prefill each turn's whole prompt instead of only its new tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    arguments = parser.parse_args()
    episodes_default, tokens_default = DEFAULTS[arguments.task]
    count = arguments.episodes or episodes_default
    new_tokens = arguments.new_tokens or tokens_default

    torch.manual_seed(arguments.seed)  # LoRA A matrices are drawn at construction
    model = HuggingfaceLoRALanguageModel(dtype=arguments.dtype,
                                         prefix_caching=not arguments.no_prefix_caching)
    agent = TokenExactAgent(model, temperature=arguments.temperature, max_new_tokens=new_tokens)
    task = make_task(arguments.task, arguments.rounds)
    samples = [(task.get_sample(sample_id), 0) for sample_id in task.sample_ids("train")[:count]]
    seeds = [arguments.seed * 1_000_003 + index for index in range(len(samples))]
    config = {"task": arguments.task, "task_description": describe_task(arguments.task,
                                                                         arguments.rounds),
              "model": model.model_name_or_path, "dtype": arguments.dtype,
              "cpu_threads": torch.get_num_threads(), "episodes": len(samples),
              "rounds": arguments.rounds, "temperature": arguments.temperature,
              "max_new_tokens": new_tokens,
              "lora": model.lora_settings.model_dump(), "prefix_caching": model.prefix_caching,
              "seed": arguments.seed}
    print(f"config: embedded SmolLM2-135M, {arguments.dtype}, CPU threads "
          f"{config['cpu_threads']}, {len(samples)} episodes of {config['task_description']}, "
          f"temperature {arguments.temperature}, max {new_tokens} new tokens per turn, LoRA "
          f"r={model.lora_settings.r} {model.lora_settings.target_modules}, prefix caching "
          f"{model.prefix_caching}, seed {arguments.seed}")
    # Untimed: fill the family's caches (econ's rule-policy economies) and warm the model.
    for (sample, _), seed in zip(samples, seeds, strict=True):
        environment = task.new_episode()
        environment.reset(seed=seed, options={"sample": sample})
        environment.close()
    roll_out_lockstep(samples[:2], task, agent, 0, seeds[:2])

    lockstep = measure("lockstep", model, lambda: roll_out_lockstep(
        samples, task, agent, 0, seeds))
    sequential = measure("sequential", model, lambda: [
        episode for pair, seed in zip(samples, seeds, strict=True)
        for episode in roll_out_lockstep([pair], task, agent, 0, [seed])])
    token_ratio = lockstep["tokens_per_s"] / sequential["tokens_per_s"]
    episode_ratio = lockstep["episodes_per_s"] / sequential["episodes_per_s"]
    print(f"lockstep / sequential: {token_ratio:.2f}x tokens/s, {episode_ratio:.2f}x "
          f"episodes/s")
    task.close()
    if arguments.out is not None:
        atomic_write_json(arguments.out, {
            "config": config, "lockstep": lockstep, "sequential": sequential,
            "tokens_per_s_ratio": token_ratio, "episodes_per_s_ratio": episode_ratio})
        print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
