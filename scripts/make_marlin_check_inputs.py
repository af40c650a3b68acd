#!/usr/bin/env python
"""CPU side of the Marlin check (scripts/gpu_marlin_check.py): inputs, CPU references, comparison.

Question: does SGLang's `--quantization gptq_marlin` compute the same function as the GPTQ checkpoint
that SOAR Lab's quantization path writes (zero points and packing read as Marlin expects)?

    .venv/bin/python scripts/make_marlin_check_inputs.py build      # model, quantize, check, pack
    .venv/bin/python scripts/make_marlin_check_inputs.py reference  # CPU greedy references
    # GPU: see scripts/gpu_marlin_check.py (carry .gpu/c1 and .gpu/mq)
    .venv/bin/python scripts/make_marlin_check_inputs.py compare DIR   # DIR: the GPU run's $OUT files

`build` writes, under the ignored folder .gpu/:
- mc/bf16: a Llama-shaped model (LlamaForCausalLM, hidden 1024, 2 layers, 8 heads x 128, 2 KV heads,
  intermediate 1536, vocab 2048 from soarlab.tiny's BPE tokenizer, untied lm_head, bf16 safetensors).
  The weights are uniform random numbers from numpy's PCG64 (seed 1234), scaled so the residual
  stream keeps unit size and the logits have a standard deviation of about 4 (greedy choices are
  then not coin flips). `gen_weights` is deterministic, so the GPU side regenerates this model
  instead of carrying it (checked there by sha256 per tensor);
- mc/gptq: `soarlab prepare-model --input mc/bf16 --output mc/gptq model=tiny quant=gptq_w4` (SOAR Lab's
  own path: GPTQModel 4-bit, group 128, sym, desc_act false, format gptq v1, 16 x 128 corpus windows),
  then `soarlab check-checkpoint mc/gptq`;
- mc/gptq_bad: the same checkpoint with every qzeros word rewritten from 0x77777777 (v1: stored
  zero 7 = Marlin's fixed zero 8 minus 1) to 0x88888888 (a v2 zero written into a v1 file: the
  GPTQModel mistake of RULES.md 7). The CPU reference then means w = s * (q - 9); Marlin ignores
  qzeros for symmetric GPTQ and computes s * (q - 8);
- mq/ (carried to the GPU, 7.6 MB): the small files of mc/gptq, quant.safetensors (only the
  qweight/qzeros/scales/g_idx tensors; the bf16 embeddings, norms and lm_head equal mc/bf16's and
  are rebuilt there), manifest.json (sha256 of every tensor of mc/bf16 and mc/gptq) and prompts.json
  (16 prompts of 8..48 corpus tokens, as token ids with BOS).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / ".gpu"
MC, MQ = GPU / "mc", GPU / "mq"
SEED = 1234
NEW_TOKENS = 16
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
    "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
    "head_dim": 128, "vocab_size": 2048, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 4, "pad_token_id": 2, "dtype": "bfloat16",
}
QUANT_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")


def gen_weights(cfg: dict = CONFIG, seed: int = SEED) -> dict:
    """name -> bf16 torch tensor; uniform PCG64 draws (bit-stable across numpy versions)."""
    import numpy as np
    import torch

    rng = np.random.Generator(np.random.PCG64(seed))
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q_out = cfg["num_attention_heads"] * cfg["head_dim"]
    kv_out = cfg["num_key_value_heads"] * cfg["head_dim"]

    def uni(shape, std):  # uniform with this standard deviation
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


def tensor_sha(t) -> str:
    import torch

    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def load_dir(d: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def build() -> None:
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT / "src"))
    from soarlab.tiny.build import _train_tokenizer

    for d in (MC, MQ):
        shutil.rmtree(d, ignore_errors=True)
    bf16 = MC / "bf16"
    bf16.mkdir(parents=True)
    tok = _train_tokenizer(2048)
    assert len(tok) <= CONFIG["vocab_size"], len(tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") == CONFIG["eos_token_id"]
    tok.save_pretrained(bf16)
    (bf16 / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    (bf16 / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": CONFIG["eos_token_id"], "pad_token_id": 2, "do_sample": False}) + "\n")
    weights = gen_weights()
    save_file(weights, str(bf16 / "model.safetensors"), metadata={"format": "pt"})
    print("bf16 model:", sum(t.numel() for t in weights.values()), "parameters", flush=True)

    soar = [str(ROOT / ".venv/bin/soarlab")]
    subprocess.run(soar + ["prepare-model", "--input", str(bf16), "--output", str(MC / "gptq"),
                           "model=tiny", "quant=gptq_w4"], check=True)
    r = subprocess.run(soar + ["check-checkpoint", str(MC / "gptq")], capture_output=True, text=True)
    (MC / "check_checkpoint.txt").write_text(f"rc={r.returncode}\n{r.stdout}{r.stderr}")
    print("check-checkpoint rc", r.returncode, r.stdout, r.stderr, flush=True)

    gq = load_dir(MC / "gptq")
    # broken variant: qzeros 0x77777777 -> 0x88888888 (v2 zeros stored in a v1 file)
    bad = MC / "gptq_bad"
    shutil.copytree(MC / "gptq", bad)
    for f in bad.glob("*.safetensors"):
        f.unlink()
    gbad = {k: (torch.full_like(t, int(0x88888888 - (1 << 32))) if k.endswith(".qzeros") else t) for k, t in gq.items()}
    assert all((t == 0x77777777).all() for k, t in gq.items() if k.endswith(".qzeros")), "qzeros not all 0x77777777"
    save_file(gbad, str(bad / "model.safetensors"), metadata={"format": "pt"})

    MQ.mkdir(parents=True)
    for f in (MC / "gptq").iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and not f.name.endswith(".index.json"):
            shutil.copy2(f, MQ / f.name)
    quant = {k: t for k, t in gq.items() if k.rsplit(".", 1)[-1] in QUANT_SUFFIXES}
    save_file(quant, str(MQ / "quant.safetensors"), metadata={"format": "pt"})
    rest = sorted(set(gq) - set(quant))
    same = {k: tensor_sha(gq[k]) == tensor_sha(weights[k]) and gq[k].dtype == weights[k].dtype for k in rest}
    assert all(same.values()), f"non-quantized tensors differ from bf16: {same}"
    manifest = {"bf16": {k: tensor_sha(t) for k, t in weights.items()},
                "gptq": {k: tensor_sha(t) for k, t in gq.items()},
                "gptq_dtypes": {k: str(t.dtype) for k, t in gq.items()},
                "gptq_from_bf16": rest, "seed": SEED, "config": CONFIG}
    (MQ / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    ids = tok(Path(ROOT / "src/soarlab/tiny/corpus.txt").read_text()[:200000], add_special_tokens=False)["input_ids"]
    import random

    rnd = random.Random(7)
    prompts = []
    for i in range(16):
        n = rnd.randint(8, 48)
        s = rnd.randrange(0, len(ids) - n)
        prompts.append([1] + ids[s:s + n])
    (MQ / "prompts.json").write_text(json.dumps(prompts) + "\n")
    print("packed:", {f.name: f.stat().st_size for f in MQ.iterdir()}, flush=True)


@__import__("functools").lru_cache(None)
def _model(kind: str):
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    if kind == "bf16":
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(str(MC / "bf16"), dtype=torch.bfloat16, device_map="cpu")
    else:
        from soarlab.quant.hf_compat import load_causal_lm

        m = load_causal_lm(MC / kind)
    m.eval()
    return m


def logprobs_of(kind: str, seq: list[int], start: int):
    """log-softmax (float32) of the logits at positions start-1 .. len-1 (row j predicts seq[start + j])."""
    import torch

    with torch.no_grad():
        logits = _model(kind)(torch.tensor([seq])).logits[0].float()
    return torch.log_softmax(logits[start - 1:], dim=-1)


def greedy(kind: str, prompt: list[int], n: int = NEW_TOKENS) -> dict:
    import torch

    seq = list(prompt)
    out, lps, tops = [], [], []
    for _ in range(n):
        lp = logprobs_of(kind, seq, len(seq))[-1]
        t = int(torch.argmax(lp))
        v, i = torch.topk(lp, 5)
        out.append(t)
        lps.append(float(lp[t]))
        tops.append([[float(a), int(b)] for a, b in zip(v, i)])
        seq.append(t)
    return {"output_ids": out, "logprobs": lps, "top5": tops}


def reference() -> None:
    prompts = json.loads((MQ / "prompts.json").read_text())
    for kind in ("bf16", "gptq", "gptq_bad"):
        res = [greedy(kind, p) for p in prompts]
        (MC / f"ref_{kind}.json").write_text(json.dumps(res) + "\n")
        print(kind, "done", flush=True)


def _agree(a: list[list[int]], b: list[list[int]]) -> dict:
    tot = sum(len(x) for x in a)
    same = sum(x == y for p, q in zip(a, b) for x, y in zip(p, q))
    prefix = []
    for p, q in zip(a, b):
        k = 0
        while k < len(p) and k < len(q) and p[k] == q[k]:
            k += 1
        prefix.append(k)
    return {"same_position": f"{same}/{tot}", "identical_sequences": sum(k == len(p) for k, p in zip(prefix, a)),
            "mean_common_prefix": sum(prefix) / len(prefix), "first_token_same": sum(k > 0 for k in prefix)}


def compare(run_dir: Path) -> dict:
    """Greedy agreement and teacher-forced logprob differences (SGLang's tokens scored on CPU)."""
    import torch

    prompts = json.loads((MQ / "prompts.json").read_text())
    gpu = json.loads((run_dir / "results.json").read_text())
    ref = {k: json.loads((MC / f"ref_{k}.json").read_text()) for k in ("bf16", "gptq", "gptq_bad")}
    out: dict = {}
    pairs = [("sglang_gptq", "gptq"), ("sglang_bf16", "bf16"), ("sglang_gptq_bad", "gptq_bad"),
             ("sglang_gptq", "bf16"), ("sglang_gptq", "gptq_bad")]
    for srv, cpu in pairs:
        if srv not in gpu:
            continue
        s_ids = [r["output_ids"] for r in gpu[srv]]
        d = {"greedy_vs_cpu_greedy": _agree(s_ids, [r["output_ids"] for r in ref[cpu]])}
        diffs, first, argmax_same = [], [], 0
        for p, r in zip(prompts, gpu[srv]):
            lp = logprobs_of(cpu, p + r["output_ids"], len(p))
            cpu_lp = lp[torch.arange(len(r["output_ids"])), torch.tensor(r["output_ids"])]
            s_lp = torch.tensor([x[0] for x in r["meta_info"]["output_token_logprobs"]])
            diffs += (s_lp - cpu_lp).abs().tolist()
            argmax_same += int((lp[:len(r["output_ids"])].argmax(-1) == torch.tensor(r["output_ids"])).sum())
            # first generated position: SGLang's top-5 logprobs against the CPU's for the same ids
            top = r["meta_info"]["output_top_logprobs"][0]
            first += [abs(v - float(lp[0, i])) for v, i, *_ in top]
        n = len(diffs)
        d["teacher_forced"] = {
            "positions": n, "cpu_argmax_equals_sglang_token": f"{argmax_same}/{n}",
            "chosen_logprob_absdiff_max": max(diffs), "chosen_logprob_absdiff_mean": sum(diffs) / n,
            "first_position_top5_absdiff_max": max(first), "first_position_top5_absdiff_mean": sum(first) / len(first)}
        out[f"{srv}_vs_cpu_{cpu}"] = d
    for a, b in (("sglang_gptq", "sglang_bf16"), ("sglang_gptq", "sglang_gptq_bad")):
        if a in gpu and b in gpu:
            out[f"{a}_vs_{b}"] = _agree([r["output_ids"] for r in gpu[a]], [r["output_ids"] for r in gpu[b]])
    for a, b in (("gptq", "bf16"), ("gptq_bad", "gptq")):
        out[f"cpu_{a}_vs_cpu_{b}"] = _agree([r["output_ids"] for r in ref[a]], [r["output_ids"] for r in ref[b]])
    print(json.dumps(out, indent=1))
    (MC / "marlin_compare.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "build"
    if cmd == "build":
        build()
    elif cmd == "reference":
        reference()
    elif cmd == "compare":
        compare(Path(sys.argv[2]))
    else:
        sys.exit(f"unknown command {cmd}")
