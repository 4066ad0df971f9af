"""Where a GRPO step's time goes for the seed's Qwen3-32B run on one 8-GPU node, by design.

An analytic model, not a measurement: every input is printed, so the figures can be
redone with other assumptions (`--mfu`, `--response_tokens`, ...). It compares
1. one trainer process on one GPU (the update on cuda:0) beside a vLLM engine with
   tensor parallelism 4 (the shipped assignment before trainer workers): 3 GPUs idle;
2. four FSDP trainer workers (one GPU each, `num_trainer_workers: 4`) beside the same
   engine on the other four GPUs, rollouts then update in turn;
3. the same with asynchronous rollouts (staleness 1): the engine samples batch n+1 while
   the workers train on batch n, so a step costs the longer of the two.

Work model (N parameters, T tokens trained per step):
- training with a LoRA adapter, frozen base, gradient checkpointing: forward 2NT,
  recomputed forward 2NT, backward through activations only 2NT -> 6NT FLOP;
- the old log-probs' scoring pass (two optimiser steps per batch, so not free): 2NT;
- decoding: each step reads the engine's weights once per GPU shard and computes 2N per
  sequence; a step costs the larger of the two (roofline), KV-cache reads added;
- prefill: 2N per prompt token at the training efficiency.

python bench/scaling_plan.py [--mfu 0.4] [--response_tokens 700] [--trainer_gpus 4]
    [--engine_gpus 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Model:
    name: str = "Qwen3-32B"
    parameters: float = 32.8e9
    layers: int = 64
    hidden: int = 5120
    intermediate: int = 25600
    kv_heads: int = 8
    head_dim: int = 128
    bytes_per_value: int = 2  # bf16

    @property
    def weight_bytes(self) -> float:
        return self.parameters * self.bytes_per_value

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value


@dataclass(frozen=True)
class Gpu:
    name: str = "H100 SXM 80 GB"
    bf16_flops: float = 989e12  # dense
    memory_bytes_per_s: float = 3.35e12
    memory_bytes: float = 80e9


@dataclass(frozen=True)
class Batch:
    prompts: int = 128
    samples_per_prompt: int = 8
    prompt_tokens: int = 256
    response_tokens: float = 700.0  # mean; the limit is 1024
    max_response_tokens: int = 1024
    optimiser_steps: int = 2  # mini-batch 512 of 1024 episodes

    @property
    def sequences(self) -> int:
        return self.prompts * self.samples_per_prompt

    @property
    def trained_tokens(self) -> float:
        return self.sequences * (self.prompt_tokens + self.response_tokens)


def generation_seconds(model: Model, gpu: Gpu, batch: Batch, gpus: int, memory_share: float,
                       mfu: float, bandwidth_efficiency: float) -> dict[str, float]:
    """One engine with tensor parallelism `gpus`: prefill once per prompt (the group's
    samples share it), then decode in waves limited by the KV cache's room."""
    cache_bytes = gpus * gpu.memory_bytes * memory_share - model.weight_bytes
    per_sequence = model.kv_bytes_per_token * (batch.prompt_tokens + batch.max_response_tokens)
    concurrent = max(1, min(batch.sequences, int(cache_bytes // per_sequence)))
    waves = math.ceil(batch.sequences / concurrent)
    flops = gpus * gpu.bf16_flops
    prefill = 2 * model.parameters * batch.prompts * batch.prompt_tokens / (flops * mfu)
    # a decode step: weights once, each sequence's cache (half full on average), 2N each
    read = (model.weight_bytes + concurrent * model.kv_bytes_per_token
            * (batch.prompt_tokens + batch.response_tokens / 2))
    step = max(read / (gpus * gpu.memory_bytes_per_s * bandwidth_efficiency),
               2 * model.parameters * concurrent / (flops * mfu))
    decode = waves * batch.max_response_tokens * step  # a wave lasts as long as its longest
    return {"concurrent_sequences": concurrent, "waves": waves, "prefill_s": prefill,
            "decode_step_ms": 1e3 * step, "generation_s": prefill + decode}


def training_seconds(model: Model, gpu: Gpu, batch: Batch, gpus: int, mfu: float
                     ) -> dict[str, float]:
    tokens = batch.trained_tokens
    flops = gpus * gpu.bf16_flops * mfu
    return {"score_old_s": 2 * model.parameters * tokens / flops,
            "update_s": 6 * model.parameters * tokens / flops}


def memory_per_trainer_gpu(model: Model, workers: int, micro_batch_tokens: int) -> float:
    """Weights (sharded over the workers, one layer gathered whole), checkpointed hidden
    states of a micro-batch, and one layer's activations recomputed in the backward."""
    shard = model.weight_bytes / workers + model.weight_bytes / model.layers
    checkpoints = model.layers * micro_batch_tokens * model.hidden * model.bytes_per_value
    # the MLP's gate, up and product (the largest), plus attention's, about 3x
    one_layer = 3 * 3 * micro_batch_tokens * model.intermediate * model.bytes_per_value
    return shard + checkpoints + one_layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mfu", type=float, default=0.4,
                        help="fraction of peak FLOP/s reached by matrix work")
    parser.add_argument("--bandwidth_efficiency", type=float, default=0.6)
    parser.add_argument("--response_tokens", type=float, default=700.0)
    parser.add_argument("--memory_share", type=float, default=0.8,
                        help="vLLM gpu_memory_utilization")
    parser.add_argument("--trainer_gpus", type=int, default=4, help="FSDP workers")
    parser.add_argument("--engine_gpus", type=int, default=4, help="the engine's TP size")
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()

    model, gpu = Model(), Gpu()
    batch = Batch(response_tokens=arguments.response_tokens)
    workers, tp = arguments.trainer_gpus, arguments.engine_gpus
    baseline_generation = generation_seconds(model, gpu, batch, 4, arguments.memory_share,
                                             arguments.mfu, arguments.bandwidth_efficiency)
    generation = generation_seconds(model, gpu, batch, tp, arguments.memory_share,
                                    arguments.mfu, arguments.bandwidth_efficiency)
    one = training_seconds(model, gpu, batch, 1, arguments.mfu)
    sharded = training_seconds(model, gpu, batch, workers, arguments.mfu)
    gen, base_gen = generation["generation_s"], baseline_generation["generation_s"]
    train = sharded["score_old_s"] + sharded["update_s"]
    designs = {
        "1 trainer GPU + vLLM TP4 (3 GPUs idle)": {
            "generation_s": base_gen, "training_s": one["score_old_s"] + one["update_s"],
            "step_s": base_gen + one["score_old_s"] + one["update_s"],
            "trainer_gpu_memory_gb": memory_per_trainer_gpu(model, 1, 5120) / 1e9},
        f"FSDP {workers} workers + vLLM TP{tp}, in turn": {
            "generation_s": gen, "training_s": train, "step_s": gen + train,
            "trainer_gpu_memory_gb": memory_per_trainer_gpu(model, workers, 5120) / 1e9},
        f"FSDP {workers} workers + vLLM TP{tp}, async (staleness 1)": {
            "generation_s": gen, "training_s": train, "step_s": max(gen, train),
            "trainer_gpu_memory_gb": memory_per_trainer_gpu(model, workers, 5120) / 1e9},
    }
    print(f"model {model.name}: {model.parameters / 1e9:.1f} B parameters, "
          f"{model.weight_bytes / 1e9:.1f} GB in bf16, KV cache "
          f"{model.kv_bytes_per_token / 1e3:.0f} kB per token")
    print(f"GPU {gpu.name}: {gpu.bf16_flops / 1e12:.0f} TFLOP/s bf16 dense, "
          f"{gpu.memory_bytes_per_s / 1e12:.2f} TB/s; assumed MFU {arguments.mfu}, "
          f"bandwidth efficiency {arguments.bandwidth_efficiency}")
    print(f"batch: {batch.prompts} prompts x {batch.samples_per_prompt} samples, prompt "
          f"{batch.prompt_tokens} + mean response {batch.response_tokens:.0f} (max "
          f"{batch.max_response_tokens}) tokens = {batch.trained_tokens / 1e6:.2f} M tokens "
          f"trained, {batch.optimiser_steps} optimiser steps")
    print(f"generation (vLLM TP{tp}, memory share {arguments.memory_share}): "
          f"{generation['concurrent_sequences']} sequences at once in {generation['waves']} "
          f"wave(s), decode step {generation['decode_step_ms']:.1f} ms, prefill "
          f"{generation['prefill_s']:.1f} s -> {gen:.0f} s")
    print(f"training on 1 GPU: old log-probs {one['score_old_s']:.0f} s + update "
          f"{one['update_s']:.0f} s; on {workers} FSDP workers: "
          f"{sharded['score_old_s']:.0f} s + {sharded['update_s']:.0f} s\n")
    print(f"{'design':<48} {'generation s':>12} {'training s':>11} {'step s':>7} "
          f"{'speed-up':>8} {'trainer GPU GB':>14}")
    baseline = next(iter(designs.values()))["step_s"]
    for name, row in designs.items():
        print(f"{name:<48} {row['generation_s']:>12.0f} {row['training_s']:>11.0f} "
              f"{row['step_s']:>7.0f} {baseline / row['step_s']:>7.2f}x "
              f"{row['trainer_gpu_memory_gb']:>14.1f}")
    if arguments.json is not None:
        arguments.json.write_text(json.dumps({
            "model": asdict(model), "gpu": asdict(gpu), "batch": asdict(batch),
            "assumptions": vars(arguments) | {"json": str(arguments.json)},
            "generation": generation, "designs": designs}, indent=2))


if __name__ == "__main__":
    main()
