"""The metric table (bench/metrics.py): declarations, the figures as bench_serving defines them, flat keys, typed reports.

Records are built by hand with known times, so every figure has a value worked out here on paper.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from soarlab.bench.client import Record
from soarlab.bench.metrics import (METRICS, PER_REQUEST, RUN_METRICS, STATS, TABLE, Diagnostics, Distribution,
                                   flat_metrics, level_key)
from soarlab.bench.results import LevelReport, Method, RunReport, ServerInfo, SpeedSetInfo, Warmup
from soarlab.bench.runner import record_row


def records() -> list[Record]:
    # SGLang-style: cumulative server token counts per chunk; the 1.5 s chunk added no token.
    a = Record(0, 1, prompt_len=10, output_len=4, send=0.0, first_token=0.5, end=2.0,
               chunks=[(0.5, 1), (1.1, 3), (1.5, 3), (2.0, 4)], server_tokens=4, client_tokens=4)
    # OpenAI-style: no counts per chunk, no server total; the client's retokenized count.
    b = Record(1, 2, prompt_len=6, output_len=3, send=1.0, first_token=1.2, end=1.6,
               chunks=[(1.2, None), (1.4, None), (1.6, None)], client_tokens=3)
    c = Record(2, 3, prompt_len=7, output_len=5, send=0.1, end=0.2, error="HTTP 500 Internal Server Error: boom")
    return [a, b, c]


def test_table_declares_each_metric_once_with_unit_and_definition():
    names = [m.name for m in TABLE]
    assert len(names) == len(set(names))
    for m in TABLE:
        assert m.unit and m.definition and m.label, m.name
        assert m.of in ("level", "run")
        assert set(m.flat) <= ({""} if not m.distribution else set(STATS)), m.name
        assert set(m.shown) <= ({""} if not m.distribution else set(STATS)), m.name
        assert (m.unit == "ms") == m.distribution, m.name
    # the typed diagnostics are exactly the table's run metrics, in the table's order
    assert [f.name for f in dataclasses.fields(Diagnostics)] == [m.name for m in RUN_METRICS]
    assert [m.column for m in PER_REQUEST] == ["ttft_s", "latency_s"]


def test_diagnostics_as_bench_serving_defines_them():
    d = Diagnostics.measure(records(), duration=2.0)
    assert (d.completed, d.failed) == (2, 1)
    assert (d.total_input_tokens, d.total_output_tokens, d.total_output_tokens_asked) == (16, 7, 12)
    assert d.server_output_tokens is None  # b has no server count
    assert d.client_output_tokens == 7
    assert d.request_throughput == pytest.approx(1.0)
    assert (d.input_throughput, d.output_throughput, d.total_throughput) == pytest.approx((8.0, 3.5, 11.5))
    assert d.concurrency == pytest.approx((2.0 + 0.6) / 2.0)
    assert d.ttft_ms.mean == pytest.approx(350.0) and d.ttft_ms.p99 == pytest.approx(200 + 0.99 * 300)
    # TPOT: (e2e - TTFT) / (tokens - 1): a (2.0 - 0.5) / 3, b (0.6 - 0.2) / 2
    assert d.tpot_ms.mean == pytest.approx((500.0 + 200.0) / 2)
    # ITL: a's 0.6 s gap split over the 2 tokens it added, the no-token chunk skipped, then 0.9 s; b's 0.2 s gaps
    assert d.itl_ms.mean == pytest.approx((300 + 300 + 900 + 200 + 200) / 5) and d.itl_ms.median == pytest.approx(300.0)
    assert d.e2e_latency_ms.mean == pytest.approx(1300.0)
    empty = Diagnostics.measure(records()[2:], duration=1.0)
    assert empty.completed == 0 and empty.ttft_ms == Distribution(None, None, None, None)


def test_per_request_columns_come_from_the_table():
    a, _, c = records()
    row = record_row(a, "S1", 0, t0=0.0)
    assert (row["ttft_s"], row["latency_s"], row["error"]) == (0.5, 2.0, None)
    assert list(row)[-3:] == ["ttft_s", "latency_s", "error"]
    row = record_row(c, "S1", 0, t0=0.0)
    assert row["ttft_s"] is None and row["latency_s"] == pytest.approx(0.1) and row["error"].startswith("HTTP 500")


def _report(valid: bool = True) -> LevelReport:
    diag = Diagnostics.measure(records()[:2], duration=2.0)
    method = Method("/generate", True, 0.0, "ignore_eos", 1, False, 2, True, 1.0, 60.0)
    return LevelReport(
        level="S8", max_concurrency=8, valid=valid, invalid_reasons=[] if valid else ["run 1: 1 of 3 requests failed"],
        duration_s=2.0 if valid else None, measured_duration_s=2.0, durations_s=[2.0], spread_s=None, spread_pct=None,
        repeats=1, requests=2, diagnostics=diag, runs=[RunReport(0, 2.0, valid, "flushed", diag)],
        warmup=Warmup(1, 4, 1, None), server=ServerInfo("http://127.0.0.1:1", "sglang", None), method=method,
        dataset=SpeedSetInfo("speed.jsonl", 3, 2, 1, [{"line": 3, "prompt_len": 1, "output_len": 5, "reason": "x"}], 16, 7),
        notes=["n"], started="2026-12-02T00:00:00+00:00", wall_s=3.0,
    )


def test_flat_metrics_keys_and_values():
    flat = flat_metrics([_report()])
    assert set(flat) == {
        "S8_duration_s", "S8_valid", "S8_measured_duration_s", "S8_repeats", "S8_requests", "S8_dropped_rows",
        "S8_request_throughput", "S8_output_throughput", "S8_mean_ttft_ms", "S8_median_ttft_ms", "S8_p99_ttft_ms",
        "S8_mean_tpot_ms", "S8_median_tpot_ms", "S8_mean_itl_ms", "S8_p99_itl_ms", "S8_mean_e2e_latency_ms",
        "S8_p99_e2e_latency_ms",
    }  # spread_s is left out: one run has no spread
    assert (flat["S8_duration_s"], flat["S8_valid"], flat["S8_dropped_rows"]) == (2.0, 1.0, 1.0)
    assert flat["S8_mean_ttft_ms"] == pytest.approx(350.0)
    invalid = flat_metrics([_report(valid=False)])
    assert invalid["S8_valid"] == 0.0 and "S8_duration_s" not in invalid
    # the keys score and tracking read
    assert (level_key("S1", "duration_s"), level_key("Smax", "valid")) == ("S1_duration_s", "Smax_valid")
    assert level_key("S8", "ttft_ms", "p99") == "S8_p99_ttft_ms"
    with pytest.raises(KeyError):
        level_key("S8", "ttft_ms", "p90")  # not a flat figure
    with pytest.raises(KeyError):
        level_key("S8", "latency")


def test_level_report_json_round_trip():
    report = _report()
    text = json.dumps(report.to_dict())
    assert LevelReport.from_dict(json.loads(text)) == report
    d = json.loads(text)
    assert list(d)[:4] == ["level", "max_concurrency", "valid", "invalid_reasons"]
    assert set(d["diagnostics"]["ttft_ms"]) == set(STATS) and d["runs"][0]["cache_flush"] == "flushed"
    bare = dataclasses.replace(report, warmup=None, dataset=None)
    assert bare.to_dict()["warmup"] == {} and bare.to_dict()["dataset"] == {}
    assert LevelReport.from_dict(json.loads(json.dumps(bare.to_dict()))) == bare
    assert METRICS["duration_s"].unit == "s"
