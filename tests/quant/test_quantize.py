"""Quantization of the tiny model with real GPTQModel (CPU): every preset, faults, stage, CLI (the rules it
plans by: tests/quant/test_rules.py)."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from soarlab.config import compose
from soarlab.errors import SoarError

from support import ROOT, copy_conf, qcfg

# Each test here quantizes the tiny model with real GPTQModel (or takes a module fixture that does).
pytestmark = pytest.mark.slow

PRESETS = ("gptq_w4", "gptq_w4_mixed", "gptq_w8", "rtn_w4", "none")


@pytest.fixture(scope="module")
def quantized(tiny_model_dir, tmp_path_factory):
    """preset -> (output dir, report); each preset quantized once per module."""
    from soarlab.quant.quantize import quantize_checkpoint

    cache = {}

    def get(preset):
        if preset not in cache:
            out = tmp_path_factory.mktemp(preset) / "model"
            cache[preset] = (out, quantize_checkpoint(tiny_model_dir, out, qcfg(preset), model_name="tiny"))
        return cache[preset]

    return get


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_quantizes_checks_reloads_and_generates(preset, quantized, tiny_tokenizer):
    import torch

    from soarlab.quant.check import check_checkpoint
    from soarlab.quant.hf_compat import load_causal_lm

    out, report = quantized(preset)
    assert check_checkpoint(out, qcfg(preset).exclude) == []
    config = json.loads((out / "config.json").read_text())
    assert "AutoConfig" not in config["auto_map"] and "AutoModelForCausalLM" in config["auto_map"]
    assert config["dtype"] == "bfloat16"
    for name in ("tokenizer.json", "chat_template.jinja", "generation_config.json", "modeling_minicpm_sala.py"):
        assert (out / name).is_file(), name
    assert report["serve_quantization"] == compose([f"quant={preset}"]).quant.serve_quantization
    model = load_causal_lm(out)
    ids = tiny_tokenizer("The model", return_tensors="pt")
    with torch.no_grad():
        gen = model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # the trained model may stop early
    assert gen.shape[1] == ids["input_ids"].shape[1] + 4
    m = report["metrics"]
    if preset == "none":
        assert "quantization_config" not in config and m["modules_bf16"] == m["modules_total"]
    else:
        assert m["size_after_bytes"] < m["size_before_bytes"]
        assert 0 < m["rel_output_error_mean"] < 0.3


def test_quantized_bytes_do_not_depend_on_the_cpu(quantized, tiny_model_dir, tmp_path):
    """The same inputs give the same checkpoint file for file whatever the CPU's instruction set and thread
    count (quant.cpu_numerics fixes both), so DVC's hash of models/quantized is the committed one on any
    machine. Varied here as far as one machine allows: ATen's kernels (default = no SIMD, avx512) and the
    threads (1, 2). Without the pin, these give other bytes (docs/PERFORMANCE.md)."""
    import hashlib
    import os
    import re
    import subprocess
    import sys

    def digests(folder):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}

    outputs = []
    for capability, threads in (("default", "1"), ("avx512", "2")):
        out = tmp_path / f"{capability}-{threads}"
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        proc = subprocess.run([sys.executable, "-m", "soarlab.cli", "prepare-model", "--input", str(tiny_model_dir),
                               "--output", str(out), "model=tiny", "quant=gptq_w4_mixed"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(digests(out))
    assert outputs[0] == outputs[1]
    # a clean log: GPTQModel's per-layer tables (rows like "INFO  | ... |") are not printed
    output = proc.stdout + proc.stderr
    table = re.search(r"^INFO\s+[|+]", output, re.M)
    assert not table, output[max(0, table.start() - 1500): table.start() + 500]
    # GPTQModel's per-module log (wall-clock times) is kept out of the checkpoint, in the report without times
    first, report = quantized("gptq_w4_mixed")
    assert "quant_log.csv" not in digests(first)
    assert report["gptq_log"] and {"layer", "module", "loss"} <= set(report["gptq_log"][0]) and "time" not in report["gptq_log"][0]


def test_plain_transformers_call_reloads_after_prepare(quantized):
    """After hf_compat.prepare(dir), the plain transformers call works (what the engines use)."""
    from transformers import AutoModelForCausalLM

    from soarlab.quant.hf_compat import prepare

    out, _ = quantized("gptq_w4_mixed")
    prepare(out)
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    assert model.model.layers[0].self_attn.q_proj.bits == 8
    assert model.model.layers[1].self_attn.q_proj.bits == 4
    assert type(model.model.layers[0].self_attn.o_gate).__name__ == "Linear"


def test_mixed_preset_keeps_sparse_qkv_at_8_bits_and_exclusions_bf16(quantized):
    from safetensors import safe_open

    out, report = quantized("gptq_w4_mixed")
    config = json.loads((out / "config.json").read_text())
    mixers = config["mixer_types"]
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        for i, mixer in enumerate(mixers):
            q = f.get_slice(f"model.layers.{i}.self_attn.q_proj.qweight").get_shape()
            assert q[0] == config["hidden_size"] * (8 if mixer == "minicpm4" else 4) // 32
            gate = "o_gate" if mixer == "minicpm4" else "z_proj"
            assert f"model.layers.{i}.self_attn.{gate}.weight" in keys
            assert f"model.layers.{i}.self_attn.{gate}.qweight" not in keys
    assert "lm_head.weight" in keys and "model.embed_tokens.weight" in keys
    dyn = config["quantization_config"]["dynamic"]
    assert list(dyn)[0].startswith("-:")  # negatives first: first match wins in SGLang
    assert any("qkv_proj" in k for k in dyn)  # SGLang's fused name is covered too
    assert report["bits_per_module"]["model.layers.0.self_attn.o_gate"] == "bf16"
    assert report["metrics"]["rel_output_error_mean_8bit"] < report["metrics"]["rel_output_error_mean_4bit"]


def test_model_dir_without_weights_is_an_error(tiny_model_dir, tmp_path):
    from soarlab.quant.quantize import quantize_checkpoint

    src = tmp_path / "noweights"
    shutil.copytree(tiny_model_dir, src, ignore=shutil.ignore_patterns("*.safetensors"))
    with pytest.raises(SoarError, match="safetensors"):
        quantize_checkpoint(src, tmp_path / "out", qcfg("rtn_w4"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fault", [KeyboardInterrupt(), OSError(28, "No space left on device")])
def test_interrupt_or_full_disk_mid_write_leaves_no_output(fault, tiny_model_dir, tmp_path, monkeypatch):
    """The fault is injected after GPTQModel wrote its files, before the output is complete."""
    from soarlab.quant import quantize as q

    def boom(*args, **kwargs):
        raise fault

    monkeypatch.setattr(q, "_fix_config", boom)
    with pytest.raises(type(fault)):
        q.quantize_checkpoint(tiny_model_dir, tmp_path / "out", qcfg("rtn_w4"))
    assert list(tmp_path.iterdir()) == []


def test_failed_check_leaves_no_output(tiny_model_dir, tmp_path):
    from soarlab.quant.quantize import quantize_checkpoint

    # An exclusion list the output violates (mlp quantized but "must stay unquantized").
    with pytest.raises(SoarError, match="fails"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_checkpoint(tiny_model_dir, tmp_path / "out",
                                qcfg("rtn_w4", rules=[{"name": "mlp", "match": r".*\.mlp\..*", "bits": 4,
                                                       "override_exclude": True}],
                                     exclude=[r".*\.o_gate", r".*\.z_proj", "lm_head", r"model\.embed_tokens", r".*\.mlp\..*"]))
    assert list(tmp_path.iterdir()) == []


# --- stage and CLI

def test_stage_writes_model_and_reports(tiny_model_dir, tmp_path, monkeypatch):
    from soarlab.stages import quantize as stage

    copy_conf(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "base").symlink_to(tiny_model_dir)
    monkeypatch.chdir(tmp_path)
    cfg = compose(["quant=rtn_w4"])
    stage.run(cfg)
    assert (tmp_path / "models" / "quantized" / "model.safetensors").is_file()
    report = json.loads((tmp_path / "reports" / "quantize" / "report.json").read_text())
    metrics = json.loads((tmp_path / "reports" / "quantize" / "metrics.json").read_text())
    assert report["preset"] == "rtn_w4" and report["checks"] == "passed"
    assert all(isinstance(v, (int, float)) for v in metrics.values())
    assert {"size_before_bytes", "size_after_bytes", "quantize_seconds", "rel_output_error_mean"} <= set(metrics)
    assert not (tmp_path / "logs").exists()  # GPTQModel's own per-layer log is not left in the project


def test_prepare_model_cli(tiny_model_dir, tmp_path, capsys):
    from soarlab.cli import main

    out = tmp_path / "processed"
    assert main(["prepare-model", "--input", str(tiny_model_dir), "--output", str(out), "quant=rtn_w4"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["preset"] == "rtn_w4"
    assert main(["check-checkpoint", str(out)]) == 0


def test_prepare_model_cli_bad_input_exits_2(tmp_path):
    from soarlab.cli import main

    assert main(["prepare-model", "--input", str(tmp_path / "missing"), "--output", str(tmp_path / "o")]) == 2
