"""Diagnostics as bench_serving defines them, repeats and spread, and comparing two level reports.

- TTFT: send to the first chunk with non-empty text.
- TPOT: (latency - TTFT) / (output tokens - 1), for requests with more than one token.
- ITL: gaps between content chunks; where the server gives a running token count (SGLang
  meta_info.completion_tokens) a gap is split evenly over the tokens its chunk added and
  chunks that added none are skipped, as bench_serving does.
- e2e latency: send to completion. Throughputs over the level duration.
Every figure is over the timed requests only (never the warm-up).
"""

from __future__ import annotations

import statistics
from typing import Sequence

import numpy as np

from soarlab.bench.client import Record

QUANTILES = {"median": 50, "p90": 90, "p99": 99}


def summarize(values: Sequence[float], scale: float = 1000.0) -> dict:
    """{mean, median, p90, p99} of values (seconds) in ms; nulls when there are none."""
    if not len(values):
        return {"mean": None, "median": None, "p90": None, "p99": None}
    arr = np.asarray(values, dtype=float) * scale
    out = {"mean": float(arr.mean())}
    out.update({k: float(np.percentile(arr, q)) for k, q in QUANTILES.items()})
    return out


def itls(rec: Record) -> list[float]:
    gaps: list[float] = []
    if rec.first_token is None or not rec.chunks:
        return gaps
    prev_t, prev_n = rec.chunks[0]
    for t, n in rec.chunks[1:]:
        if n is None or prev_n is None:
            gaps.append(t - prev_t)
        else:
            new = n - prev_n
            if new <= 0:
                continue
            gaps.extend([(t - prev_t) / new] * new)
        prev_t, prev_n = t, n
    return gaps


def diagnostics(records: Sequence[Record], duration: float) -> dict:
    done = [r for r in records if r.ok and r.first_token is not None]
    ttft = [r.first_token - r.send for r in done]
    e2e = [r.end - r.send for r in done]
    tpot, itl = [], []
    for r in done:
        n = r.tokens_out if r.tokens_out is not None else r.output_len
        if n > 1:
            tpot.append(((r.end - r.send) - (r.first_token - r.send)) / (n - 1))
        itl.extend(itls(r))
    out_tokens = sum((r.tokens_out if r.tokens_out is not None else r.output_len) for r in done)
    in_tokens = sum(r.prompt_len for r in done)
    server_out = [r.server_tokens for r in done if r.server_tokens is not None]
    client_out = [r.client_tokens for r in done if r.client_tokens is not None]
    dur = duration if duration > 0 else float("nan")
    return {
        "completed": len(done),
        "failed": sum(1 for r in records if not r.ok),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "total_output_tokens_asked": sum(r.output_len for r in records),
        "server_output_tokens": sum(server_out) if len(server_out) == len(done) and done else None,
        "client_output_tokens": sum(client_out) if len(client_out) == len(done) and done else None,
        "request_throughput": len(done) / dur,
        "input_throughput": in_tokens / dur,
        "output_throughput": out_tokens / dur,
        "total_throughput": (in_tokens + out_tokens) / dur,
        "concurrency": sum(e2e) / dur,
        "ttft_ms": summarize(ttft),
        "tpot_ms": summarize(tpot),
        "itl_ms": summarize(itl),
        "e2e_latency_ms": summarize(e2e),
    }


def check(records: Sequence[Record]) -> list[str]:
    """Why the level cannot be scored: failed requests, or requests with another token count than asked."""
    reasons = []
    failed = [r for r in records if not r.ok]
    if failed:
        examples = "; ".join(f"request {r.index} (line {r.line}): {r.error}" for r in failed[:3])
        reasons.append(f"{len(failed)} of {len(records)} requests failed: {examples}")
    wrong = [r for r in records if r.ok and r.tokens_out != r.output_len]
    if wrong:
        examples = "; ".join(
            f"request {r.index} (line {r.line}) asked {r.output_len}, got {r.tokens_out}"
            f" ({'server' if r.server_tokens is not None else 'client retokenized'} count)"
            for r in wrong[:3]
        )
        reasons.append(f"{len(wrong)} requests returned another number of tokens than asked: {examples}")
    return reasons


def repeats_summary(durations: Sequence[float]) -> dict:
    """Median duration and spread (max - min) of a level's repeats."""
    if not durations:
        return {"median_s": None, "spread_s": None, "spread_pct": None, "repeats": 0}
    med = statistics.median(durations)
    spread = max(durations) - min(durations) if len(durations) > 1 else None
    return {
        "median_s": med,
        "spread_s": spread,
        "spread_pct": (100.0 * spread / med) if spread is not None and med > 0 else None,
        "repeats": len(durations),
    }


def compare_level_reports(a: dict, b: dict) -> dict:
    """Is the difference between two level reports (`<level>.json`) larger than their run-to-run spread?

    Noise is the larger of the two spreads (max - min over repeats). With a single run on either
    side the noise is unknown and `within_noise` is None: rerun with bench.repeats >= 3.
    """
    da, db = a.get("duration_s"), b.get("duration_s")
    if da is None or db is None:
        return {"level": a.get("level"), "comparable": False, "within_noise": None,
                "verdict": "not comparable: a level without a valid duration (see invalid_reasons)"}
    diff = db - da
    spreads = [x.get("spread_s") for x in (a, b)]
    noise = None if any(s is None for s in spreads) else max(spreads)
    within = None if noise is None else abs(diff) <= noise
    pct = 100.0 * diff / da if da else None
    if within is None:
        verdict = f"difference {diff:+.3f} s ({pct:+.1f}%); noise unknown (run with bench.repeats >= 3)"
    elif within:
        verdict = f"difference {diff:+.3f} s ({pct:+.1f}%) is inside the run-to-run spread ({noise:.3f} s): no real change"
    else:
        verdict = f"difference {diff:+.3f} s ({pct:+.1f}%) is outside the run-to-run spread ({noise:.3f} s)"
    return {"level": a.get("level"), "comparable": True, "duration_a_s": da, "duration_b_s": db,
            "difference_s": diff, "difference_pct": pct, "noise_s": noise, "within_noise": within, "verdict": verdict}
