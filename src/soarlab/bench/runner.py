"""Run levels the official way: warm-up (not counted), cache flush, pause, timed run; N repeats.

A level is valid only if every request succeeded with exactly the asked number of tokens; an
invalid level keeps its measured duration for information but has `duration_s: null`, and
says why in `invalid_reasons`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Sequence

import aiohttp

from soarlab.bench.client import ApiClient, LevelRun, Record, client_for, make_session
from soarlab.bench.metrics import PER_REQUEST, Diagnostics, Spread, check
from soarlab.bench.requests import BenchRequest
from soarlab.bench.server_metrics import Sampler, acceptance
from soarlab.bench.results import LevelReport, Method, RunReport, ServerInfo, SpeedSetInfo, Warmup
from soarlab.engines.server import DEATH_WAIT_S, Server
from soarlab.errors import SoarError
from soarlab.schema import BenchGroup
from soarlab.stopping import run_async


def resolve_length_control(server: Server, setting: str) -> str:
    if setting in ("ignore_eos", "generation_config"):
        return setting
    if setting != "auto":
        raise SoarError(f"bench.length_control is {setting!r}", "use auto, ignore_eos or generation_config")
    return "ignore_eos" if server.api == "sglang" or server.supports_ignore_eos else "generation_config"


async def _flush(server: Server, timeout_s: float) -> str:
    """Server.flush_cache, off the event loop; the state the run report records."""
    if not server.has_flush_cache:
        return "not supported by this engine"
    ok = await asyncio.get_running_loop().run_in_executor(None, server.flush_cache, timeout_s)
    return "flushed" if ok else "failed (POST /flush_cache did not answer 200)"


def record_row(rec: Record, level: str, repeat: int, t0: float) -> dict:
    """One line of <level>.requests.jsonl: times relative to the run's first send, in seconds."""
    rel = lambda t: None if t is None else round(t - t0, 6)  # noqa: E731
    row = {
        "level": level, "repeat": repeat, "index": rec.index, "line": rec.line,
        "prompt_tokens": rec.prompt_len, "output_tokens_asked": rec.output_len,
        "server_output_tokens": rec.server_tokens, "client_output_tokens": rec.client_tokens,
        "server_prompt_tokens": rec.server_prompt_tokens, "chunks": len(rec.chunks),
        "send_s": rel(rec.send), "first_token_s": rel(rec.first_token), "end_s": rel(rec.end),
    }
    for metric in PER_REQUEST:  # ttft_s, latency_s: the table's per-request figures
        samples = metric.value(rec)
        row[metric.column] = samples[0] if samples else None
    row["error"] = rec.error
    return row


async def _run_level_async(server: Server, client: ApiClient, requests, level, concurrency, bench: BenchGroup, tokenizer, progress,
                           on_request=None):
    timeout = aiohttp.ClientTimeout(total=bench.request_timeout_s, sock_connect=bench.connect_timeout_s)
    deadline = bench.level_timeout_s
    connections = len(requests) if not concurrency else min(concurrency, len(requests))
    runs: list[tuple[LevelRun, str]] = []
    rows: list[dict] = []
    warmup, sampled = None, {}
    async with make_session(connections) as session:
        # Warm-up: the first row, output capped (bench_serving: min(output_len, 32)); never counted.
        n_warm = bench.warmup_requests
        if n_warm > 0:
            cap = bench.warmup_max_tokens
            first = requests[0]
            warm = await client.run(session, [first] * n_warm, None, timeout=timeout,
                                    output_len=lambda r: min(r.output_len, cap), deadline_s=deadline)
            client.finish_records(warm.records)
            ok = [r for r in warm.records if r.ok]
            warmup = Warmup(n_warm, min(first.output_len, cap), len(ok), None if ok else warm.records[0].error)
            if not ok:
                return runs, rows, warmup, sampled
        with Sampler(server.base_url, bench.server_metrics) as sampler:  # the timed runs only
            await _timed_runs(server, client, session, requests, level, concurrency, bench, progress, timeout, deadline, runs,
                              on_request)
        sampled = sampler.summary()
    for repeat, (run, _flush_state) in enumerate(runs):
        client.finish_records(run.records, tokenizer)
        rows.extend(record_row(r, level, repeat, run.start) for r in run.records)
    if sampled:
        sampled["spec"] = acceptance(sampled, [r for run, _ in runs for r in run.records])
    return runs, rows, warmup, sampled


async def _timed_runs(server, client, session, requests, level, concurrency, bench: BenchGroup, progress, timeout,
                      deadline, runs, on_request=None) -> None:
    """bench.repeats timed runs of the level, each after a cache flush and a pause; appended to `runs`.
    `on_request(level, repeat, total, record)` is called as each request ends (what it raises stops the level)."""
    for repeat in range(bench.repeats):
        flush = await _flush(server, bench.flush_timeout_s) if bench.flush_cache else "off (bench.flush_cache)"
        await asyncio.sleep(bench.pause_after_flush_s)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(requests), desc=f"{level} run {repeat + 1}/{bench.repeats}", unit="req", leave=False)
        def done(record, repeat=repeat, bar=bar):
            if bar is not None:
                bar.update(1)
            if on_request is not None:
                on_request(level, repeat, len(requests), record)

        run = await client.run(session, requests, concurrency, timeout=timeout, on_done=done, deadline_s=deadline)
        if bar is not None:
            bar.close()
        runs.append((run, flush))
        if not all(r.ok for r in run.records) and server.exit_reason(DEATH_WAIT_S):  # a dead server answers no repeat
            return


GENERATION_CONFIG_NOTE = (
    "output length enforced with the request field generation_config "
    "{min_new_tokens: n, max_new_tokens: n} (this engine lacks ignore_eos), not sampling_params.ignore_eos"
)


def _judge_runs(runs: list, warmup: Warmup | None) -> tuple[list[RunReport], list[str]]:
    """Each timed run's report, and why the level is invalid (nothing: valid)."""
    per_run: list[RunReport] = []
    reasons: list[str] = []
    for i, (run, flush) in enumerate(runs):
        why = check(run.records)
        reasons.extend(f"run {i + 1}: {w}" for w in why)
        per_run.append(RunReport(i, run.duration, not why, flush, Diagnostics.measure(run.records, run.duration)))
    if warmup is not None and not warmup.ok:
        reasons.insert(0, f"warm-up request failed, level not run: {warmup.error}")
    return per_run, reasons


def run_level(
    server: Server,
    requests: Sequence[BenchRequest],
    level: str,
    concurrency: int | None,
    bench: BenchGroup,
    tokenizer=None,
    dataset: SpeedSetInfo | None = None,
    on_request=None,
) -> tuple[LevelReport, list[dict]]:
    """Run one level (bench.repeats times). Returns (the level report, the per-request rows).
    `on_request`: see _timed_runs (a pruning sweep's checkpoints)."""
    if not requests:
        raise SoarError("no requests to send (the dataset is empty after dropping short rows)", "use a speed set with longer rows")
    length_control = resolve_length_control(server, bench.length_control)
    client = client_for(server.api, server.base_url, model=server.model, length_control=length_control,
                        temperature=bench.temperature)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t_wall = time.perf_counter()
    runs, rows, warmup, sampled = run_async(
        _run_level_async(server, client, list(requests), level, concurrency, bench, tokenizer, bench.progress,
                         on_request)
    )
    per_run, reasons = _judge_runs(runs, warmup)
    died = server.exit_reason(DEATH_WAIT_S if reasons else 0.0)
    if died:  # the cause of every failed request, named first
        reasons.insert(0, died)
    durations = [r.duration_s for r in per_run]
    spread = Spread.of(durations)
    valid = bool(per_run) and not reasons
    median_run = sorted(per_run, key=lambda r: r.duration_s)[(len(per_run) - 1) // 2] if per_run else None
    notes = [GENERATION_CONFIG_NOTE] if length_control == "generation_config" else []
    report = LevelReport(
        level=level,
        max_concurrency=concurrency,
        valid=valid,
        invalid_reasons=reasons,
        duration_s=spread.median_s if valid else None,
        measured_duration_s=spread.median_s,
        durations_s=durations,
        spread_s=spread.spread_s,
        spread_pct=spread.spread_pct,
        repeats=bench.repeats,
        requests=len(requests),
        diagnostics=median_run.diagnostics if median_run else None,
        runs=per_run,
        warmup=warmup,
        server=ServerInfo(server.base_url, server.api, server.model),
        method=Method(
            endpoint=client.path, stream=True, temperature=bench.temperature, length_control=length_control,
            seed=bench.seed, apply_chat_template=bench.apply_chat_template, min_tokens=bench.min_tokens,
            flush_cache=bench.flush_cache, pause_after_flush_s=bench.pause_after_flush_s,
            request_timeout_s=bench.request_timeout_s, level_timeout_s=bench.level_timeout_s,
        ),
        dataset=dataset,
        notes=notes,
        started=started,
        wall_s=time.perf_counter() - t_wall,
        server_metrics=sampled,
    )
    return report, rows
