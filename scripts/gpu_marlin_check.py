#!/usr/bin/env python
"""GPU side of the Marlin check: does SGLang 0.5.17 `--quantization gptq_marlin` serve SOAR Lab's GPTQ
checkpoint as the same function the checkpoint means on CPU (transformers + optimum + gptqmodel)?

Inputs (made on the CPU machine by scripts/make_marlin_check_inputs.py build; see its header):
.gpu/mq/ holds the small files of the quantized checkpoint (config.json with quantization_config,
tokenizer, quantize_config.json), quant.safetensors (only qweight/qzeros/scales/g_idx, 7.7 MB),
manifest.json (sha256 of every tensor of the bf16 model and of the GPTQ checkpoint) and prompts.json
(16 prompts as token ids). The bf16 model (random uniform weights from numpy PCG64, seed 1234) is
regenerated here with the same `gen_weights`, and the GPTQ checkpoint's unquantized tensors
(embeddings, norms, lm_head: equal to the bf16 ones) are taken from it; every tensor is checked
against the manifest's sha256 before anything is served. The bad variant rewrites every qzeros
word to 0x88888888 (a v2 zero stored in a v1 file).

What runs: two processes JIT-compile the gptq_marlin GEMM and repack kernels (tvm-ffi, ~300 s
for the GEMM) while a bf16 server is started and asked; then the good and the bad GPTQ checkpoints
are served one after the other (ports 30011, 30031) with
`--quantization gptq_marlin --dtype bfloat16 --attention-backend triton --sampling-backend pytorch
--disable-cuda-graph`. Each server gets one batched native /generate: temperature 0, 16 new tokens,
ignore_eos, return_logprob with top-5 logprobs. Results: $OUT/results.json, logs in $OUT/logs.tgz.
Comparison on CPU: `make_marlin_check_inputs.py compare DIR`.

Run on the GPU machine (the device tool's `run`, carry [".gpu/c1", ".gpu/mq"]), from the repo root:
    mkdir -p /tmp/site && xz -dc .gpu/c1/core.tar.xz | tar x -C /tmp/site && \
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 scripts/gpu_marlin_check.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
T0 = time.time()
PY = sys.executable
ENV = dict(os.environ, PYTHONPATH="/tmp/site", PYTHONUNBUFFERED="1")
LOGS = Path("/tmp/mlogs")


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def prewarm(name: str, code: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-c", code], env=ENV, stdout=open(LOGS / f"jit_{name}.log", "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def build_models(mq: Path) -> dict:
    import torch
    from safetensors.torch import load_file, save_file

    from make_marlin_check_inputs import gen_weights, tensor_sha

    man = json.loads((mq / "manifest.json").read_text())
    w = gen_weights(man["config"], man["seed"])
    bad_bf16 = [k for k, t in w.items() if tensor_sha(t) != man["bf16"][k]]
    small = [f for f in mq.iterdir() if f.is_file() and f.name not in
             ("manifest.json", "prompts.json", "quant.safetensors", "quant_log.csv")]
    mb = Path("/tmp/mb")
    mb.mkdir(exist_ok=True)
    for f in small:
        if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja", "generation_config.json"):
            shutil.copy2(f, mb / f.name)
    (mb / "config.json").write_text(json.dumps(man["config"], indent=1) + "\n")
    save_file(w, str(mb / "model.safetensors"), metadata={"format": "pt"})
    q = load_file(str(mq / "quant.safetensors"))
    q.update({k: w[k] for k in man["gptq_from_bf16"]})
    bad_gptq = sorted(set(man["gptq"]) ^ set(q)) + [k for k in q if k in man["gptq"] and tensor_sha(q[k]) != man["gptq"][k]]
    for name, tensors in (("mq", q), ("mqbad", {k: (torch.full_like(t, 0x88888888 - (1 << 32)) if k.endswith(".qzeros") else t)
                                                for k, t in q.items()})):
        d = Path("/tmp") / name
        d.mkdir(exist_ok=True)
        for f in small:
            shutil.copy2(f, d / f.name)
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return {"bf16_tensors": len(w), "bf16_sha_mismatch": bad_bf16, "gptq_tensors": len(q), "gptq_sha_mismatch": bad_gptq}


def start_server(name: str, model: str, port: int, extra: list[str]) -> subprocess.Popen:
    cmd = [PY, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "bfloat16", "--attention-backend", "triton", "--sampling-backend", "pytorch",
           "--disable-cuda-graph", "--disable-radix-cache", "--mem-fraction-static", "0.25",
           "--watchdog-timeout", "1200", *extra]
    log(f"start {name}: {' '.join(cmd)}")
    return subprocess.Popen(cmd, env=ENV, stdout=open(LOGS / f"server_{name}.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_health(p: subprocess.Popen, port: int, limit: float) -> float:
    t = time.time()
    while time.time() - t < limit:
        if p.poll() is not None:
            raise RuntimeError(f"server on {port} exited with {p.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return time.time() - t
        except Exception:
            pass
        time.sleep(1)
    raise RuntimeError(f"server on {port} not healthy after {limit} s")


def ask(port: int, prompts: list[list[int]]) -> tuple[list[dict], float]:
    body = {"input_ids": prompts, "return_logprob": True, "top_logprobs_num": 5,
            "sampling_params": {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.time()
    with urllib.request.urlopen(req, timeout=900) as r:
        res = json.loads(r.read())
    dt = time.time() - t
    out = []
    for x in res:
        m = x["meta_info"]
        out.append({"output_ids": [int(e[1]) for e in m["output_token_logprobs"]], "text": x.get("text"),
                    "meta_info": {k: m.get(k) for k in ("prompt_tokens", "completion_tokens", "finish_reason",
                                                          "output_token_logprobs", "output_top_logprobs")}})
    return out, dt


def stop(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, 15)
        p.wait(timeout=60)
    except Exception:
        try:
            os.killpg(p.pid, 9)
        except Exception:
            pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", default=str(ROOT / ".gpu/mq"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    LOGS.mkdir(exist_ok=True)
    res: dict = {"timings": {}}
    servers: list[subprocess.Popen] = []
    try:
        jit = {"gemm": prewarm("gemm", "import torch; from sglang.kernels.ops.quantization.gptq_marlin import "
                                       "_jit_gptq_marlin_module as m; m(torch.bfloat16); print('ok')"),
               "repack": prewarm("repack", "from sglang.kernels.ops.quantization.gptq_marlin_repack import "
                                           "_jit_gptq_marlin_repack_module as m; m(); print('ok')")}
        log("JIT prewarm started")
        res["build"] = build_models(Path(a.inputs))
        log(f"models built: {res['build']}")
        if res["build"]["bf16_sha_mismatch"] or res["build"]["gptq_sha_mismatch"]:
            raise RuntimeError("regenerated tensors differ from the manifest")
        prompts = json.loads((Path(a.inputs) / "prompts.json").read_text())
        p = start_server("bf16", "/tmp/mb", 30000, [])
        servers.append(p)
        res["timings"]["bf16_start_to_health_s"] = wait_health(p, 30000, 500)
        log(f"bf16 healthy after {res['timings']['bf16_start_to_health_s']:.1f} s")
        res["sglang_bf16"], res["timings"]["bf16_generate_s"] = ask(30000, prompts)
        stop(p)
        log("bf16 done")
        for k, j in jit.items():
            t = time.time()
            j.wait(timeout=560 - (time.time() - T0))
            res["timings"][f"jit_{k}_done_at_s"] = time.time() - T0
            log(f"jit {k} rc={j.returncode} (waited {time.time() - t:.1f} s)")
        q = start_server("gptq", "/tmp/mq", 30011, ["--quantization", "gptq_marlin"])
        servers.append(q)
        res["timings"]["gptq_start_to_health_s"] = wait_health(q, 30011, 300)
        log(f"gptq healthy after {res['timings']['gptq_start_to_health_s']:.1f} s")
        res["sglang_gptq"], res["timings"]["gptq_generate_s"] = ask(30011, prompts)
        stop(q)
        log("gptq done")
        # One server at a time: --mem-fraction-static is checked against the memory free at start, so a
        # second server started while the first holds 25% fails ("Loaded weights leave no GPU memory
        # for the KV cache ... minimum viable 0.2545"); that is how the 2026-12-02 runs lost it.
        qb = start_server("gptq_bad", "/tmp/mqbad", 30031, ["--quantization", "gptq_marlin"])
        servers.append(qb)
        res["timings"]["gptq_bad_start_to_health_s"] = wait_health(qb, 30031, 300)
        res["sglang_gptq_bad"], res["timings"]["gptq_bad_generate_s"] = ask(30031, prompts)
        log("gptq_bad done")
    except Exception:
        res["error"] = traceback.format_exc()
        log(res["error"])
    finally:
        for s in servers:
            stop(s)
        res["timings"]["total_s"] = time.time() - T0
        try:
            res["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                               capture_output=True, text=True).stdout.strip()
            res["versions"] = subprocess.run([PY, "-c", "import torch,sglang,transformers;print(torch.__version__,"
                                              "sglang.__version__,transformers.__version__)"], env=ENV,
                                             capture_output=True, text=True).stdout.strip()
        except Exception:
            pass
        (out / "results.json").write_text(json.dumps(res) + "\n")
        with tarfile.open(out / "logs.tgz", "w:gz") as tf:
            tf.add(LOGS, arcname="logs")
        for k in ("sglang_bf16", "sglang_gptq", "sglang_gptq_bad"):
            if k in res:
                log(f"{k} first: {res[k][0]['output_ids']}")
    return 0 if "error" not in res else 1


if __name__ == "__main__":
    sys.exit(main())
