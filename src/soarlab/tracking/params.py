"""The config of a run as MLflow params, and the run's name: the quant preset and what differs from conf/."""

from __future__ import annotations

import json

from soarlab.config import flatten
from soarlab.schema import SoarConfig

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


def run_name(cfg: SoarConfig, params: dict[str, str]) -> str:
    """'gptq_w4', 'none', 'gptq_w4 · engine=sglang, engine.server_args.kv-cache-dtype=fp8_e4m3': the preset
    and what changed (incidental keys left out), and which rerun of a compare it is ('gptq_w4 · rerun A2')."""
    rest = [d for d in overrides_of(params, cfg.decide.incidental_params) if not d.startswith("quant=")]
    if cfg.bench.rerun:  # `soarlab compare --rerun`: compare-<id>-A2 is rerun A2, apart from its twins
        rest.append(f"rerun {cfg.bench.rerun.rsplit('-', 1)[-1]}")
    name = cfg.quant.name + (" · " + ", ".join(rest) if rest else "")
    return name if len(name) <= 250 else name[:249] + "…"
