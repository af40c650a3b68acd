"""The streaming benchmark client: asyncio + aiohttp, one session, a connection pool sized to the level.

Kept cheap per chunk, so the client is never what a level measures: the request body is
serialized once, the stream is read in whatever blocks arrive (`iter_any`) and split on
newlines by hand, and a chunk is only scanned for (a) whether its text is empty, until the
first token, and (b) the server's running token count (a regex on bytes). Full JSON parsing
happens once per request, after the stream, or after the level (`finish_records`).

Timing follows bench_serving: `send` just before the POST, TTFT at the first chunk whose text
is non-empty, `end` at the last chunk (or stream end); ITL from the gaps between content chunks
(SGLang: divided over the tokens a chunk added, as bench_serving does).
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import aiohttp

from soarlab.bench.requests import BenchRequest

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_TEXT_KEY = re.compile(rb'"text"\s*:\s*"')
JSON_HEADERS = {"Content-Type": "application/json"}
APIS = ("sglang", "openai")
PATHS = {"sglang": "/generate", "openai": "/v1/completions"}


@dataclass
class Record:
    """One request as sent and as answered. Times are time.perf_counter() seconds."""

    index: int
    line: int
    prompt_len: int
    output_len: int  # asked
    send: float = 0.0
    first_token: float | None = None
    end: float | None = None
    chunks: list = field(default_factory=list)  # (time, server token count or None) per content chunk
    server_tokens: int | None = None  # meta_info.completion_tokens / usage.completion_tokens
    server_prompt_tokens: int | None = None
    client_tokens: int | None = None  # retokenized generated text (bench_serving's "retokenized")
    text: str = ""
    error: str | None = None
    raw: list = field(default_factory=list)  # OpenAI content chunks, parsed after the level

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tokens_out(self) -> int | None:
        """The count the level is checked against: the server's if it gave one, else the client's."""
        return self.server_tokens if self.server_tokens is not None else self.client_tokens


def length_fields(api: str, n: int, length_control: str) -> dict:
    """How the output is held at exactly n tokens (RULES.md 2: ignore_eos; else generation_config)."""
    if length_control == "ignore_eos":
        return {"ignore_eos": True}
    if length_control == "generation_config":
        return {"generation_config": json.dumps({"min_new_tokens": n, "max_new_tokens": n})}
    raise ValueError(f"length_control {length_control!r}")


def request_body(api: str, prompt: str, n: int, *, model: str | None, length_control: str, temperature: float = 0.0) -> bytes:
    if api == "sglang":
        sampling = {"temperature": temperature, "max_new_tokens": n}
        if length_control == "ignore_eos":
            sampling["ignore_eos"] = True
        body = {"text": prompt, "sampling_params": sampling, "stream": True}
        if length_control == "generation_config":
            body.update(length_fields(api, n, length_control))
    elif api == "openai":
        body = {"model": model, "prompt": prompt, "temperature": temperature, "max_tokens": n, "stream": True}
        body.update(length_fields(api, n, length_control))
    else:
        raise ValueError(f"unknown api {api!r}")
    return json.dumps(body, ensure_ascii=False).encode()


def _text_nonempty(payload: bytes) -> bool:
    m = _TEXT_KEY.search(payload)
    return bool(m) and payload[m.end() : m.end() + 1] != b'"'


def _tokens(payload: bytes) -> int | None:
    m = _COMPLETION_TOKENS.search(payload, max(0, payload.rfind(b'"completion_tokens"')))
    return int(m.group(1)) if m else None


async def send_one(
    session: aiohttp.ClientSession, url: str, api: str, body: bytes, rec: Record, timeout: aiohttp.ClientTimeout
) -> Record:
    """POST one streaming request and fill `rec`; never raises for a server or network fault."""
    chunks = rec.chunks
    last = b""
    done = False
    is_openai = api == "openai"
    rec.send = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=JSON_HEADERS, timeout=timeout) as resp:
            if resp.status != 200:
                detail = (await resp.text())[:300].strip().replace("\n", " ")
                rec.error = f"HTTP {resp.status} {resp.reason}: {detail}"
                rec.end = time.perf_counter()
                return rec
            buf = b""
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                buf += data
                if b"\n" not in data:
                    continue
                lines = buf.split(b"\n")
                buf = lines.pop()
                for line in lines:
                    if line[:5] != b"data:":
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    if payload[:9] == b'{"error"':
                        rec.error = f"server error in stream: {payload[:300].decode(errors='replace')}"
                        continue
                    last = payload
                    if rec.first_token is None:
                        if not _text_nonempty(payload):
                            continue
                        rec.first_token = now
                    elif is_openai and not _text_nonempty(payload):
                        if b'"completion_tokens"' in payload:
                            rec.server_tokens = _tokens(payload)
                        continue
                    chunks.append((now, None if is_openai else _tokens(payload)))
                    if is_openai:
                        rec.raw.append(payload)
                        if b'"completion_tokens"' in payload:
                            rec.server_tokens = _tokens(payload)
            rec.end = time.perf_counter()  # the stream is complete: this is the request's completion
    except asyncio.TimeoutError:
        rec.end = time.perf_counter()
        rec.error = f"timed out after {timeout.total:g} s (bench.request_timeout_s)"
        return rec
    except aiohttp.ClientPayloadError as exc:
        rec.end = time.perf_counter()
        rec.error = f"connection dropped mid-stream ({exc})"
        return rec
    except aiohttp.ClientError as exc:
        rec.end = time.perf_counter()
        rec.error = f"{type(exc).__name__}: {exc}"
        return rec
    if rec.error is None:
        _finish_last(rec, api, last, done)
    return rec


def _finish_last(rec: Record, api: str, last: bytes, done: bool) -> None:
    """Parse the final chunk once: text and server counts (SGLang), finish reason (OpenAI)."""
    if not last:
        rec.error = "the stream ended without any content"
        return
    try:
        data = json.loads(last)
    except json.JSONDecodeError:
        rec.error = f"unparsable last chunk: {last[:200].decode(errors='replace')}"
        return
    if api == "sglang":
        rec.text = data.get("text", "")
        meta = data.get("meta_info") or {}
        rec.server_tokens = meta.get("completion_tokens", rec.server_tokens)
        rec.server_prompt_tokens = meta.get("prompt_tokens")
        if not done:
            rec.error = "the stream ended before [DONE] (connection dropped?)"
    else:
        usage = data.get("usage") or {}
        if usage:
            rec.server_tokens = usage.get("completion_tokens", rec.server_tokens)
            rec.server_prompt_tokens = usage.get("prompt_tokens")
        choices = data.get("choices") or [{}]
        if not done and not choices[0].get("finish_reason"):
            rec.error = "the stream ended without [DONE] or a finish_reason (connection dropped?)"


def finish_records(records: Sequence[Record], api: str, tokenizer=None) -> None:
    """After the level (off the clock): OpenAI text from its chunks, and the client's own token count."""
    for rec in records:
        if api == "openai" and rec.raw:
            parts = []
            for payload in rec.raw:
                try:
                    parts.append((json.loads(payload).get("choices") or [{}])[0].get("text") or "")
                except json.JSONDecodeError:
                    pass
            rec.text = "".join(parts)
            rec.raw = []
        if tokenizer is not None and rec.ok:
            rec.client_tokens = len(tokenizer.encode(rec.text, add_special_tokens=False))


@dataclass
class LevelRun:
    records: list[Record]
    start: float  # first send
    end: float  # last completion

    @property
    def duration(self) -> float:
        return self.end - self.start


def make_session(connections: int, read_bufsize: int = 1 << 20) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=max(1, connections), limit_per_host=0, ttl_dns_cache=None, keepalive_timeout=60)
    return aiohttp.ClientSession(connector=connector, read_bufsize=read_bufsize, timeout=aiohttp.ClientTimeout(total=None))


async def run_requests(
    session: aiohttp.ClientSession,
    base_url: str,
    api: str,
    requests: Sequence[BenchRequest],
    concurrency: int | None,
    *,
    model: str | None,
    length_control: str,
    timeout: aiohttp.ClientTimeout,
    temperature: float = 0.0,
    output_len: Callable[[BenchRequest], int] | None = None,
    on_done: Callable[[Record], None] | None = None,
    deadline_s: float | None = None,
) -> LevelRun:
    """Send `requests` in order, at most `concurrency` in flight (None: all at once, like --request-rate inf).

    `deadline_s`: the whole run is abandoned after this long (a hung server), its unfinished
    requests failed, instead of waiting for each to time out in turn.
    """
    url = base_url.rstrip("/") + PATHS[api]
    n_of = output_len or (lambda r: r.output_len)
    bodies = [
        request_body(api, r.prompt, n_of(r), model=model, length_control=length_control, temperature=temperature)
        for r in requests
    ]
    records = [Record(r.index, r.line, r.prompt_len, n_of(r)) for r in requests]
    workers = len(requests) if not concurrency else min(concurrency, len(requests))
    queue = iter(range(len(requests)))

    async def worker():
        for i in queue:  # a shared iterator: the same FIFO order as bench_serving's semaphore
            await send_one(session, url, api, bodies[i], records[i], timeout)
            if on_done is not None:
                on_done(records[i])

    # Full GC passes over a heap holding torch/transformers (~200k objects) cost ~20% of the client's
    # CPU at Smax (measured: 1.27 -> 1.03 s per 2000 requests); freeze what exists before the level.
    gc.freeze()
    try:
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(workers))), deadline_s)
    except asyncio.TimeoutError:
        _abandon(records, f"abandoned: the run took over {deadline_s:g} s (bench.level_timeout_s)")
    finally:
        gc.unfreeze()
    sent = [r for r in records if r.send] or records
    start = min(r.send for r in sent)
    end = max((r.end or r.send) for r in sent)
    return LevelRun(records, start, end)


def _abandon(records: Sequence[Record], why: str) -> None:
    """Fail every request that had not finished when its run was given up on."""
    now = time.perf_counter()
    for rec in records:
        if rec.end is None:
            rec.error = rec.error or why
            rec.end = now if rec.send else None
