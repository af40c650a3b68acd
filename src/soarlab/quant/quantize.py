"""Quantize a MiniCPM-SALA checkpoint into a directory SGLang serves with --quantization gptq_marlin.

`quantize_checkpoint(input, output, qcfg)`:
1. resolve the rules into a plan and GPTQModel's `dynamic` (soarlab.quant.rules);
2. GPTQ (calibrated) or RTN through GPTQModel with our `minicpm_sala` definition, or for `none`
   a hard-linked/copied base model;
3. post-process: drop `auto_map.AutoConfig` (RULES.md 7), keep the remote code files,
   `auto_map.AutoModelForCausalLM`, tokenizer, chat template and generation config, `dtype` bf16;
4. run the validator (soarlab.quant.check) on the result; any problem fails the job;
5. measure the report (soarlab.quant.report).
Everything is written into a temporary directory renamed into place at the end (atomic_dir):
an interrupt, a full disk or a failed check leaves no output that looks valid.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path

from soarlab.atomic import atomic_dir, scratch_dir
from soarlab.errors import SoarError
from soarlab.schema import Calibration, QuantGroup

WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt", "*.pth")


def pin_cpu_numerics(numerics) -> None:
    """Quantizing on a CPU, fix what float32 GPTQ's bytes depend on: the kernels' instruction set (ATen,
    MKL and oneDNN each pick theirs by CPU) and the thread count (quant.cpu_numerics). Then the same
    inputs give the same checkpoint on any x86-64 CPU with AVX2. The variables are read when torch loads,
    so the quantize stage and prepare-model call this first, in their own processes; a library caller
    (a test) keeps its process's numerics, and its environment is left alone for what it starts later.
    A process that already loaded torch is not pinned: changing them under loaded libraries is unsafe.
    A GPU machine quantizes on CUDA: nothing is pinned there."""
    if Path("/dev/nvidiactl").exists() or "torch" in sys.modules:
        return
    threads = str(numerics.threads)
    os.environ.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "GPTQMODEL_CPU_WORKERS": threads,
                       **{name: str(value) for name, value in numerics.env.items()}})


def _calibration_settings(qcfg: QuantGroup, model_name: str | None) -> Calibration:
    """quant.calibration with the model's `per_model` values in place of the defaults they set."""
    cal = qcfg.calibration
    override = cal.per_model.get(model_name) if model_name else None
    return cal.model_copy(update=override.model_dump(exclude_none=True)) if override else cal


def _is_weight(path: Path) -> bool:
    return any(path.match(p) for p in WEIGHT_FILES)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _copy_side_files(src: Path, dst: Path) -> list[str]:
    """Tokenizer, chat template, generation config, remote code: whatever the output lacks."""
    copied = []
    for f in sorted(src.iterdir()):
        if f.is_file() and not _is_weight(f) and f.name != "config.json" and not (dst / f.name).exists():
            shutil.copy2(f, dst / f.name)
            copied.append(f.name)
    return copied


def _fix_config(out_dir: Path, base_config: dict, qcfg: QuantGroup) -> None:
    path = out_dir / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else dict(base_config)
    auto_map = dict(config.get("auto_map") or base_config.get("auto_map") or {})
    auto_map.pop("AutoConfig", None)  # RULES.md 7: SGLang must use its own config class
    if auto_map:
        config["auto_map"] = auto_map
    else:
        config.pop("auto_map", None)
    config["dtype"] = "bfloat16"
    config.pop("torch_dtype", None)
    qc = config.get("quantization_config")
    if qc is not None:
        qc["checkpoint_format"] = qc.get("checkpoint_format", qcfg.checkpoint_format)
        meta = qc.get("meta") or {}
        meta.pop("offload_to_disk_path", None)  # a temp path of the quantizing machine
        meta["soarlab_preset"] = qcfg.name
    path.write_text(json.dumps(config, indent=2) + "\n")
    qpath = out_dir / "quantize_config.json"
    if qpath.is_file():  # keep GPTQModel's copy consistent with config.json
        q = json.loads(qpath.read_text())
        (q.get("meta") or {}).pop("offload_to_disk_path", None)
        qpath.write_text(json.dumps(q, indent=2) + "\n")


@contextlib.contextmanager
def _output_into(log: Path | None):
    """This process's stdout and stderr, at the file descriptors, appended to `log` (None: left alone).
    GPTQModel prints its banner at import, and its INFO lines, progress bars, per-layer tables, the
    saved config and generation_config dumps, and the JIT compiler's output through its own writers
    and child processes: only the descriptors catch them all."""
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(log, "ab") as fh:
            os.dup2(fh.fileno(), 1), os.dup2(fh.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os.dup2(saved[0], 1), os.dup2(saved[1], 2)
    finally:
        os.close(saved[0]), os.close(saved[1])


def _gptq(input_dir: Path, out_dir: Path, qcfg: QuantGroup, plan, cal: Calibration, samples: list[dict]) -> list[dict]:
    """GPTQModel's quantize and save into out_dir; returns its per-module log (the checkpoint keeps none)."""
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(qcfg.cpu_numerics.threads))  # GPTQModel on CPU needs it
    import torch
    from gptqmodel import GPTQModel, QuantizeConfig
    from gptqmodel.quantization.config import RTNConfig

    from soarlab.quant.definition import register

    register()
    common = dict(
        bits=qcfg.bits, group_size=qcfg.group_size, sym=qcfg.sym, desc_act=qcfg.desc_act,
        dynamic=plan.dynamic or None, offload_to_disk=qcfg.offload_to_disk, format=qcfg.checkpoint_format,
    )
    if qcfg.method == "rtn":
        config = RTNConfig(**common)
    else:
        config = QuantizeConfig(**common, damp_percent=qcfg.damp_percent,
                                damp_auto_increment=qcfg.damp_auto_increment,
                                act_group_aware=qcfg.act_group_aware and not qcfg.desc_act)
    torch.manual_seed(cal.seed)  # same inputs, same bytes (tests/quant/test_quantize.py quantizes twice)
    with _gptqmodel_logs_elsewhere(out_dir.parent):
        model = GPTQModel.load(str(input_dir), config, trust_remote_code=True, dtype=torch.bfloat16)
        if qcfg.method == "rtn":
            model.quantize(None)
        else:
            model.quantize(samples, batch_size=cal.batch_size)
        model.save(str(out_dir))
        del model
    return _take_quant_log(out_dir)


def _take_quant_log(out_dir: Path) -> list[dict]:
    """GPTQModel saves quant_log.csv (per module: loss, samples, damp, wall-clock time) into the
    checkpoint. Its times differ on every run, so the folder's hash would too, and bench and accuracy
    would re-run for a byte-identical model: the log moves into the report, without the times."""
    from gptqmodel.models.writer import PROCESS_LOG_TIME

    path = out_dir / "quant_log.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as fh:
        rows = [{k: v for k, v in row.items() if k != PROCESS_LOG_TIME} for row in csv.DictReader(fh)]
    path.unlink()
    return rows


@contextlib.contextmanager
def _gptqmodel_logs_elsewhere(beside: Path):
    """GPTQModel 7.6 prints two tables per layer (a row per quantized module; the timing of its
    regions) and writes the module rows into ./logs of whatever folder it runs in (the project root,
    under DVC). The report keeps the module numbers (`gptq_log`, from quant_log.csv) and our own
    timings, so neither table is printed and the files go to a scratch folder beside the output,
    removed afterwards (and by the next run, if this one is killed); the rest of its output goes where
    _output_into sends it."""
    from gptqmodel.looper import loop_processor
    from gptqmodel.utils.logger import QuantizationRegionTimer

    processor = loop_processor.LoopProcessor
    saved = loop_processor._PROJECT_LOG_DIR, processor.log_new_row, QuantizationRegionTimer.flush
    with scratch_dir(beside, "gptqmodel-logs") as tmp:
        loop_processor._PROJECT_LOG_DIR = tmp
        processor.log_new_row = lambda self, stat: None
        QuantizationRegionTimer.flush = lambda self: None
        try:
            yield
        finally:
            loop_processor._PROJECT_LOG_DIR, processor.log_new_row, QuantizationRegionTimer.flush = saved


def _refuse_bad_inputs(input_dir: Path, output_dir: Path, qcfg: QuantGroup) -> dict:
    """The base model's config.json, once the model folder and the preset are known to be usable."""
    from soarlab.hub import validate_model_dir
    from soarlab.quant.rules import read_config

    if not input_dir.is_dir():
        raise SoarError(f"input model directory {input_dir} does not exist", "pass --input / set paths.base_model to a model directory")
    if input_dir == output_dir:
        raise SoarError("input and output are the same directory", "write the quantized model elsewhere")
    method = qcfg.method
    if method not in ("gptq", "rtn", "none"):
        raise SoarError(f"quant.method is {method!r}", "use gptq, rtn or none")
    if method != "none" and not qcfg.sym:
        raise SoarError("quant.sym is false", "gptq_marlin requires symmetric quantization: set quant.sym=true")
    validate_model_dir(input_dir)
    base_config = read_config(input_dir)
    if "quantization_config" in base_config:
        raise SoarError(f"{input_dir} is already quantized", "quantize the original bf16 checkpoint")
    return base_config


def _refuse_bad_output(model_dir: Path, qcfg: QuantGroup) -> None:
    from soarlab.quant.check import check_checkpoint

    problems = check_checkpoint(model_dir, exclude=qcfg.exclude) if qcfg.check else []
    if problems:
        raise SoarError(f"the quantized checkpoint fails {len(problems)} check(s): " + "; ".join(problems[:5]),
                        "see `soarlab check-checkpoint` on a kept copy; fix the preset in conf/quant/")


def _quantize_into(tmp: Path, input_dir: Path, qcfg: QuantGroup, plan, cal: Calibration, samples: list,
                   log: Path | None) -> list[dict]:
    """Write the quantized (or, for method none, linked) weights into `tmp`; GPTQModel's per-module log."""
    if qcfg.method != "none":
        with _output_into(log):
            return _gptq(input_dir, tmp, qcfg, plan, cal, samples)
    for f in sorted(input_dir.iterdir()):
        if f.is_file() and f.name != "config.json":
            _link_or_copy(f, tmp / f.name)
    return []


def quantize_checkpoint(input_dir: str | Path, output_dir: str | Path, qcfg: QuantGroup, model_name: str | None = None,
                        root: Path | None = None, library_log: Path | None = None) -> dict:
    """Quantize `input_dir` into `output_dir` (atomically). Returns the report (dict). `library_log`: where
    GPTQModel's own output goes (None: this process's stdout and stderr)."""
    t_start = time.perf_counter()
    input_dir, output_dir = Path(input_dir).resolve(), Path(output_dir).resolve()
    base_config = _refuse_bad_inputs(input_dir, output_dir, qcfg)  # before transformers loads torch: a bad model fails fast
    from transformers import AutoTokenizer

    from soarlab.quant import report as rep
    from soarlab.quant.calibration import calibration_samples
    from soarlab.quant.rules import build_plan, inventory

    method = qcfg.method
    modules = inventory(input_dir)  # raises when there are no weights
    plan = build_plan(modules, qcfg)
    if method == "none":
        plan.bits = {n: None for n in plan.bits}
        plan.dynamic = {}
    cal = _calibration_settings(qcfg, model_name)
    tokenizer = AutoTokenizer.from_pretrained(str(input_dir), trust_remote_code=True)
    samples, cal_warnings = calibration_samples(tokenizer, cal.source, cal.num_samples,
                                                cal.seq_len, cal.seed, root)
    timings: dict[str, float] = {}
    with atomic_dir(output_dir) as tmp:
        t0 = time.perf_counter()
        gptq_log = _quantize_into(tmp, input_dir, qcfg, plan, cal, samples, library_log)
        timings["quantize"] = time.perf_counter() - t0
        copied = _copy_side_files(input_dir, tmp)
        _fix_config(tmp, base_config, qcfg)
        _refuse_bad_output(tmp, qcfg)
        t0 = time.perf_counter()
        quantized_bits = plan.quantized()
        errors = {}
        if quantized_bits:
            n_err = min(qcfg.report.error_samples, len(samples))
            errors = rep.reconstruction_errors(input_dir, tmp, quantized_bits, samples[:n_err],
                                               qcfg.checkpoint_format)
        timings["report"] = time.perf_counter() - t0
        size_before, size_after = rep.dir_size(input_dir), rep.dir_size(tmp)
    timings["total"] = time.perf_counter() - t_start
    return {
        "preset": qcfg.name,
        "method": method,
        "serve_quantization": qcfg.serve_quantization,
        "input": str(input_dir),
        "output": str(output_dir),
        "calibration": {**cal.model_dump(exclude={"per_model"}), "samples_used": len(samples) if method == "gptq" else 0},
        "dynamic": plan.dynamic,
        "bits_per_module": {n: (b if b is not None else "bf16") for n, b in sorted(plan.bits.items())},
        "rule_hits": plan.rule_hits,
        "reconstruction_error": errors,
        "gptq_log": gptq_log,
        "warnings": plan.warnings + cal_warnings,
        "side_files_copied": copied,
        "checks": "passed" if qcfg.check else "skipped",
        "metrics": rep.summarize(plan.bits, {m.name: m.shape for m in modules}, errors, size_before, size_after, timings),
    }
