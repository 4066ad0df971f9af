"""The GPU code paths of the in-process LoRA policy on a randomly initialised model.

No weights are needed: the model is built from a config of the real shape with random
weights, saved with the embedded model's tokenizer, and loaded back through
HuggingfaceLoRALanguageModel (LoRA r=16 all-linear). Then, on --device:
1. sampling throughput: `generate` of P prompts x n samples x T new tokens (prompts of
   random ids, lengths drawn in [L/2, L] so that rows are left-padded), timed after a
   warm-up call with other prompts; then a second turn (the reply + a few new ids, so
   the prefix cache is used) and a short nucleus (top_p) call;
2. sampler/trainer agreement: the sampled sequences scored with `score()`, |sampling
   log-prob - trainer log-prob| over the sampled tokens (first and second turn);
3. one GRPO step through RLTrainer.train on episodes built from those
   samples (random 0/1 rewards with spread in every group; KL k3 to the base model on):
   step time, peak allocated memory, loss, and whether the adapter moved.
Sampling and the GRPO step each print a roofline line (bench/roofline.py): achieved
FLOP/s and bytes/s against the device's peaks, measured at the start (--no_peaks skips).

Shapes: smollm2-135m (the embedded model's config, read from --assets), 7b (a
Qwen2.5-7B-shaped config written here: random weights, 7B-shaped), tiny (the 135M config
cut to two layers, for checking this script on a CPU).

python bench/gpu_step.py --shape smollm2-135m|7b|tiny [--assets .gpu_assets/smollm2-135m]
    [--device cuda] [--dtype bfloat16|float32] [--prompts 8] [--samples 4]
    [--prompt_tokens 96] [--new_tokens 128] [--gradient_checkpointing]
    [--micro_batch_max_tokens auto|N|0] [--sampler auto|kv_cache|static_cache|generate]
    [--reproducible] [--model_dir DIR] [--out result.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from roofline import (  # noqa: E402, I001
    DecoderShape,
    Peaks,
    decode_work,
    forward_work,
    measure_peaks,
    roofline_line,
    tokens_fed_by,
    training_work,
)

from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.language_models.language_model import SamplingParams, TokenBatch  # noqa: E402
from src.online_training.trainer import RLTrainer  # noqa: E402
from src.records.episode import Episode, EpisodeStatus, Outcome, Sample  # noqa: E402
from src.records.trajectory import Trajectory  # noqa: E402
from src.run.trainer import BatchContext, TrainingSchedule  # noqa: E402
from src.runtime.reproducibility import make_reproducible  # noqa: E402
from src.training.settings import AdvantageSettings, KLSettings, OptimizerSettings  # noqa: E402

GIB = 1024**3


# ---- the model folder ------------------------------------------------------------------
def make_config(shape: str, assets: Path):
    from transformers import AutoConfig, Qwen2Config

    if shape in ("smollm2-135m", "tiny"):
        config = AutoConfig.from_pretrained(assets)
        if shape == "tiny":
            config.num_hidden_layers = 2
        return config
    if shape == "7b":  # Qwen2.5-7B's shape; ids of the embedded model's special tokens
        return Qwen2Config(
            vocab_size=152064, hidden_size=3584, intermediate_size=18944,
            num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
            max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
            hidden_act="silu", tie_word_embeddings=False, use_sliding_window=False,
            bos_token_id=1, eos_token_id=2, pad_token_id=2, initializer_range=0.02,
            architectures=["Qwen2ForCausalLM"])
    raise ValueError(f"unknown shape {shape}")


def build_model_folder(shape: str, assets: Path, folder: Path, device: torch.device,
                       save_dtype: torch.dtype, seed: int) -> dict:
    """Random weights of the config's shape + the assets' tokenizer, saved to `folder`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    config = make_config(shape, assets)
    start = time.perf_counter()
    torch.manual_seed(seed)
    # build on the device: a 7B random init on a CPU takes minutes
    build_device = device if device.type == "cuda" else torch.device("cpu")
    with build_device:
        model = AutoModelForCausalLM.from_config(config, dtype=save_dtype)
    parameters = sum(p.numel() for p in model.parameters())
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id,
                                               eos_token_id=config.eos_token_id,
                                               pad_token_id=config.pad_token_id)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(assets).save_pretrained(folder)
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"parameters": parameters, "build_and_save_s": time.perf_counter() - start,
            "model_type": config.model_type, "num_hidden_layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
            "saved_dtype": str(save_dtype).removeprefix("torch.")}


# ---- helpers ---------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    return {"allocated_gib": torch.cuda.memory_allocated(device) / GIB,
            "peak_allocated_gib": torch.cuda.max_memory_allocated(device) / GIB,
            "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / GIB}


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def random_prompts(rng: random.Random, count: int, max_tokens: int, low: int,
                   high: int) -> list[list[int]]:
    """Prompts of random ids in [low, high), lengths in [max_tokens / 2, max_tokens]."""
    return [[rng.randrange(low, high) for _ in range(rng.randint(max(1, max_tokens // 2),
                                                                   max_tokens))]
            for _ in range(count)]


def timed_generate(model: HuggingfaceLoRALanguageModel, prompts: list[list[int]],
                   params: SamplingParams) -> tuple[list, dict]:
    synchronize(model.device)
    start = time.perf_counter()
    groups = model.generate(prompts, params)
    synchronize(model.device)
    seconds = time.perf_counter() - start
    generations = [g for group in groups for g in group]
    tokens = sum(len(g.token_ids) for g in generations)
    return groups, {"rows": len(generations), "new_tokens_total": tokens,
                    "seconds": seconds, "tokens_per_s": tokens / seconds,
                    "stopped_early": sum(g.finish_reason == "stop" for g in generations),
                    "mean_prompt_tokens": sum(map(len, prompts)) / len(prompts)}


def agreement(model: HuggingfaceLoRALanguageModel, sequences: list[list[int]],
              masks: list[list[int]], sampled: list[list[float]], rows_per_call: int) -> dict:
    """|sampling log-prob - score() log-prob| over the masked (sampled) tokens."""
    model.eval_mode()
    differences, nonfinite = [], 0
    with torch.no_grad():
        for start in range(0, len(sequences), rows_per_call):
            part = slice(start, start + rows_per_call)
            batch = TokenBatch.from_sequences(sequences[part], masks[part], model.pad_id)
            scored = model.score(batch).logprobs.float().cpu()
            for row, (mask, logprobs) in enumerate(zip(masks[part], sampled[part],
                                                       strict=True)):
                positions = torch.tensor([t for t, m in enumerate(mask) if m])
                trainer = scored[row, positions]
                sampler = torch.tensor([logprobs[t] for t in positions.tolist()])
                nonfinite += int((~torch.isfinite(trainer)).sum() + (~torch.isfinite(sampler)).sum())
                differences.append((trainer - sampler).abs())
    flat = torch.cat(differences)
    finite = flat[torch.isfinite(flat)]
    return {"tokens": int(flat.numel()), "nonfinite": nonfinite,
            "mean_abs_diff": float(finite.mean()) if finite.numel() else float("nan"),
            "max_abs_diff": float(finite.max()) if finite.numel() else float("nan"),
            "p99_abs_diff": float(finite.quantile(0.99)) if finite.numel() else float("nan"),
            "mean_sampler_logprob": float(torch.cat([torch.tensor([lp for lp, m in zip(s, k, strict=True) if m]) for s, k in zip(sampled, masks, strict=True)]).mean())}


def adapter_snapshot(model: HuggingfaceLoRALanguageModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().float().clone() for name, p in model.model.named_parameters()
            if p.requires_grad}


def sampling_roofline(model: HuggingfaceLoRALanguageModel, sampled: dict, new_tokens: int,
                      peaks: Peaks) -> str:
    """The decode of a timed `generate` call (its prefill counted in the time, not in the
    work: a lower bound)."""
    shape = DecoderShape.of(model.model.get_base_model())
    steps = min(new_tokens, sampled["new_tokens_total"])
    work = decode_work(shape, sampled["new_tokens_total"], steps,
                       sampled["mean_prompt_tokens"] + steps / 2,
                       sampled["new_tokens_total"] / steps, model.dtype)
    return roofline_line(f"sampling (batch {sampled['rows']})", work, sampled["seconds"],
                         model.dtype, peaks)


def step_roofline(model: HuggingfaceLoRALanguageModel, sequences: list[list[int]],
                  completion_tokens: int, reference_pass: bool, seconds: float,
                  peaks: Peaks) -> str:
    """The update's forward and backward (rows packed by shared prefix where the model
    packs them) plus the reference pass of the KL term, over the whole step's time: a lower
    bound, since micro-batches that split a pack feed its prefix and read the weights
    again."""
    shape = DecoderShape.of(model.model.get_base_model())
    fed = tokens_fed_by(sequences, model.packs_shared_prefixes)
    work = training_work(shape, fed, completion_tokens, model.dtype)
    if reference_pass:
        work = work + forward_work(shape, fed, completion_tokens, model.dtype)
    return roofline_line(f"GRPO step ({fed} tokens fed)", work, seconds, model.dtype, peaks)


def token_budget(arguments: argparse.Namespace) -> int | str | None:
    value = arguments.micro_batch_max_tokens
    return value if value == "auto" else int(value) or None


def grpo_step(model: HuggingfaceLoRALanguageModel, episodes: list[Episode], samples: int,
              arguments: argparse.Namespace) -> dict:
    # other settings at their defaults; scored at the temperature the trajectories record
    callback = RLTrainer(
        model, advantage=AdvantageSettings(estimator="grpo"),
        kl=KLSettings(coef=arguments.kl_coef),
        optimizer=OptimizerSettings(
            learning_rate=arguments.learning_rate,
            micro_batch_max_tokens=token_budget(arguments)))
    callback.prepare(TrainingSchedule(1, len(episodes)))
    before = adapter_snapshot(model)
    reset_peak(model.device)
    allocated_before = memory(model.device).get("allocated_gib")
    synchronize(model.device)
    start = time.perf_counter()
    metrics = callback.train(BatchContext(0, episodes, samples))
    synchronize(model.device)
    seconds = time.perf_counter() - start
    after = adapter_snapshot(model)
    delta_b = max((after[k] - before[k]).abs().max().item() for k in after if "lora_B" in k)
    delta_a = max((after[k] - before[k]).abs().max().item() for k in after if "lora_A" in k)
    budget = callback.learner.token_budget()
    del callback
    return {"seconds": seconds, "allocated_before_gib": allocated_before, **memory(model.device),
            "loss": metrics.get("loss"), "loss_finite": bool(torch.isfinite(torch.tensor(
                metrics.get("loss", float("nan"))))),
            "grad_norm": metrics.get("grad_norm"), "kl": metrics.get("kl"),
            "entropy": metrics.get("entropy"),
            "logprob_diff_sampler_trainer": metrics.get("logprob_diff/sampler_trainer"),
            "adapter_max_abs_delta_lora_B": delta_b, "adapter_max_abs_delta_lora_A": delta_a,
            "adapter_changed": delta_b > 0 or delta_a > 0, "micro_batch_budget_tokens": budget,
            "policy_version": metrics.get("policy_version"), "metrics": metrics}


def profile_decode(model: HuggingfaceLoRALanguageModel, prompts: list[list[int]],
                   arguments: argparse.Namespace) -> dict:
    """Where a decode step's time goes: the project's sampler with and without the
    adapter, a bare decode loop (base model, HF cache, argmax) and torch.profiler tables."""
    from torch.profiler import ProfilerActivity, profile

    steps = arguments.profile_steps
    params = SamplingParams(n=arguments.samples, max_new_tokens=steps)
    timed_generate(model, prompts, params)  # warm
    _, with_adapter = timed_generate(model, prompts, params)
    with model.model.disable_adapter():
        _, without_adapter = timed_generate(model, prompts, params)
    # a bare loop: equal-length rows (no padding), the base model, greedy
    base = model.model.get_base_model()
    rows = len(prompts) * arguments.samples
    length = max(len(p) for p in prompts)
    ids = torch.randint(3, base.config.vocab_size, (rows, length), device=model.device)
    with torch.no_grad(), model.model.disable_adapter():
        for _ in range(2):  # the second pass is timed
            synchronize(model.device)
            start = time.perf_counter()
            output = base(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache, token = output.past_key_values, output.logits[:, -1].argmax(-1)
            for _ in range(steps - 1):
                output = base(input_ids=token[:, None], past_key_values=cache, use_cache=True)
                token = output.logits[:, -1].argmax(-1)
            synchronize(model.device)
            bare = time.perf_counter() - start
    activities = [ProfilerActivity.CPU]
    if model.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as profiler:
        _, profiled = timed_generate(model, prompts, params)
    averages = profiler.key_averages()
    tables = {"by_self_cpu": averages.table(sort_by="self_cpu_time_total", row_limit=25)}
    device_total = None
    if model.device.type == "cuda":
        tables["by_self_device"] = averages.table(sort_by="self_device_time_total",
                                                  row_limit=25)
        # kernels only: an operator's row repeats the time of the kernels it launched
        device_total = sum(e.self_device_time_total for e in averages
                           if e.device_type == torch.autograd.DeviceType.CUDA
                           and not e.is_user_annotation) / 1e6
    if arguments.profile_out:
        Path(arguments.profile_out).parent.mkdir(parents=True, exist_ok=True)
        Path(arguments.profile_out).write_text("\n\n".join(
            f"== {name}\n{table}" for name, table in tables.items()))
    else:
        print("\n\n".join(tables.values()))
    per_step = 1000 / steps
    return {"steps": steps, "rows": rows,
            "sampler_ms_per_step": with_adapter["seconds"] * per_step,
            "sampler_adapter_disabled_ms_per_step": without_adapter["seconds"] * per_step,
            "bare_base_greedy_loop_ms_per_step": bare * per_step,
            "profiled_ms_per_step": profiled["seconds"] * per_step,
            "profiled_device_busy_ms_per_step": (device_total * per_step
                                                 if device_total is not None else None)}


def profile_step(model: HuggingfaceLoRALanguageModel, episodes: list[Episode],
                 arguments: argparse.Namespace) -> str:
    """Another GRPO step under torch.profiler: the operators by device time and by CPU
    time, 20 of each."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if model.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    model.set_policy_version(0)  # the same episodes on policy again: none is left out
    with profile(activities=activities) as profiler:
        step = grpo_step(model, episodes, arguments.samples, arguments)
    averages = profiler.key_averages()
    sort = "self_device_time_total" if model.device.type == "cuda" else "self_cpu_time_total"
    summary = {key: step.get(key) for key in ("seconds", "loss", "adapter_changed")}
    return (f"== GRPO step (profiled: {json.dumps(summary)}) by {sort}\n"
            f"{averages.table(sort_by=sort, row_limit=20)}\n"
            f"== by self_cpu_time_total\n"
            f"{averages.table(sort_by='self_cpu_time_total', row_limit=20)}")


# ---- main ------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=["smollm2-135m", "7b", "tiny"],
                        default="smollm2-135m")
    parser.add_argument("--assets", default=".gpu_assets/smollm2-135m",
                        help="folder with the embedded model's config.json and tokenizer")
    parser.add_argument("--model_dir", default=None,
                        help="where the random model is saved (default: a temp folder, "
                             "in /dev/shm when there is one)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--save_dtype", default=None, choices=["bfloat16", "float32"],
                        help="dtype of the saved random weights (default: --dtype)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--prompt_tokens", type=int, default=96)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--second_turn_tokens", type=int, default=32)
    parser.add_argument("--score_rows", type=int, default=8, help="rows per score() call")
    parser.add_argument("--gradient_checkpointing", action="store_true")
    parser.add_argument("--micro_batch_max_tokens", default="auto",
                        help="auto (the policy's default: sized from free GPU memory), a "
                             "number, or 0 for one micro-batch")
    parser.add_argument("--sampler", default="auto",
                        choices=["auto", "kv_cache", "static_cache", "generate"])
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--kl_coef", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile_steps", type=int, default=0,
                        help="also profile a call of this many new tokens (torch.profiler) "
                             "and time it with the adapter disabled and as a plain decode "
                             "loop of the base model; tables go to --profile_out")
    parser.add_argument("--profile_out", default=None)
    parser.add_argument("--profile_step", action="store_true",
                        help="after the timed GRPO step, profile a second one "
                             "(torch.profiler, its top operators printed)")
    parser.add_argument("--no_peaks", action="store_true",
                        help="skip measuring the device's peaks and the roofline lines")
    parser.add_argument("--peaks_from", default=None,
                        help="the peaks another run of this script measured on this device "
                             "(its --out JSON): roofline lines without measuring again")
    parser.add_argument("--out", default=None)
    parser.add_argument("--reproducible", action="store_true",
                        help="deterministic kernels, as a run's `reproducible: true` sets them")
    arguments = parser.parse_args()
    if arguments.reproducible:  # before the first product on the device
        make_reproducible()

    device = torch.device(arguments.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but torch sees no GPU")
    result: dict = {"arguments": vars(arguments), "errors": {}}
    result["environment"] = {
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "transformers": __import__("transformers").__version__,
        "peft": __import__("peft").__version__}
    print("configuration:", json.dumps(result["arguments"]), flush=True)
    print("environment:", json.dumps(result["environment"]), flush=True)
    peaks = (Peaks(**json.loads(Path(arguments.peaks_from).read_text())["peaks"])
             if arguments.peaks_from else None if arguments.no_peaks else measure_peaks(device))
    if peaks is not None:
        result["peaks"] = vars(peaks)
        print(f"peaks: fp32 {peaks.fp32_flops / 1e12:.2f} TFLOP/s, bf16 "
              f"{peaks.bf16_flops / 1e12:.2f} TFLOP/s, read "
              f"{peaks.read_bytes_per_s / 1e9:.1f} GB/s", flush=True)

    def write() -> None:
        if arguments.out:
            Path(arguments.out).parent.mkdir(parents=True, exist_ok=True)
            Path(arguments.out).write_text(json.dumps(result, indent=2, default=str))

    # 1. the model folder and the project's model
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) \
        else None
    folder = Path(arguments.model_dir) if arguments.model_dir else Path(
        tempfile.mkdtemp(prefix=f"gpu_step_{arguments.shape}_", dir=base))
    save_dtype = getattr(torch, arguments.save_dtype or arguments.dtype)
    if not (folder / "config.json").is_file():
        result["model"] = build_model_folder(arguments.shape, Path(arguments.assets), folder,
                                             device, save_dtype, arguments.seed)
    else:
        result["model"] = {"reused_folder": True}
    result["model"]["folder"] = str(folder)
    print("model:", json.dumps(result["model"]), flush=True)
    reset_peak(device)
    start = time.perf_counter()
    torch.manual_seed(arguments.seed + 1)  # LoRA A
    model = HuggingfaceLoRALanguageModel(
        str(folder), dtype=arguments.dtype, device=arguments.device,
        gradient_checkpointing=arguments.gradient_checkpointing, sampler=arguments.sampler,
        lora_config=LoRASettings(r=16, lora_alpha=32, target_modules="all-linear"))
    synchronize(device)
    lora = [p for p in model.trainable_parameters()]
    result["load"] = {"seconds": time.perf_counter() - start, **memory(device),
                      "lora_parameters": sum(p.numel() for p in lora),
                      "lora_dtype": str(lora[0].dtype).removeprefix("torch."),
                      "base_dtype": str(model.dtype).removeprefix("torch."),
                      "attn_implementation": model.model.get_base_model().config._attn_implementation,
                      "sampler": type(model._sampler).__name__}
    print("load:", json.dumps(result["load"]), flush=True)
    write()

    # 2. sampling throughput
    vocab = model.model.get_base_model().config.vocab_size
    stop = set(model.end_of_turn_ids())
    low = max(stop) + 1 if stop else 0  # random ids above the special ones
    rng = random.Random(arguments.seed)
    params = SamplingParams(n=arguments.samples, temperature=1.0, top_p=1.0,
                            max_new_tokens=arguments.new_tokens)
    warm = random_prompts(rng, arguments.prompts, arguments.prompt_tokens, low, vocab)
    timed_generate(model, warm, SamplingParams(n=arguments.samples,
                                               max_new_tokens=min(16, arguments.new_tokens)))
    prompts = random_prompts(rng, arguments.prompts, arguments.prompt_tokens, low, vocab)
    reset_peak(device)
    torch.manual_seed(arguments.seed + 2)
    groups, result["sampling"] = timed_generate(model, prompts, params)
    result["sampling"].update(memory(device))
    states = getattr(model._sampler, "_states", {})  # the static-cache sampler's buckets
    result["sampling"]["cuda_graphs"] = sum(state.graph is not None for state in states.values())
    result["sampling"]["decode_ms_per_step"] = (1000 * result["sampling"]["seconds"]
                                                / arguments.new_tokens)
    print("sampling:", json.dumps(result["sampling"]), flush=True)
    if peaks is not None:
        result["sampling"]["roofline"] = sampling_roofline(model, result["sampling"],
                                                           arguments.new_tokens, peaks)
        print(result["sampling"]["roofline"], flush=True)
    write()

    if arguments.profile_steps:
        try:
            result["profile"] = profile_decode(model, prompts, arguments)
            print("profile:", json.dumps(result["profile"]), flush=True)
        except Exception:  # noqa: BLE001
            result["errors"]["profile"] = traceback.format_exc()
            print(result["errors"]["profile"], flush=True)
        write()

    # trajectories of the first turn
    trajectories: list[Trajectory] = []
    for prompt, group in zip(prompts, groups, strict=True):
        for generation in group:
            trajectory = Trajectory()
            trajectory.append_context(prompt)
            trajectory.append_sampled(generation.token_ids, generation.logprobs,
                                      generation.finish_reason, generation.policy_version,
                                      params.temperature, params.top_p, params.max_new_tokens)
            trajectories.append(trajectory)

    # 3. sampler / trainer agreement (first turn)
    try:
        result["agreement_turn1"] = agreement(
            model, [t.token_ids for t in trajectories], [t.loss_mask for t in trajectories],
            [t.sampling_logprobs for t in trajectories], arguments.score_rows)
        print("agreement, first turn:", json.dumps(result["agreement_turn1"]), flush=True)
    except Exception:  # noqa: BLE001 - a failure is a finding: record it and go on
        result["errors"]["agreement_turn1"] = traceback.format_exc()
        print(result["errors"]["agreement_turn1"], flush=True)
    write()

    # a second turn from the prefix cache, then a nucleus-sampling call
    try:
        second = [t.token_ids + [rng.randrange(low, vocab) for _ in range(8)]
                  for t in trajectories]
        cached_before = len(model._sampler.prefix_cache)
        turn2_params = SamplingParams(n=1, max_new_tokens=arguments.second_turn_tokens)
        groups2, result["sampling_turn2"] = timed_generate(model, second, turn2_params)
        result["sampling_turn2"]["prefix_cache_entries_before"] = cached_before
        sequences, masks, logprobs = [], [], []
        for prompt, [generation] in zip(second, groups2, strict=True):
            sequences.append(prompt + generation.token_ids)
            masks.append([0] * len(prompt) + [1] * len(generation.token_ids))
            logprobs.append([0.0] * len(prompt) + generation.logprobs)
        print("sampling, second turn:", json.dumps(result["sampling_turn2"]), flush=True)
        result["agreement_turn2"] = agreement(model, sequences, masks, logprobs,
                                              arguments.score_rows)
        print("agreement, second turn (prefix cache):", json.dumps(result["agreement_turn2"]),
              flush=True)
        _, result["sampling_top_p"] = timed_generate(
            model, prompts[:2], SamplingParams(n=arguments.samples, top_p=0.9,
                                               max_new_tokens=min(32, arguments.new_tokens)))
        print("sampling, top_p 0.9:", json.dumps(result["sampling_top_p"]), flush=True)
    except Exception:  # noqa: BLE001
        result["errors"]["second_turn"] = traceback.format_exc()
        print(result["errors"]["second_turn"], flush=True)
    write()

    # 4. one GRPO step through the project's callback
    def episodes() -> list[Episode]:
        made = []
        for index, trajectory in enumerate(trajectories):
            group, slot = divmod(index, arguments.samples)
            episode = Episode(Sample(sample_id=f"p{group}"), slot, 0, environment=None)  # type: ignore[arg-type]
            episode.trajectory = trajectory
            episode.reward = float((slot + group) % 2)  # spread in every group of 2+
            episode.status = EpisodeStatus.COMPLETED
            episode.outcome = Outcome.CORRECT if episode.reward > 0 else Outcome.INCORRECT
            made.append(episode)
        return made

    result["grpo_step_config"] = {
        "rows": len(trajectories),
        "tokens": sum(len(t.token_ids) for t in trajectories),
        "completion_tokens": sum(t.completion_token_count for t in trajectories),
        "micro_batch_max_tokens": token_budget(arguments),
        "gradient_checkpointing": arguments.gradient_checkpointing,
        "learning_rate": arguments.learning_rate, "kl_coef": arguments.kl_coef,
        "loss": "ppo_clip (dual clip 3), token-mean, KL k3 to the base model"}
    result["grpo_step"] = grpo_step(model, episodes(), arguments.samples, arguments)
    print("GRPO step (project callback):", json.dumps(
        {k: v for k, v in result["grpo_step"].items() if k != "metrics"}), flush=True)
    if peaks is not None:
        result["grpo_step"]["roofline"] = step_roofline(
            model, [list(t.token_ids) for t in trajectories],
            result["grpo_step_config"]["completion_tokens"], arguments.kl_coef > 0,
            result["grpo_step"]["seconds"], peaks)
        print(result["grpo_step"]["roofline"], flush=True)
    write()
    if arguments.profile_step:
        try:
            print(profile_step(model, episodes(), arguments), flush=True)
        except Exception:  # noqa: BLE001
            result["errors"]["profile_step"] = traceback.format_exc()
            print(result["errors"]["profile_step"], flush=True)
        write()
    print("errors:", list(result["errors"]) or "none", flush=True)


if __name__ == "__main__":
    main()
