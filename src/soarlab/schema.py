"""The config's types: one pydantic model per Hydra group, checked once after composition.

`validate(cfg)` runs in `soarlab.config.compose` (every CLI command) and `load_params` (every
stage), so a wrong type, a value out of range or an unknown key fails before any work starts, in
one line naming the key: `config key engine.port: Input should be less than or equal to 65535`.
The models are strict (no "31000" string for an int) and forbid keys they do not declare, so
a key added under conf/ must be declared here too; code then reads it without a fallback.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from soarlab.errors import SoarError

Port = Annotated[int, Field(ge=0, le=65535)]  # 0: any free port
PositiveInt = Annotated[int, Field(gt=0)]
Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(gt=0)]
Pause = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, lt=1)]
Percent = Annotated[float, Field(gt=0, le=100)]
TokenRange = Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=2, max_length=2)]
Args = list[str]


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# ---- model ----
class ModelGroup(Group):
    name: str
    source: Literal["embedded", "huggingface", "modelscope", "local"]
    repo_id: str | None
    modelscope_id: str | None
    modelscope_revision: str | None
    local_path: str | None
    revision: str | None
    baseline_accuracy: Percent
    max_eagle_topk: PositiveInt  # widest speculative draft tree the model can verify (RULES.md 6)


# ---- quant ----
class CalibrationOverride(Group):
    num_samples: PositiveInt | None = None
    seq_len: PositiveInt | None = None
    batch_size: PositiveInt | None = None


class Calibration(Group):
    source: str
    num_samples: PositiveInt
    seq_len: PositiveInt
    batch_size: PositiveInt
    seed: int
    per_model: dict[str, CalibrationOverride]


class QuantRule(Group):
    name: str
    match: str | None = None
    mixer: Literal["minicpm4", "lightning-attn"] | None = None
    bits: Literal[4, 8, "keep"]
    override_exclude: bool = False


class QuantReport(Group):
    error_samples: PositiveInt


class CpuNumerics(Group):
    threads: PositiveInt
    env: dict[str, str]


class QuantGroup(Group):
    name: str
    method: Literal["gptq", "rtn", "none"]
    serve_quantization: str | None
    bits: Literal[4, 8]
    group_size: Annotated[int, Field(ge=-1)]
    sym: bool
    desc_act: bool
    act_group_aware: bool
    damp_percent: Fraction
    damp_auto_increment: Annotated[float, Field(ge=0, lt=1)]
    checkpoint_format: Literal["gptq"]
    offload_to_disk: bool
    cpu_numerics: CpuNumerics
    calibration: Calibration
    exclude: list[str]
    rules: list[QuantRule]
    report: QuantReport
    check: bool


# ---- engine ----
class ServedEngine(Group):
    host: str
    port: Port
    startup_timeout_s: Seconds
    stop_grace_s: Pause


Launcher = Literal["local", "container"]  # container: inside the serving image `package` builds


class TransformersEngine(ServedEngine):
    name: Literal["transformers"]
    launcher: Launcher
    container_args: Args
    device: str
    dtype: str
    trust_remote_code: bool
    log_level: Literal["debug", "info", "warning", "error", "critical"]
    extra_args: Args
    cpu_threads: PositiveInt | None


ServerArg = Union[bool, int, float, str, list[Union[int, float, str]], None]


FlagValue = Union[bool, int, float, str, None]


class KnownBad(Group):
    """A combination of SGLang flags known to fail (soarlab.known_bad)."""
    when: dict[str, list[FlagValue]]  # flag -> the values that make it (None: the flag unset)
    unless: dict[str, FlagValue]  # flags that make it safe
    why: str
    source: str  # where the fact is recorded (RULES.md N, or a second-hand source)
    secondhand: bool  # a warning naming the source, not a refusal


class SGLangEngine(ServedEngine):
    name: Literal["sglang"]
    launcher: Launcher
    python: str | None
    container_gpus: str
    container_shm_size: str
    container_args: Args
    jit_cache_dir: str | None  # where SGLang's JIT compilers keep what they build; null: their defaults
    enable_metrics: bool  # --enable-metrics at a local launch (bench samples GET /metrics)
    server_args: dict[str, ServerArg]
    known_bad: list[KnownBad]


class ExternalEngine(Group):
    name: Literal["external"]
    url: str
    api: Literal["sglang", "openai"]
    model: str | None
    supports_ignore_eos: bool | None
    health_timeout_s: Seconds


Engine = Annotated[Union[TransformersEngine, SGLangEngine, ExternalEngine], Field(discriminator="name")]


# ---- bench ----
class SpeedSetSource(Group):
    profile: str
    num_requests: PositiveInt
    seed: int
    path: str | None
    max_line_bytes: PositiveInt


class ProfileComponent(Group):
    weight: Annotated[float, Field(gt=0)]
    input_tokens: TokenRange
    output_tokens: TokenRange


class Profile(Group):
    mix: Annotated[list[ProfileComponent], Field(min_length=1)]


class ServerMetrics(Group):
    every_s: Seconds
    prometheus: dict[str, str]
    counters: dict[str, str]
    nvml: bool


class BenchGroup(Group):
    dataset: SpeedSetSource
    levels: dict[str, PositiveInt | None]
    seed: int
    apply_chat_template: bool
    min_tokens: Count
    warmup_requests: Count
    warmup_max_tokens: PositiveInt
    flush_cache: bool
    flush_timeout_s: Seconds
    pause_after_flush_s: Pause
    temperature: Pause
    length_control: Literal["auto", "ignore_eos", "generation_config"]
    model: str | None
    request_timeout_s: Seconds
    connect_timeout_s: Seconds
    level_timeout_s: Seconds | None  # null: a run of a level is never abandoned
    repeats: PositiveInt
    rerun: str | None  # set by `soarlab compare --rerun` only
    progress: bool
    server_metrics: ServerMetrics
    plot: bool
    profiles: dict[str, Profile]


# ---- eval ----
class CorrectnessSource(Group):
    source: Literal["embedded", "github", "file"]
    path: str | None
    repo: str
    file: str
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None
    git_blob_sha1: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None
    download_timeout_s: Seconds


class Bootstrap(Group):
    resamples: PositiveInt
    seed: int
    confidence: Fraction


class OfficialPass(Group):
    questions: PositiveInt
    max_tokens: PositiveInt
    time_limit_s: Seconds


class AfterLoad(Group):
    questions: Count  # 0: off
    varying_engines: list[str]


class EvalGroup(Group):
    dataset: CorrectnessSource
    max_tokens: PositiveInt
    temperature: Pause
    chat_template_kwargs: dict[str, Any]
    num_concurrent: PositiveInt
    retries: Count
    retry_backoff_s: Pause
    timeout_s: Seconds
    seed: int
    limit: PositiveInt | None
    bootstrap: Bootstrap
    tasks: list[str]
    standard_limit: PositiveInt | None
    official_pass: OfficialPass
    after_load: AfterLoad


# ---- spec ----
Sha = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]


class DraftSource(Group):
    source: Literal["none", "embedded", "huggingface", "modelscope", "local"]
    repo_id: str | None
    revision: Sha | None  # hub sources: the pinned commit
    local_path: str | None


class SpecGroup(Group):
    name: str
    algorithm: Literal["STANDALONE", "NGRAM", "EAGLE", "EAGLE3"] | None
    draft: DraftSource
    num_steps: PositiveInt | None
    eagle_topk: PositiveInt | None
    num_draft_tokens: PositiveInt | None


# ---- score ----
class CBand(Group):
    above: float
    C: Annotated[float, Field(ge=0, le=1)]


class ScoreReference(Group):
    source: Literal["config", "best_recorded", "baseline_run"]
    durations: dict[str, Seconds | None]
    baseline_run_id: str | None


class ScoreGroup(Group):
    weights: dict[str, Annotated[float, Field(ge=0)]]
    speed_scale: Seconds
    accuracy_cap: Percent
    c_table: list[CBand]
    c_floor: Annotated[float, Field(ge=0, le=1)]
    decimals: Count
    reference: ScoreReference


# ---- package, tracking, paths ----
class CpuImage(Group):
    tag: str
    base: str
    suite: str
    apt_sources: str | None
    torch: str
    torch_index_url: str
    uv: str
    engine_packages: list[str]


class PackageGroup(Group):
    name: str
    base_image: str
    model: str
    sglang: SGLangEngine  # the engine the submission's SGLANG_SERVER_ARGS describe (conf/engine/sglang.yaml)
    max_size_bytes: PositiveInt
    pip_packages: list[str]
    uv_extra_args: Args
    container_cli: Literal["auto", "docker", "podman"]
    build_image: Literal["auto"] | bool
    image_tag: str
    platform_model_dir: str
    processed_model_dir: str
    cpu_image: CpuImage
    forbidden: list[str]


class TrackingGroup(Group):
    uri: str | None
    experiment: str
    lock_wait_s: Seconds


# ---- decide ----
class DecideCompare(Group):
    negligible_pct: Pause
    rerun_timeout_s: Seconds


class DecideCalibration(Group):
    level_ratio_tolerance: Annotated[float, Field(ge=1)]
    official_best: dict[str, Seconds | None]


class DecideGate(Group):
    against: str
    min_gain: float


class DecideLengths(Group):
    p95_growth_pct: Pause
    at_cap_growth: Count


class DecideLeaderboard(Group):
    plot: str


class DecideGroup(Group):
    confidence: Fraction
    compare: DecideCompare
    calibration: DecideCalibration
    gate: DecideGate
    incidental_params: list[str]
    leaderboard: DecideLeaderboard
    lengths: DecideLengths


class Paths(Group):
    base_model: str
    quantized_model: str
    draft_model: str
    data: str
    reports: str


class SweepTrial(Group):
    """`trial` of conf/sweep_app.yaml: how `soarlab sweep` runs each trial (not a pipeline key)."""
    timeout_s: Seconds
    remote: str | None
    git_remote: str
    jit_cache_dir: str
    always: list[str]


class SweepPruning(Group):
    """`sweep` of conf/sweep_app.yaml: early stopping of trials that cannot win (soarlab.pruning)."""
    prune: bool
    pruner: dict[str, Any] | None  # an Optuna pruner: `_target_` and its arguments; None: SoarPruner
    slower_pct: Annotated[float, Field(ge=0)]
    s1_fraction: Fraction
    decision_timeout_s: Seconds


class SoarConfig(Group):
    model: ModelGroup
    quant: QuantGroup
    engine: Engine
    spec: SpecGroup
    bench: BenchGroup
    eval: EvalGroup
    score: ScoreGroup
    package: PackageGroup
    tracking: TrackingGroup
    decide: DecideGroup
    paths: Paths


def _key(loc: tuple) -> str:
    """('engine', 'transformers', 'port') -> 'engine.port': drop the union's tag from the path."""
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] == "engine" and parts[1] in ("transformers", "sglang", "external"):
        del parts[1]
    return ".".join(parts)


def _validated(model: type[Group], cfg, where: str, prefix: tuple = ()):
    """`model` of `cfg` (a DictConfig or plain data); SoarError naming the first bad key (and how many more)."""
    from omegaconf import DictConfig, OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        key = _key(prefix + tuple(first["loc"]))
        got = "" if first["type"] in ("missing", "extra_forbidden") else f" (got {first.get('input')!r:.80})"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        more = f"; {len(errors) - 1} more problem(s)" if len(errors) > 1 else ""
        raise SoarError(
            f"config key {key} in {where}: {message}{got}{more}",
            "set a valid value, or remove the key",
        ) from None


def validate(cfg, where: str = "the config") -> SoarConfig:
    """The typed config; SoarError naming the first bad key (and how many more there are), or the
    first speculative-decoding combination or SGLang flag combination known to fail (soarlab.speculative.check,
    soarlab.known_bad.check)."""
    from soarlab import known_bad
    from soarlab.speculative import check

    typed = _validated(SoarConfig, cfg, where)
    check(typed)
    known_bad.check(typed)
    return typed


def validate_trial(trial_cfg, where: str = "conf/sweep_app.yaml") -> SweepTrial:
    """The sweep's `trial` keys, typed; SoarError naming the first bad one."""
    return _validated(SweepTrial, trial_cfg, where, prefix=("trial",))


def validate_sweep(sweep_cfg, where: str = "conf/sweep_app.yaml") -> SweepPruning:
    """The sweep's `sweep` keys (pruning), typed; SoarError naming the first bad one."""
    return _validated(SweepPruning, sweep_cfg, where, prefix=("sweep",))
