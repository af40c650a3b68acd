"""The benchmark client and level runner against real HTTP servers on loopback (SGLang native and OpenAI).

The servers are soarlab.bench.loopback (aiohttp on 127.0.0.1): they count requests in flight,
record every payload, and inject faults on demand. No test depends on timing being fast.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from soarlab.bench.loopback import LoopbackServer
from soarlab.bench.metrics import Spread
from soarlab.bench.preflight import prepare
from soarlab.bench.report import write_level, write_summary
from soarlab.bench.requests import build_requests
from soarlab.bench.results import compare
from soarlab.bench.runner import run_level
from soarlab.datasets.soar import read_speed_set
from soarlab.engines.server import Server
from soarlab.errors import SoarError

from support import bench_cfg, write_set


@pytest.fixture(scope="module")
def speed_rows():
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    rng = random.Random(0)
    rows = []
    for i in range(12):
        q = f"Question {i}: " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        a = " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
        rows.append({"question": q, "model_response": a})
    return rows


@pytest.fixture
def dataset(tmp_path, speed_rows):
    return write_set(tmp_path / "speed.jsonl", speed_rows)


def _level(server, api, dataset, tokenizer, level="S8", concurrency=8, **changes):
    bench = bench_cfg(**changes)
    requests, info = prepare(dataset, tokenizer, bench)
    target = Server(server.base_url, api, model="loopback")
    assert target.supports_ignore_eos is (api == "sglang")
    return run_level(target, requests, level, concurrency, bench, tokenizer, info), requests


def test_output_length_from_model_response_and_prompt_as_is(tiny_tokenizer, dataset, speed_rows):
    with LoopbackServer(api="sglang") as srv:
        (report, rows), requests = _level(srv, "sglang", dataset, tiny_tokenizer, warmup_requests=0)
    assert report.valid, report.invalid_reasons
    by_text = {p["text"]: p for p in srv.stats.payloads}
    for row in speed_rows:
        payload = by_text[row["question"]]  # the question text as it is: no chat template
        assert payload["stream"] is True
        assert payload["sampling_params"] == {
            "temperature": 0.0,
            "max_new_tokens": len(tiny_tokenizer.encode(row["model_response"])),  # BOS counted
            "ignore_eos": True,
        }
    assert "<|im_start|>" not in "".join(by_text)


def test_chat_template_only_when_asked(tiny_tokenizer, speed_rows):
    rows = [{**r, "line": i + 1, "prompt": r["question"]} for i, r in enumerate(speed_rows)]
    reqs, _ = build_requests(rows, tiny_tokenizer, apply_chat_template=True)
    assert all(r.prompt.startswith("<|im_start|>user\n") for r in reqs)


def test_shuffle_order_matches_bench_serving(tiny_tokenizer, tmp_path, speed_rows):
    rows = list(speed_rows)
    rows[3] = {"question": "Q", "model_response": "a long enough answer"}  # 1 token + BOS = 2: kept
    rows[5] = {"question": "", "model_response": "answer"}  # BOS only: 1 token, dropped
    rows[7] = {"question": "a question", "model_response": ""}  # dropped
    path = write_set(tmp_path / "s.jsonl", rows)
    reqs, dropped = build_requests(read_speed_set(path), tiny_tokenizer, seed=1)
    # bench_serving: random.seed(1); random.shuffle(all rows); then drop short ones in that order.
    expected = list(range(len(rows)))
    random.seed(1)
    random.shuffle(expected)
    expected = [i + 1 for i in expected if i + 1 not in (6, 8)]
    assert [r.line for r in reqs] == expected
    assert sorted(d["line"] for d in dropped) == [6, 8]


def test_short_rows_dropped_and_reported(tiny_tokenizer, tmp_path, speed_rows):
    rows = speed_rows[:4] + [{"question": "", "model_response": "x y"}]
    path = write_set(tmp_path / "s.jsonl", rows)
    with LoopbackServer(api="sglang") as srv:
        (report, _), requests = _level(srv, "sglang", path, tiny_tokenizer)
    assert report.requests == 4 and report.dataset.dropped_rows == 1


@pytest.mark.parametrize("level,concurrency,expected", [("S1", 1, 1), ("S8", 8, 8), ("Smax", None, 12)])
def test_concurrency_limits_held(tiny_tokenizer, dataset, level, concurrency, expected):
    with LoopbackServer(api="sglang", token_delay_s=0.01) as srv:
        (report, rows), _ = _level(srv, "sglang", dataset, tiny_tokenizer, level, concurrency)
    assert report.valid, report.invalid_reasons
    assert srv.stats.max_inflight == expected


def test_warmup_excluded_and_cache_flushed(tiny_tokenizer, dataset):
    with LoopbackServer(api="sglang") as srv:
        (report, rows), requests = _level(srv, "sglang", dataset, tiny_tokenizer, warmup_max_tokens=2, repeats=2)
    first = srv.stats.payloads[0]
    assert first["text"] == requests[0].prompt and first["sampling_params"]["max_new_tokens"] == 2
    assert srv.stats.requests == 1 + 2 * len(requests)
    assert srv.stats.flushes == 2
    assert len(rows) == 2 * len(requests) and report.diagnostics.completed == len(requests)
    assert report.warmup.output_tokens == 2


def test_openai_uses_generation_config_and_says_so(tiny_tokenizer, dataset):
    with LoopbackServer(api="openai") as srv:
        (report, rows), requests = _level(srv, "openai", dataset, tiny_tokenizer)
    assert report.valid, report.invalid_reasons
    body = srv.stats.payloads[-1]
    assert "ignore_eos" not in body and body["stream"] is True and body["temperature"] == 0.0
    gc = json.loads(body["generation_config"])
    assert gc["min_new_tokens"] == gc["max_new_tokens"] == body["max_tokens"]
    assert report.method.length_control == "generation_config"
    assert any("generation_config" in n for n in report.notes)
    assert all(r["server_output_tokens"] == r["output_tokens_asked"] for r in rows)


def test_openai_ignore_eos_rejected_makes_level_invalid(tiny_tokenizer, dataset):
    with LoopbackServer(api="openai") as srv:
        (report, _), _ = _level(srv, "openai", dataset, tiny_tokenizer, length_control="ignore_eos", warmup_requests=0)
    assert not report.valid and report.duration_s is None
    assert "HTTP 422" in report.invalid_reasons[0]


def _fault_on(prompt, mode):
    return lambda payload: mode if (payload.get("text") or payload.get("prompt")) == prompt and not payload.get("_") else None


@pytest.mark.parametrize(
    "mode,message",
    [("http500", "HTTP 500"), ("drop", "dropped"), ("hang", "timed out"), ("short", "another number of tokens")],
)
@pytest.mark.parametrize("api", ["sglang", "openai"])
def test_faults_make_the_level_invalid(tiny_tokenizer, dataset, speed_rows, tmp_path, mode, message, api):
    bench = bench_cfg()
    requests, _ = prepare(dataset, tiny_tokenizer, bench)
    victim = requests[-1].prompt  # not the warm-up row
    with LoopbackServer(api=api, fault=_fault_on(victim, mode)) as srv:
        (report, rows), _ = _level(srv, api, dataset, tiny_tokenizer, request_timeout_s=1.0)
    assert not report.valid and report.duration_s is None
    assert message in " ".join(report.invalid_reasons)
    assert report.measured_duration_s is not None
    # The finished requests are still recorded, the failed one with its error.
    assert len(rows) == len(requests)
    assert sum(1 for r in rows if r["error"] is None) >= len(requests) - 1
    write_level(tmp_path, report, rows)
    flat = write_summary(tmp_path, ["S8"])
    assert flat["S8_valid"] == 0 and "S8_duration_s" not in flat


def test_warmup_failure_is_reported(tiny_tokenizer, dataset):
    with LoopbackServer(api="sglang", fault=lambda p: "http500") as srv:
        (report, rows), _ = _level(srv, "sglang", dataset, tiny_tokenizer)
    assert not report.valid and "warm-up" in report.invalid_reasons[0]
    assert srv.stats.requests == 1


def test_repeats_spread_and_compare(tiny_tokenizer, dataset):
    with LoopbackServer(api="sglang") as srv:
        (a, _), _ = _level(srv, "sglang", dataset, tiny_tokenizer, repeats=3)
    assert len(a.durations_s) == 3 and a.spread_s == max(a.durations_s) - min(a.durations_s)
    assert a.duration_s == sorted(a.durations_s)[1]
    b = dataclasses.replace(a, duration_s=a.duration_s + a.spread_s / 2)
    assert compare(a, b).within_noise is True
    c = dataclasses.replace(a, duration_s=a.duration_s + 2 * a.spread_s + 1.0)
    assert compare(a, c).within_noise is False
    single = dataclasses.replace(a, spread_s=None)
    assert compare(single, b).within_noise is None
    invalid = dataclasses.replace(a, duration_s=None)
    assert compare(invalid, b).comparable is False and compare(invalid, b).within_noise is None
    assert Spread.of([3.0, 1.0, 2.0]) == Spread(median_s=2.0, spread_s=2.0, spread_pct=100.0, repeats=3)


def test_reports_written(tiny_tokenizer, dataset, tmp_path):
    with LoopbackServer(api="sglang") as srv:
        for level, conc in (("S1", 1), ("S8", 8), ("Smax", None)):
            (report, rows), _ = _level(srv, "sglang", dataset, tiny_tokenizer, level, conc)
            write_level(tmp_path, report, rows)
    flat = write_summary(tmp_path)
    for level in ("S1", "S8", "Smax"):
        assert flat[f"{level}_valid"] == 1 and flat[f"{level}_duration_s"] > 0
        rec = json.loads((tmp_path / f"{level}.requests.jsonl").read_text().splitlines()[0])
        assert {"send_s", "first_token_s", "end_s", "prompt_tokens", "output_tokens_asked", "error"} <= set(rec)
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    d = json.loads((tmp_path / "S8.json").read_text())["diagnostics"]
    assert set(d["ttft_ms"]) == {"mean", "median", "p90", "p99"} and d["server_output_tokens"] == d["total_output_tokens"]


def test_empty_after_drop_is_an_error(tiny_tokenizer, tmp_path):
    path = write_set(tmp_path / "s.jsonl", [{"question": "", "model_response": "a b c"}])
    with pytest.raises(SoarError, match="under 2 tokens"):
        prepare(path, tiny_tokenizer, bench_cfg())


def test_one_client_class_per_api():
    from soarlab.bench.client import CLIENTS, OpenAIClient, SGLangClient, client_for

    assert {api: cls.path for api, cls in CLIENTS.items()} == {"sglang": "/generate", "openai": "/v1/completions"}
    sgl = client_for("sglang", "http://h:1/", model=None, length_control="generation_config")
    assert isinstance(sgl, SGLangClient) and sgl.url == "http://h:1/generate"
    body = json.loads(sgl.body("p", 5))
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 5}
    assert json.loads(body["generation_config"]) == {"min_new_tokens": 5, "max_new_tokens": 5}
    oai = client_for("openai", "http://h:1", model="m", length_control="ignore_eos", temperature=0.5)
    assert isinstance(oai, OpenAIClient)
    assert json.loads(oai.body("p", 3)) == {"model": "m", "prompt": "p", "temperature": 0.5, "max_tokens": 3,
                                            "stream": True, "ignore_eos": True}
    with pytest.raises(ValueError, match="unknown api"):
        client_for("vllm", "http://h:1", model=None, length_control="ignore_eos")
    with pytest.raises(ValueError, match="length_control"):
        client_for("sglang", "http://h:1", model=None, length_control="auto")
