"""The embedded tiny model is shipped bytes: installed as they are, checked against SHA256SUMS, and scoring the
README's accuracy table."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys

import pytest

from soarlab.errors import SoarError
from soarlab.tiny import CHECKPOINT_DIR, install_tiny_model, verify_checkpoint

from support import ROOT, copy_conf


def test_install_copies_the_checked_bytes(tmp_path):
    out = install_tiny_model(tmp_path / "base")
    names = verify_checkpoint()
    assert sorted(p.name for p in out.iterdir()) == names
    assert all((out / n).read_bytes() == (CHECKPOINT_DIR / n).read_bytes() for n in names)
    assert {oct((out / n).stat().st_mode & 0o777) for n in names} == {"0o644"}  # readable by all, as any output
    # the manifest is sha256sum's own format
    subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=CHECKPOINT_DIR, check=True)


@pytest.mark.parametrize("change", ["edit", "extra", "missing"])
def test_a_changed_checkpoint_is_refused_with_the_fix(tmp_path, change):
    copy = shutil.copytree(CHECKPOINT_DIR, tmp_path / "checkpoint")
    if change == "edit":
        data = bytearray((copy / "model.safetensors").read_bytes())
        data[-1] ^= 1
        (copy / "model.safetensors").write_bytes(bytes(data))
    elif change == "extra":
        (copy / "notes.txt").write_text("x")
    else:
        (copy / "tokenizer.json").unlink()
    with pytest.raises(SoarError) as info:
        verify_checkpoint(copy)
    assert {"edit": "model.safetensors fail their sha256", "extra": "notes.txt", "missing": "tokenizer.json"}[change] in str(info.value)
    assert "scripts/build_tiny_model.py" in str(info.value)


def test_the_outlier_channel_changes_the_weights_not_what_the_model_computes():
    """add_outlier_channel (spec.yaml's `outlier`), applied once more to the shipped model: the same logits to the
    bit, the sparse layers' q/k/v column `channel` 32 times larger. A scale bfloat16 cannot hold exactly is refused."""
    import torch
    from pydantic import ValidationError
    from transformers import AutoModelForCausalLM

    from soarlab.tiny.build import OutlierSpec, add_outlier_channel, load_spec

    outlier = load_spec().outlier
    model = AutoModelForCausalLM.from_pretrained(CHECKPOINT_DIR, trust_remote_code=True, dtype=torch.bfloat16).eval()
    ids = torch.arange(3, 40)[None]
    sparse = model.model.layers[model.config.mixer_types.index("minicpm4")].self_attn
    column = sparse.q_proj.weight[:, outlier.channel].clone()
    with torch.no_grad():
        before = model(ids).logits
        add_outlier_channel(model, outlier)
        after = model(ids).logits
    assert torch.equal(before, after)
    assert torch.equal(sparse.q_proj.weight[:, outlier.channel], column * outlier.scale)
    with pytest.raises(ValidationError, match="not a power of two"):
        OutlierSpec(channel=0, scale=24)


def _readme_table() -> dict[str, tuple[float, float]]:
    """quant -> (raw accuracy, C) as the README's tiny-default table states them."""
    text = (ROOT / "README.md").read_text()
    lines = text[text.index("| quant | raw accuracy | C | note |"):].splitlines()[2:]
    table = {}
    for line in itertools.takewhile(lambda s: s.startswith("|"), lines):
        quant, raw, c = (cell.strip() for cell in line.strip("|").split("|")[:3])
        table[quant.split()[0]] = (float(raw), float(c))
    return table


@pytest.mark.slow
def test_shipped_model_scores_the_readme_table(tiny_model_dir, tmp_path, monkeypatch):
    """Each preset of the README's table, on the shipped bytes, through the pipeline's own path: pinned
    quantization (`soarlab prepare-model`, real GPTQModel), then the accuracy stage (real lm-eval against a
    real `transformers serve`). The table's figures are measured, and they tell the real model's story
    (RULES.md 7) where it decides the score: the default mixed preset and 8-bit keep C, the default with margin,
    and fully 4-bit weights lose it."""
    from soarlab.config import compose
    from soarlab.datasets.correctness import fetch_correctness_set, read_correctness_set
    from soarlab.stages import accuracy

    table = _readme_table()
    assert {"none", "gptq_w4", "gptq_w4_mixed", "gptq_w8", "rtn_w4", "fp8"} <= set(table), table
    copy_conf(tmp_path)
    monkeypatch.chdir(tmp_path)
    cfg = compose(["engine.port=0"])
    fetch_correctness_set(cfg.eval.dataset, tmp_path / "data" / "correctness.jsonl")
    measured = {}
    for preset in table:
        out = tmp_path / "quantized" / preset
        proc = subprocess.run([sys.executable, "-m", "soarlab.cli", "prepare-model", "--input", str(tiny_model_dir),
                               "--output", str(out), "model=tiny", f"quant={preset}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-2000:]
        cfg = compose(["engine.port=0", f"quant={preset}", f"paths.quantized_model={out}", f"paths.reports=reports/{preset}"])
        summary = accuracy.run(cfg)
        assert summary["failed"] == 0, summary["warnings"]
        measured[preset] = (round(summary["ori_accuracy"], 2), summary["C"])
    # One answer may flip between CPU types (their float kernels round differently): each raw accuracy is the
    # table's within one question, and each C is the table's.
    one_question = 100 / len(read_correctness_set(tmp_path / "data" / "correctness.jsonl"))
    assert {p: c for p, (_, c) in measured.items()} == {p: c for p, (_, c) in table.items()}, measured
    assert all(abs(measured[p][0] - table[p][0]) <= one_question + 0.01 for p in table), (measured, table)
    # unquantized, 8-bit and the default hold C = 1, so the main command's final score is above 0
    assert (measured["none"][1], measured["gptq_w4_mixed"][1], measured["gptq_w8"][1]) == (1, 1, 1), measured
    assert (measured["gptq_w4"][1], measured["rtn_w4"][1]) == (0, 0), measured
    band = max(b.above for b in cfg.score.c_table if b.C == 1.0)  # normalized accuracy C = 1 must exceed
    one_question = 100 / summary["n"]
    assert measured["gptq_w4_mixed"][0] - band / 100 * cfg.model.baseline_accuracy >= 2 * one_question, measured
    assert one_question <= 1  # the set is large enough that one question moves ori by a point at most
    assert cfg.model.baseline_accuracy < measured["none"][0]  # the baseline stands below the unquantized model
