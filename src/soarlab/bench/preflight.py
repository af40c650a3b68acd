"""What comes before a level is measured: the server answers (`reachable`), which API it speaks
(`probe_api`) and which model it serves (`server_model`), and the speed set as requests in send order
(`prepare`). `soarlab bench` (soarlab.commands.measure) runs one level against any running server with them.

The API is SGLang native (/generate) or OpenAI (/v1/completions); `--api auto` probes
GET /get_model_info (or /server_info): answered means SGLang, else OpenAI. The tokenizer that
defines output lengths is `--tokenizer`, else the one the server names.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from soarlab.bench.results import SpeedSetInfo
from soarlab.engines.server import http_request, served_models
from soarlab.errors import SoarError
from soarlab.schema import BenchGroup


def _get_json(url: str, timeout: float):
    """The JSON body of a 200 answer, else None."""
    status, text = http_request(url, timeout=timeout)
    if status != 200:
        return None
    try:
        return json.loads(text or "null")
    except ValueError:
        return None


def reachable(base_url: str, timeout_s: float) -> bool:
    """Anything answers (any status) on one of the endpoints servers of either API have, all
    within `timeout_s` (a socket that accepts and never answers costs that long, not three times it)."""
    deadline = time.monotonic() + timeout_s
    for path in ("/health", "/v1/models", "/get_model_info"):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if http_request(base_url + path, timeout=left)[0] is not None:
            return True
    return False


def probe_api(base_url: str, timeout: float) -> str:
    """sglang if the server answers SGLang's info endpoints, else openai."""
    for path in ("/get_model_info", "/server_info", "/get_server_info"):
        if _get_json(base_url + path, timeout) is not None:
            return "sglang"
    return "openai"


def server_model(base_url: str, api: str, timeout: float) -> str | None:
    if api == "sglang":
        info = _get_json(base_url + "/get_model_info", timeout) or {}
        return info.get("tokenizer_path") or info.get("model_path")
    models = served_models(base_url, timeout=timeout)
    return models[0] if models else None


def prepare(dataset: str | Path, tokenizer, bench: BenchGroup) -> tuple[list, SpeedSetInfo]:
    """Read the speed set, build the requests in send order, and describe the set for the report."""
    from soarlab.bench.requests import build_requests
    from soarlab.datasets.soar import read_speed_set
    from soarlab.datasets.speed import check_context, context_length

    rows = read_speed_set(dataset, bench.dataset.max_line_bytes)
    requests, dropped = build_requests(
        rows, tokenizer, seed=bench.seed, min_tokens=bench.min_tokens,
        apply_chat_template=bench.apply_chat_template,
    )
    check_context(((r.line, r.prompt_len, r.output_len) for r in requests), context_length(tokenizer), dataset)
    if not requests:
        raise SoarError(
            f"every row of {dataset} is under {bench.min_tokens} tokens of prompt or output",
            "use a speed set with longer questions and model responses",
        )
    info = SpeedSetInfo(
        path=str(dataset), rows=len(rows), requests=len(requests), dropped_rows=len(dropped),
        dropped=dropped[:50], input_tokens=sum(r.prompt_len for r in requests),
        output_tokens=sum(r.output_len for r in requests),
    )
    return requests, info
