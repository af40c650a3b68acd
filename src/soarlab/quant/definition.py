"""GPTQModel model definition for `minicpm_sala` (openbmb/MiniCPM-SALA and the tiny test model).

GPTQModel 7.6 has no entry for this model type and would fall back to auto-detecting the module
tree. The layers are heterogeneous: `minicpm4` (sparse) layers have `self_attn.o_gate`,
`lightning-attn` layers have `self_attn.z_proj` and the `q_norm`/`k_norm`/`o_norm` norms. One tree
lists the union and `layer_modules_strict = False` lets each layer skip what it lacks.

Subset numbers (`:0`, `:1`) group modules that see the same input, quantized together:
q/k/v/o_gate/z_proj all read the normalized hidden state; o_proj reads the attention output;
gate/up read the post-attention norm; down_proj reads the MLP activation. `o_gate` and `z_proj`
are in the tree so that a rule *may* quantize them; the default exclusions (`quant.exclude`) keep
them in bf16 through negative `dynamic` entries.
"""

from __future__ import annotations

MODEL_TYPE = "minicpm_sala"

# Leaf names of quantizable linear layers, relative to model.layers.N (the union over mixer kinds).
LAYER_LINEARS = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_gate", "self_attn.z_proj",
    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
)
# SGLang fuses these into one layer (qkv_proj, gate_up_proj): they must share one precision.
FUSED_GROUPS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}

_registered = None


def definition_class():
    """The BaseQModel subclass (built lazily: importing gptqmodel is slow)."""
    global _registered
    if _registered is not None:
        return _registered
    from gptqmodel.models.base import BaseQModel

    class MiniCPMSALAQModel(BaseQModel):
        pre_lm_head_norm_module = "model.norm"
        layer_modules_strict = False  # sparse and lightning layers have different modules
        require_trust_remote_code = True
        support_batch_quantize = True
        module_tree = [
            "model",
            "layers",
            "#",
            {
                "input_layernorm": ("input_layernorm:!",),
                "self_attn": (
                    "q_norm:!", "k_norm:!", "o_norm:!",
                    "q_proj:0", "k_proj:0", "v_proj:0", "o_gate:0", "z_proj:0",
                    "o_proj:1",
                ),
                "post_attention_layernorm": ("post_attention_layernorm:!",),
                "mlp": ("gate_proj:0", "up_proj:0", "down_proj:1"),
            },
        ]

    _registered = MiniCPMSALAQModel
    return _registered


def register() -> type:
    """Make GPTQModel pick our definition for model_type `minicpm_sala` (idempotent)."""
    from gptqmodel.models import auto

    cls = definition_class()
    auto.MODEL_MAP[MODEL_TYPE] = cls
    if MODEL_TYPE not in auto.SUPPORTED_MODELS:
        auto.SUPPORTED_MODELS.append(MODEL_TYPE)
    return cls
