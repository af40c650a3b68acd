"""`soarlab check-checkpoint DIR`: refuse a checkpoint that would cost a submission (RULES.md 7).

Checks, each problem reported on one line:
- config.json: quantization_config is GPTQ, symmetric (also in every `dynamic` override), bits 4/8,
  checkpoint format v1 (`gptq`), desc_act matches g_idx; `dtype` bfloat16; no `auto_map.AutoConfig`;
  the remote model code auto_map names is present;
- tensors: excluded modules (o_gate, z_proj, embeddings, lm_head: `quant.exclude`) have no qweight;
  every decoder linear is either quantized or excluded by a `-:` dynamic entry (else SGLang expects
  a qweight that is not there); the modules SGLang fuses (q/k/v -> qkv_proj, gate/up -> gate_up_proj)
  share one precision, and `dynamic` gives the fused name that same precision: SGLang looks the rules
  up under the fused name only (`get_dynamic_override(prefix=...qkv_proj)`), so a rule naming only
  q_proj/k_proj/v_proj is ignored there; qweight/qzeros/scales/g_idx shapes agree with the bits and group
  size that apply to the module and with config.json's sizes; Marlin tile sizes (in % 128, out % 64);
  the packed zero points are 2^(bits-1)-1 (v1 of 2^(bits-1), the bias Marlin applies); scales finite;
  non-quantized float tensors bf16;
- files: weights, tokenizer, chat template and generation config present.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from soarlab.domain import GPTQ_V1, LAYER_RE, gptq_format_version
from soarlab.errors import SoarError
from soarlab.quant.definition import FUSED_GROUPS, LAYER_LINEARS

MARLIN_BITS = (4, 8)
MARLIN_MIN_K, MARLIN_MIN_N = 128, 64  # gptq_marlin tile sizes: in_features % 128, out_features % 64


def dynamic_override(dynamic: dict | None, name: str):
    """SGLang's/GPTQModel's reading: first key that re.match-es wins; `-:` -> False (unquantized)."""
    for key, value in (dynamic or {}).items():
        if key.startswith("-:"):
            if re.match(key[2:], name):
                return False
        elif re.match(key[2:] if key.startswith("+:") else key, name):
            return value
    return None


def _precision(dynamic: dict, name: str, base_bits) -> str:
    """How SGLang builds module `name` from `dynamic`: 'bf16' or '<bits>-bit'."""
    override = dynamic_override(dynamic, name)
    if override is False:
        return "bf16"
    bits = override.get("bits", base_bits) if isinstance(override, dict) else base_bits
    return f"{bits}-bit"


def fused_problems(dynamic: dict, base_bits, stored: dict[str, str]) -> list[str]:
    """`stored`: module -> 'bf16' or '<bits>-bit' as the checkpoint holds it. SGLang builds one layer
    per fused group and reads `dynamic` under the fused name: both must agree with the parts."""
    problems = []
    layers = sorted({int(m.group(1)) for n in stored if (m := LAYER_RE.match(n))})
    for layer in layers:
        for fused, parts in FUSED_GROUPS.items():
            names = [f"model.layers.{layer}.{p}" for p in parts if f"model.layers.{layer}.{p}" in stored]
            if not names:
                continue
            kinds = {n.rsplit(".", 1)[1]: stored[n] for n in names}
            fused_name = f"model.layers.{layer}.{fused}"
            if len(set(kinds.values())) > 1:
                problems.append(f"{fused_name}: SGLang fuses {', '.join(kinds)} into one layer of one precision, "
                                f"but they are stored as {', '.join(f'{k}={v}' for k, v in kinds.items())}")
                continue
            want, sglang = next(iter(kinds.values())), _precision(dynamic, fused_name, base_bits)
            if sglang != want:
                problems.append(f"{fused_name}: {'/'.join(kinds)} are stored {want}, but SGLang looks `dynamic` up "
                                f"under the fused name and builds it {sglang} (no rule matches {fused_name}), so it "
                                f"fails loading the weights (SGLang 0.5.17, seen on an H200); add the fused name to the "
                                f"rule's regex, as soarlab.quant.rules writes it")
    return problems


def _expected_dims(leaf: str, config: dict) -> tuple[int | None, int | None]:
    """(in, out) config.json implies for a decoder linear, None where it depends on the mixer."""
    h, inter = config.get("hidden_size"), config.get("intermediate_size")
    return {
        "mlp.gate_proj": (h, inter), "mlp.up_proj": (h, inter), "mlp.down_proj": (inter, h),
        "self_attn.q_proj": (h, None), "self_attn.k_proj": (h, None), "self_attn.v_proj": (h, None),
        "self_attn.o_gate": (h, None), "self_attn.z_proj": (h, None), "self_attn.o_proj": (None, h),
    }.get(leaf, (None, None))


@dataclass
class _Quantization:
    """What config.json's quantization_config says, as the tensor checks need it."""
    quantized: bool = False
    bits: int | None = None
    group_size: int | None = None
    dynamic: dict = field(default_factory=dict)
    fmt_version: int = 1
    desc_act: bool = False


def _config_problems(d: Path, config: dict) -> tuple[list[str], _Quantization]:
    problems = []
    auto_map = config.get("auto_map") or {}
    if "AutoConfig" in auto_map:
        problems.append("config.json auto_map.AutoConfig is present: SGLang would use the remote config class (remove it)")
    for cls, ref in auto_map.items():
        module = ref.split("--")[-1].rsplit(".", 1)[0]
        if not (d / f"{module}.py").is_file():
            problems.append(f"config.json auto_map.{cls} names {module}.py, which is missing")
    dtype = config.get("dtype") or config.get("torch_dtype")
    if dtype != "bfloat16":
        problems.append(f"config.json dtype is {dtype!r}, not bfloat16 (serve Marlin checkpoints in bf16)")
    qc = config.get("quantization_config")
    if qc is None:
        return problems, _Quantization()
    q = _Quantization(quantized=True, bits=qc.get("bits"), group_size=qc.get("group_size"),
                      dynamic=qc.get("dynamic") or {}, desc_act=bool(qc.get("desc_act")))
    method = str(qc.get("quant_method", qc.get("method", ""))).lower()
    if method != "gptq":
        problems.append(f"quantization_config.quant_method is {method!r}, not gptq")
    if q.bits not in MARLIN_BITS:
        problems.append(f"quantization_config.bits is {q.bits!r}; gptq_marlin serves 4 or 8")
    if qc.get("sym") is not True:
        problems.append(f"quantization_config.sym is {qc.get('sym')!r}: gptq_marlin requires symmetric quantization")
    fmt = qc.get("checkpoint_format", qc.get("format", GPTQ_V1))
    if fmt != GPTQ_V1:
        problems.append(f"quantization_config.checkpoint_format is {fmt!r}; SGLang reads GPTQ v1 (`gptq`) zero points")
        q.fmt_version = gptq_format_version(fmt)
    return problems + _dynamic_problems(q.dynamic), q


def _dynamic_problems(dynamic: dict) -> list[str]:
    problems = []
    for key, override in dynamic.items():
        if not (key.startswith("+:") or key.startswith("-:")):
            problems.append(f"quantization_config.dynamic key {key!r} lacks a +: or -: prefix")
        if isinstance(override, dict):
            if override.get("sym") is False:
                problems.append(f"quantization_config.dynamic {key!r} sets sym=false: gptq_marlin requires symmetric")
            if override.get("bits", 4) not in MARLIN_BITS:
                problems.append(f"quantization_config.dynamic {key!r} sets bits={override.get('bits')}; gptq_marlin serves 4 or 8")
        try:
            re.compile(key[2:])
        except re.error:
            problems.append(f"quantization_config.dynamic key {key!r} is not a valid regex")
    return problems


def _file_problems(d: Path) -> list[str]:
    problems = []
    if not any((d / n).is_file() for n in ("tokenizer.json", "tokenizer.model")):
        problems.append("no tokenizer (tokenizer.json / tokenizer.model)")
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text()) if (d / "tokenizer_config.json").is_file() else {}
    if not ((d / "chat_template.jinja").is_file() or tok_cfg.get("chat_template")):
        problems.append("no chat template (chat_template.jinja or tokenizer_config.json chat_template)")
    if not (d / "generation_config.json").is_file():
        problems.append("generation_config.json missing")
    return problems


def _module_problems(name: str, load, q: _Quantization, config: dict) -> list[str]:
    """The packed tensors of one quantized module against the bits and group size that apply to it.
    `load(key)` reads a tensor; the module's four tensors are present."""
    import torch

    from soarlab.quant.packing import unpack_cols

    override = dynamic_override(q.dynamic, name) or {}
    b = override.get("bits", q.bits) if isinstance(override, dict) else q.bits
    g = override.get("group_size", q.group_size) if isinstance(override, dict) else q.group_size
    qweight, qzeros, scales, g_idx = (load(f"{name}.{s}") for s in ("qweight", "qzeros", "scales", "g_idx"))
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        return [f"{name}: qweight/qzeros are {qweight.dtype}/{qzeros.dtype}, not int32"]
    in_f, out_f = qweight.shape[0] * 32 // b, qweight.shape[1]
    gs = in_f if g in (-1, None) else g
    groups = -(-in_f // gs)
    m = LAYER_RE.match(name)
    exp_in, exp_out = _expected_dims(m.group(2), config) if m else (None, None)
    if (exp_in and exp_in != in_f) or (exp_out and exp_out != out_f):
        return [f"{name}: qweight {tuple(qweight.shape)} at {b} bits means [{in_f} in, {out_f} out], config.json says [{exp_in} in, {exp_out} out] (wrong bits recorded?)"]
    problems = []
    if in_f % gs:
        problems.append(f"{name}: {in_f} input features not divisible by group size {gs}")
    if in_f % MARLIN_MIN_K or out_f % MARLIN_MIN_N:
        problems.append(f"{name}: [{in_f} in, {out_f} out] does not fit gptq_marlin tiles (in % {MARLIN_MIN_K}, out % {MARLIN_MIN_N})")
    expect = {"scales": (groups, out_f), "qzeros": (groups, out_f * b // 32), "g_idx": (in_f,)}
    shapes = [f"{name}.{s} shape {tuple(t.shape)}, expected {expect[s]} for {b} bits, group size {gs}"
              for s, t in (("scales", scales), ("qzeros", qzeros), ("g_idx", g_idx)) if tuple(t.shape) != expect[s]]
    if shapes:
        return problems + shapes
    if not torch.isfinite(scales.float()).all():
        problems.append(f"{name}.scales has NaN or inf")
    if scales.dtype not in (torch.float16, torch.bfloat16):
        problems.append(f"{name}.scales dtype {scales.dtype}, expected float16/bfloat16")
    stored_zero = (1 << (b - 1)) - (1 if q.fmt_version == 1 else 0)
    zeros = unpack_cols(qzeros, b)
    if not bool((zeros == stored_zero).all()):
        found = sorted(set(zeros.flatten().tolist()))[:6]
        problems.append(f"{name}.qzeros hold {found}, expected all {stored_zero} (symmetric {b}-bit, GPTQ v1: Marlin applies a fixed zero of {1 << (b - 1)})")
    if not q.desc_act and not torch.equal(g_idx.long(), torch.arange(in_f, dtype=torch.int64) // gs):
        problems.append(f"{name}.g_idx is not i // group_size although desc_act is false (Marlin would misread groups)")
    return problems


def _tensor_problems(tensors: dict[str, Path], q: _Quantization, exclude: list, config: dict) -> list[str]:
    from safetensors import safe_open

    def load(key):
        with safe_open(str(tensors[key]), framework="pt") as h:
            return h.get_tensor(key)

    problems = []
    qmodules = sorted(k[: -len(".qweight")] for k in tensors if k.endswith(".qweight"))
    if qmodules and not q.quantized:
        problems.append(f"{len(qmodules)} modules have qweight but config.json has no quantization_config")
    problems += [f"{name} is quantized but must stay unquantized (quant.exclude)"
                 for name in qmodules if any(p.fullmatch(name) for p in exclude)]
    linears = sorted(k[: -len(".weight")] for k in tensors
                     if k.endswith(".weight") and (m := LAYER_RE.match(k[: -len('.weight')])) and m.group(2) in LAYER_LINEARS)
    if q.quantized:
        problems += [f"{name} is stored bf16 but quantization_config does not exclude it (no -: dynamic entry): SGLang would expect a qweight"
                     for name in linears if dynamic_override(q.dynamic, name) is not False]
    for name in qmodules:
        if q.quantized and dynamic_override(q.dynamic, name) is False:
            problems.append(f"{name} is quantized but quantization_config.dynamic excludes it")
        override = dynamic_override(q.dynamic, name) or {}
        if (override.get("bits", q.bits) if isinstance(override, dict) else q.bits) not in MARLIN_BITS:
            continue  # reported with the config
        missing = [s for s in ("qzeros", "scales", "g_idx") if f"{name}.{s}" not in tensors]
        if missing:
            problems.append(f"{name}: missing {', '.join(missing)}")
            continue
        problems += _module_problems(name, load, q, config)
    if q.quantized:
        stored = {n: "bf16" for n in linears}
        stored.update({n: _precision(q.dynamic, n, q.bits) for n in qmodules})
        problems += fused_problems(q.dynamic, q.bits, stored)
    for key in tensors:
        if key.rsplit(".", 1)[-1] in ("qweight", "qzeros", "scales", "g_idx"):
            continue
        with safe_open(str(tensors[key]), framework="pt") as h:
            dt = h.get_slice(key).get_dtype()
        if dt in ("F16", "F32", "F64"):
            problems.append(f"{key} is {dt}, expected BF16")
    return problems


def check_checkpoint(model_dir: str | Path, exclude: Iterable[str]) -> list[str]:
    """All problems found in `model_dir` (empty list: ready to serve with --quantization gptq_marlin);
    `exclude`: the regexes of modules that must stay unquantized (`quant.exclude`)."""
    from safetensors import safe_open

    from soarlab.hub import read_model_config, validate_model_dir

    d = Path(model_dir)
    if not d.is_dir():
        raise SoarError(f"{d} is not a directory", "pass the quantized model directory")
    try:
        config = validate_model_dir(d) and read_model_config(d)
    except SoarError as exc:
        return [exc.problem]
    problems, q = _config_problems(d, config)
    problems += _file_problems(d)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        return problems + ["no *.safetensors weights"]
    tensors: dict[str, Path] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            tensors.update(dict.fromkeys(h.keys(), f))
    return problems + _tensor_problems(tensors, q, [re.compile(p) for p in exclude], config)
