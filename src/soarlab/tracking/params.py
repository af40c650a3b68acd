"""The config of a run as MLflow params, and the run's name: what sets it apart (the quant preset and what
differs from conf/, or a sweep trial's varying overrides), then its scores, since the MLflow runs table
shows the name and hides every metric column until the user picks it."""

from __future__ import annotations

import json

from soarlab.config import flatten
from soarlab.domain import LEVELS
from soarlab.schema import SoarConfig
from soarlab.tracking.tags import trial_label

# MLflow rejects param values over this many characters.
_MAX_PARAM_CHARS = 6000


def run_params(data: dict) -> dict[str, str]:
    """The config as written (soarlab.config.params_data / composed_data), flattened as MLflow stores it:
    strings, JSON for non-strings, cut to MLflow's limit."""
    params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in flatten(data).items()}
    return {k: v[:_MAX_PARAM_CHARS] for k, v in params.items()}


def incidental_key(key: str, incidental) -> bool:
    """Whether `key` says where or how a run was watched (decide.incidental_params), not what it tried."""
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in incidental)


def config_delta(params: dict[str, str], reference: dict[str, str], incidental) -> list[str]:
    """The config keys of `params` that differ from `reference`, shortest first: a group whose
    `name` changed shows as `group=name` (its other keys follow the preset); incidental keys never show."""
    changed = [k for k in sorted(set(params) | set(reference))
               if params.get(k) != reference.get(k) and not incidental_key(k, incidental)]
    groups = {k[: -len(".name")] for k in changed if k.endswith(".name") and "." not in k[: -len(".name")]}
    presets = [f"{g}={params.get(f'{g}.name')}" for g in sorted(groups)]
    keys = [f"{k}={params.get(k)}" for k in changed if k.split(".", 1)[0] not in groups]
    return presets + keys


def overrides_of(params: dict[str, str], incidental) -> list[str]:
    """The Hydra overrides that compose `params` from conf/: the presets that differ (`engine=sglang`),
    then the keys that differ from those presets (else two sweep trials of engine=sglang that differ in
    one flag would look alike)."""
    from soarlab.config import composed_data
    from soarlab.errors import SoarError

    def is_preset(item: str) -> bool:  # `engine=sglang`, not `engine.port=0`
        return "." not in item.split("=", 1)[0]

    default = run_params(composed_data())
    presets = [d for d in config_delta(params, default, incidental) if is_preset(d)]
    try:
        reference = run_params(composed_data(presets))
    except SoarError:  # a group `name` set by hand, not a preset in conf/: its keys follow it, unnamed
        reference = default
    return presets + [d for d in config_delta(params, reference, incidental) if not is_preset(d)]


def config_name(cfg: SoarConfig, params: dict[str, str]) -> str:
    """'gptq_w4', 'none · engine=sglang, engine.server_args.kv-cache-dtype=fp8_e4m3': the preset and what
    changed (incidental keys left out), and which rerun of a compare it is ('gptq_w4 · rerun A2'); a sweep
    trial's is what its sweep varies (soarlab.sweep.record.trial_label), handed down by the trial."""
    label = trial_label()
    if label:
        return label
    rest = [d for d in overrides_of(params, cfg.decide.incidental_params) if not d.startswith("quant=")]
    if cfg.bench.rerun:  # `soarlab compare --rerun`: compare-<id>-A2 is rerun A2, apart from its twins
        rest.append(f"rerun {cfg.bench.rerun.rsplit('-', 1)[-1]}")
    return cfg.quant.name + (" · " + ", ".join(rest) if rest else "")


NAME_CHARS = 120  # a run name the runs table shows whole at its usual width


def _seconds(value: float) -> str:
    return f"{value:.2f}s" if value < 10 else f"{value:.1f}s" if value < 100 else f"{value:.0f}s"


def scored_name(config: str, metrics: dict[str, float]) -> str:
    """The run's name in MLflow: `config` (config_name, cut to fit), then its scores from its metrics:
    'gptq_w4_mixed · final 41.30 · C 1 · ori 81.2 · S1 1.72s S8 1.72s Smax 1.66s'."""
    if metrics.get("score.pruned") == 1.0:
        scores = "pruned"
    else:
        final, c, ori = metrics.get("score.final"), metrics.get("score.C"), metrics.get("accuracy.ori_accuracy")
        durations = {level: metrics.get(f"bench.{level}_duration_s") for level in LEVELS}
        scores = " · ".join(part for part in (
            "final " + (f"{final:.2f}" if final is not None else "-"),
            f"C {c:g}" if c is not None else "",
            f"ori {ori:.1f}" if ori is not None else "",
            " ".join(f"{level} {_seconds(d)}" for level, d in durations.items() if d is not None),
        ) if part)
    room = NAME_CHARS - len(scores) - len(" · ")
    config = config if len(config) <= room else config[: max(room - 1, 0)] + "…"
    return f"{config} · {scores}"
