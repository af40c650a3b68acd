"""Run levels the official way: warm-up (not counted), cache flush, pause, timed run; N repeats.

A level is valid only if every request succeeded with exactly the asked number of tokens; an
invalid level keeps its measured duration for information but has `duration_s: null`, and
says why in `invalid_reasons`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import aiohttp

from soarlab.bench import client as bc
from soarlab.bench.metrics import check, diagnostics, repeats_summary
from soarlab.bench.requests import BenchRequest
from soarlab.errors import SoarError


@dataclass
class Target:
    """A running server: base URL, API (sglang | openai), OpenAI model field, length support, cache flush."""

    base_url: str
    api: str
    model: str | None = None
    supports_ignore_eos: bool = True
    flush_cache: Callable[[], bool] | None = None  # None: POST /flush_cache where the API is sglang
    notes: list = field(default_factory=list)


def resolve_length_control(target: Target, setting: str) -> str:
    if setting in ("ignore_eos", "generation_config"):
        return setting
    if setting != "auto":
        raise SoarError(f"bench.length_control is {setting!r}", "use auto, ignore_eos or generation_config")
    if target.api == "sglang" or target.supports_ignore_eos:
        return "ignore_eos"
    return "generation_config"


async def _flush(session: aiohttp.ClientSession, target: Target) -> str:
    if target.flush_cache is not None:
        ok = await asyncio.get_running_loop().run_in_executor(None, target.flush_cache)
        return "flushed" if ok else "not supported by this engine"
    if target.api != "sglang":
        return "not supported by an OpenAI-API server"
    try:
        async with session.post(target.base_url.rstrip("/") + "/flush_cache", timeout=aiohttp.ClientTimeout(total=60)) as r:
            return "flushed" if r.status == 200 else f"failed (HTTP {r.status})"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return f"failed ({type(exc).__name__})"


def record_row(rec: bc.Record, level: str, repeat: int, t0: float) -> dict:
    rel = lambda t: None if t is None else round(t - t0, 6)  # noqa: E731
    return {
        "level": level, "repeat": repeat, "index": rec.index, "line": rec.line,
        "prompt_tokens": rec.prompt_len, "output_tokens_asked": rec.output_len,
        "server_output_tokens": rec.server_tokens, "client_output_tokens": rec.client_tokens,
        "server_prompt_tokens": rec.server_prompt_tokens, "chunks": len(rec.chunks),
        "send_s": rel(rec.send), "first_token_s": rel(rec.first_token), "end_s": rel(rec.end),
        "ttft_s": None if rec.first_token is None else rec.first_token - rec.send,
        "latency_s": None if rec.end is None else rec.end - rec.send,
        "error": rec.error,
    }


async def _run_level_async(target, requests, level, concurrency, bench, tokenizer, length_control, progress):
    timeout = aiohttp.ClientTimeout(total=float(bench.request_timeout_s), sock_connect=float(bench.connect_timeout_s))
    deadline = float(bench.level_timeout_s) if bench.level_timeout_s else None  # null: no bound
    connections = len(requests) if not concurrency else min(concurrency, len(requests))
    runs, rows = [], []
    warmup: dict = {}
    async with bc.make_session(connections) as session:
        # Warm-up: the first row, output capped (bench_serving: min(output_len, 32)); never counted.
        n_warm = int(bench.warmup_requests)
        if n_warm > 0:
            cap = int(bench.warmup_max_tokens)
            first = requests[0]
            warm = await bc.run_requests(
                session, target.base_url, target.api, [first] * n_warm, None, model=target.model,
                length_control=length_control, timeout=timeout, temperature=float(bench.temperature),
                output_len=lambda r: min(r.output_len, cap), deadline_s=deadline,
            )
            bc.finish_records(warm.records, target.api)
            ok = [r for r in warm.records if r.ok]
            warmup = {"requests": n_warm, "output_tokens": min(first.output_len, cap), "ok": len(ok),
                      "error": None if ok else warm.records[0].error}
            if not ok:
                return runs, rows, warmup
        for repeat in range(int(bench.repeats)):
            flush = await _flush(session, target) if bench.flush_cache else "off (bench.flush_cache)"
            await asyncio.sleep(float(bench.pause_after_flush_s))
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=len(requests), desc=f"{level} run {repeat + 1}/{bench.repeats}", unit="req", leave=False)
            run = await bc.run_requests(
                session, target.base_url, target.api, requests, concurrency, model=target.model,
                length_control=length_control, timeout=timeout, temperature=float(bench.temperature),
                on_done=(lambda _r: bar.update(1)) if bar is not None else None, deadline_s=deadline,
            )
            if bar is not None:
                bar.close()
            runs.append((run, flush))
    for repeat, (run, _flush_state) in enumerate(runs):
        bc.finish_records(run.records, target.api, tokenizer)
        rows.extend(record_row(r, level, repeat, run.start) for r in run.records)
    return runs, rows, warmup


def run_level(
    target: Target,
    requests: Sequence[BenchRequest],
    level: str,
    concurrency: int | None,
    bench,
    tokenizer=None,
    dataset_info: dict | None = None,
) -> tuple[dict, list[dict]]:
    """Run one level (bench.repeats times). Returns (the level report, the per-request rows)."""
    if not requests:
        raise SoarError("no requests to send (the dataset is empty after dropping short rows)", "use a speed set with longer rows")
    length_control = resolve_length_control(target, str(bench.length_control))
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t_wall = time.perf_counter()
    runs, rows, warmup = asyncio.run(
        _run_level_async(target, list(requests), level, concurrency, bench, tokenizer, length_control, bool(bench.progress))
    )
    per_run, reasons = [], []
    for i, (run, flush) in enumerate(runs):
        why = check(run.records)
        reasons.extend(f"run {i + 1}: {w}" for w in why)
        per_run.append({"repeat": i, "duration_s": run.duration, "valid": not why, "cache_flush": flush,
                        "diagnostics": diagnostics(run.records, run.duration)})
    if warmup and not warmup["ok"]:
        reasons.insert(0, f"warm-up request failed, level not run: {warmup['error']}")
    durations = [r["duration_s"] for r in per_run]
    spread = repeats_summary(durations)
    valid = bool(per_run) and not reasons
    median_run = sorted(per_run, key=lambda r: r["duration_s"])[(len(per_run) - 1) // 2] if per_run else None
    notes = list(target.notes)
    if length_control == "generation_config":
        notes.append(
            "output length enforced with the request field generation_config "
            "{min_new_tokens: n, max_new_tokens: n} (this engine lacks ignore_eos), not sampling_params.ignore_eos"
        )
    report = {
        "level": level,
        "max_concurrency": concurrency,
        "valid": valid,
        "invalid_reasons": reasons,
        "duration_s": spread["median_s"] if valid else None,
        "measured_duration_s": spread["median_s"],
        "durations_s": durations,
        "spread_s": spread["spread_s"],
        "spread_pct": spread["spread_pct"],
        "repeats": int(bench.repeats),
        "requests": len(requests),
        "diagnostics": median_run["diagnostics"] if median_run else None,
        "runs": per_run,
        "warmup": warmup,
        "server": {"url": target.base_url, "api": target.api, "model": target.model},
        "method": {
            "endpoint": bc.PATHS[target.api], "stream": True, "temperature": float(bench.temperature),
            "length_control": length_control, "seed": int(bench.seed),
            "apply_chat_template": bool(bench.apply_chat_template), "min_tokens": int(bench.min_tokens),
            "flush_cache": bool(bench.flush_cache), "pause_after_flush_s": float(bench.pause_after_flush_s),
            "request_timeout_s": float(bench.request_timeout_s), "level_timeout_s": bench.level_timeout_s,
        },
        "dataset": dataset_info or {},
        "notes": notes,
        "started": started,
        "wall_s": time.perf_counter() - t_wall,
    }
    return report, rows
