#!/usr/bin/env python3
"""GPU recipe: SOAR Lab's GPTQ checkpoints on SGLang's `--quantization gptq_marlin`.

Question: does SGLang serve a checkpoint written by `soarlab prepare-model` as the function the CPU
reference (transformers + optimum + GPTQModel) computes from it, for `quant=gptq_w4_mixed` (4-bit with
8-bit q/k/v through GPTQModel's `dynamic`), and how fast is it at batch 1?

    python scripts/gpu/marlin_check.py build        # CPU: model, prepare-model, check-checkpoint, pack .gpu/mq
    python scripts/gpu/marlin_check.py reference    # CPU: greedy references of bf16 and the checkpoint
    python3 scripts/gpu/marlin_check.py serve --out $OUT   # GPU (scripts/README.md: the device call)
    python scripts/gpu/marlin_check.py compare DIR  # CPU: DIR holds the GPU run's results.json

build: the small Llama of scripts/gpu/models.py (real random weights, `mixer_types` marks layer 0
sparse, so the preset's rule puts layer 0's q/k/v at 8 bits), `prepare-model ... quant=gptq_w4_mixed`,
`check-checkpoint`. Carried to the GPU (.gpu/mq): the checkpoint's small files, quant.safetensors (only
qweight/qzeros/scales/g_idx), manifest.json (sha256 of every tensor) and prompts.json. The bf16 tensors
are regenerated there from the seed and checked against the manifest.

serve (GPU), each phase saved to OUT/results.json as it ends:
- small models, no CUDA graphs: bf16 (noise floor), the mixed checkpoint as written, and the same
  tensors with `dynamic` keys that name only q_proj/k_proj/v_proj (GPTQModel's own naming), not the
  fused `qkv_proj` SGLang builds: one batched greedy /generate each, top-5 logprobs;
- TPOT at batch 1 on the 7.58 B dummy Llama (`--load-format dummy`, CUDA graphs on) for bf16,
  gptq_w4 and gptq_w4_mixed: `sglang.bench_serving` random ids, 128 in / 512 out, 8 prompts, concurrency 1.
Servers start through `soarlab.engines.open_engine` with the quant preset's own serve_quantization.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "src"), str(HERE)]
from models import SEED, SMALL, gen_weights, tensor_sha, write_dummy_llama  # noqa: E402

GPU = ROOT / ".gpu"
MC, MQ = GPU / "mc", GPU / "mq"
PRESET = "gptq_w4_mixed"
NEW_TOKENS = 16
QUANT_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def load_dir(d: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def build() -> None:
    from safetensors.torch import save_file

    from soarlab.tiny.build import _train_tokenizer

    for d in (MC, MQ):
        shutil.rmtree(d, ignore_errors=True)
    bf16 = MC / "bf16"
    bf16.mkdir(parents=True)
    tok = _train_tokenizer(SMALL["vocab_size"])
    assert tok.convert_tokens_to_ids("<|im_end|>") == SMALL["eos_token_id"]
    tok.save_pretrained(bf16)
    (bf16 / "config.json").write_text(json.dumps(SMALL, indent=1) + "\n")
    (bf16 / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": SMALL["eos_token_id"], "pad_token_id": 2, "do_sample": False}) + "\n")
    weights = gen_weights()
    save_file(weights, str(bf16 / "model.safetensors"), metadata={"format": "pt"})
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


def unfused_dynamic(dynamic: dict) -> dict:
    """The same rules without SGLang's fused names: what GPTQModel itself matches (q_proj, k_proj, ...)."""
    out = {}
    for key, value in dynamic.items():
        key = re.sub(r"\|?self_attn\\\.qkv_proj\|?", "|", key).replace("(?:|", "(?:").replace("|)", ")")
        key = re.sub(r"\|?mlp\\\.gate_up_proj\|?", "|", key).replace("(?:|", "(?:").replace("|)", ")")
        out[key] = value
    return out


# --------------------------------------------------------------------------------------------- GPU side
def gpu_models(mq: Path, work: Path) -> dict:
    """Rebuild bf16 and the checkpoint from the seed and the carried tensors; check every sha256."""
    from safetensors.torch import load_file, save_file

    man = json.loads((mq / "manifest.json").read_text())
    w = gen_weights(man["config"], man["seed"])
    bad_bf16 = [k for k, t in w.items() if tensor_sha(t) != man["bf16"][k]]
    small = [f for f in mq.iterdir() if f.is_file() and f.name not in ("manifest.json", "prompts.json", "quant.safetensors")]
    q = load_file(str(mq / "quant.safetensors"))
    q.update({k: w[k] for k in man["gptq_from_bf16"]})
    bad_q = sorted(set(man["gptq"]) ^ set(q)) + [k for k in q if k in man["gptq"] and tensor_sha(q[k]) != man["gptq"][k]]
    mb = work / "bf16"
    mb.mkdir(parents=True, exist_ok=True)
    for f in small:
        if f.name != "config.json":
            shutil.copy2(f, mb / f.name)
    (mb / "config.json").write_text(json.dumps(man["config"], indent=1))
    save_file(w, str(mb / "model.safetensors"), metadata={"format": "pt"})
    for name in ("mixed", "mixed_unfused"):
        d = work / name
        d.mkdir(exist_ok=True)
        for f in small:
            shutil.copy2(f, d / f.name)
        save_file(q, str(d / "model.safetensors"), metadata={"format": "pt"})
    for f, key in (("config.json", "quantization_config"), ("quantize_config.json", None)):
        path = work / "mixed_unfused" / f
        cfg = json.loads(path.read_text())
        qc = cfg[key] if key else cfg
        qc["dynamic"] = unfused_dynamic(qc["dynamic"])
        path.write_text(json.dumps(cfg, indent=1))
    return {"bf16_sha_mismatch": bad_bf16, "gptq_sha_mismatch": bad_q, "gptq_tensors": len(q),
            "dynamic": json.loads((work / "mixed/config.json").read_text())["quantization_config"]["dynamic"],
            "dynamic_unfused": qc["dynamic"]}


def engine_cfg(preset: str, extra: list[str]):
    from soarlab.config import compose

    return compose(["engine=sglang", f"quant={preset}", "engine.port=0", "engine.startup_timeout_s=900",
                    f"engine.jit_cache_dir={os.environ.get('JIT_CACHE_DIR', '/tmp/jitcache')}",
                    "engine.server_args.attention-backend=triton", "~engine.server_args.dense-as-sparse",
                    "+engine.server_args.sampling-backend=pytorch", *extra])


def generate(base_url: str, prompts: list[list[int]]) -> list[dict]:
    from soarlab.engines.server import http_request

    body = {"input_ids": prompts, "return_logprob": True, "top_logprobs_num": 5,
            "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}}
    status, text = http_request(base_url + "/generate", "POST", body, timeout=900)
    if status != 200:
        raise RuntimeError(f"/generate answered {status}: {text[:500]}")
    out = []
    for x in json.loads(text):
        m = x["meta_info"]
        out.append({"output_ids": [int(e[1]) for e in m["output_token_logprobs"]],
                    "meta_info": {k: m.get(k) for k in ("completion_tokens", "finish_reason",
                                                          "output_token_logprobs", "output_top_logprobs")}})
    return out


def serve(args) -> int:
    import official
    from soarlab.atomic import write_json
    from soarlab.engines import open_engine

    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "phases": {}}

    def save() -> None:
        res["elapsed_s"] = round(time.time() - T0, 1)
        write_json(out / "results.json", res)

    def phase(name: str, preset: str, model: Path, extra: list[str], job) -> None:
        if args.only and name not in args.only.split(","):
            return
        if args.jit_done and preset != "none":
            waited = time.time()
            while not Path(args.jit_done).exists() and time.time() - waited < 900:
                time.sleep(2)
            res.setdefault("jit_wait_s", {})[name] = round(time.time() - waited, 1)
        t = time.time()
        entry: dict = {"preset": preset}
        res["phases"][name] = entry
        try:
            with open_engine(engine_cfg(preset, extra), model, work / f"server_{name}.log") as server:
                entry["start_to_health_s"] = round(time.time() - t, 1)
                log(f"{name}: healthy after {entry['start_to_health_s']} s")
                entry.update(job(server.base_url, model))
        except Exception as exc:  # noqa: BLE001 - one phase failing (the unfused form may) is a result
            entry["error"] = f"{type(exc).__name__}: {exc}"[-3000:]
            log(f"{name} FAILED: {entry['error'][:400]}")
        log_text = (work / f"server_{name}.log").read_text(errors="replace") if (work / f"server_{name}.log").is_file() else ""
        entry["log_quant_lines"] = [ln[:300] for ln in log_text.splitlines()
                                    if re.search(r"marlin|quant|Error|error:|shape|size mismatch", ln)][:20]
        entry["phase_s"] = round(time.time() - t, 1)
        save()

    try:
        res["build"] = gpu_models(Path(args.inputs), work)
        if res["build"]["bf16_sha_mismatch"] or res["build"]["gptq_sha_mismatch"]:
            raise RuntimeError("regenerated tensors differ from the manifest")
        save()
        prompts = json.loads((Path(args.inputs) / "prompts.json").read_text())
        small = ["+engine.server_args.disable-cuda-graph=true", "+engine.server_args.mem-fraction-static=0.25"]
        ask = lambda url, model: {"outputs": generate(url, prompts)}  # noqa: E731
        big = ["+engine.server_args.load-format=dummy", "+engine.server_args.cuda-graph-max-bs=4"]

        def tpot(url, model):
            r = official.run(url, model, work / f"tpot_{model.name}.jsonl", num_prompts=8, max_concurrency=1,
                             random_len=(128, 512))
            r.pop("input_lens", None)
            r["exact_tokens"] = r.pop("output_lens", None) == [512] * 8
            return {"tpot": r}

        def dummy(preset):
            return write_dummy_llama(work / f"dummy_{preset}", quant=None if preset == "none" else preset)
        # bf16 phases first: they run while the gptq_marlin JIT pre-warm compiles (~6 min on a fresh machine)
        phase("small_bf16", "none", work / "bf16", small, ask)
        phase("tpot_none", "none", dummy("none"), big, tpot)
        phase("small_mixed", PRESET, work / "mixed", small, ask)
        phase("small_mixed_unfused", PRESET, work / "mixed_unfused", small, ask)
        for preset in ("gptq_w4", PRESET):
            phase(f"tpot_{preset}", preset, dummy(preset), big, tpot)
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc()[-3000:]
        log(res["error"])
    finally:
        save()
        subprocess.run(["tar", "czf", str(out / "marlin_logs.tgz"), "-C", str(work), "--exclude=*.safetensors",
                        "--exclude=tokenizer.json", "."], capture_output=True)
    return 0 if "error" not in res else 1


# --------------------------------------------------------------------------------------------- CPU side
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build")
    sub.add_parser("reference")
    s = sub.add_parser("serve")
    s.add_argument("--out", required=True)
    s.add_argument("--inputs", default=str(MQ))
    s.add_argument("--work", default="/tmp/marlin_check")
    s.add_argument("--jit-done", help="a file whose existence says the gptq_marlin JIT pre-warm finished")
    s.add_argument("--only", help="comma-separated phase names to run")
    c = sub.add_parser("compare")
    c.add_argument("dir", type=Path)
    args = ap.parse_args()
    if args.cmd == "build":
        build()
    elif args.cmd == "reference":
        reference()
    elif args.cmd == "serve":
        return serve(args)
    else:
        compare(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
