"""CPU side of scripts/gpu/marlin_check.py: the checkpoint's inputs, the CPU references, the comparison.

`build`: the small Llama of models.py (seeded random weights; `mixer_types` marks layer 0 sparse, so
`quant=gptq_w4_mixed` puts layer 0's q/k/v at 8 bits), `soarlab prepare-model`, `soarlab check-checkpoint`,
and .gpu/mq for the GPU: the checkpoint's small files, quant.safetensors (qweight/qzeros/scales/g_idx
only), manifest.json (sha256 of every tensor) and prompts.json. `reference`: greedy CPU outputs of bf16
and the checkpoint (transformers + optimum + GPTQModel). `compare`: greedy agreement and teacher-forced
logprob differences of the GPU run against them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from models import SEED, SMALL, tensor_sha, write_small_llama

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / ".gpu"
MC, MQ = GPU / "mc", GPU / "mq"
PRESET = "gptq_w4_mixed"
NEW_TOKENS = 16
QUANT_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")


def load_dir(d: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def build() -> None:
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    for d in (MC, MQ):
        shutil.rmtree(d, ignore_errors=True)
    bf16 = MC / "bf16"
    weights = write_small_llama(bf16)
    tok = AutoTokenizer.from_pretrained(bf16)
    soar = [sys.executable, "-m", "soarlab.cli"]
    subprocess.run(soar + ["prepare-model", "--input", str(bf16), "--output", str(MC / "gptq"),
                           "model=tiny", f"quant={PRESET}"], check=True)
    r = subprocess.run(soar + ["check-checkpoint", str(MC / "gptq")], capture_output=True, text=True)
    (MC / "check_checkpoint.txt").write_text(f"rc={r.returncode}\n{r.stdout}{r.stderr}")
    print("check-checkpoint rc", r.returncode, r.stdout, r.stderr, flush=True)
    gq = load_dir(MC / "gptq")
    MQ.mkdir(parents=True)
    for f in (MC / "gptq").iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".index.json", ".csv")):
            shutil.copy2(f, MQ / f.name)
    quant = {k: t for k, t in gq.items() if k.rsplit(".", 1)[-1] in QUANT_SUFFIXES}
    save_file(quant, str(MQ / "quant.safetensors"), metadata={"format": "pt"})
    rest = sorted(set(gq) - set(quant))
    assert all(tensor_sha(gq[k]) == tensor_sha(weights[k]) for k in rest), "non-quantized tensors differ from bf16"
    manifest = {"bf16": {k: tensor_sha(t) for k, t in weights.items()}, "gptq": {k: tensor_sha(t) for k, t in gq.items()},
                "gptq_from_bf16": rest, "seed": SEED, "config": SMALL}
    (MQ / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    ids = tok((ROOT / "src/soarlab/tiny/corpus.txt").read_text()[:200000], add_special_tokens=False)["input_ids"]
    import random

    rnd = random.Random(7)
    prompts = []
    for _ in range(16):
        n = rnd.randint(8, 48)
        s = rnd.randrange(0, len(ids) - n)
        prompts.append([1] + ids[s:s + n])
    (MQ / "prompts.json").write_text(json.dumps(prompts) + "\n")
    print("packed:", {f.name: f.stat().st_size for f in MQ.iterdir()}, flush=True)


_models: dict = {}


def cpu_model(kind: str):
    import torch

    if kind not in _models:
        if kind == "bf16":
            from transformers import AutoModelForCausalLM

            m = AutoModelForCausalLM.from_pretrained(str(MC / "bf16"), dtype=torch.bfloat16, device_map="cpu")
        else:
            from soarlab.quant.hf_compat import load_causal_lm

            m = load_causal_lm(MC / kind)
        _models[kind] = m.eval()
    return _models[kind]


def logprobs_of(kind: str, seq: list[int], start: int):
    """log-softmax (float32) at positions start-1 .. len-1 (row j predicts seq[start + j])."""
    import torch

    with torch.no_grad():
        logits = cpu_model(kind)(torch.tensor([seq])).logits[0].float()
    return torch.log_softmax(logits[start - 1:], dim=-1)


def reference() -> None:
    import torch

    prompts = json.loads((MQ / "prompts.json").read_text())
    for kind in ("bf16", "gptq"):
        res = []
        for p in prompts:
            seq = list(p)
            for _ in range(NEW_TOKENS):
                seq.append(int(torch.argmax(logprobs_of(kind, seq, len(seq))[-1])))
            res.append({"output_ids": seq[len(p):]})
        (MC / f"ref_{kind}.json").write_text(json.dumps(res) + "\n")
        print(kind, "done", flush=True)


def _agree(a: list[list[int]], b: list[list[int]]) -> dict:
    same = sum(x == y for p, q in zip(a, b) for x, y in zip(p, q))
    prefix = []
    for p, q in zip(a, b):
        k = 0
        while k < min(len(p), len(q)) and p[k] == q[k]:
            k += 1
        prefix.append(k)
    return {"same_position": f"{same}/{sum(len(x) for x in a)}",
            "identical_sequences": sum(k == len(p) for k, p in zip(prefix, a)), "first_token_same": sum(k > 0 for k in prefix)}


def compare(run_dir: Path) -> dict:
    """Greedy agreement, and teacher-forced logprob differences (SGLang's tokens scored on CPU)."""
    import torch

    prompts = json.loads((MQ / "prompts.json").read_text())
    phases = json.loads((run_dir / "results.json").read_text())["phases"]
    ref = {k: json.loads((MC / f"ref_{k}.json").read_text()) for k in ("bf16", "gptq")}
    out: dict = {}
    for srv, cpu in (("small_bf16", "bf16"), ("small_mixed", "gptq"), ("small_mixed", "bf16"),
                     ("small_mixed_unfused", "gptq")):
        gen = phases.get(srv, {}).get("outputs")
        if not gen:
            continue
        d = {"greedy_vs_cpu_greedy": _agree([r["output_ids"] for r in gen], [r["output_ids"] for r in ref[cpu]])}
        diffs, argmax_same = [], 0
        for p, r in zip(prompts, gen):
            lp = logprobs_of(cpu, p + r["output_ids"], len(p))
            ids = torch.tensor(r["output_ids"])
            cpu_lp = lp[torch.arange(len(ids)), ids]
            s_lp = torch.tensor([x[0] for x in r["meta_info"]["output_token_logprobs"]])
            diffs += (s_lp - cpu_lp).abs().tolist()
            argmax_same += int((lp[:len(ids)].argmax(-1) == ids).sum())
        d["teacher_forced"] = {"cpu_argmax_equals_sglang_token": f"{argmax_same}/{len(diffs)}",
                               "logprob_absdiff_mean": sum(diffs) / len(diffs), "logprob_absdiff_max": max(diffs)}
        out[f"sglang_{srv}_vs_cpu_{cpu}"] = d
    out["tpot_ms"] = {k: (v.get("tpot") or {}).get("mean_tpot_ms") for k, v in phases.items() if k.startswith("tpot_")}
    print(json.dumps(out, indent=1))
    (MC / "marlin_compare.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


