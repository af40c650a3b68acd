"""Typed level reports: what reports/bench/<level>.json holds, and comparing two of them.

`LevelReport.to_dict()` writes the JSON the pipeline has always written; `LevelReport.from_dict`
reads it back (write_summary, `compare`). The figures themselves are declared in bench/metrics.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from soarlab.bench.metrics import Diagnostics


@dataclass(frozen=True)
class SpeedSetInfo:
    """The speed set a level sent: where it came from and what was dropped."""

    path: str
    rows: int
    requests: int
    dropped_rows: int
    dropped: list[dict]  # the first 50 dropped rows: {line, prompt_len, output_len, reason}
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Warmup:
    requests: int
    output_tokens: int
    ok: int  # warm-up requests that succeeded
    error: str | None


@dataclass(frozen=True)
class RunReport:
    """One timed run of a level."""

    repeat: int
    duration_s: float
    valid: bool
    cache_flush: str  # flushed | not supported by this engine | failed (...) | off (bench.flush_cache)
    diagnostics: Diagnostics

    @classmethod
    def from_dict(cls, d: dict) -> RunReport:
        return cls(**{**d, "diagnostics": Diagnostics.from_dict(d["diagnostics"])})


@dataclass(frozen=True)
class ServerInfo:
    url: str
    api: str
    model: str | None


@dataclass(frozen=True)
class Method:
    """How the level was measured (RULES.md 2), from the bench config and the server."""

    endpoint: str
    stream: bool
    temperature: float
    length_control: str
    seed: int
    apply_chat_template: bool
    min_tokens: int
    flush_cache: bool
    pause_after_flush_s: float
    request_timeout_s: float
    level_timeout_s: float | None = None  # the bound on one whole run; None: unbounded


@dataclass(frozen=True)
class LevelReport:
    level: str
    max_concurrency: int | None  # None: every request at once
    valid: bool
    invalid_reasons: list[str]
    duration_s: float | None  # the scored figure: median over repeats; None when invalid
    measured_duration_s: float | None
    durations_s: list[float]
    spread_s: float | None
    spread_pct: float | None
    repeats: int
    requests: int
    diagnostics: Diagnostics | None  # of the median run
    runs: list[RunReport]
    warmup: Warmup | None
    server: ServerInfo
    method: Method
    dataset: SpeedSetInfo | None
    notes: list[str] = field(default_factory=list)
    started: str = ""
    wall_s: float = 0.0
    server_metrics: dict = field(default_factory=dict)  # soarlab.bench.server_metrics.Sampler.summary()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["warmup"] = d["warmup"] or {}
        d["dataset"] = d["dataset"] or {}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> LevelReport:
        return cls(**{
            **d,
            "diagnostics": Diagnostics.from_dict(d["diagnostics"]) if d.get("diagnostics") else None,
            "runs": [RunReport.from_dict(r) for r in d.get("runs") or []],
            "warmup": Warmup(**d["warmup"]) if d.get("warmup") else None,
            "server": ServerInfo(**d["server"]),
            "method": Method(**d["method"]),
            "dataset": SpeedSetInfo(**d["dataset"]) if d.get("dataset") else None,
        })


@dataclass(frozen=True)
class Comparison:
    level: str
    comparable: bool
    within_noise: bool | None  # None: noise unknown (a single run on either side) or not comparable
    verdict: str
    duration_a_s: float | None = None
    duration_b_s: float | None = None
    difference_s: float | None = None
    difference_pct: float | None = None
    noise_s: float | None = None


def compare(a: LevelReport, b: LevelReport) -> Comparison:
    """Is the difference between two level reports larger than their run-to-run spread?

    Noise is the larger of the two spreads (max - min over repeats). With a single run on either
    side the noise is unknown and `within_noise` is None: rerun with bench.repeats >= 3.
    """
    da, db = a.duration_s, b.duration_s
    if da is None or db is None:
        return Comparison(a.level, False, None, "not comparable: a level without a valid duration (see invalid_reasons)")
    diff = db - da
    spreads = (a.spread_s, b.spread_s)
    noise = None if any(s is None for s in spreads) else max(spreads)
    within = None if noise is None else abs(diff) <= noise
    pct = 100.0 * diff / da if da else None
    if within is None:
        verdict = f"difference {diff:+.3f} s ({pct:+.1f}%); noise unknown (run with bench.repeats >= 3)"
    elif within:
        verdict = f"difference {diff:+.3f} s ({pct:+.1f}%) is inside the run-to-run spread ({noise:.3f} s): no real change"
    else:
        verdict = f"difference {diff:+.3f} s ({pct:+.1f}%) is outside the run-to-run spread ({noise:.3f} s)"
    return Comparison(a.level, True, within, verdict, da, db, diff, pct, noise)
