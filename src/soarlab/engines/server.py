"""The `Server` handle and the small HTTP helpers the engines share (stdlib only: no event loop)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from soarlab.errors import SoarError, short_path

DEATH_WAIT_S = 3.0  # from a dead server's last closed socket to its exit status: milliseconds, even under load


@dataclass
class Server:
    """A running server, ready for requests: what the engines start and the benchmark and accuracy talk to.

    api: "sglang" (native `POST /generate`, streaming, `POST /flush_cache`) or
    "openai" (`/v1/completions`, `/v1/chat/completions`).
    model: the OpenAI `model` field (None: not needed, as for SGLang's native API).
    supports_ignore_eos: whether `ignore_eos` may be sent (None: as the api says); transformers serve
    rejects unknown fields, so there exact lengths are asked with a `generation_config` JSON string
    instead (see conf/engine/transformers.yaml).
    has_flush_cache: None means "as the api says" (sglang has /flush_cache, openai servers do not).
    process: the server's process where we started it (None: an external server), so that a server that
    dies during a level is reported as dead (`exit_reason`), not as failed requests.
    """

    base_url: str
    api: str
    model: str | None = None
    supports_ignore_eos: bool | None = None
    has_flush_cache: bool | None = None
    log_path: Path | None = None
    process: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        if self.supports_ignore_eos is None:
            self.supports_ignore_eos = self.api == "sglang"
        if self.has_flush_cache is None:
            self.has_flush_cache = self.api == "sglang"

    def flush_cache(self, timeout_s: float) -> bool:
        """POST /flush_cache where the engine has one. True if the server said yes; False otherwise.

        The one cache-flush path: the benchmark calls it before every timed run (bench.flush_cache).
        """
        if not self.has_flush_cache:
            return False
        status, _ = http_request(f"{self.base_url}/flush_cache", method="POST", timeout=timeout_s)
        return status == 200


    def exit_reason(self, wait_s: float = 0.0) -> str | None:
        """Why the server's process is gone ("the server exited (signal 9, likely out of memory)");
        None while it runs, or when it is not ours to watch. `wait_s`: how long to wait for a process
        whose requests just failed: its sockets close before the kernel has it exited."""
        if self.process is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=wait_s)
        code = self.process.poll()
        return None if code is None else describe_exit(code)

    @contextlib.contextmanager
    def death_reported(self, during: str) -> Iterator[None]:
        """A server that died in the block is the block's error: its requests' failures ("Cannot
        connect", "connection dropped") are what a death looks like from outside, not the cause."""
        try:
            yield
        except Exception:
            self.raise_if_exited(during, wait_s=DEATH_WAIT_S)
            raise
        self.raise_if_exited(during)

    def raise_if_exited(self, during: str, wait_s: float = 0.0) -> None:
        reason = self.exit_reason(wait_s)
        if reason is not None:
            raise SoarError(f"{reason} during {during}",
                            f"read the end of {short_path(self.log_path)}; if out of memory, send fewer or shorter requests")


def describe_exit(code: int) -> str:
    """A server's exit status in words. A container CLI reports a signal as 128 + its number."""
    signum = -code if code < 0 else code - 128 if code > 128 else None
    if signum is None:
        return f"the server exited with code {code}"
    if signum == signal.SIGKILL:  # what the kernel's OOM killer sends
        return f"the server exited (signal {signum}, likely out of memory)"
    return f"the server exited (signal {signum}, {signal.Signals(signum).name})" if signum in signal.valid_signals() \
        else f"the server exited with code {code}"


def http_request(url: str, method: str = "GET", body: Any = None, *, timeout: float) -> tuple[int | None, str]:
    """(status, text); status None when nothing answered (refused, reset, timed out)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace") if exc.fp else ""
    except (urllib.error.URLError, OSError, TimeoutError):
        return None, ""


def is_healthy(base_url: str, timeout: float) -> bool:
    """GET /health answers 200; or, for servers without /health, GET /v1/models does."""
    status, _ = http_request(f"{base_url}/health", timeout=timeout)
    if status == 200:
        return True
    if status is None:
        return False
    status, _ = http_request(f"{base_url}/v1/models", timeout=timeout)
    return status == 200


def served_models(base_url: str, timeout: float) -> list[str]:
    status, text = http_request(f"{base_url}/v1/models", timeout=timeout)
    if status != 200:
        return []
    try:
        return [m["id"] for m in json.loads(text).get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
