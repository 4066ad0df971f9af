"""Peak RSS of GRPO steps (rollout + update) on the embedded model, each update's time and
page faults (minor: fresh pages the allocator asked the kernel for) and, with --profile
(steps 1 on profiled, not timed), where the last scored update's time goes (torch.profiler's self time of its operators, in the
groups of `SHARE_GROUPS`, as shares of the update's wall time).

python bench/grpo_step_memory.py [--prompts 4] [--samples 4] [--new_tokens 128]
    [--micro_batch_max_tokens 512 | 0 for one micro-batch] [--gradient_checkpointing]
    [--dtype float32|bfloat16|bfloat16_where_native] [--lora_compute_dtype base|float32]
    [--steps 2] [--release_freed_memory] [--kl_coef 0.01] [--quickstart_task] [--profile]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from src.agents.instance.token_exact_agent import TokenExactAgent  # noqa: E402
from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
)
from src.online_training.trainer import RLTrainer  # noqa: E402
from src.records.chat import Role  # noqa: E402
from src.records.episode import Episode  # noqa: E402
from src.run.trainer import BatchContext, TrainingSchedule  # noqa: E402
from src.runtime.allocator import keep_freed_memory  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402
from src.training.settings import (  # noqa: E402
    AdvantageSettings,
    KLSettings,
    MismatchSettings,
    OptimizerSettings,
)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def page_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
            "mkldnn::_linear_pointwise")
CONVERSIONS = ("aten::to", "aten::_to_copy", "aten::copy_")
ATTENTION = "scaled_dot_product"
SHARE_GROUPS = ("matrix products of the adapter (a dimension = rank)",
                "matrix products of the base model and head", "dtype conversions",
                "attention, forward and backward", "optimiser", "other operators (elementwise, "
                "reductions, indexing, ...)", "outside operators (autograd, allocation, Python)")


def share_group(name: str, shapes: list, rank: int) -> str:
    """Which of `SHARE_GROUPS` an operator's self time belongs to."""
    if name in PRODUCTS:
        dimensions = {size for shape in shapes for size in shape}
        return SHARE_GROUPS[0] if rank in dimensions else SHARE_GROUPS[1]
    if name in CONVERSIONS:
        return SHARE_GROUPS[2]
    if ATTENTION in name:
        return SHARE_GROUPS[3]
    if "_foreach" in name or "adam" in name.lower():
        return SHARE_GROUPS[4]
    return SHARE_GROUPS[5]


def profiled_shares(update: Callable[[], dict[str, float]], rank: int
                    ) -> tuple[float, dict[str, float], dict[str, float]]:
    """Run `update` under torch.profiler: its wall seconds, each group's share of them and
    its metrics."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        start = time.perf_counter()
        metrics = update()
        seconds = time.perf_counter() - start
    totals = dict.fromkeys(SHARE_GROUPS, 0.0)
    for event in profiler.key_averages(group_by_input_shape=True):
        group = share_group(event.key, event.input_shapes or [], rank)
        totals[group] += event.self_cpu_time_total / 1e6
    totals[SHARE_GROUPS[-1]] = seconds - sum(totals.values())
    return seconds, {group: value / seconds for group, value in totals.items()}, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--micro_batch_max_tokens", type=int, default=512)
    parser.add_argument("--gradient_checkpointing", action="store_true")
    parser.add_argument("--dtype", default="float32",
                        choices=["float32", "bfloat16", "bfloat16_where_native"])
    parser.add_argument("--lora_compute_dtype", default="base", choices=["base", "float32"])
    # the first update grows the heap to its peak; later ones show what is reused
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--release_freed_memory", action="store_true",
                        help="leave glibc's defaults (freed memory handed back)")
    parser.add_argument("--kl_coef", type=float, default=0.01,
                        help="0: no reference scoring pass (the quickstart's setting)")
    parser.add_argument("--quickstart_task", action="store_true",
                        help="the quickstart's problems (level 1, a worked example)")
    parser.add_argument("--profile", action="store_true",
                        help="profile the last update and print where its time goes")
    arguments = parser.parse_args()
    if not arguments.release_freed_memory:
        keep_freed_memory("benchmark")
    torch.manual_seed(0)
    model = HuggingfaceLoRALanguageModel(gradient_checkpointing=arguments.gradient_checkpointing,
                                         dtype=arguments.dtype,
                                         lora_compute_dtype=arguments.lora_compute_dtype)
    exact = model.dtype == torch.float32
    agent = TokenExactAgent(model, max_new_tokens=arguments.new_tokens)
    # the callback's other settings at their defaults; it scores at the temperature the
    # agent recorded in each trajectory (the agent's default, 1.0)
    callback = RLTrainer(
        model, advantage=AdvantageSettings(estimator="grpo"), kl=KLSettings(coef=arguments.kl_coef),
        optimizer=OptimizerSettings(
            learning_rate=1e-5, micro_batch_max_tokens=arguments.micro_batch_max_tokens or None),
        mismatch=MismatchSettings() if exact else MismatchSettings(
            old_logprobs="trainer", correction="tis"))
    callback.prepare(TrainingSchedule(arguments.steps, arguments.prompts * arguments.samples))
    print(f"after loading: peak RSS {peak_rss_gib():.2f} GiB")
    # level 4 with long replies: the memory case; level 1 with a worked example: the
    # quickstart's task, whose groups' rewards differ (equal ones leave nothing to learn)
    task = (MathProblemsTask(levels=[1], worked_example=True) if arguments.quickstart_task
            else MathProblemsTask(levels=[4], worked_example=False,
                                  instruction="Explain your reasoning step by step in detail."))
    steps = []  # (rollout seconds, update seconds, update's page faults, metrics) a step
    shares: dict[str, float] = {}
    for step in range(arguments.steps):
        episodes = []
        for index in range(arguments.prompts * arguments.samples):
            env = task.new_episode()
            prompt = step * arguments.prompts + index // arguments.samples
            observation, _ = env.reset(options={"sample_id": f"train-{prompt:06d}"})
            assert env.sample is not None
            episode = Episode(env.sample, index % arguments.samples, step, environment=env)
            episode.add_message(Role.USER, observation)
            agent.start_episode(episode)
            episodes.append(episode)
        start = time.perf_counter()
        for episode, reply in zip(episodes, agent.act(episodes), strict=True):
            episode.add_message(Role.AGENT, reply.content)
            _, episode.reward, _, _, _ = episode.environment.step(reply.content)
        rollout = time.perf_counter() - start
        rollout_peak = peak_rss_gib()
        context = BatchContext(step, episodes, arguments.samples)
        if arguments.profile and step > 0:  # after a first update that warms up
            _, step_shares, metrics = profiled_shares(partial(callback.train, context),
                                                      model.lora_settings.r)
            if "loss" in metrics:  # a skipped update (nothing to learn) is no profile
                shares = step_shares
            continue
        start, faults = time.perf_counter(), page_faults()
        metrics = callback.train(context)
        steps.append((rollout, time.perf_counter() - start, page_faults() - faults, metrics))
    lengths = [episode.trajectory.completion_token_count for episode in episodes]
    print(f"config: {arguments.prompts} prompts x {arguments.samples} samples x "
          f"{arguments.new_tokens} new tokens max, {model.dtype} CPU, LoRA r=16 all-linear "
          f"(products in {arguments.lora_compute_dtype}), "
          f"KL k3 coefficient {arguments.kl_coef}, shared-prefix training {model.packs_shared_prefixes}, "
          f"micro_batch_max_tokens={arguments.micro_batch_max_tokens or None}, "
          f"gradient_checkpointing={arguments.gradient_checkpointing}")
    print(f"completion tokens: mean {sum(lengths) / len(lengths):.1f}, max {max(lengths)}")
    print(f"peak RSS after the last rollout: {rollout_peak:.2f} GiB")
    for step, (rollout, update, faults, metrics) in enumerate(steps):
        print(f"step {step}: rollout {rollout:.1f} s, update {update:.1f} s, loss "
              f"{metrics.get('loss', float('nan')):.4f}, page faults in the update {faults} "
              f"({faults * resource.getpagesize() / 2**30:.2f} GiB of fresh pages)")
    print(f"peak RSS of the GRPO step: {peak_rss_gib():.2f} GiB")
    if arguments.profile and shares:
        print("the last update that was not skipped (steps 1 on, under torch.profiler), "
              "shares of its wall time:")
        for group, share in shares.items():
            print(f"  {share:6.1%}  {group}")


if __name__ == "__main__":
    main()
