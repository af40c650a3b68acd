#!/usr/bin/env python
"""Is SOAR Lab's benchmark client ever the bottleneck? Measure it against a server that answers at once.

1. Makes a speed set (fixed input/output lengths) with a tokenizer (default: the tiny model's, built here).
2. Starts `python -m soarlab.bench.loopback` (SGLang native streaming) in its own process on 127.0.0.1.
3. Runs SOAR Lab's client (the official method: warm-up, flush, level) at Smax, S8 and S1 against it,
   and, where `sglang.bench_serving` imports under --official-python (its own venv), the official tool
   (`--backend sglang --dataset-name custom --flush-cache`) on the same server and set, converted to
   its conversations format: requests/s of each, and SOAR Lab's added latency per request (mean e2e
   latency minus the server's own handler time per request, at S1).
4. Duration: against a server with a fixed delay per token, each tool's S1 and S8 duration and their
   ratio (and, at S1, the time the server's handlers themselves took).
5. Every configuration --rounds times (the tools alternate which goes first), each round reported.

Prints a Markdown block for docs/PERFORMANCE.md ("## Benchmark client").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts" / "gpu")]
import official  # noqa: E402  (scripts/gpu/official.py: the one runner of sglang.bench_serving)


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
    from soarlab.bench.runner import run_level
    from soarlab.engines.server import Server

    before = stats(url)
    report, _ = run_level(Server(url, "sglang"), requests, level, conc, bench, tokenizer)
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


def official_level(python, url, dataset, tokenizer_dir, n, conc, tmp: Path) -> dict:
    """One run of the official tool (its own warm-up, flush, 1 s pause, timed run)."""
    res = official.run(url, Path(tokenizer_dir), tmp / f"official.{time.monotonic_ns()}.jsonl", dataset=dataset,
                       num_prompts=n, max_concurrency=conc, python=python, timeout_s=3600)
    if res["rc"] != 0:
        raise SystemExit(f"official tool failed (rc {res['rc']}): {res['error'][-800:]}")
    if res.get("completed") != n:
        raise SystemExit(f"official tool completed {res.get('completed')} of {n} requests")
    return {"duration_s": res["duration"], "req_s": res["request_throughput"],
            "mean_e2e_ms": res.get("mean_e2e_latency_ms"), "completed": res["completed"]}


def fmt(x, spec=".3f"):
    return "n/a" if x is None else format(x, spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000, help="requests per throughput level (Smax, S8)")
    p.add_argument("--s1-requests", type=int, default=200, help="requests of the S1 (client latency) level")
    p.add_argument("--input-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--tokenizer", help="model dir (default: build the tiny model's tokenizer in a temp dir)")
    p.add_argument("--delay-requests", type=int, default=40, help="requests of the fixed-delay S1 run (S8: 4x)")
    p.add_argument("--delay-tokens", type=int, default=64)
    p.add_argument("--token-delay-s", type=float, default=0.002)
    p.add_argument("--rounds", type=int, default=2, help="repeat every configuration (the machine is shared)")
    p.add_argument("--official-python", default=sys.executable,
                   help="a Python whose environment has sglang (its own venv; e.g. /tmp/sglvenv/bin/python)")
    args = p.parse_args()

    from omegaconf import OmegaConf

    from soarlab.atomic import write_jsonl
    from soarlab.bench.preflight import prepare
    from soarlab.datasets.speed import load_tokenizer, make_speed_set

    tmp = Path(tempfile.mkdtemp(prefix="bench_client."))
    tok_dir = args.tokenizer
    if not tok_dir:
        from soarlab.tiny import CHECKPOINT_DIR

        tok_dir = str(CHECKPOINT_DIR)
    tokenizer = load_tokenizer(tok_dir)
    bench = OmegaConf.merge(OmegaConf.load(ROOT / "conf/bench/soar.yaml"),
                            {"pause_after_flush_s": 0.0, "progress": False, "request_timeout_s": 600})

    def make_set(name, n, n_in, n_out):
        prof = {"mix": [{"weight": 1, "input_tokens": [n_in, n_in], "output_tokens": [n_out, n_out]}]}
        rows = make_speed_set(tokenizer, prof, n, seed=1)
        path = tmp / f"{name}.jsonl"
        write_jsonl(path, rows)
        # The official custom format (RULES.md 2): each SOAR row -> a two-turn conversation,
        # user = question, assistant = model_response (the loader takes "content" or "value").
        write_jsonl(tmp / f"{name}.official.jsonl", official.to_custom(rows))
        return path

    fast_set = make_set("fast", args.requests, args.input_tokens, args.output_tokens)
    slow_set = make_set("slow", 4 * args.delay_requests, args.input_tokens, args.delay_tokens)
    have_official, why = official_available(args.official_python)

    fast_levels = (("Smax", None, args.requests), ("S8", 8, args.requests), ("S1", 1, args.s1_requests))
    slow_levels = (("S1", 1, args.delay_requests), ("S8", 8, 4 * args.delay_requests))
    fast = {lvl: [] for lvl, _, _ in fast_levels}  # level -> one dict per round
    slow = {lvl: [] for lvl, _, _ in slow_levels}

    def both(rnd, soar_fn, off_fn):
        """Run both tools, alternating which goes first from round to round (shared machine)."""
        order = (soar_fn, off_fn) if rnd % 2 == 0 else (off_fn, soar_fn)
        got = [fn() if fn else None for fn in order]
        return (got[0], got[1]) if rnd % 2 == 0 else (got[1], got[0])

    for rnd in range(args.rounds):
        proc, url = start_server(0.0)
        try:
            requests, _ = prepare(fast_set, tokenizer, bench)
            for level, conc, n in fast_levels:
                def soar(n=n, level=level, conc=conc):
                    rep, server_per_req = soarlab_level(url, requests[:n], level, conc, tokenizer, bench)
                    d = rep.diagnostics
                    return {"requests": n, "duration_s": rep.measured_duration_s, "valid": rep.valid,
                            "req_s": d.request_throughput, "mean_e2e_ms": d.e2e_latency_ms.mean,
                            "server_ms": 1000 * server_per_req}
                off = (lambda n=n, conc=conc: official_level(args.official_python, url, tmp / "fast.official.jsonl",
                                                             tok_dir, n, conc, tmp)) if have_official else None
                s, o = both(rnd, soar, off)
                fast[level].append({**s, "official": o})
                print(f"round {rnd + 1} {level}: SOAR Lab {s['req_s']:.0f} req/s"
                      + (f", official {o['req_s']:.0f} req/s" if o else ""), file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(10)

        proc, url = start_server(args.token_delay_s)
        try:
            requests, _ = prepare(slow_set, tokenizer, bench)
            for level, conc, n in slow_levels:
                def soar(n=n, level=level, conc=conc):
                    rep, server_per_req = soarlab_level(url, requests[:n], level, conc, tokenizer, bench)
                    return {"requests": n, "duration_s": rep.measured_duration_s, "valid": rep.valid,
                            # the floor at S1: the server's handlers' own time (run one at a time)
                            "server_floor_s": server_per_req * n if conc == 1 else None}
                off = (lambda n=n, conc=conc: official_level(args.official_python, url, tmp / "slow.official.jsonl",
                                                             tok_dir, n, conc, tmp)) if have_official else None
                s, o = both(rnd, soar, off)
                slow[level].append({**s, "official": o})
                print(f"round {rnd + 1} delay {level}: SOAR Lab {s['duration_s']:.3f} s"
                      + (f", official {o['duration_s']:.3f} s" if o else ""), file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(10)

    runs = lambda xs, spec=".3f": " / ".join(fmt(x, spec) for x in xs)  # noqa: E731
    cpu = platform.processor() or platform.machine()
    print("\n## Benchmark client\n")
    print(f"Command: `python scripts/bench/bench_client.py --requests {args.requests} --output-tokens {args.output_tokens} "
          f"--rounds {args.rounds} --official-python {args.official_python}`  ")
    print(f"Machine: {os.cpu_count()} CPU cores ({cpu}), Python {platform.python_version()}, "
          f"both clients and the loopback server on the same cores (server in its own process)  ")
    print(f"Date: {dt.datetime.now().isoformat(timespec='minutes')}\n")
    print(f"Request rate, {args.input_tokens}-token inputs, {args.output_tokens}-token outputs, server answering at once "
          f"(rounds separated by /):\n")
    print("| level | requests | SOAR Lab req/s | official req/s | SOAR/official (x) | SOAR Lab duration (s) | official duration (s) |")
    print("|---|---|---|---|---|---|---|")
    for level, rs in fast.items():
        ratio = [r["req_s"] / r["official"]["req_s"] if r["official"] else None for r in rs]
        print(f"| {level} | {rs[0]['requests']} | {runs([r['req_s'] for r in rs], '.0f')} | "
              f"{runs([r['official'] and r['official']['req_s'] for r in rs], '.0f')} | {runs(ratio, '.2f')} | "
              f"{runs([r['duration_s'] for r in rs])} | {runs([r['official'] and r['official']['duration_s'] for r in rs])} |")
    s1 = fast["S1"]
    print(f"\nClient-added latency per request (S1, {s1[0]['requests']} requests, mean e2e minus the server "
          f"handler's own time): SOAR Lab {runs([r['mean_e2e_ms'] - r['server_ms'] for r in s1], '.2f')} ms "
          f"(mean e2e {runs([r['mean_e2e_ms'] for r in s1], '.2f')} ms)"
          + (f"; the official tool, its mean e2e minus the same server time: "
             f"{runs([r['official']['mean_e2e_ms'] - r['server_ms'] for r in s1], '.2f')} ms" if s1[0]["official"] else "") + ".")
    print(f"\nDuration against a server with a fixed delay ({1000 * args.token_delay_s:g} ms per token, "
          f"{args.delay_tokens}-token outputs):\n")
    print("| level | requests | SOAR Lab duration (s) | official duration (s) | SOAR/official - 1 (%) |  server floor (s) |")
    print("|---|---|---|---|---|---|")
    for level, rs in slow.items():
        ratio = [100 * (r["duration_s"] / r["official"]["duration_s"] - 1) if r["official"] else None for r in rs]
        print(f"| {level} | {rs[0]['requests']} | {runs([r['duration_s'] for r in rs])} | "
              f"{runs([r['official'] and r['official']['duration_s'] for r in rs])} | "
              f"{runs(ratio, '+.2f')} | {runs([r['server_floor_s'] for r in rs])} |")
    if not have_official:
        print(f"\nOfficial tool not measured: {why}.")
    print(json.dumps({"fast": fast, "slow": slow}, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
