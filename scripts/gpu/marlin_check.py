#!/usr/bin/env python3
"""GPU recipe: SOAR Lab's GPTQ checkpoints on SGLang's `--quantization gptq_marlin`.

Question: does SGLang serve a checkpoint written by `soarlab prepare-model` as the function the CPU
reference (transformers + optimum + GPTQModel) computes from it, for `quant=gptq_w4_mixed` (4-bit with
8-bit q/k/v through GPTQModel's `dynamic`), and how fast is it at batch 1?

    python scripts/gpu/marlin_check.py build        # CPU: model, prepare-model, check-checkpoint, pack .gpu/mq
    python scripts/gpu/marlin_check.py reference    # CPU: greedy references of bf16 and the checkpoint
    python3 scripts/gpu/marlin_check.py serve --out OUT    # GPU (scripts/gpu/run.sh runs it as the step `marlin`)
    python scripts/gpu/marlin_check.py compare DIR  # CPU: DIR holds the GPU run's results.json

build: the small Llama of scripts/gpu/models.py (real random weights, `mixer_types` marks layer 0
sparse, so the preset's rule puts layer 0's q/k/v at 8 bits), `prepare-model ... quant=gptq_w4_mixed`,
`check-checkpoint`. Copied to the GPU host (.gpu/mq): the checkpoint's small files, quant.safetensors (only
qweight/qzeros/scales/g_idx), manifest.json (sha256 of every tensor) and prompts.json. The bf16 tensors
are regenerated there from the seed and checked against the manifest.

serve (GPU), each phase saved to OUT/results.json as it ends:
- small models, no CUDA graphs: bf16 (noise floor), the mixed checkpoint as written, and the same
  tensors with `dynamic` keys that name only q_proj/k_proj/v_proj (GPTQModel's own naming), not the
  fused `qkv_proj` SGLang builds: one batched greedy /generate each, top-5 logprobs;
- TPOT at batch 1 on the 7.58 B dummy Llama (`--load-format dummy`, CUDA graphs on) for bf16,
  gptq_w4 and gptq_w4_mixed: `sglang.bench_serving` random ids, 128 in / 512 out, 8 prompts, concurrency 1.
Servers start through `soarlab.engines.open_engine` with the quant preset's own serve_quantization.
`serve --only tpot_none,tpot_gptq_w4,tpot_gptq_w4_mixed` runs the TPOT phases alone; they need no .gpu/mq.
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
from marlin_cpu import MQ, NEW_TOKENS, PRESET, build, compare, reference  # noqa: E402
from models import gen_weights, tensor_sha, wait_for_jit, write_dummy_llama  # noqa: E402
T0 = time.time()
# Phase names, in the order they run (--only picks some of them).
SMALL_PHASES = ("small_bf16", "small_mixed", "small_mixed_unfused")
TPOT_PHASES = ("tpot_none", "tpot_gptq_w4", f"tpot_{PRESET}")


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def unfused_dynamic(dynamic: dict) -> dict:
    """The same rules without SGLang's fused names: what GPTQModel itself matches (q_proj, k_proj, ...)."""
    out = {}
    for key, value in dynamic.items():
        key = re.sub(r"\|?self_attn\\\.qkv_proj\|?", "|", key).replace("(?:|", "(?:").replace("|)", ")")
        key = re.sub(r"\|?mlp\\\.gate_up_proj\|?", "|", key).replace("(?:|", "(?:").replace("|)", ")")
        out[key] = value
    return out


def gpu_models(mq: Path, work: Path) -> dict:
    """Rebuild bf16 and the checkpoint from the seed and the copied tensors; check every sha256."""
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

    selected = args.only.split(",") if args.only else [*SMALL_PHASES, *TPOT_PHASES]
    unknown = sorted(set(selected) - {*SMALL_PHASES, *TPOT_PHASES})
    if unknown:
        sys.exit(f"unknown phase(s) {unknown} in --only; phases: {', '.join([*SMALL_PHASES, *TPOT_PHASES])}")
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "phases": {}}

    def save() -> None:
        res["elapsed_s"] = round(time.time() - T0, 1)
        write_json(out / "results.json", res)

    def phase(name: str, preset: str, model: Path, extra: list[str], job) -> None:
        if name not in selected:
            return
        if args.jit_done and preset != "none":
            res.setdefault("jit_wait_s", {})[name] = wait_for_jit(args.jit_done)
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
        # The small phases need the checkpoint built on the CPU (.gpu/mq); the TPOT phases alone need nothing copied.
        if any(name in selected for name in SMALL_PHASES):
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
    s.add_argument("--only", help="comma-separated phase names to run, e.g. "
                   + ",".join(TPOT_PHASES) + " (TPOT only: no checkpoint from the CPU needed)")
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
