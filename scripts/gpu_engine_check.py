#!/usr/bin/env python
"""Real-GPU check of SOAR Lab's SGLang engine and benchmark client against real SGLang 0.5.17.

What it does (on a GPU machine; nothing here runs in CI):
 1. writes a Llama-shaped dummy-weight model dir (the shape and WordLevel `t<id>` tokenizer of
    shared/gpu/mkmodel.py: 32 layers, hidden 4096, vocab 73448, 7.58 B parameters);
 2. `soarlab make-speed-set --profile 0.1k-0.5k` with that tokenizer. The corpus is English, so with
    a `t<id>` WordLevel vocabulary every word is `<unk>`: the lengths come out exact but every
    token is id 0. The set that is benchmarked keeps those exact lengths and replaces each
    `<unk>` word by a random `t<id>` word (one token each; counts re-checked with the tokenizer);
 3. converts it for `sglang.bench_serving --dataset-name custom` (RULES.md 2: one two-turn
    conversation per line, {"conversations": [{"role": "user", "content": question},
    {"role": "assistant", "content": model_response}]});
 4. starts SGLang through `soarlab.engines.open_engine` (engine=sglang, launcher python), with
    engine.server_args overridden for this model (the MiniCPM-only flags removed);
 5. with that server up: `soarlab bench` (sglang native API, ignore_eos) and the official
    `python -m sglang.bench_serving --backend sglang --dataset-name custom --flush-cache --seed 1`
    at S1, S8 and Smax on the same set; checks every request returned exactly the asked number of
    tokens (SGLang meta_info.completion_tokens in both tools) and that POST /flush_cache works;
 6. leaves the `with` block (stop), checks the process group is gone, the port free and the GPU
    memory released; writes results.json, the server log and bench outputs under --out.

Packing (on the CPU machine; see shared/gpu/RECIPE.md "Packing" for the wheel list and flags):
    echo '/.gpu/' >> .git/info/exclude
    python3 -m pip download $P -d .gpu/all <RECIPE.md wheel list>     # $P: RECIPE.md's flags
    python3.12 -m pip install --no-index --no-deps --no-compile --target .gpu/site .gpu/all/*.whl
    # SOAR Lab's own config needs hydra-core 1.3.8, omegaconf 2.3.x, antlr4-python3-runtime 4.9.3;
    # antlr4 4.9.3 is sdist-only on PyPI (`--only-binary=:all:` finds none), and all three are pure
    # Python, so they are copied from the project venv:
    cp -r .venv/lib/python3.11/site-packages/{hydra,omegaconf,antlr4}* .gpu/site/
    cd .gpu/site && rm -rf sgl_kernel/sm100 sgl_kernel/infllm_ops*.so sgl_kernel/flashmla_ops.abi3.so \
       xgrammar/lib zstandard/_cffi*.so sglang/multimodal_gen && find . -name __pycache__ -prune -exec rm -rf {} +
    mkdir -p ../c1 && tar cf - --exclude=sgl_kernel/flash_ops.abi3.so . | xz -9 -T0 > ../c1/core.tar.xz
 Only the core archive travels (about 55 MiB, one transfer): the FA3 kernels (flash_ops, 127 MiB
 packed, 3 transfers) are not needed with --attention-backend triton, which this check uses.
 The FA3 backend was measured in RECIPE.md; this check is about SOAR Lab's code, not attention speed.

Run on the GPU machine (the device tool's `run`, carry [".gpu/c1"]), from the repository root:
    mkdir -p /tmp/site && xz -dc .gpu/c1/core.tar.xz | tar x -C /tmp/site && \
    PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1 python3 scripts/gpu_engine_check.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
LEVELS = {"S1": 1, "S8": 8, "Smax": None}
VOCAB = 73448
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def write_model(d: Path, layers: int = 32) -> None:
    """shared/gpu/mkmodel.py's Llama shape (bf16, dummy weights) and WordLevel t<id> tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    d.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": layers, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": VOCAB, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": "bfloat16",
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    (d / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<unk>", "add_bos_token": False, "add_eos_token": False,
        "model_max_length": 32768,
    }, indent=1))


def make_sets(work: Path, model: Path, profile: str, n: int, seed: int) -> dict:
    from soarlab.datasets.speed import load_tokenizer

    made = work / "speed_made.jsonl"
    t = time.time()
    r = subprocess.run([sys.executable, "-m", "soarlab.cli", "make-speed-set", "--profile", profile, "--tokenizer",
                        str(model), "--num-requests", str(n), "--seed", str(seed), "--output", str(made)],
                       capture_output=True, text=True, cwd=ROOT)
    info = {"make_speed_set_rc": r.returncode, "make_speed_set_out": (r.stdout + r.stderr).strip()[-600:],
            "make_speed_set_s": round(time.time() - t, 1)}
    if r.returncode != 0:
        raise RuntimeError(f"make-speed-set failed: {info['make_speed_set_out']}")
    tok = load_tokenizer(str(model))
    rows = [json.loads(line) for line in made.read_text().splitlines() if line.strip()]
    words = [w for row in rows for k in ("question", "model_response") for w in row[k].split()]
    info["made_unk_fraction"] = sum(w == "<unk>" for w in words) / max(1, len(words))
    rng = random.Random(seed)
    out, mismatches = [], 0
    for row in rows:
        new = {}
        for k in ("question", "model_response"):
            want = len(tok.encode(row[k]))
            text = " ".join(f"t{rng.randrange(3, VOCAB)}" if w == "<unk>" else w for w in row[k].split())
            mismatches += len(tok.encode(text)) != want
            new[k] = text
        out.append(new)
    if mismatches:
        raise RuntimeError(f"{mismatches} texts changed token count when <unk> was replaced")
    soar = work / "speed.jsonl"
    soar.write_text("".join(json.dumps(r) + "\n" for r in out))
    custom = work / "speed_custom.jsonl"
    custom.write_text("".join(json.dumps({"conversations": [
        {"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["model_response"]}]}) + "\n"
        for r in out))
    info.update(rows=len(out), input_tokens=sum(len(tok.encode(r["question"])) for r in out),
                output_tokens=sum(len(tok.encode(r["model_response"])) for r in out), soar_set=str(soar),
                custom_set=str(custom))
    return info


def asked_order(dataset: Path, model: Path) -> list[tuple[int, int]]:
    """(prompt_len, output_len) in SOAR Lab's send order (= bench_serving's with --seed 1)."""
    from soarlab.bench.cli import prepare
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer

    reqs, _ = prepare(dataset, load_tokenizer(str(model)), compose(["bench=soar"]).bench)
    return [(r.prompt_len, r.output_len) for r in reqs]


def run_soarlab(url: str, dataset: Path, model: Path, level: str, outdir: Path) -> dict:
    t = time.time()
    r = subprocess.run([sys.executable, "-m", "soarlab.cli", "bench", "--url", url, "--dataset", str(dataset),
                        "--level", level, "--tokenizer", str(model), "--api", "sglang", "--output-dir", str(outdir),
                        "bench=soar", "bench.progress=false", "bench.plot=false"],
                       capture_output=True, text=True, cwd=ROOT)
    (outdir / f"{level}.stdout.txt").write_text(r.stdout + r.stderr)
    log(f"soarlab bench {level} rc={r.returncode} ({time.time() - t:.1f}s): {r.stdout.strip()[-300:]}")
    rep = json.loads((outdir / f"{level}.json").read_text()) if (outdir / f"{level}.json").is_file() else {}
    rows = [json.loads(x) for x in (outdir / f"{level}.requests.jsonl").read_text().splitlines()] \
        if (outdir / f"{level}.requests.jsonl").is_file() else []
    d = rep.get("diagnostics") or {}
    return {
        "rc": r.returncode, "valid": rep.get("valid"), "invalid_reasons": rep.get("invalid_reasons"),
        "duration_s": rep.get("measured_duration_s"), "completed": d.get("completed"), "failed": d.get("failed"),
        "ttft_ms": d.get("ttft_ms"), "tpot_ms": d.get("tpot_ms"), "itl_ms": d.get("itl_ms"),
        "output_throughput": d.get("output_throughput"),
        "total_output_tokens_asked": d.get("total_output_tokens_asked"),
        "server_output_tokens": d.get("server_output_tokens"), "client_output_tokens": d.get("client_output_tokens"),
        "exact_tokens": bool(rows) and all(x["server_output_tokens"] == x["output_tokens_asked"] for x in rows),
        "server_prompt_tokens_match": bool(rows) and all(x["server_prompt_tokens"] == x["prompt_tokens"] for x in rows),
        "cache_flush": [run.get("cache_flush") for run in rep.get("runs", [])],
        "warmup": rep.get("warmup"), "asked_order": [(x["prompt_tokens"], x["output_tokens_asked"]) for x in rows],
    }


def run_official(url: str, custom: Path, model: Path, n: int, conc, outdir: Path, name: str) -> dict:
    res_file = outdir / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
           "--dataset-name", "custom", "--dataset-path", str(custom), "--num-prompts", str(n),
           "--model", str(model), "--tokenizer", str(model), "--flush-cache", "--seed", "1",
           "--disable-tqdm", "--output-file", str(res_file), "--output-details"]
    if conc:
        cmd += ["--max-concurrency", str(conc)]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    (outdir / f"{name}.txt").write_text("$ " + " ".join(cmd) + "\n" + r.stdout + r.stderr)
    log(f"bench_serving {name} rc={r.returncode} ({time.time() - t:.1f}s)")
    if r.returncode != 0 or not res_file.is_file():
        return {"rc": r.returncode, "error": (r.stdout + r.stderr).strip()[-1500:]}
    res = json.loads(res_file.read_text().strip().splitlines()[-1])
    keep = ("duration", "completed", "total_input_tokens", "total_output_tokens", "total_output_tokens_retokenized",
            "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms", "mean_e2e_latency_ms")
    out = {"rc": 0, **{k: res.get(k) for k in keep}}
    out["output_lens"] = res.get("output_lens")
    out["input_lens"] = res.get("input_lens")
    out["errors"] = [e for e in (res.get("errors") or []) if e]
    return out


def _version(version, name: str) -> str | None:
    try:
        return version(name)
    except Exception:  # noqa: BLE001 - not installed
        return None


def gpu_mem_mib(query: str = "memory.used") -> str:
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True)
    except OSError as exc:
        return f"(nvidia-smi: {exc})"
    return r.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_check_out"))
    ap.add_argument("--work", default="/tmp/gpu_check")
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--profile", default="0.1k-0.5k")
    ap.add_argument("--attention-backend", default="triton")
    ap.add_argument("--port", type=int, default=30000)
    args = ap.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "ok": False, "levels": {}}
    model = work / "model"
    server_log = work / "server.log"
    bench_dir = work / "bench"
    bench_dir.mkdir(exist_ok=True)
    overrides = [
        "engine=sglang", "quant=none", f"engine.port={args.port}", "engine.startup_timeout_s=480",
        f"engine.server_args.attention-backend={args.attention_backend}",
        "~engine.server_args.dense-as-sparse",
        "+engine.server_args.load-format=dummy", "+engine.server_args.sampling-backend=pytorch",
    ]
    res["overrides"] = overrides
    try:
        from importlib.metadata import version

        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
        gpu = gpu_mem_mib("name,driver_version,memory.used")
        res["versions"] = {"python": sys.version.split()[0], **{p: _version(version, p) for p in (
            "torch", "sglang", "sglang-kernel", "transformers", "hydra-core", "omegaconf")}, "gpu": gpu}
        log(f"versions {res['versions']}")
        write_model(model)
        res["dataset"] = make_sets(work, model, args.profile, args.num_requests, 1)
        log(f"dataset {({k: v for k, v in res['dataset'].items() if k != 'make_speed_set_out'})}")
        soar, custom = Path(res["dataset"]["soar_set"]), Path(res["dataset"]["custom_set"])
        asked = asked_order(soar, model)
        n = len(asked)

        from soarlab.config import compose
        from soarlab.engines import open_engine
        from soarlab.engines.sglang import build_command
        from soarlab.engines.server import port_in_use

        cfg = compose(overrides)
        res["server_command"] = build_command(cfg, model.resolve(), cfg.engine.host, int(cfg.engine.port))
        log("server: " + " ".join(res["server_command"]))
        t = time.time()
        with open_engine(cfg, model, server_log) as server:
            res["startup_s"] = round(time.time() - t, 1)
            res["server"] = {"base_url": server.base_url, "api": server.api, "model": server.model,
                             "pid_alive": True}
            log(f"healthy after {res['startup_s']} s; {server}")
            res["flush_cache_direct"] = server.flush_cache()
            # Warm the server up (prefill shapes, JIT kernels): one untimed official run at Smax.
            res["warmup_run"] = {k: v for k, v in run_official(server.base_url, custom, model, n, None, bench_dir,
                                                                "warmup_Smax").items() if k in ("rc", "duration", "error")}
            for level, conc in LEVELS.items():
                s = run_soarlab(server.base_url, soar, model, level, bench_dir)
                o = run_official(server.base_url, custom, model, n, conc, bench_dir, f"official_{level}")
                o_exact = o.get("output_lens") == [a[1] for a in asked]
                s["same_order_as_official"] = s.pop("asked_order") == asked and o.get("input_lens") == [a[0] for a in asked]
                o.pop("input_lens", None)
                o["exact_tokens"] = o_exact
                o.pop("output_lens", None)
                ratio = (s["duration_s"] / o["duration"]) if s.get("duration_s") and o.get("duration") else None
                res["levels"][level] = {"max_concurrency": conc, "soarlab": s, "official": o,
                                        "ratio_soarlab_over_official": ratio}
                log(f"{level}: soarlab {s.get('duration_s')} s (valid {s.get('valid')}, exact {s.get('exact_tokens')}), "
                    f"official {o.get('duration')} s (exact {o_exact}), ratio {ratio}")
            res["flush_cache_direct_after"] = server.flush_cache()
        t = time.time()
        res["stop"] = {"port_free_after_stop": not port_in_use("127.0.0.1", args.port),
                       "gpu_mem_after_stop": None}
        time.sleep(3)
        res["stop"]["gpu_mem_after_stop"] = gpu_mem_mib()
        log_text = server_log.read_text(errors="replace")
        res["server_log"] = {"bytes": len(log_text), "first_line": log_text.splitlines()[0][:300] if log_text else "",
                             "cache_flushed_lines": log_text.count("Cache flushed successfully"),
                             "fired_up": "The server is fired up" in log_text,
                             "errors": [ln[:200] for ln in log_text.splitlines() if "Traceback" in ln or " ERROR " in ln][:10]}
        ps = subprocess.run(["pgrep", "-f", "sglang.launch_server"], capture_output=True, text=True).stdout.split()
        res["stop"]["sglang_processes_left"] = len(ps)
        res["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - record and still write what we have
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()[-4000:]
        log("FAILED: " + res["error"])
    finally:
        res["total_s"] = round(time.time() - T0, 1)
        (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
        if server_log.is_file():
            (out / "server.log").write_bytes(server_log.read_bytes()[-8_000_000:])
        with tarfile.open(out / "bench.tgz", "w:gz") as tf:
            tf.add(bench_dir, arcname="bench")
            for f in ("speed.jsonl", "speed_custom.jsonl", "speed_made.jsonl"):
                if (work / f).is_file():
                    tf.add(work / f, arcname=f)
        log(f"wrote {out}/results.json")
    summary = {lv: (v["soarlab"].get("duration_s"), v["official"].get("duration"), v["ratio_soarlab_over_official"])
               for lv, v in res["levels"].items()}
    print("SUMMARY", json.dumps({"ok": res["ok"], "levels": summary, "stop": res.get("stop")}), flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
