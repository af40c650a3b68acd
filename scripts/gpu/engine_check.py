#!/usr/bin/env python3
"""GPU recipe: SOAR Lab's SGLang engine and `soarlab bench` against `sglang.bench_serving`.

On one SGLang server, started by `soarlab.engines.open_engine` (engine=sglang, launcher local) on a
dummy-weight Llama (scripts/gpu/models.py), each level runs `soarlab bench --api sglang` and the
official `sglang.bench_serving --dataset-name custom --flush-cache --seed 1` on the same speed set,
and reports the duration ratio (target: within 2%, RULES.md 2), exact output lengths and send order.

The speed set: `soarlab make-speed-set --profile P` with the model's WordLevel `t<id>` tokenizer. The
corpus is English, so every word comes out `<unk>` (exact lengths, all token 0); each `<unk>` is then
replaced by a random `t<id>` word (one token each; counts re-checked).

Each finished level is written to OUT/results.json at once (an interrupted run keeps them); the stop
checks (port free, no sglang process, GPU memory) run on every path, errors included.

    python3 scripts/gpu/engine_check.py --out $OUT [--levels S1,S8,Smax] [--profile 60k-0.5k]
        [--num-requests 8] [--context-length 67584] [--layers 32] [--attention-backend triton]
(scripts/gpu/run.sh runs it as the step `engine`; scripts/README.md has the whole recipe)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "src"), str(HERE)]
import official  # noqa: E402
from models import VOCAB, write_dummy_llama  # noqa: E402
from soarlab.atomic import write_json  # noqa: E402

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def make_sets(work: Path, model: Path, profile: str, n: int, seed: int) -> dict:
    from soarlab.datasets.speed import load_tokenizer

    made = work / "speed_made.jsonl"
    r = subprocess.run([sys.executable, "-m", "soarlab.cli", "make-speed-set", "--profile", profile, "--tokenizer",
                        str(model), "--num-requests", str(n), "--seed", str(seed), "--output", str(made)],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"make-speed-set failed: {(r.stdout + r.stderr).strip()[-600:]}")
    tok = load_tokenizer(str(model))
    rng = random.Random(seed)
    rows, mismatches = [], 0
    for line in made.read_text().splitlines():
        row, new = json.loads(line), {}
        for k in ("question", "model_response"):
            text = " ".join(f"t{rng.randrange(3, VOCAB)}" if w == "<unk>" else w for w in row[k].split())
            mismatches += len(tok.encode(text)) != len(tok.encode(row[k]))
            new[k] = text
        rows.append(new)
    if mismatches:
        raise RuntimeError(f"{mismatches} texts changed token count when <unk> was replaced")
    soar, custom = work / "speed.jsonl", work / "speed_custom.jsonl"
    soar.write_text("".join(json.dumps(r) + "\n" for r in rows))
    custom.write_text("".join(json.dumps(r) + "\n" for r in official.to_custom(rows)))
    return {"rows": len(rows), "input_tokens": sum(len(tok.encode(r["question"])) for r in rows),
            "output_tokens": sum(len(tok.encode(r["model_response"])) for r in rows),
            "soar_set": str(soar), "custom_set": str(custom)}


def asked_order(dataset: Path, model: Path) -> list[tuple[int, int]]:
    """(prompt_len, output_len) in SOAR Lab's send order (= bench_serving's with --seed 1)."""
    from soarlab.bench.preflight import prepare
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
    log(f"soarlab bench {level} rc={r.returncode} ({time.time() - t:.1f}s)")
    rep_file, req_file = outdir / f"{level}.json", outdir / f"{level}.requests.jsonl"
    rep = json.loads(rep_file.read_text()) if rep_file.is_file() else {}
    rows = [json.loads(x) for x in req_file.read_text().splitlines()] if req_file.is_file() else []
    d = rep.get("diagnostics") or {}
    return {
        "rc": r.returncode, "valid": rep.get("valid"), "invalid_reasons": rep.get("invalid_reasons"),
        "duration_s": rep.get("measured_duration_s"), "completed": d.get("completed"), "failed": d.get("failed"),
        "ttft_ms": d.get("ttft_ms"), "tpot_ms": d.get("tpot_ms"), "output_throughput": d.get("output_throughput"),
        "exact_tokens": bool(rows) and all(x["server_output_tokens"] == x["output_tokens_asked"] for x in rows),
        "server_prompt_tokens_match": bool(rows) and all(x["server_prompt_tokens"] == x["prompt_tokens"] for x in rows),
        "cache_flush": [run.get("cache_flush") for run in rep.get("runs", [])],
        "asked_order": [(x["prompt_tokens"], x["output_tokens_asked"]) for x in rows],
        "error": None if r.returncode == 0 else (r.stdout + r.stderr).strip()[-800:],
    }


def run_level(url, level, conc, soar, custom, model, asked, bench_dir) -> dict:
    s = run_soarlab(url, soar, model, level, bench_dir)
    o = official.run(url, model, bench_dir / f"official_{level}.jsonl", dataset=custom, num_prompts=len(asked),
                     max_concurrency=conc)
    s["same_order_as_official"] = s.pop("asked_order") == asked and o.pop("input_lens", None) == [a[0] for a in asked]
    o["exact_tokens"] = o.pop("output_lens", None) == [a[1] for a in asked]
    ratio = s["duration_s"] / o["duration"] if s.get("duration_s") and o.get("duration") else None
    log(f"{level}: soarlab {s.get('duration_s')} s (valid {s.get('valid')}), official {o.get('duration')} s, ratio {ratio}")
    return {"max_concurrency": conc, "soarlab": s, "official": o, "ratio_soarlab_over_official": ratio}


def stop_checks(port: int) -> dict:
    """After the server's `with` block, on every path: is everything it held given back?"""
    from soarlab.engines.server import port_in_use

    time.sleep(3)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"], capture_output=True, text=True)
    left = subprocess.run(["pgrep", "-f", "sglang.launch_server"], capture_output=True, text=True).stdout.split()
    return {"port_free": port <= 0 or not port_in_use("127.0.0.1", port), "gpu_mem_used": smi.stdout.strip(),
            "sglang_processes_left": len(left)}


def main() -> int:
    from soarlab.config import compose

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/engine_check")
    ap.add_argument("--levels", default="S1,S8,Smax", help="comma-separated, from bench.levels")
    ap.add_argument("--profile", default="0.1k-0.5k", help="a bench.profiles key")
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--context-length", type=int, default=32768, help="the model's max_position_embeddings and --context-length")
    ap.add_argument("--layers", type=int, default=32, help="decoder layers of the dummy Llama (32: 7.58 B)")
    ap.add_argument("--attention-backend", default="triton")
    ap.add_argument("--server-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="extra engine.server_args entry, e.g. cuda-graph-max-bs=8 (repeatable)")
    ap.add_argument("--prepare-only", action="store_true",
                    help="write the model dir and speed sets into --work and stop (a later run reuses them)")
    args = ap.parse_args()
    out, work = Path(args.out), Path(args.work)
    for d in (out, work / "bench"):
        d.mkdir(parents=True, exist_ok=True)
    levels = compose(["bench=soar"]).bench.levels
    unknown = [lv for lv in args.levels.split(",") if lv not in levels]
    if unknown:
        sys.exit(f"unknown level(s) {unknown}; bench.levels has {list(levels)}")
    res: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "args": vars(args), "levels": {}}

    def save() -> None:
        res["elapsed_s"] = round(time.time() - T0, 1)
        write_json(out / "results.json", res)

    overrides = [
        "engine=sglang", "quant=none", "engine.port=0", "engine.startup_timeout_s=900",
        f"engine.jit_cache_dir={os.environ.get('JIT_CACHE_DIR', '/tmp/jitcache')}",
        f"engine.server_args.attention-backend={args.attention_backend}", "~engine.server_args.dense-as-sparse",
        "+engine.server_args.load-format=dummy", "+engine.server_args.sampling-backend=pytorch",
        f"+engine.server_args.context-length={args.context_length}",
        *[f"+engine.server_args.{kv}" for kv in args.server_arg],
    ]
    res["overrides"] = overrides
    port = -1
    try:
        from soarlab.engines import open_engine

        model = write_dummy_llama(work / "model", args.layers, args.context_length)
        key = {k: vars(args)[k] for k in ("profile", "num_requests", "layers", "context_length")}
        made = work / "sets.json"
        if made.is_file() and json.loads(made.read_text()).get("key") == key:
            res["dataset"] = json.loads(made.read_text())["dataset"]  # prepared earlier (--prepare-only)
        else:
            res["dataset"] = make_sets(work, model, args.profile, args.num_requests, 1)
            write_json(made, {"key": key, "dataset": res["dataset"]})
        log(f"dataset {res['dataset']}")
        if args.prepare_only:
            res["ok"] = True
            return 0
        soar, custom = Path(res["dataset"]["soar_set"]), Path(res["dataset"]["custom_set"])
        asked = asked_order(soar, model)
        save()
        t = time.time()
        with open_engine(compose(overrides), model, work / "server.log") as server:
            port = int(server.base_url.rsplit(":", 1)[1])
            res["startup_s"] = round(time.time() - t, 1)
            log(f"healthy after {res['startup_s']} s at {server.base_url}")
            save()
            for level in args.levels.split(","):
                res["levels"][level] = run_level(server.base_url, level, levels[level], soar, custom, model, asked,
                                                 work / "bench")
                save()
        res["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - record it, keep what finished, still run the stop checks
        res["ok"] = False
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()[-3000:]
        log("FAILED: " + res["error"])
    finally:
        res["stop"] = stop_checks(port)
        save()
        subprocess.run(["tar", "czf", str(out / "engine_check.tgz"), "-C", str(work), "bench", "server.log"],
                       capture_output=True)
    print("SUMMARY", json.dumps({"ok": res["ok"], "stop": res["stop"], "levels": {
        lv: (v["soarlab"].get("duration_s"), v["official"].get("duration"), v["ratio_soarlab_over_official"])
        for lv, v in res["levels"].items()}}), flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
