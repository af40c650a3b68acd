#!/usr/bin/env python
"""Is SOAR Lab's benchmark client ever the bottleneck? Measure it against a server that answers at once.

1. Makes a speed set (fixed input/output lengths) with a tokenizer (default: the tiny model's, built here).
2. Starts `python -m soarlab.bench.loopback` (SGLang native streaming) in its own process on 127.0.0.1.
3. Runs SOAR Lab's client (the official method: warm-up, flush, level) at Smax, S8 and S1 against it:
   requests/s, and the client's added latency per request (mean e2e latency minus the server's own
   handler time per request, at S1).
4. Duration accuracy: against the same server with a fixed delay per token, the S1 duration vs the
   time the server's handlers themselves took (summed; S1 runs one request at a time).
5. Where `sglang.bench_serving` imports under --official-python, runs it on the same server and set
   (`--dataset-name custom`) and prints both tools' figures side by side; else says why not.

Prints a Markdown block for docs/PERFORMANCE.md ("## Benchmark client").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def start_server(delay: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "soarlab.bench.loopback", "--api", "sglang", "--port", "0", "--token-delay-s", str(delay)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise SystemExit(f"loopback server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.loads(r.read())


def soarlab_level(url, requests, level, conc, tokenizer, bench):
    from soarlab.bench.runner import Target, run_level

    before = stats(url)
    report, _ = run_level(Target(url, "sglang"), requests, level, conc, bench, tokenizer, {})
    after = stats(url)
    n = after["requests"] - before["requests"]
    server_per_req = (after["handler_s"] - before["handler_s"]) / max(n, 1)
    return report, server_per_req


def official_available(python: str) -> tuple[bool, str]:
    try:
        r = subprocess.run([python, "-c", "import sglang.bench_serving"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{python}: {exc}"
    if r.returncode == 0:
        return True, ""
    last = (r.stderr.strip().splitlines() or ["?"])[-1]
    return False, f"`import sglang.bench_serving` fails under {python}: {last}"


def official_level(python, url, dataset, tokenizer_dir, n, conc) -> dict:
    cmd = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url, "--dataset-name", "custom",
           "--dataset-path", str(dataset), "--num-prompts", str(n), "--tokenizer", str(tokenizer_dir),
           "--model", str(tokenizer_dir), "--flush-cache", "--disable-tqdm"]
    if conc:
        cmd += ["--max-concurrency", str(conc)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600).stdout
    grab = lambda label: float(re.search(re.escape(label) + r"\s+([\d.]+)", out).group(1))  # noqa: E731
    return {"duration_s": grab("Benchmark duration (s):"), "request_throughput": grab("Request throughput (req/s):")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000, help="requests per throughput level")
    p.add_argument("--input-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--tokenizer", help="model dir (default: build the tiny model's tokenizer in a temp dir)")
    p.add_argument("--delay-requests", type=int, default=40, help="requests of the duration-accuracy run (S1)")
    p.add_argument("--delay-tokens", type=int, default=64)
    p.add_argument("--token-delay-s", type=float, default=0.002)
    p.add_argument("--official-python", default=sys.executable, help="a Python whose environment has sglang")
    args = p.parse_args()

    from omegaconf import OmegaConf

    from soarlab.atomic import write_jsonl
    from soarlab.bench.cli import prepare
    from soarlab.datasets.speed import load_tokenizer, make_speed_set

    tmp = Path(tempfile.mkdtemp(prefix="bench_client."))
    tok_dir = args.tokenizer
    if not tok_dir:
        import yaml

        from soarlab.tiny import build_tiny_model

        spec = {**yaml.safe_load((ROOT / "conf/model/tiny.yaml").read_text())["tiny"], "train_steps": 0}
        tok_dir = str(build_tiny_model(tmp / "tiny", spec))
    tokenizer = load_tokenizer(tok_dir)
    bench = OmegaConf.merge(OmegaConf.load(ROOT / "conf/bench/soar.yaml"),
                            {"pause_after_flush_s": 0.0, "progress": False, "request_timeout_s": 600})

    def make_set(name, n, n_in, n_out):
        prof = {"mix": [{"weight": 1, "input_tokens": [n_in, n_in], "output_tokens": [n_out, n_out]}]}
        rows = make_speed_set(tokenizer, prof, n, seed=1)
        path = tmp / f"{name}.jsonl"
        write_jsonl(path, rows)
        write_jsonl(tmp / f"{name}.official.jsonl", [
            {"conversations": [{"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["model_response"]}]}
            for r in rows])
        return path

    fast_set = make_set("fast", args.requests, args.input_tokens, args.output_tokens)
    slow_set = make_set("slow", args.delay_requests, args.input_tokens, args.delay_tokens)
    have_official, why = official_available(args.official_python)

    results = {}
    proc, url = start_server(0.0)
    try:
        requests, _ = prepare(fast_set, tokenizer, bench)
        for level, conc in (("Smax", None), ("S8", 8), ("S1", 1)):
            reqs = requests if level != "S1" else requests[: max(200, args.requests // 10)]
            rep, server_per_req = soarlab_level(url, reqs, level, conc, tokenizer, bench)
            d = rep["diagnostics"]
            results[level] = {"requests": len(reqs), "duration_s": rep["measured_duration_s"], "valid": rep["valid"],
                              "req_s": d["request_throughput"], "mean_e2e_ms": d["e2e_latency_ms"]["mean"],
                              "server_ms": 1000 * server_per_req}
            if have_official:
                results[level]["official"] = official_level(
                    args.official_python, url, tmp / "fast.official.jsonl", tok_dir, len(reqs), conc)
    finally:
        proc.terminate()
        proc.wait(10)

    proc, url = start_server(args.token_delay_s)
    try:
        requests, _ = prepare(slow_set, tokenizer, bench)
        rep, server_per_req = soarlab_level(url, requests, "S1", 1, tokenizer, bench)
        # The floor: the time the server's handlers themselves took (timed requests, run one at a time).
        ideal = server_per_req * len(requests)
        delay = {"duration_s": rep["measured_duration_s"], "server_floor_s": ideal, "valid": rep["valid"]}
        if have_official:
            delay["official"] = official_level(args.official_python, url, tmp / "slow.official.jsonl", tok_dir, len(requests), 1)
    finally:
        proc.terminate()
        proc.wait(10)

    cpu = platform.processor() or platform.machine()
    print("\n## Benchmark client\n")
    print(f"Command: `python scripts/bench_client.py --requests {args.requests} --output-tokens {args.output_tokens}`  ")
    print(f"Machine: {os.cpu_count()} CPU cores ({cpu}), Python {platform.python_version()}, "
          f"client and loopback server on the same cores (server in its own process)  ")
    print(f"Date: {dt.date.today().isoformat()}\n")
    print("| level | requests | SOAR Lab duration (s) | SOAR Lab req/s | mean e2e (ms) | server time/req (ms) | client added latency/req (ms) | official duration (s) | official req/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for level, r in results.items():
        off = r.get("official") or {}
        added = r["mean_e2e_ms"] - r["server_ms"]
        print(f"| {level} | {r['requests']} | {r['duration_s']:.3f} | {r['req_s']:.0f} | {r['mean_e2e_ms']:.2f} | "
              f"{r['server_ms']:.3f} | {added if level == 'S1' else float('nan'):.2f} | "
              f"{off.get('duration_s', 'n/a')} | {off.get('request_throughput', 'n/a')} |")
    print(f"\nDuration accuracy (S1, {args.delay_requests} requests x {args.delay_tokens} tokens, "
          f"{1000 * args.token_delay_s:g} ms per token at the server): SOAR Lab {delay['duration_s']:.3f} s vs "
          f"the server's own handler time {delay['server_floor_s']:.3f} s "
          f"({100 * (delay['duration_s'] / delay['server_floor_s'] - 1):+.1f}%)"
          + (f"; official {delay['official']['duration_s']:.3f} s" if "official" in delay else "") + ".")
    if not have_official:
        print(f"\nOfficial tool not measured: {why}.")
    print(json.dumps({"results": results, "delay": delay}, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
