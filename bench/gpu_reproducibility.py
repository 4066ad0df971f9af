"""Is a seeded run repeatable on this device? A short GRPO recipe on a randomly initialised
SmolLM2-shaped model (no weights needed: bench/gpu_step.py's model folder), run by the
project's command in new processes:

1. twice from scratch (`reproducible: true`);
2. once SIGKILLed after `--kill_after` committed batches and half a batch more, then
   resumed by the same command;
3. with --control, twice with `reproducible: false`: whether this device gives other bits
   without the mode at all (if the control runs agree too, the recipe is too small to
   tell);
4. probes, in this process once the runs are done: float cumsum under the mode (torch
   refuses it on CUDA where it has no deterministic kernel; the project's token draw uses
   it), and each attention backend's forward and backward three times on the same inputs,
   with and without the mode.

Each pair is compared as bench/kill_anywhere.py compares a killed run with its reference
(every adapter tensor bit for bit, runs.jsonl rows, metrics without wall-clock keys, the
evaluation files), plus runs.jsonl and the adapter's files byte for byte.

python bench/gpu_reproducibility.py [--device cuda] [--shape smollm2-135m|tiny]
    [--assets .gpu_assets/smollm2-135m] [--work_dir /tmp/gpu_reproducibility]
    [--batches 3] [--kill_after 1] [--control] [--out reproducibility.json]
Check it here on the CPU:
python bench/gpu_reproducibility.py --device cpu --shape tiny \
    --assets ~/.cache/agent-rl/models/smollm2-135m --batches 2 --new_tokens 8 --control
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]  # importable from anywhere, as a script too

import torch  # noqa: E402
from gpu_step import build_model_folder  # noqa: E402
from kill_anywhere import compare, final_adapter, run  # noqa: E402

from src.runtime.reproducibility import CUBLAS_WORKSPACE_VARIABLE, make_reproducible  # noqa: E402

# The recipe: GRPO with dropout and sampling at temperature 1 (both draw from the seeded
# generators); tests/runtime/test_reproducibility.py runs it too, on the tiny model
RECIPE = """\
assignment_config:
  output_dir: {output}
  sample_order: random
  random_seed: 5
  reproducible: {reproducible}
  rollout: {{batch_size: {batch_size}, group_size: 4, max_batches: {batches}}}
  evaluation: {{at_end: true, max_samples: 8, temperature: 1.0}}
  trackers: {{tensorboard: false}}
  task: {task}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters:
        model_name_or_path: {model}
        device: {device}
        lora_config: {{r: 16, lora_alpha: 32, target_modules: all-linear, lora_dropout: 0.05}}
  agent:
    name: lora_rl_agent
    parameters: {{language_model: policy, temperature: 1.0, max_new_tokens: {new_tokens}}}
  callback_dict:
    rl:
      name: rl_training
      parameters:
        algorithm: grpo
        learning_rate: 1e-4
        # random weights answer nothing right: the entropy term moves the adapter anyway
        ppo: {{epochs: 2, mini_batch_size: 8, entropy_coeff: 0.05}}
        kl: {{coef: 0.01}}
"""
MATH = "{name: math_problems, parameters: {num_train: 64, num_validation: 8}}"


def same_bytes(first: Path, second: Path) -> dict[str, bool]:
    """runs.jsonl and every file of the final checkpoint's adapter (weights and
    adapter_config.json), byte for byte."""
    adapters = [max((folder / "callback_state" / "rl").glob("checkpoint-*")) / "lora_weights"
                for folder in (first, second)]
    names = [sorted(path.name for path in adapter.iterdir()) for adapter in adapters]
    return {
        "runs_jsonl_bytes_equal": ((first / "runs.jsonl").read_bytes()
                                   == (second / "runs.jsonl").read_bytes()),
        "adapter_files_bytes_equal": bool(names[0]) and names[0] == names[1] and all(
            (adapters[0] / name).read_bytes() == (adapters[1] / name).read_bytes()
            for name in names[0])}


def agree(comparison: dict[str, Any]) -> bool:
    """Whether a comparison found the two runs equal in everything it compared."""
    return (comparison["adapter_tensors"] > 0 and comparison["adapter_tensors_differing"] == 0
            and comparison["episodes_logged_twice"] == 0 and comparison["runs_jsonl_equal"]
            and comparison["metrics_rows_equal"] and comparison["evaluation_files_equal"]
            and comparison["runs_jsonl_bytes_equal"] and comparison["adapter_files_bytes_equal"])


def log_tail(log: Path, characters: int = 3000) -> str:
    return log.read_text(errors="replace")[-characters:] if log.exists() else ""


def repeated(step: Callable[[], tuple[torch.Tensor, ...]], times: int = 3) -> dict[str, Any]:
    """Run `step` `times` times; whether each of its outputs came out bit-identical."""
    try:
        outputs = [step() for _ in range(times)]
    except RuntimeError as error:  # no kernel of this kind here, or one the mode refuses
        return {"ran": False, "error": str(error).splitlines()[0][:300]}
    return {"ran": True, "identical": [all(torch.equal(first, other[index])
                                           for other in outputs[1:])
                                       for index, first in enumerate(outputs[0])]}


def attention_probe(device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """Each scaled-dot-product-attention backend, forward and backward (output, dq, dk, dv)
    three times on one input of SmolLM2-135M's head shape (9 heads of 64, causal)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    generator = torch.Generator(device=device).manual_seed(0)
    shape = (4, 9, 1024, 64)
    inputs = [torch.randn(shape, generator=generator, device=device, dtype=dtype)
              for _ in range(4)]

    def forward_and_backward(backend: SDPBackend) -> tuple[torch.Tensor, ...]:
        query, key, value = (tensor.clone().requires_grad_() for tensor in inputs[:3])
        with sdpa_kernel(backend):
            output = torch.nn.functional.scaled_dot_product_attention(query, key, value,
                                                                      is_causal=True)
            output.backward(inputs[3])
        return output.detach(), query.grad, key.grad, value.grad

    return {backend.name.lower(): repeated(lambda backend=backend: forward_and_backward(backend))
            for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                            SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH)}


def cumsum_probe(device: torch.device) -> dict[str, Any]:
    """A float64 cumsum over rows of 192 entries, as the project's token draw runs one."""
    values = torch.rand((16, 192), dtype=torch.float64, device=device,
                        generator=torch.Generator(device=device).manual_seed(0))
    return repeated(lambda: (values.cumsum(dim=-1),))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", choices=["smollm2-135m", "tiny"], default="smollm2-135m")
    parser.add_argument("--assets", default=".gpu_assets/smollm2-135m",
                        help="folder with the embedded model's config.json and tokenizer")
    parser.add_argument("--work_dir", type=Path, default=Path("/tmp/gpu_reproducibility"))
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=4, help="samples a batch, 4 each")
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--kill_after", type=int, default=1,
                        help="committed batches before the kill (half a batch later)")
    parser.add_argument("--control", action="store_true",
                        help="also two runs without the reproducible mode")
    parser.add_argument("--out", type=Path, default=None)
    arguments = parser.parse_args()

    device = torch.device(arguments.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but torch sees no GPU")
    # the control runs inherit this process's environment: it must not carry the mode's
    # cuBLAS layout (the reproducible runs set it themselves)
    inherited = os.environ.pop(CUBLAS_WORKSPACE_VARIABLE, None)
    result: dict[str, Any] = {
        "arguments": {key: str(value) for key, value in vars(arguments).items()},
        "environment": {
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "transformers": __import__("transformers").__version__,
            "peft": __import__("peft").__version__,
            "inherited_cublas_workspace_config": inherited},
        "runs": {}, "comparisons": {}, "verdict": {}, "probes": {}, "errors": {}}

    def write() -> None:
        if arguments.out:
            arguments.out.parent.mkdir(parents=True, exist_ok=True)
            arguments.out.write_text(json.dumps(result, indent=2, default=str) + "\n")

    work = arguments.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    folder = work / f"model_{arguments.shape}"
    if not (folder / "config.json").is_file():
        result["model"] = build_model_folder(arguments.shape, Path(arguments.assets).expanduser(),
                                             folder, device, torch.float32, seed=0)
    configs = {}
    for reproducible in (True, False):
        configs[reproducible] = work / f"recipe_reproducible_{str(reproducible).lower()}.yaml"
        configs[reproducible].write_text(RECIPE.format(
            output=work / "unused",  # each run is given its own with --output_dir
            reproducible=str(reproducible).lower(), batch_size=arguments.batch_size,
            batches=arguments.batches, task=MATH, model=folder, device=device.type,
            new_tokens=arguments.new_tokens))
    print("model:", json.dumps(result.get("model", {"reused_folder": str(folder)})), flush=True)
    write()

    def finished(name: str, reproducible: bool = True, **kill: Any) -> dict[str, Any] | None:
        """Run `name` (its folder emptied first unless it is being resumed); None on a
        failure, which is recorded with the end of its log."""
        output, log = work / name, work / f"{name}.log"
        try:
            record = run(configs[reproducible], output, log, **kill)
        except SystemExit as failure:
            result["errors"][name] = {"error": str(failure), "log_tail": log_tail(log)}
            print(f"{name}: FAILED\n{log_tail(log)}", flush=True)
            return None
        result["runs"].setdefault(name, []).append(record)
        print(f"{name}: {json.dumps(record)}", flush=True)
        write()
        return record

    def compared(label: str, first: str, second: str) -> bool:
        comparison = {**compare(work / first, work / second),
                      **same_bytes(work / first, work / second)}
        result["comparisons"][label] = comparison
        print(f"{label}: {json.dumps(comparison)}", flush=True)
        write()
        return agree(comparison)

    for name in ("reference", "again", "killed", "control_a", "control_b"):
        # runs of an earlier invocation are started afresh, not resumed
        shutil.rmtree(work / name, ignore_errors=True)
        (work / f"{name}.log").unlink(missing_ok=True)
    start = time.monotonic()
    reference = finished("reference")
    if reference is not None:
        moved = max((tensor.abs().max().item() for name, tensor
                     in final_adapter(work / "reference").items() if "lora_B" in name),
                    default=0.0)
        result["verdict"]["adapter_moved"] = moved > 0
        if finished("again") is not None:
            result["verdict"]["two_runs_identical"] = compared("two_runs", "reference", "again")
        batch_seconds = reference["loop_seconds"] / arguments.batches
        kill = finished("killed", kill_fraction=0.5, after_batches=arguments.kill_after,
                        default_batch_seconds=batch_seconds)
        if kill is not None:
            result["verdict"]["kill_landed"] = not kill["ended"]
            if finished("killed") is not None:
                result["verdict"]["resumed_identical"] = compared("resumed", "reference",
                                                                  "killed")
    if arguments.control and all(finished(name, reproducible=False) is not None
                                 for name in ("control_a", "control_b")):
        result["verdict"]["control_runs_identical"] = compared("control", "control_a",
                                                               "control_b")
    result["runs_seconds"] = round(time.monotonic() - start, 1)

    # the probes change this process's settings, so they come after every run
    probes = {"cumsum_float64": lambda: cumsum_probe(device),
              "attention": lambda: attention_probe(
                  device, torch.bfloat16 if device.type == "cuda" else torch.float32)}
    for mode in ("without_mode", "with_mode"):
        if mode == "with_mode":
            make_reproducible()
        for label, probe in probes.items():
            try:
                result["probes"].setdefault(label, {})[mode] = probe()
            except Exception:  # noqa: BLE001 - a probe that breaks is a finding: record it
                result["errors"][f"probe_{label}_{mode}"] = traceback.format_exc()
    print("probes:", json.dumps(result["probes"]), flush=True)
    write()
    print("verdict:", json.dumps(result["verdict"]), "errors:", list(result["errors"]) or "none",
          flush=True)


if __name__ == "__main__":
    main()
