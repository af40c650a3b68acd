"""Reload a quantized (or `none`-preset) checkpoint with plain transformers on CPU.

Why this module exists (what was found, transformers 5.24 / optimum 2.3 / gptqmodel 7.6):

1. The output config.json has no `auto_map.AutoConfig` (RULES.md 7: SGLang must use its own config
   class). `AutoConfig.from_pretrained` then only knows a config class for `model_type`
   `minicpm_sala` if one is registered in-process; there is no file-based alternative. SGLang
   registers its own; here `register_config(dir)` registers the checkpoint's *own* remote config
   class (the configuration_*.py that stays in the directory, found by its `model_type`).
   `auto_map.AutoModelForCausalLM` stays, so the model class still comes from the remote code.
2. transformers hands GPTQ checkpoints to optimum's GPTQQuantizer, which builds every linear of the
   decoder blocks with the one global `bits` and ignores GPTQModel's per-module `dynamic` field:
   o_gate/z_proj (kept bf16) and 8-bit q/k/v load with the wrong shapes and fail.
   `enable_dynamic()` makes optimum honour `dynamic` exactly as GPTQModel and SGLang read it
   (ordered keys, `re.match`, `-:` = keep unquantized, `+:` = override bits/group_size), and
   converts v1 zero points per module with each module's own bits.

`load_causal_lm(dir)` does both and then calls
`AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)`; after `prepare(dir)` that
plain call works too.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from soarlab.domain import GPTQ_V1
from soarlab.errors import SoarError

_patched = False


def _config_class_ref(model_dir: Path, model_type: str) -> str | None:
    """'configuration_x.ClassName' of the config class in `model_dir` whose model_type matches."""
    for path in sorted(model_dir.glob("configuration_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == "model_type" for t in stmt.targets)
                        and isinstance(stmt.value, ast.Constant) and stmt.value.value == model_type):
                    return f"{path.stem}.{node.name}"
    return None


def register_config(model_dir: str | Path) -> None:
    """Register the checkpoint's remote config class for its model_type with AutoConfig."""
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    model_type = config.get("model_type")
    if not model_type or model_type in CONFIG_MAPPING:
        return
    if "AutoConfig" in (config.get("auto_map") or {}):
        return  # transformers finds it itself
    ref = _config_class_ref(model_dir, model_type)
    if ref is None:
        raise SoarError(f"{model_dir} has no configuration_*.py defining model_type {model_type!r}",
                        "keep the model's remote code files in the quantized directory")
    cls = get_class_from_dynamic_module(ref, str(model_dir))
    AutoConfig.register(model_type, cls, exist_ok=True)


def _dynamic_of(model) -> dict | None:
    """`dynamic` from the checkpoint's config.json (transformers' GPTQConfig drops unknown keys)."""
    source = getattr(model.config, "_name_or_path", None) or getattr(model, "name_or_path", None)
    path = Path(str(source or "")) / "config.json"
    if not source or not path.is_file():
        return None
    qc = json.loads(path.read_text()).get("quantization_config") or {}
    return qc.get("dynamic") or None


def enable_dynamic() -> None:
    """Teach optimum's GPTQQuantizer (used by transformers) GPTQModel's per-module `dynamic` field."""
    global _patched
    if _patched:
        return
    import optimum.gptq.quantizer as oq
    from gptqmodel.quantization.config import QuantizeConfig
    from gptqmodel.utils.model import convert_gptq_v1_to_v2_format

    from soarlab.quant.check import dynamic_override

    original_convert = oq.GPTQQuantizer.convert_model

    def convert_model(self, model, **kwargs):
        dynamic = _dynamic_of(model)
        if not dynamic:
            return original_convert(self, model, **kwargs)
        if self.block_name_to_quantize is None:
            self.block_name_to_quantize = oq.get_block_name_with_pattern(model)
        layers = oq.get_layers(model, prefix=self.block_name_to_quantize)
        base = (self.bits, self.group_size, self.desc_act, self.sym)
        groups: dict[tuple, list[str]] = {}
        for name in layers:
            override = dynamic_override(dynamic, name)
            if override is False:
                continue
            o = override or {}
            key = (o.get("bits", self.bits), o.get("group_size", self.group_size),
                   o.get("desc_act", self.desc_act), o.get("sym", self.sym))
            groups.setdefault(key, []).append(name)
        try:
            for (self.bits, self.group_size, self.desc_act, self.sym), names in groups.items():
                self.select_quant_linear(device_map=kwargs.get("device_map"), pack=False)
                self._replace_by_quant_layers(model, names)
        finally:
            self.bits, self.group_size, self.desc_act, self.sym = base
            self.select_quant_linear(device_map=kwargs.get("device_map"), pack=False)
        return model

    def hf_convert_v1_to_v2(model, bits, qlinear_kernel, checkpoint_format, meta):
        # Per-module bits (the stock helper applies one global bits to every module).
        if checkpoint_format != GPTQ_V1:
            return model, False
        return convert_gptq_v1_to_v2_format(model, QuantizeConfig(bits=bits), qlinear_kernel), True

    oq.GPTQQuantizer.convert_model = convert_model
    oq.hf_convert_gptq_v1_to_v2_format = hf_convert_v1_to_v2
    _patched = True


def prepare(model_dir: str | Path) -> None:
    """Everything `AutoModelForCausalLM.from_pretrained(model_dir, trust_remote_code=True)` needs."""
    register_config(model_dir)
    config = json.loads((Path(model_dir) / "config.json").read_text())
    if config.get("quantization_config"):
        enable_dynamic()


def load_causal_lm(model_dir: str | Path, **kwargs):
    """The model, on CPU by default, in bf16."""
    import torch
    from transformers import AutoModelForCausalLM

    prepare(model_dir)
    kwargs.setdefault("dtype", torch.bfloat16)
    kwargs.setdefault("device_map", "cpu")
    return AutoModelForCausalLM.from_pretrained(str(model_dir), trust_remote_code=True, **kwargs)
