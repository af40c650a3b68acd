"""A local streaming LLM server that answers at once: SGLang native (/generate) or OpenAI (/v1/completions).

Used by the tests (faults on demand, in-flight counting) and by scripts/bench/bench_client.py (client
overhead). It generates no text worth reading: token i is the word "tok". Token counts follow
the request exactly (`max_new_tokens` / `max_tokens`), as a server honouring ignore_eos does.

OpenAI mode behaves like `transformers serve`: unknown fields (e.g. `ignore_eos`) are rejected
with HTTP 422, `generation_config` (a JSON string) is honoured, and without either the answer
stops early at an "EOS" after `eos_after` tokens. The final chunk carries `usage`.

Faults: `fault(payload) -> None | "http500" | "drop" | "hang" | "short"`.

Chat: with `chat(payload, n) -> (text, completion_tokens)` (n: the chat requests answered before this one), POST
/v1/chat/completions answers as `transformers serve` and SGLang do without streaming: one choice, `usage`, and
`finish_reason` "length" when the answer reached the request's `max_tokens` (else "stop").

Prometheus: in sglang mode, GET /metrics serves SGLang's gauges in the Prometheus text format
(running requests = requests in flight, queued 0, token usage and generation throughput
`kv_cache_usage` / `gen_throughput`), as SGLang does with --enable-metrics; OpenAI mode has none
(like `transformers serve`).

Drift between runs: with `run_drift` (factors), each GET /health (what every run's engine check
sends first, as it would after a server start) moves the token delay to `token_delay_s` times the
next factor (cycling): a controlled, deterministic run-to-run noise for the tests of `compare`.

Run standalone (scripts/bench/bench_client.py does): `python -m soarlab.bench.loopback --api sglang --port 0`
prints `PORT <n>` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from typing import Callable, Sequence

from aiohttp import web

OPENAI_FIELDS = {"model", "prompt", "temperature", "max_tokens", "stream", "generation_config", "seed", "top_p",
                 "stop", "frequency_penalty", "stream_options", "n", "best_of", "user"}


STATS = web.AppKey("stats", object)


class Stats:
    def __init__(self):
        self.inflight = 0
        self.max_inflight = 0
        self.requests = 0
        self.flushes = 0
        self.runs = 0  # GET /health calls under run_drift: runs started
        self.chats = 0  # chat completions answered
        self.payloads: list[dict] = []
        self.handler_s = 0.0  # time spent inside request handlers (what the server itself costs)
        self.stop = asyncio.Event()  # set on shutdown: releases "hang" handlers


def _sglang_chunks(n: int, prompt_tokens: int, short: bool) -> list[bytes]:
    out = []
    count = n - 1 if short else n
    text = ""
    for i in range(1, count + 1):
        text += "tok "
        finish = '{"type": "length", "length": %d}' % n if i == count else "null"
        out.append(
            b'data: {"text": "%s", "meta_info": {"id": "lb", "prompt_tokens": %d, "completion_tokens": %d, '
            b'"finish_reason": %s}, "index": 0}\n\n' % (text.encode(), prompt_tokens, i, finish.encode())
        )
    out.append(b"data: [DONE]\n\n")
    return out


def _openai_chunks(n: int, prompt_tokens: int, model: str, done_marker: bool) -> list[bytes]:
    head = b'data: {"id":"lb","object":"text_completion","created":0,"model":"%s","choices":[{"text":"' % model.encode()
    out = [head + b'tok ","index":0}]}\n\n' for _ in range(n)]
    usage = b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (prompt_tokens, n, prompt_tokens + n)
    out.append(head + b'","index":0,"finish_reason":"length"}],"usage":' + usage + b"}\n\n")
    if done_marker:
        out.append(b"data: [DONE]\n\n")
    return out


def _sglang_tokens(payload: dict, eos_after: int) -> int:
    """How many tokens /generate streams: max_new_tokens, cut at the fake EOS unless ignore_eos."""
    sp = payload.get("sampling_params") or {}
    n = int(sp.get("max_new_tokens", 16))
    return n if sp.get("ignore_eos") else min(n, eos_after)


def _openai_tokens(payload: dict, eos_after: int) -> int:
    """How many tokens /v1/completions streams: max_tokens (or generation_config's max_new_tokens), cut at
    the fake EOS unless min_new_tokens holds it off."""
    n = int(payload.get("max_tokens") or 16)
    if payload.get("generation_config"):
        gc = json.loads(payload["generation_config"])
        n = int(gc.get("max_new_tokens", n))
        return n if int(gc.get("min_new_tokens", 0)) >= n else min(n, eos_after)
    return min(n, eos_after)


def make_app(
    api: str = "sglang",
    model: str = "loopback",
    token_delay_s: float = 0.0,
    fault: Callable[[dict], str | None] | None = None,
    eos_after: int = 3,
    done_marker: bool = True,
    stats: Stats | None = None,
    run_drift: Sequence[float] = (),
    kv_cache_usage: float = 0.25,
    gen_throughput: float = 1000.0,
    chat: Callable[[dict, int], tuple[str, int]] | None = None,
) -> web.Application:
    stats = stats or Stats()
    app = web.Application()
    app[STATS] = stats
    delay = [token_delay_s * run_drift[0] if run_drift else token_delay_s]

    async def stream(request: web.Request, chunks: list[bytes], mode: str | None) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if delay[0] <= 0 and mode != "drop":
            await resp.write(b"".join(chunks))
        else:
            # Chunk i leaves at start + (i + 1) * delay, as on a server's decode clock: this process's
            # scheduling latency does not add up over a stream (one sleep per token would drift with load).
            loop = asyncio.get_running_loop()
            start = loop.time()
            for i, chunk in enumerate(chunks):
                if mode == "drop" and i == len(chunks) // 2:
                    request.transport.close()  # the connection goes away mid-stream
                    return resp
                if delay[0] > 0:
                    await asyncio.sleep(max(0.0, start + (i + 1) * delay[0] - loop.time()))
                await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def generate(request: web.Request):
        t0 = time.perf_counter()
        stats.requests += 1
        stats.inflight += 1
        stats.max_inflight = max(stats.max_inflight, stats.inflight)
        try:
            payload = await request.json()
            stats.payloads.append(payload)
            mode = fault(payload) if fault else None
            if mode == "http500":
                return web.json_response({"error": "injected failure"}, status=500)
            if mode == "hang":
                await stats.stop.wait()
                return web.json_response({"error": "shutting down"}, status=503)
            if api == "sglang":
                n = _sglang_tokens(payload, eos_after)
                chunks = _sglang_chunks(n, len(payload.get("text", "").split()), mode == "short")
            else:
                unknown = set(payload) - OPENAI_FIELDS
                if unknown:
                    return web.json_response({"detail": f"Unexpected fields in the request: {unknown}"}, status=422)
                n = _openai_tokens(payload, eos_after) - (mode == "short")
                chunks = _openai_chunks(n, len(str(payload.get("prompt", "")).split()), model, done_marker)
            return await stream(request, chunks, mode)
        finally:
            stats.inflight -= 1
            stats.handler_s += time.perf_counter() - t0

    async def health(_request):
        if run_drift:  # each health probe moves on to the next drift factor (a run starts with one)
            stats.runs += 1
            delay[0] = token_delay_s * run_drift[(stats.runs - 1) % len(run_drift)]
        return web.Response(text="ok")

    async def chat_completion(request: web.Request):
        payload = await request.json()
        stats.payloads.append(payload)
        text, tokens = chat(payload, stats.chats)
        stats.chats += 1
        finish = "length" if tokens >= int(payload.get("max_tokens") or 16) else "stop"
        return web.json_response({
            "id": "lb", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens}})

    app.router.add_get("/health", health)
    app.router.add_get("/stats", _stats_handler(stats))
    if chat is not None:
        app.router.add_post("/v1/chat/completions", chat_completion)
    _add_info_routes(app, api, model, stats, kv_cache_usage, gen_throughput)
    app.router.add_post("/generate" if api == "sglang" else "/v1/completions", generate)
    return app


def _stats_handler(stats: Stats):
    async def handler(_request):
        return web.json_response({k: v for k, v in vars(stats).items() if isinstance(v, (int, float))})
    return handler


def _add_info_routes(app: web.Application, api: str, model: str, stats: Stats, kv_cache_usage: float,
                     gen_throughput: float) -> None:
    """Models, and for the SGLang API its cache flush, model/server info and Prometheus /metrics."""
    async def flush(_request):
        stats.flushes += 1
        return web.Response(text="Cache flushed.\n")

    async def model_info(_request):
        return web.json_response({"model_path": model, "tokenizer_path": model, "is_generation": True})

    async def server_info(_request):
        return web.json_response({"internal_states": [{}]})

    async def models(_request):
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def prometheus(_request):
        gauges = {"sglang:num_running_reqs": stats.inflight, "sglang:num_queue_reqs": 0,
                  "sglang:token_usage": kv_cache_usage, "sglang:gen_throughput": gen_throughput}
        text = "".join(f"# HELP {name} loopback\n# TYPE {name} gauge\n{name}{{model_name=\"{model}\"}} {value}\n"
                       for name, value in gauges.items())
        return web.Response(text=text, content_type="text/plain")

    app.router.add_get("/v1/models", models)
    if api == "sglang":
        app.router.add_post("/flush_cache", flush)
        app.router.add_get("/get_model_info", model_info)
        app.router.add_get("/get_server_info", server_info)
        app.router.add_get("/server_info", server_info)
        app.router.add_get("/metrics", prometheus)


class LoopbackServer:
    """The app on 127.0.0.1 in a background thread (its own event loop). `with LoopbackServer(...) as s: s.base_url`."""

    def __init__(self, **app_kwargs):
        self._loop = asyncio.new_event_loop()
        self.stats = Stats()
        self.app = make_app(stats=self.stats, **app_kwargs)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.base_url = ""

    def __enter__(self) -> "LoopbackServer":
        self._thread.start()
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        asyncio.run_coroutine_threadsafe(self._runner.setup(), self._loop).result()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self._loop).result()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._loop.call_soon_threadsafe(self.stats.stop.set)
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--api", choices=("sglang", "openai"), default="sglang")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--model", default="loopback")
    p.add_argument("--token-delay-s", type=float, default=0.0)
    args = p.parse_args(argv)

    async def serve():
        runner = web.AppRunner(make_app(args.api, args.model, args.token_delay_s), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096)
        await site.start()
        print(f"PORT {site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
