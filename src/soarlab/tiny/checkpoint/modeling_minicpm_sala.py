"""Forward pass of the tiny MiniCPM-SALA test model.

Same module tree and tensor names as openbmb/MiniCPM-SALA, so quantization rules, checkpoint
checks and loaders see the real layout; the arithmetic is a plain stand-in (causal softmax
attention for `minicpm4` layers, normalized causal linear attention for `lightning-attn`
layers) that runs anywhere. It is a test model, not a port of the real kernels.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

try:
    from .configuration_minicpm_sala import MiniCPMSALAConfig
except ImportError:  # loaded as a top-level module
    from configuration_minicpm_sala import MiniCPMSALAConfig

SPARSE, LIGHTNING = "minicpm4", "lightning-attn"
# transformers 5 names the cache `cache`; 4.x (the real model's platform) names it `past_key_values`.
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class MiniCPMRMSNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _split_heads(x, heads):
    bsz, seq, _ = x.shape
    return x.view(bsz, seq, heads, -1).transpose(1, 2)


def _causal_keep(q_len, k_len, device, padding_mask):
    """Boolean [b|1, 1, q, k] mask: True where a query may look at a key."""
    offset = k_len - q_len
    rows = torch.arange(q_len, device=device)[:, None] + offset
    keep = (torch.arange(k_len, device=device)[None, :] <= rows)[None, None]
    if padding_mask is not None:
        keep = keep & padding_mask[:, None, None, -k_len:].bool()
    return keep


class SparseAttention(nn.Module):
    """`minicpm4` mixer: GQA softmax attention with a sigmoid output gate (`o_gate`)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        h = config.hidden_size
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.o_gate = nn.Linear(h, self.heads * self.head_dim, bias=False)

    def forward(self, x, cache, padding_mask):
        q = _split_heads(self.q_proj(x), self.heads)
        k = _split_heads(self.k_proj(x), self.kv_heads)
        v = _split_heads(self.v_proj(x), self.kv_heads)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        keep = _causal_keep(q.shape[2], k.shape[2], x.device, padding_mask)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.o_proj(out * torch.sigmoid(self.o_gate(x)))


class LightningAttention(nn.Module):
    """`lightning-attn` mixer: causal linear attention with q/k norms, output norm and `z_proj` gate."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.heads, self.head_dim = config.lightning_nh, config.lightning_head_dim
        h, inner = config.hidden_size, config.lightning_nh * config.lightning_head_dim
        self.q_proj = nn.Linear(h, inner, bias=False)
        self.k_proj = nn.Linear(h, inner, bias=False)
        self.v_proj = nn.Linear(h, inner, bias=False)
        self.o_proj = nn.Linear(inner, h, bias=False)
        self.z_proj = nn.Linear(h, inner, bias=False)
        self.q_norm = MiniCPMRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = MiniCPMRMSNorm(self.head_dim, config.rms_norm_eps)
        self.o_norm = MiniCPMRMSNorm(inner, config.rms_norm_eps)

    def forward(self, x, cache, padding_mask):
        q = F.elu(self.q_norm(_split_heads(self.q_proj(x), self.heads))) + 1
        k = F.elu(self.k_norm(_split_heads(self.k_proj(x), self.heads))) + 1
        v = _split_heads(self.v_proj(x), self.heads)
        if cache is not None:
            # The real model keeps a fixed-size recurrent state; keeping k/v is simpler and equivalent here.
            k, v = cache.update(k, v, self.layer_idx)
        keep = _causal_keep(q.shape[2], k.shape[2], x.device, padding_mask)
        scores = (q @ k.transpose(-1, -2)) * keep / math.sqrt(self.head_dim)
        out = (scores @ v) / scores.sum(-1, keepdim=True).clamp_min(1e-6)
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.o_proj(self.o_norm(out) * torch.sigmoid(self.z_proj(x)))


class MiniCPMMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MiniCPMSALADecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        mixer = config.mixer_types[layer_idx]
        self.self_attn = SparseAttention(config, layer_idx) if mixer == SPARSE else LightningAttention(config, layer_idx)
        self.mlp = MiniCPMMLP(config)
        self.input_layernorm = MiniCPMRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = MiniCPMRMSNorm(config.hidden_size, config.rms_norm_eps)
        # muP depth scaling, as in MiniCPM.
        self.residual_scale = config.scale_depth / math.sqrt(config.num_hidden_layers)

    def forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
        h = hidden_states + self.self_attn(self.input_layernorm(hidden_states), cache, attention_mask) * self.residual_scale
        return h + self.mlp(self.post_attention_layernorm(h)) * self.residual_scale


class MiniCPMSALAPreTrainedModel(PreTrainedModel):
    config_class = MiniCPMSALAConfig
    base_model_prefix = "model"
    _no_split_modules = ["MiniCPMSALADecoderLayer"]
    _supports_cache_class = True

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
        elif isinstance(module, MiniCPMRMSNorm):
            nn.init.ones_(module.weight)


class MiniCPMSALAModel(MiniCPMSALAPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(MiniCPMSALADecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = MiniCPMRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids=None, attention_mask=None, cache=None, inputs_embeds=None, use_cache=None, **kwargs):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids) * self.config.scale_emb
        if use_cache and cache is None:
            cache = DynamicCache()
        h = inputs_embeds
        for layer in self.layers:
            h = layer(h, cache=cache if use_cache else None, attention_mask=attention_mask)
        return self.norm(h), cache


class MiniCPMSALAForCausalLM(MiniCPMSALAPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {}

    def __init__(self, config):
        super().__init__(config)
        self.model = MiniCPMSALAModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, cache=None, inputs_embeds=None,
                labels=None, use_cache=None, logits_to_keep=0, past_key_values=None, **kwargs):
        use_cache = self.config.use_cache if use_cache is None else use_cache
        cache = cache if cache is not None else past_key_values
        hidden, cache = self.model(input_ids, attention_mask, cache, inputs_embeds, use_cache)
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        # muP output scaling, as in MiniCPM.
        logits = self.lm_head(hidden / (self.config.hidden_size / self.config.dim_model_base))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache if use_cache else None})
