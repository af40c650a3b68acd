"""Model folders the GPU recipes serve: Llama shapes SGLang 0.5.17 runs as they are.

- `write_dummy_llama`: a Llama-3-8B-like shape (hidden 4096, 32 heads / 8 KV heads,
  intermediate 14336, vocab 73448; 32 layers = 7.58 B parameters) for `--load-format dummy`, with a
  WordLevel `t<id>` tokenizer, optionally with the quantization_config SOAR Lab's own rules
  (soarlab.quant.rules) write for a quant preset. No weights: SGLang fills them with random numbers.
- `SMALL` / `gen_weights` / `write_small_llama`: a small Llama with real random weights (hidden 1024,
  2 layers, vocab 2048 of soarlab.tiny's tokenizer), generated bit-stably from a seed, so the GPU side
  rebuilds the bf16 model instead of receiving it, and checks it tensor by tensor against the CPU's sha256.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

VOCAB = 73448
# MiniCPM-SALA's sparse (minicpm4) layers (RULES.md 5): the layers whose q/k/v gptq_w4_mixed keeps at 8 bits.
SALA_SPARSE_LAYERS = (0, 9, 16, 17, 22, 29, 30, 31)


def dummy_config(layers: int = 32, context: int = 32768) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": layers, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": VOCAB, "max_position_embeddings": context,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": "bfloat16",
        "mixer_types": ["minicpm4" if i in SALA_SPARSE_LAYERS else "lightning-attn" for i in range(layers)],
    }


def wait_for_jit(flag: str | Path | None, limit_s: float = 900) -> float:
    """Seconds waited until run.sh's gptq_marlin JIT pre-warm wrote `flag` (a GPTQ server started before it
    would compile the same kernels again), at most `limit_s`; 0 without a flag."""
    started = time.time()
    while flag and not Path(flag).exists() and time.time() - started < limit_s:
        time.sleep(2)
    return round(time.time() - started, 1)


def quantization_config(config: dict, preset: str) -> dict:
    """The quantization_config SOAR Lab writes for `quant=<preset>` on a model of this config's shape."""
    from soarlab.config import compose
    from soarlab.quant.rules import Module, build_plan

    q = compose([f"quant={preset}"]).quant
    h, inter = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    shapes = {"self_attn.q_proj": (h, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
              "self_attn.o_proj": (h, h), "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h),
              "mlp.down_proj": (h, inter)}
    mixers = config.get("mixer_types") or []
    modules = [Module(f"model.layers.{i}.{leaf}", shape, i, leaf, mixers[i] if i < len(mixers) else None)
               for i in range(config["num_hidden_layers"]) for leaf, shape in shapes.items()]
    modules += [Module("model.embed_tokens", (config["vocab_size"], h), None, "model.embed_tokens", None),
                Module("lm_head", (config["vocab_size"], h), None, "lm_head", None)]
    plan = build_plan(modules, q)
    return {"quant_method": "gptq", "bits": int(q.bits), "group_size": int(q.group_size), "sym": bool(q.sym),
            "desc_act": bool(q.desc_act), "checkpoint_format": str(q.checkpoint_format), "lm_head": False,
            "dynamic": plan.dynamic}


def write_wordlevel_tokenizer(d: Path, vocab_size: int = VOCAB, max_len: int = 32768) -> None:
    """`<unk> <s> </s>` then `t3 .. t<vocab-1>`: every `t<id>` word is exactly one token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<unk>", "add_bos_token": False, "add_eos_token": False,
        "model_max_length": max_len}, indent=1))


def write_dummy_llama(d: Path, layers: int = 32, context: int = 32768, quant: str | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    cfg = dummy_config(layers, context)
    if quant:
        cfg["quantization_config"] = quantization_config(cfg, quant)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    (d / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}))
    write_wordlevel_tokenizer(d, max_len=context)
    return d


SEED = 1234
SMALL = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
    "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
    "head_dim": 128, "vocab_size": 2048, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 4, "pad_token_id": 2, "dtype": "bfloat16",
    # layer 0 "sparse", layer 1 not: gptq_w4_mixed's rule then gives layer 0's q/k/v 8 bits (SGLang ignores the key)
    "mixer_types": ["minicpm4", "lightning-attn"],
}


def gen_weights(cfg: dict = SMALL, seed: int = SEED) -> dict:
    """name -> bf16 tensor; uniform PCG64 draws (bit-stable across numpy versions), scaled so the
    residual stream keeps unit size and the logits have a standard deviation of about 4."""
    import numpy as np
    import torch

    rng = np.random.Generator(np.random.PCG64(seed))
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q_out = cfg["num_attention_heads"] * cfg["head_dim"]
    kv_out = cfg["num_key_value_heads"] * cfg["head_dim"]

    def uni(shape, std):
        a = std * 3 ** 0.5
        x = (rng.random(shape, dtype=np.float64) * 2 - 1) * a
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)

    def norm(n):
        return torch.from_numpy((0.75 + 0.5 * rng.random(n)).astype(np.float32)).to(torch.bfloat16)

    w = {"model.embed_tokens.weight": uni((v, h), 1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_proj.weight"] = uni((q_out, h), h ** -0.5)
        w[p + "self_attn.k_proj.weight"] = uni((kv_out, h), h ** -0.5)
        w[p + "self_attn.v_proj.weight"] = uni((kv_out, h), h ** -0.5)
        w[p + "self_attn.o_proj.weight"] = uni((h, q_out), q_out ** -0.5)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        w[p + "mlp.gate_proj.weight"] = uni((inter, h), h ** -0.5)
        w[p + "mlp.up_proj.weight"] = uni((inter, h), h ** -0.5)
        w[p + "mlp.down_proj.weight"] = uni((h, inter), inter ** -0.5)
    w["model.norm.weight"] = norm(h)
    w["lm_head.weight"] = uni((v, h), 4 * h ** -0.5)
    return w


def write_small_llama(d: Path, cfg: dict = SMALL, seed: int = SEED) -> dict:
    """The small Llama as a model folder (config, the embedded model's tokenizer and chat template,
    seeded weights); returns the weights. SGLang serves it as it is, and SOAR Lab's pipeline takes it
    as `model.source=local`."""
    from safetensors.torch import save_file

    from soarlab.tiny.build import train_tokenizer

    d.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(cfg["vocab_size"])
    assert tok.convert_tokens_to_ids("<|im_end|>") == cfg["eos_token_id"]
    tok.save_pretrained(d)
    (d / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (d / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": cfg["eos_token_id"], "pad_token_id": 2, "do_sample": False}) + "\n")
    weights = gen_weights(cfg, seed)
    save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
    return weights


def tensor_sha(t) -> str:
    import torch

    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
