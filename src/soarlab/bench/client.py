"""The streaming benchmark client: one class per HTTP API, asyncio + aiohttp, one session per level.

- `SGLangClient`: SGLang's native `POST /generate` (what the official tool sends, RULES.md 2);
- `OpenAIClient`: `POST /v1/completions` (e.g. `transformers serve`, the CPU engine).

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
from typing import Callable, ClassVar, Sequence

import aiohttp

from soarlab.bench.requests import BenchRequest

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_TEXT_KEY = re.compile(rb'"text"\s*:\s*"')
JSON_HEADERS = {"Content-Type": "application/json"}
# How the output is held at exactly n tokens: RULES.md 2's sampling_params.ignore_eos, or a
# generation_config {min_new_tokens: n, max_new_tokens: n} for servers that reject ignore_eos.
LENGTH_CONTROLS = ("ignore_eos", "generation_config")


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
    spec_verify_ct: int | None = None  # SGLang's meta_info: speculative verifications of this request
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


@dataclass
class LevelRun:
    records: list[Record]
    start: float  # first send
    end: float  # last completion

    @property
    def duration(self) -> float:
        return self.end - self.start


def _text_nonempty(payload: bytes) -> bool:
    m = _TEXT_KEY.search(payload)
    return bool(m) and payload[m.end() : m.end() + 1] != b'"'


def _tokens(payload: bytes) -> int | None:
    m = _COMPLETION_TOKENS.search(payload, max(0, payload.rfind(b'"completion_tokens"')))
    return int(m.group(1)) if m else None


def _generation_config(n: int) -> str:
    return json.dumps({"min_new_tokens": n, "max_new_tokens": n})


def make_session(connections: int, read_bufsize: int = 1 << 20) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=max(1, connections), limit_per_host=0, ttl_dns_cache=None, keepalive_timeout=60)
    return aiohttp.ClientSession(connector=connector, read_bufsize=read_bufsize, timeout=aiohttp.ClientTimeout(total=None))


class ApiClient:
    """What every API shares: the streaming loop, the request queue and the after-level pass.

    A subclass says what its body looks like (`body`), what a content chunk records (`_content`),
    and how the last chunk and the collected text are read (`_finish_last`, `_collect_text`).
    """

    api: ClassVar[str]
    path: ClassVar[str]
    # OpenAI streams may carry chunks without text after the first token (the usage chunk): not content.
    skip_empty_chunks: ClassVar[bool] = False

    def __init__(self, base_url: str, *, model: str | None, length_control: str, temperature: float = 0.0):
        if length_control not in LENGTH_CONTROLS:
            raise ValueError(f"length_control {length_control!r}")
        self.url = base_url.rstrip("/") + self.path
        self.model = model
        self.length_control = length_control
        self.temperature = temperature

    def body(self, prompt: str, n: int) -> bytes:
        raise NotImplementedError

    def _content(self, rec: Record, now: float, payload: bytes) -> None:
        raise NotImplementedError

    def _usage(self, rec: Record, payload: bytes) -> None:
        """A chunk without text after the first token (only where skip_empty_chunks)."""

    def _finish_last(self, rec: Record, data: dict, done: bool) -> None:
        raise NotImplementedError

    def _collect_text(self, rec: Record) -> None:
        """After the level: the generated text, where it was not already read from the last chunk."""

    async def send(self, session: aiohttp.ClientSession, body: bytes, rec: Record, timeout: aiohttp.ClientTimeout) -> Record:
        """POST one streaming request and fill `rec`; never raises for a server or network fault."""
        last = b""
        done = False
        skip_empty = self.skip_empty_chunks
        content = self._content
        rec.send = time.perf_counter()
        try:
            async with session.post(self.url, data=body, headers=JSON_HEADERS, timeout=timeout) as resp:
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
                        elif skip_empty and not _text_nonempty(payload):
                            self._usage(rec, payload)
                            continue
                        content(rec, now, payload)
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
            self._parse_last(rec, last, done)
        return rec

    def _parse_last(self, rec: Record, last: bytes, done: bool) -> None:
        """Parse the final chunk once."""
        if not last:
            rec.error = "the stream ended without any content"
            return
        try:
            data = json.loads(last)
        except json.JSONDecodeError:
            rec.error = f"unparsable last chunk: {last[:200].decode(errors='replace')}"
            return
        self._finish_last(rec, data, done)

    def finish_records(self, records: Sequence[Record], tokenizer=None) -> None:
        """After the level (off the clock): the generated text, and the client's own token count."""
        for rec in records:
            self._collect_text(rec)
            if tokenizer is not None and rec.ok:
                rec.client_tokens = len(tokenizer.encode(rec.text, add_special_tokens=False))

    async def run(
        self,
        session: aiohttp.ClientSession,
        requests: Sequence[BenchRequest],
        concurrency: int | None,
        *,
        timeout: aiohttp.ClientTimeout,
        output_len: Callable[[BenchRequest], int] | None = None,
        on_done: Callable[[Record], None] | None = None,
        deadline_s: float | None = None,
    ) -> LevelRun:
        """Send `requests` in order, at most `concurrency` in flight (None: all at once, like --request-rate inf).

        `deadline_s`: the whole run is abandoned after this long (a hung server), its unfinished
        requests failed, instead of waiting for each to time out in turn.
        """
        n_of = output_len or (lambda r: r.output_len)
        bodies = [self.body(r.prompt, n_of(r)) for r in requests]
        records = [Record(r.index, r.line, r.prompt_len, n_of(r)) for r in requests]
        workers = len(requests) if not concurrency else min(concurrency, len(requests))
        queue = iter(range(len(requests)))

        async def worker():
            for i in queue:  # a shared iterator: the same FIFO order as bench_serving's semaphore
                await self.send(session, bodies[i], records[i], timeout)
                if on_done is not None:
                    on_done(records[i])

        # The process holds torch's and transformers' objects, and every full GC pass walks them all while
        # the level's requests are timed: freeze what exists before the level, so passes walk only its own.
        gc.freeze()
        gathered = asyncio.gather(*(worker() for _ in range(workers)))
        # On SIGTERM (stopping.run_async cancels the level) asyncio cancels the workers and this
        # coroutine in no fixed order; gather may then hold a CancelledError nobody awaits,
        # which asyncio prints as a traceback at exit. Retrieving it here keeps the stop message clean.
        gathered.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait_for(gathered, deadline_s)
        except asyncio.TimeoutError:
            _abandon(records, f"abandoned: the run took over {deadline_s:g} s (bench.level_timeout_s)")
        finally:
            gc.unfreeze()
        sent = [r for r in records if r.send] or records
        start = min(r.send for r in sent)
        end = max((r.end or r.send) for r in sent)
        return LevelRun(records, start, end)


class SGLangClient(ApiClient):
    """SGLang native: text in, `sampling_params`, one cumulative text and meta_info per chunk."""

    api = "sglang"
    path = "/generate"

    def body(self, prompt: str, n: int) -> bytes:
        sampling = {"temperature": self.temperature, "max_new_tokens": n}
        if self.length_control == "ignore_eos":
            sampling["ignore_eos"] = True
        body = {"text": prompt, "sampling_params": sampling, "stream": True}
        if self.length_control == "generation_config":
            body["generation_config"] = _generation_config(n)
        return json.dumps(body, ensure_ascii=False).encode()

    def _content(self, rec: Record, now: float, payload: bytes) -> None:
        rec.chunks.append((now, _tokens(payload)))

    def _finish_last(self, rec: Record, data: dict, done: bool) -> None:
        rec.text = data.get("text", "")  # cumulative: the last chunk holds the whole answer
        meta = data.get("meta_info") or {}
        rec.server_tokens = meta.get("completion_tokens", rec.server_tokens)
        rec.server_prompt_tokens = meta.get("prompt_tokens")
        rec.spec_verify_ct = meta.get("spec_verify_ct")
        if not done:
            rec.error = "the stream ended before [DONE] (connection dropped?)"


class OpenAIClient(ApiClient):
    """OpenAI completions: text deltas per chunk, `usage` on the last one."""

    api = "openai"
    path = "/v1/completions"
    skip_empty_chunks = True

    def body(self, prompt: str, n: int) -> bytes:
        body = {"model": self.model, "prompt": prompt, "temperature": self.temperature, "max_tokens": n, "stream": True}
        if self.length_control == "ignore_eos":
            body["ignore_eos"] = True
        else:
            body["generation_config"] = _generation_config(n)
        return json.dumps(body, ensure_ascii=False).encode()

    def _usage(self, rec: Record, payload: bytes) -> None:
        if b'"completion_tokens"' in payload:
            rec.server_tokens = _tokens(payload)

    def _content(self, rec: Record, now: float, payload: bytes) -> None:
        rec.chunks.append((now, None))
        rec.raw.append(payload)
        self._usage(rec, payload)

    def _finish_last(self, rec: Record, data: dict, done: bool) -> None:
        usage = data.get("usage") or {}
        if usage:
            rec.server_tokens = usage.get("completion_tokens", rec.server_tokens)
            rec.server_prompt_tokens = usage.get("prompt_tokens")
        choices = data.get("choices") or [{}]
        if not done and not choices[0].get("finish_reason"):
            rec.error = "the stream ended without [DONE] or a finish_reason (connection dropped?)"

    def _collect_text(self, rec: Record) -> None:
        if not rec.raw:
            return
        parts = []
        for payload in rec.raw:
            try:
                parts.append((json.loads(payload).get("choices") or [{}])[0].get("text") or "")
            except json.JSONDecodeError:
                pass
        rec.text = "".join(parts)
        rec.raw = []


CLIENTS: dict[str, type[ApiClient]] = {c.api: c for c in (SGLangClient, OpenAIClient)}


def client_for(api: str, base_url: str, **kwargs) -> ApiClient:
    """The client of `api` (sglang | openai)."""
    if api not in CLIENTS:
        raise ValueError(f"unknown api {api!r}")
    return CLIENTS[api](base_url, **kwargs)


def _abandon(records: Sequence[Record], why: str) -> None:
    """Fail every request that had not finished when its run was given up on."""
    now = time.perf_counter()
    for rec in records:
        if rec.end is None:
            rec.error = rec.error or why
            rec.end = now if rec.send else None
