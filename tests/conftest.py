"""Shared fixtures. The tiny model is built once per test session (untrained: a few seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def tiny_spec(**changes) -> dict:
    spec = yaml.safe_load((ROOT / "conf" / "model" / "tiny.yaml").read_text())["tiny"]
    return {**spec, **changes}


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """An untrained tiny MiniCPM-SALA checkpoint (real tokenizer, config, remote code, bf16 weights)."""
    from soarlab.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", tiny_spec(train_steps=0))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir, trust_remote_code=True)
