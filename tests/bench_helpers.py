"""Helpers for the bench tests: the bench config (conf/bench/tiny.yaml over soar.yaml) and small speed sets."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]


def bench_cfg(**changes):
    """conf/bench/tiny.yaml as Hydra composes it (it extends soar.yaml), with test-friendly changes."""
    base = OmegaConf.load(ROOT / "conf" / "bench" / "soar.yaml")
    tiny = OmegaConf.load(ROOT / "conf" / "bench" / "tiny.yaml")
    tiny.pop("defaults", None)
    cfg = OmegaConf.merge(base, tiny, {"pause_after_flush_s": 0.0, "progress": False, "request_timeout_s": 20}, changes)
    OmegaConf.set_struct(cfg, True)
    return cfg


def write_set(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
