"""The short summary of bench/gpu_check.sh's folder: what each stage settled, read from the
files it wrote (a stage that wrote nothing is reported as missing, never guessed).

python bench/gpu_check_summary.py FOLDER    prints it and writes FOLDER/summary.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

GPU_STEP_FILES = {"135M bf16": "smollm2_135m_bf16.json", "7B bf16": "7b_bf16.json",
                  "135M bf16 kv_cache sampler": "smollm2_135m_bf16_kv_cache.json",
                  "135M bf16 without the mode": "smollm2_135m_bf16_no_mode.json"}


def identical(outcome: dict[str, Any]) -> bool | str:
    """A probe's repeats: all bit-identical, or why they did not run."""
    return all(outcome["identical"]) if outcome["ran"] else f"did not run: {outcome['error']}"


def reproducibility(folder: Path) -> dict[str, Any] | None:
    path = folder / "reproducibility.json"
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    probes = {f"{label} {mode}": identical(checks) if "ran" in checks
              else {backend: identical(outcome) for backend, outcome in checks.items()}
              for label, modes in result["probes"].items() for mode, checks in modes.items()}
    return {"gpu": result["environment"]["gpu"], "torch": result["environment"]["torch"],
            "verdict": result["verdict"], "probes_identical": probes,
            "runs_seconds": result.get("runs_seconds"), "errors": sorted(result["errors"])}


def tests(folder: Path) -> list[str] | None:
    """pytest's closing lines and each invocation's exit status."""
    path = folder / "pytest_cuda.log"
    if not path.is_file():
        return None
    return [line.strip() for line in path.read_text(errors="replace").splitlines()
            if re.search(r"(\d+ (passed|failed|errors?|skipped|deselected)\b.* in [\d.]+s)"
                         r"|rc=\d+", line)]


def gpu_step(folder: Path, name: str) -> dict[str, Any] | None:
    path = folder / name
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    sampling, step = result.get("sampling", {}), result.get("grpo_step", {})
    agreement = result.get("agreement_turn1", {})
    return {"reproducible": result["arguments"].get("reproducible"),
            "sampler": result.get("load", {}).get("sampler"),
            "sampling_tokens_per_s": sampling.get("tokens_per_s"),
            "decode_ms_per_step": sampling.get("decode_ms_per_step"),
            "sampling_roofline": sampling.get("roofline"),
            "micro_batch_budget_tokens": step.get("micro_batch_budget_tokens",
                                                  result.get("grpo_step_config", {}).get(
                                                      "auto_budget_tokens")),
            "grpo_step_roofline": step.get("roofline"),
            "logprob_abs_diff_mean_max": [agreement.get("mean_abs_diff"),
                                          agreement.get("max_abs_diff")],
            "grpo_step_s": step.get("seconds"),
            "grpo_step_peak_allocated_gib": step.get("peak_allocated_gib"),
            "adapter_changed": step.get("adapter_changed"),
            "finished": "grpo_step" in result, "errors": sorted(result.get("errors", {}))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    summary = {"reproducibility": reproducibility(folder), "tests_on_cuda": tests(folder),
               **{f"gpu_step {label}": gpu_step(folder, name)
                  for label, name in GPU_STEP_FILES.items()}}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for stage, figures in summary.items():
        print(f"{stage}: {'missing' if figures is None else json.dumps(figures)}")


if __name__ == "__main__":
    main()
