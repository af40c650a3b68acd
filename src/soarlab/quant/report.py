"""What a quantization did: sizes, bits per module, per-layer reconstruction error.

The reconstruction error of a quantized linear is measured from the checkpoints themselves:
the bf16 base model runs the calibration windows; a hook on every quantized linear takes the
input X it receives and compares X W^T (bf16 weight) with X Wq^T (Wq dequantized from the
output's qweight/qzeros/scales/g_idx by soarlab.quant.packing, not by GPTQModel):
    rel_output_error = ||X Wq^T - X W^T|| / ||X W^T||   (Frobenius, over all calibration tokens)
plus the relative weight error ||Wq - W|| / ||W||. Errors accumulate in the hooks, so memory stays
one layer's worth even on the real model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from soarlab.domain import GPTQ_V1, gptq_format_version


def dir_size(path: str | Path, pattern: str = "*.safetensors") -> int:
    return sum(p.stat().st_size for p in Path(path).glob(pattern))


def _quantized_tensors(qdir: Path) -> dict[str, Path]:
    from safetensors import safe_open

    out = {}
    for f in sorted(qdir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                if k.endswith(".qweight"):
                    out[k[: -len(".qweight")]] = f
    return out


def reconstruction_errors(base_dir: Path, qdir: Path, bits: dict[str, int], samples: list[dict],
                          checkpoint_format: str = GPTQ_V1) -> dict[str, dict[str, float]]:
    """Module -> {rel_output_error, rel_weight_error} on `samples` (input_ids windows)."""
    from safetensors import safe_open
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM

    from soarlab.quant.hf_compat import register_config
    from soarlab.quant.packing import dequantize

    register_config(base_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), trust_remote_code=True, dtype=torch.bfloat16)
    model.to(device).eval()
    files = _quantized_tensors(qdir)
    stats: dict[str, list[float]] = {}
    wq_cache: dict[str, torch.Tensor] = {}
    version = gptq_format_version(checkpoint_format)

    def dequant(name: str) -> torch.Tensor:
        if name not in wq_cache:
            with safe_open(str(files[name]), framework="pt") as h:
                t = [h.get_tensor(f"{name}.{s}") for s in ("qweight", "qzeros", "scales", "g_idx")]
            wq_cache[name] = dequantize(*t, bits=bits[name], format_version=version).to(device)
        return wq_cache[name]

    hooks = []
    modules = dict(model.named_modules())
    for name in bits:
        if name not in files or name not in modules:
            continue

        def hook(mod, inputs, output, name=name):
            x = inputs[0].float().reshape(-1, inputs[0].shape[-1])
            w = mod.weight.float()
            ref = x @ w.t()
            diff = x @ dequant(name).t() - ref
            s = stats.setdefault(name, [0.0, 0.0])
            s[0] += float(diff.pow(2).sum())
            s[1] += float(ref.pow(2).sum())

        hooks.append(modules[name].register_forward_hook(hook))
    try:
        with torch.no_grad():
            for sample in tqdm(samples, desc="reconstruction error", unit="sample", leave=False):
                ids = torch.tensor([sample["input_ids"]], device=device)
                model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    errors = {}
    for name, (num, den) in stats.items():
        w = modules[name].weight.detach().float()
        wq = dequant(name)
        errors[name] = {
            "rel_output_error": (num / den) ** 0.5 if den else float("nan"),
            "rel_weight_error": float((wq - w).norm() / w.norm()),
        }
    del model
    return errors


def summarize(plan_bits: dict[str, int | None], shapes: dict[str, tuple[int, ...]], errors: dict,
              size_before: int, size_after: int, timings: dict[str, float]) -> dict[str, float]:
    """Flat numbers for metrics.json (MLflow metrics)."""
    linear_params = {n: shapes[n][0] * shapes[n][1] for n in plan_bits if n in shapes}
    total = sum(linear_params.values()) or 1
    avg_bits = sum(linear_params[n] * (b if b is not None else 16) for n, b in plan_bits.items() if n in linear_params) / total
    out = {
        "size_before_bytes": size_before,
        "size_after_bytes": size_after,
        "compression_ratio": size_before / size_after if size_after else 0.0,
        "modules_total": len(plan_bits),
        "modules_4bit": sum(1 for b in plan_bits.values() if b == 4),
        "modules_8bit": sum(1 for b in plan_bits.values() if b == 8),
        "modules_bf16": sum(1 for b in plan_bits.values() if b is None),
        "avg_weight_bits": avg_bits,
        **{f"{k}_seconds": v for k, v in timings.items()},
    }
    if errors:
        outs = [e["rel_output_error"] for e in errors.values()]
        out["rel_output_error_mean"] = sum(outs) / len(outs)
        out["rel_output_error_max"] = max(outs)
        for b in (4, 8):
            sel = [e["rel_output_error"] for n, e in errors.items() if plan_bits.get(n) == b]
            if sel:
                out[f"rel_output_error_mean_{b}bit"] = sum(sel) / len(sel)
    return out
