"""The metric table: every figure a level reports, declared once with its unit and definition.

The table feeds the diagnostics of a run (`Diagnostics.measure`), the per-request JSONL columns,
the flat metrics of metrics.json (which MLflow tracking logs as `bench.<key>`), the printout and
the plot. Definitions follow sglang.bench_serving (`calculate_metrics`):

- TTFT: send to the first chunk with non-empty text.
- TPOT: (latency - TTFT) / (output tokens - 1), for requests with more than one token.
- ITL: gaps between content chunks; where the server gives a running token count (SGLang
  meta_info.completion_tokens) a gap is split evenly over the tokens its chunk added and
  chunks that added none are skipped, as bench_serving does.
- e2e latency: send to completion. Throughputs over the level duration.
Every figure is over the timed requests only (never the warm-up).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    from soarlab.bench.client import Record

STATS = ("mean", "median", "p90", "p99")
_PERCENTILES = {"median": 50, "p90": 90, "p99": 99}
VALUE = ""  # the `flat`/`shown` entry of a scalar metric: the value itself


@dataclass(frozen=True)
class Distribution:
    """A per-request figure over a run's requests, in ms; None where no request has it."""

    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None


def summarize(values: Sequence[float], scale: float = 1000.0) -> Distribution:
    """mean, median, p90, p99 of values (seconds), scaled to ms."""
    if not len(values):
        return Distribution(None, None, None, None)
    arr = np.asarray(values, dtype=float) * scale
    return Distribution(float(arr.mean()), *(float(np.percentile(arr, q)) for q in _PERCENTILES.values()))


def itls(rec: Record) -> list[float]:
    gaps: list[float] = []
    if rec.first_token is None or not rec.chunks:
        return gaps
    prev_t, prev_n = rec.chunks[0]
    for t, n in rec.chunks[1:]:
        if n is None or prev_n is None:
            gaps.append(t - prev_t)
        else:
            new = n - prev_n
            if new <= 0:
                continue
            gaps.extend([(t - prev_t) / new] * new)
        prev_t, prev_n = t, n
    return gaps


def _out_tokens(r: Record) -> int:
    return r.tokens_out if r.tokens_out is not None else r.output_len


def _tpot(r: Record) -> list[float]:
    n = _out_tokens(r)
    return [((r.end - r.send) - (r.first_token - r.send)) / (n - 1)] if n > 1 else []


class RunSample:
    """One timed run as the table's run metrics read it: its requests, those completed, its duration."""

    def __init__(self, records: Sequence[Record], duration: float):
        self.records = records
        self.done = [r for r in records if r.ok and r.first_token is not None]
        self.per_s = duration if duration > 0 else float("nan")  # the divisor of every throughput
        self.input_tokens = sum(r.prompt_len for r in self.done)
        self.output_tokens = sum(_out_tokens(r) for r in self.done)

    def all_or_none(self, attr: str) -> int | None:
        """The sum of a per-request count, if every completed request has it."""
        values = [getattr(r, attr) for r in self.done if getattr(r, attr) is not None]
        return sum(values) if len(values) == len(self.done) and self.done else None


@dataclass(frozen=True)
class Metric:
    name: str  # key in the level report (of="level") or in its diagnostics (of="run")
    unit: str
    definition: str
    label: str  # how the printout and the plot name it
    of: str  # "level": read from a LevelReport; "run": measured on one timed run
    # level: f(LevelReport); run scalar: f(RunSample); run distribution: f(Record) -> samples in seconds
    value: Callable[[Any], Any]
    distribution: bool = False
    flat: tuple[str, ...] = ()  # to metrics.json and MLflow: VALUE for a scalar, statistics of a distribution
    shown: tuple[str, ...] = ()  # in the printout
    column: str | None = None  # per-request JSONL column (seconds) of a one-sample-per-request figure; plotted

    def measure(self, sample: RunSample):
        if self.distribution:
            return summarize([x for r in sample.done for x in self.value(r)])
        return self.value(sample)


def _level(name, unit, definition, label, value, flat=(VALUE,)):
    return Metric(name, unit, definition, label, "level", value, flat=flat)


def _run(name, unit, definition, label, value, **kw):
    return Metric(name, unit, definition, label, "run", value, **kw)


def _dist(name, definition, label, samples, **kw):
    return Metric(name, "ms", definition, label, "run", samples, distribution=True, **kw)


TABLE: tuple[Metric, ...] = (
    _level("duration_s", "s", "benchmark duration: first request sent to last response finished, median over "
           "repeats; the scored figure (RULES.md 2); null when the level is invalid", "benchmark duration",
           lambda rep: rep.duration_s),
    _level("valid", "1", "1 when every timed request succeeded with exactly the asked number of tokens", "valid",
           lambda rep: 1 if rep.valid else 0),
    _level("measured_duration_s", "s", "the median duration even when the level is invalid", "benchmark duration",
           lambda rep: rep.measured_duration_s),
    _level("spread_s", "s", "max - min duration over repeats (null with one run)", "spread", lambda rep: rep.spread_s),
    _level("repeats", "runs", "timed runs of the level", "repeats", lambda rep: rep.repeats),
    _level("requests", "requests", "requests per timed run", "requests", lambda rep: rep.requests),
    _level("dropped_rows", "rows", "speed-set rows dropped (prompt or output under bench.min_tokens)", "dropped rows",
           lambda rep: rep.dataset.dropped_rows if rep.dataset else None),
    _run("completed", "requests", "requests that succeeded with a first token", "completed", lambda s: len(s.done)),
    _run("failed", "requests", "requests that failed", "failed", lambda s: sum(1 for r in s.records if not r.ok)),
    _run("total_input_tokens", "tokens", "prompt tokens of the completed requests", "input tokens",
         lambda s: s.input_tokens),
    _run("total_output_tokens", "tokens", "output tokens of the completed requests (server count, else client count, "
         "else asked)", "output tokens", lambda s: s.output_tokens),
    _run("total_output_tokens_asked", "tokens", "output tokens asked, over all requests", "output tokens asked",
         lambda s: sum(r.output_len for r in s.records)),
    _run("server_output_tokens", "tokens", "output tokens as the server counted them (null unless every completed "
         "request has a count)", "server output tokens", lambda s: s.all_or_none("server_tokens")),
    _run("client_output_tokens", "tokens", "output tokens of the generated text retokenized by the client",
         "client output tokens", lambda s: s.all_or_none("client_tokens")),
    _run("request_throughput", "req/s", "completed requests / duration", "request throughput",
         lambda s: len(s.done) / s.per_s, flat=(VALUE,), shown=(VALUE,)),
    _run("input_throughput", "tok/s", "input tokens / duration", "input throughput", lambda s: s.input_tokens / s.per_s),
    _run("output_throughput", "tok/s", "output tokens / duration", "output throughput",
         lambda s: s.output_tokens / s.per_s, flat=(VALUE,), shown=(VALUE,)),
    _run("total_throughput", "tok/s", "(input + output tokens) / duration", "total throughput",
         lambda s: (s.input_tokens + s.output_tokens) / s.per_s),
    _run("concurrency", "requests", "sum of e2e latencies / duration: requests in flight on average", "concurrency",
         lambda s: sum(r.end - r.send for r in s.done) / s.per_s),
    _dist("ttft_ms", "time to first token: send to the first chunk with non-empty text", "TTFT",
          lambda r: [] if r.first_token is None else [r.first_token - r.send],
          flat=("mean", "median", "p99"), shown=("mean",), column="ttft_s"),
    _dist("tpot_ms", "time per output token after the first: (e2e latency - TTFT) / (output tokens - 1), "
          "requests with more than one token", "TPOT", _tpot, flat=("mean", "median"), shown=("mean",)),
    _dist("itl_ms", "inter-token latency: gaps between content chunks, split over the tokens a chunk added",
          "ITL", itls, flat=("mean", "p99")),
    _dist("e2e_latency_ms", "end-to-end latency: send to the last chunk", "e2e latency",
          lambda r: [] if r.end is None else [r.end - r.send], flat=("mean", "p99"), column="latency_s"),
)
METRICS = {m.name: m for m in TABLE}
RUN_METRICS = tuple(m for m in TABLE if m.of == "run")
PER_REQUEST = tuple(m for m in TABLE if m.column)


@dataclass(frozen=True)
class Diagnostics:
    """The run metrics of the table, measured on one timed run (field names = the table's names)."""

    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    total_output_tokens_asked: int
    server_output_tokens: int | None
    client_output_tokens: int | None
    request_throughput: float
    input_throughput: float
    output_throughput: float
    total_throughput: float
    concurrency: float
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_latency_ms: Distribution

    @classmethod
    def measure(cls, records: Sequence[Record], duration: float) -> Diagnostics:
        sample = RunSample(records, duration)
        return cls(**{m.name: m.measure(sample) for m in RUN_METRICS})

    @classmethod
    def from_dict(cls, d: dict) -> Diagnostics:
        return cls(**{f.name: Distribution(**d[f.name]) if METRICS[f.name].distribution else d[f.name] for f in fields(cls)})


def value_of(metric: Metric, report, stat: str = VALUE):
    """A metric's figure in a level report (None where it does not exist)."""
    if metric.of == "level":
        return metric.value(report)
    if report.diagnostics is None:
        return None
    value = getattr(report.diagnostics, metric.name)
    return getattr(value, stat) if metric.distribution else value


def level_key(level: str, name: str, stat: str = VALUE) -> str:
    """The flat key of a metric: `S1_duration_s`, `S8_mean_ttft_ms` (metrics.json; `bench.<key>` in MLflow)."""
    metric = METRICS[name]
    if stat not in metric.flat:
        raise KeyError(f"{name} has no flat figure {stat!r}")
    return f"{level}_{stat}_{name}" if stat else f"{level}_{name}"


def flat_metrics(reports) -> dict[str, float]:
    """{'S1_duration_s': .., 'S1_valid': 1, ...}; a figure that does not exist is left out (MLflow takes numbers)."""
    flat: dict[str, float] = {}
    for rep in reports:
        for metric in TABLE:
            for stat in metric.flat:
                value = value_of(metric, rep, stat)
                if value is not None:
                    flat[level_key(rep.level, metric.name, stat)] = float(value)
    return flat


def check(records: Sequence[Record]) -> list[str]:
    """Why the level cannot be scored: failed requests, or requests with another token count than asked."""
    reasons = []
    failed = [r for r in records if not r.ok]
    if failed:
        examples = "; ".join(f"request {r.index} (line {r.line}): {r.error}" for r in failed[:3])
        reasons.append(f"{len(failed)} of {len(records)} requests failed: {examples}")
    wrong = [r for r in records if r.ok and r.tokens_out != r.output_len]
    if wrong:
        examples = "; ".join(
            f"request {r.index} (line {r.line}) asked {r.output_len}, got {r.tokens_out}"
            f" ({'server' if r.server_tokens is not None else 'client retokenized'} count)"
            for r in wrong[:3]
        )
        reasons.append(f"{len(wrong)} requests returned another number of tokens than asked: {examples}")
    return reasons


@dataclass(frozen=True)
class Spread:
    """Median duration and spread (max - min) of a level's repeats."""

    median_s: float | None
    spread_s: float | None
    spread_pct: float | None
    repeats: int

    @classmethod
    def of(cls, durations: Sequence[float]) -> Spread:
        if not durations:
            return cls(None, None, None, 0)
        med = statistics.median(durations)
        spread = max(durations) - min(durations) if len(durations) > 1 else None
        pct = (100.0 * spread / med) if spread is not None and med > 0 else None
        return cls(med, spread, pct, len(durations))
