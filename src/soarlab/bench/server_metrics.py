"""What the server and the GPU were doing while a level ran, so that a slow level can be explained.

During a level's timed runs a background thread samples, every `bench.server_metrics.every_s` and
once more at the end:
- the server's Prometheus page (GET /metrics; SGLang serves it with --enable-metrics, which the
  sglang engine adds at launch; the CPU engine with speculative decoding on): the gauges named in
  `bench.server_metrics.prometheus` (token throughput, running and queued requests, KV-cache usage,
  speculative accept length), summed over their label sets, and the increase over the level of the
  counters named in `bench.server_metrics.counters` (the CPU engine's speculative verifications);
- with `bench.server_metrics.nvml`, each GPU's utilisation and memory through NVML (nvidia-ml-py).
What does not exist here is skipped and said so (transformers serve has no /metrics; a CPU machine
has no NVML). The level report keeps the summary (mean, max, samples) and the GPU series, which the
track stage logs as MLflow system metrics (`system/gpu_<i>_utilization_percentage`, ...).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

from soarlab.engines.server import http_request

GPU_FIELDS = ("utilization_pct", "memory_used_mb")  # of each GPU sample; MLflow names: tracking.run_page.GPU_SERIES


def parse_prometheus(text: str, wanted: dict[str, str]) -> dict[str, float]:
    """{our name: value} of the wanted Prometheus samples (summed over label sets) found in `text`."""
    from prometheus_client.parser import text_string_to_metric_families

    by_metric = {metric: name for name, metric in wanted.items()}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in by_metric:
                found[by_metric[sample.name]] = found.get(by_metric[sample.name], 0.0) + float(sample.value)
    return found


def _nvml():
    """The initialised NVML module, or the reason there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, None
    except ImportError:
        return None, "no NVML here (nvidia-ml-py not installed): GPU utilisation and memory not sampled"
    except Exception as exc:  # pynvml.NVMLError: no driver, no GPU
        return None, f"no NVML here ({exc}): GPU utilisation and memory not sampled"


@dataclass
class Sampler:
    """`with Sampler(base_url, cfg.bench.server_metrics) as s: ...` then `s.summary()`."""

    base_url: str
    cfg: object
    samples: dict[str, list[float]] = field(default_factory=dict)
    gpu: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._prometheus = dict(self.cfg.prometheus)
        self._counters = {f"counter:{name}": metric for name, metric in self.cfg.counters.items()}
        self._nvml = None
        if self.cfg.nvml:
            self._nvml, why = _nvml()
            if why:
                self.skipped.append(why)
        self._t0 = 0.0

    def __enter__(self) -> "Sampler":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._sample()  # the level's end: at least two samples, however short the level
        if self._nvml:
            self._nvml.nvmlShutdown()

    def _loop(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(float(self.cfg.every_s)):
                return

    def _sample(self) -> None:
        if self._prometheus or self._counters:
            status, text = http_request(f"{self.base_url}/metrics", timeout=5)
            if status != 200:
                self.skipped.append(f"GET {self.base_url}/metrics answered {status or 'nothing'}: this server has no "
                                    "Prometheus metrics (transformers serve only with speculative decoding; SGLang only "
                                    "with --enable-metrics)")
                self._prometheus, self._counters = {}, {}
            else:
                for name, value in parse_prometheus(text, self._prometheus | self._counters).items():
                    self.samples.setdefault(name, []).append(value)
        if self._nvml:
            t = round(time.monotonic() - self._t0, 3)
            for i in range(self._nvml.nvmlDeviceGetCount()):
                handle = self._nvml.nvmlDeviceGetHandleByIndex(i)
                self.gpu.append({"t_s": t, "gpu": i, "utilization_pct": float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                                 "memory_used_mb": self._nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20})

    def summary(self) -> dict:
        """{"prometheus": {name: {mean, max, samples}}, "counters": {name: increase over the level},
        "gpu": [samples], "skipped": [reasons]}."""
        gauges = {name: v for name, v in self.samples.items() if not name.startswith("counter:")}
        stats = {name: {"mean": statistics.fmean(v), "max": max(v), "samples": len(v)} for name, v in gauges.items()}
        counters = {name.removeprefix("counter:"): v[-1] - v[0] for name, v in self.samples.items()
                    if name.startswith("counter:")}
        return {"prometheus": stats, "counters": counters, "gpu": self.gpu, "skipped": self.skipped}


def acceptance(summary: dict, records) -> dict | None:
    """How many tokens each speculative verification gave on a level (SGLang's accept length: 1 means no draft
    token was ever accepted), from the best source there is: SGLang's per-request `spec_verify_ct`, the CPU
    engine's counters (which also give the share of drafted tokens accepted), or SGLang's gauge. None: no
    speculative decoding was seen."""
    verified = sum(r.spec_verify_ct or 0 for r in records)
    if verified:
        tokens = sum(r.tokens_out or 0 for r in records if r.spec_verify_ct)
        return {"accept_length": tokens / verified, "accept_rate": None, "verify_steps": verified, "source": "meta_info"}
    counted = summary.get("counters") or {}
    steps = counted.get("spec_verify_steps")
    if steps:
        accepted, drafted = counted.get("spec_accepted_tokens", 0), counted.get("spec_draft_tokens", 0)
        return {"accept_length": (accepted + steps) / steps, "accept_rate": accepted / drafted if drafted else None,
                "verify_steps": steps, "source": "counters"}
    gauge = (summary.get("prometheus") or {}).get("spec_accept_length")
    if gauge and gauge["mean"] > 0:
        return {"accept_length": gauge["mean"], "accept_rate": None, "verify_steps": None, "source": "gauge"}
    return None


def flat(level: str, summary: dict) -> dict[str, float]:
    """metrics.json keys: `S1_server_running_requests_mean`, `S1_gpu0_utilization_pct_max`,
    `S1_spec_accept_length`, ..."""
    out = {f"{level}_server_{name}_{stat}": float(v[stat]) for name, v in (summary.get("prometheus") or {}).items()
           for stat in ("mean", "max")}
    spec = summary.get("spec") or {}
    out |= {f"{level}_spec_{key}": float(spec[key]) for key in ("accept_length", "accept_rate")
            if spec.get(key) is not None}
    for i in sorted({s["gpu"] for s in summary.get("gpu") or []}):
        for key in GPU_FIELDS:
            values = [s[key] for s in summary["gpu"] if s["gpu"] == i]
            out |= {f"{level}_gpu{i}_{key}_mean": statistics.fmean(values), f"{level}_gpu{i}_{key}_max": max(values)}
    return out
