"""What the server and GPU did during a level (soarlab.bench.server_metrics), against loopback servers
(soarlab.bench.loopback): SGLang's API serves a Prometheus page at /metrics as SGLang does with
--enable-metrics; the OpenAI API has none, as `transformers serve` has none."""

from __future__ import annotations

import importlib.util
import json

import pytest

from support import bench_cfg

from soarlab.bench.loopback import LoopbackServer
from soarlab.bench.report import write_level, write_summary
from soarlab.bench.requests import BenchRequest
from soarlab.bench.runner import run_level
from soarlab.tracking.run_page import bench_series
from soarlab.engines.server import Server

REQUESTS = [BenchRequest(index=i, line=i + 1, prompt="word " * 8, prompt_len=9, output_len=8) for i in range(8)]
HAS_NVML = importlib.util.find_spec("pynvml") is not None


def _level(srv: LoopbackServer, api: str, level: str = "S8"):
    bench = bench_cfg(warmup_requests=0, repeats=2, server_metrics={"every_s": 0.05})
    return run_level(Server(srv.base_url, api, model="loopback"), REQUESTS, level, 8, bench)


def test_prometheus_gauges_are_sampled_per_level_and_flattened(tmp_path):
    with LoopbackServer(api="sglang", token_delay_s=0.002, kv_cache_usage=0.4, gen_throughput=1234.0) as srv:
        report, rows = _level(srv, "sglang")
    assert report.valid, report.invalid_reasons
    sampled = report.server_metrics["prometheus"]
    assert set(sampled) == {"gen_throughput_tok_s", "running_requests", "queued_requests", "kv_cache_usage"}
    assert sampled["kv_cache_usage"]["mean"] == pytest.approx(0.4) and sampled["gen_throughput_tok_s"]["max"] == 1234.0
    assert sampled["queued_requests"]["max"] == 0.0 and 0 <= sampled["running_requests"]["max"] <= 8
    assert sampled["kv_cache_usage"]["samples"] >= 2  # at the start and at the end, however short the level
    if not HAS_NVML:  # a CPU machine: what was not sampled is said
        assert any(w.startswith("no NVML here") for w in report.server_metrics["skipped"])
    write_level(tmp_path, report, rows)
    flat = write_summary(tmp_path, ["S8"], make_plot=False)
    assert flat["S8_server_kv_cache_usage_mean"] == pytest.approx(0.4) and flat["S8_server_gen_throughput_tok_s_max"] == 1234.0
    assert json.loads((tmp_path / "S8.json").read_text())["server_metrics"]["prometheus"]["kv_cache_usage"]["mean"] == pytest.approx(0.4)


def test_a_server_without_metrics_is_skipped_and_said(tmp_path):
    with LoopbackServer(api="openai") as srv:
        report, rows = _level(srv, "openai")
    assert report.valid, report.invalid_reasons
    assert report.server_metrics["prometheus"] == {}
    reason = next(w for w in report.server_metrics["skipped"] if "/metrics" in w)
    assert reason == (f"GET {srv.base_url}/metrics answered 404: this server has no Prometheus metrics "
                      "(transformers serve only with speculative decoding; SGLang only with --enable-metrics)")
    write_level(tmp_path, report, rows)
    assert not [k for k in write_summary(tmp_path, ["S8"], make_plot=False) if "_server_" in k]


def test_gpu_samples_become_mlflow_system_metrics_across_levels(tmp_path):
    """NVML needs a GPU: its samples are written into level reports by hand, as the sampler writes them."""
    bench = tmp_path / "reports" / "bench"
    bench.mkdir(parents=True)
    for level, started in (("S1", "2026-12-03T10:00:00+00:00"), ("S8", "2026-12-03T10:01:00+00:00")):
        samples = [{"t_s": t, "gpu": 0, "utilization_pct": 90.0 + t, "memory_used_mb": 1000.0} for t in (0.0, 1.0)]
        (bench / f"{level}.json").write_text(json.dumps({"started": started, "durations_s": [1.0],
                                                          "server_metrics": {"gpu": samples}}))
    series = [m for m in bench_series(tmp_path / "reports", ["S1", "S8"], 0) if m.key.startswith("system/")]
    utilization = [m for m in series if m.key == "system/gpu_0_utilization_percentage"]
    assert [m.step for m in utilization] == [0, 1, 2, 3] and [m.value for m in utilization] == [90.0, 91.0, 90.0, 91.0]
    assert utilization[2].timestamp - utilization[0].timestamp == 60_000  # timed from each level's start
    assert {m.key for m in series} == {"system/gpu_0_utilization_percentage", "system/gpu_0_memory_usage_megabytes"}
