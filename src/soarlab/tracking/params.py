"""A run's config in MLflow and its name. The runs table's params are what describes the configuration
(each group's preset and the overrides that compose it from conf/), the whole config is the params file
logged as an artifact (CONFIG_TAG names it), and the name says what sets the run apart (the quant preset
and what differs from conf/, or a sweep trial's varying overrides), then its scores."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from typing import Sequence

from soarlab.config import composed_data, flatten, params_data
from soarlab.errors import SoarError
from soarlab.schema import SoarConfig
from soarlab.names.mlflow_tags import CONFIG_TAG
from soarlab.tracking.tags import trial_label
from soarlab.tracking.runs_view import DURATION_METRICS, SCORE_C, SCORE_FINAL, SCORE_ORI

# MLflow rejects param values over this many characters.
_MAX_PARAM_CHARS = 6000


def run_params(data: dict) -> dict[str, str]:
    """The config as written (soarlab.config.params_data / composed_data), flattened as MLflow stores
    params: strings, JSON for non-strings, cut to MLflow's limit. What the decide commands compare."""
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

    def is_preset(item: str) -> bool:  # `engine=sglang`, not `engine.port=0`
        return "." not in item.split("=", 1)[0]

    default = run_params(composed_data())
    presets = [d for d in config_delta(params, default, incidental) if is_preset(d)]
    try:
        reference = run_params(composed_data(presets)) if presets else default
    except SoarError:  # a group `name` set by hand, not a preset in conf/: its keys follow it, unnamed
        reference = default
    return presets + [d for d in config_delta(params, reference, incidental) if not is_preset(d)]


def override_key(override: str) -> str:
    """The config key an override sets: `+engine.server_args.x=1` -> `engine.server_args.x` (`++`, `~` too)."""
    return override.lstrip("+~").split("=", 1)[0]


def _param_key(override: str) -> str:
    """The flattened key an override sets: a preset's `name` for a group (`quant=none` -> `quant.name`)."""
    key = override_key(override)
    return key if "." in key else f"{key}.name"


def table_params(flat: dict[str, str], incidental, overrides: Sequence[str], trial_overrides: Sequence[str] = ()) -> dict[str, str]:
    """The params of a run, as the runs table shows them: each config group's preset (`quant.name`), then
    the keys set by `overrides` (overrides_of(flat): what composes it from conf/) and by a sweep trial's
    own overrides (its `soarlab.trial` tag), incidental keys left out. The whole config is an artifact."""
    presets = [k for k in flat if k.endswith(".name") and k.count(".") == 1]
    keys = [_param_key(o) for o in [*overrides, *trial_overrides]]
    return {k: flat[k] for k in [*presets, *keys] if k in flat and not incidental_key(k, incidental)}


class LoggedConfig(Mapping):
    """A run's whole config, flattened as run_params does, read from its params file artifact (CONFIG_TAG)
    when first asked: one download, for the runs a command compares. A run logged before CONFIG_TAG holds
    the whole config in its params."""

    def __init__(self, run):
        self._run, self._flat = run, None

    def _data(self) -> dict[str, str]:
        if self._flat is None:
            artifact = self._run.data.tags.get(CONFIG_TAG)
            self._flat = _read_config(self._run.info.artifact_uri, artifact) if artifact else dict(self._run.data.params)
        return self._flat

    def __getitem__(self, key: str) -> str:
        return self._data()[key]

    def __iter__(self):
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())


def _read_config(artifact_uri: str, artifact: str) -> dict[str, str]:
    import mlflow
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(artifact_uri=f"{artifact_uri}/{artifact}", dst_path=tmp)
        except (MlflowException, OSError) as exc:
            raise SoarError(f"the run's config artifact {artifact_uri}/{artifact} cannot be read ({str(exc)[:120]})",
                            "make the run's artifact store reachable (tracking.uri's server, or mlartifacts/ beside the store)") from None
        return run_params(params_data(path))


def config_name(cfg: SoarConfig, overrides: Sequence[str]) -> str:
    """'gptq_w4', 'none · engine=sglang, engine.server_args.kv-cache-dtype=fp8_e4m3': the preset and what
    changed (`overrides`: overrides_of the run's params, incidental keys left out), and which rerun of a
    compare it is ('gptq_w4 · rerun A2'); a sweep trial's is what its sweep varies
    (soarlab.sweep.record.trial_label), handed down by the trial."""
    label = trial_label()
    if label:
        return label
    rest = [d for d in overrides if not d.startswith("quant=")]
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
        final, c, ori = metrics.get(SCORE_FINAL), metrics.get(SCORE_C), metrics.get(SCORE_ORI)
        durations = {level: metrics.get(key) for level, key in DURATION_METRICS.items()}
        scores = " · ".join(part for part in (
            "final " + (f"{final:.2f}" if final is not None else "-"),
            f"C {c:g}" if c is not None else "",
            f"ori {ori:.1f}" if ori is not None else "",
            " ".join(f"{level} {_seconds(d)}" for level, d in durations.items() if d is not None),
        ) if part)
    room = NAME_CHARS - len(scores) - len(" · ")
    config = config if len(config) <= room else config[: max(room - 1, 0)] + "…"
    return f"{config} · {scores}"
