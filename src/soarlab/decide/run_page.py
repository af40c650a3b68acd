"""What the MLflow UI shows of a pipeline run, beyond its numbers (issue 9, part 6).

- a name that says what was tried: the quant preset and the config keys that differ from conf/;
- the pipeline's own start and end (each `soarlab stage` appends its times to reports/logs/);
- the speed set and the correctness set as dataset inputs with their digests;
- the checkpoint as a logged model that points at its DVC-versioned location and hash (nothing copied);
- a reproduction recipe (the run's description) and a digest of its inputs, so that a no-op re-run
  (`dvc repro` with nothing changed) is recognised instead of logged twice;
- per-repeat level durations and per-request latencies as metric series (the run page's charts).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path

import yaml

from soarlab.datasets.soar import file_sha256

# MLflow 3's UI opens an experiment on its GenAI pages unless this experiment tag says otherwise
# (read by the experiment page in mlflow/server/js; "genai_development" is the other value).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
RUNS_TABLE_KIND = "custom_model_development"
INPUTS_DIGEST_TAG = "soarlab.inputs_digest"
MACHINE_TAG = "soarlab.machine"  # the host a run was measured on
STAGE_TIMES = Path("logs") / "stages.jsonl"  # under the reports folder; not a DVC output
# MLflow stores a dataset digest in 36 characters; the full sha256 goes into the dataset's profile.
_DIGEST_CHARS = 32


def record_stage_time(reports: Path, stage: str, start: float, end: float) -> None:
    path = reports / STAGE_TIMES
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:  # one short line per stage: appending is all-or-nothing in practice
        out.write(json.dumps({"stage": stage, "start": start, "end": end}) + "\n")


def pipeline_start_ms(reports: Path) -> int:
    """When this pipeline execution began: the first stage recorded since the last `track`."""
    path = reports / STAGE_TIMES
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    last_track = max((i for i, e in enumerate(entries) if e["stage"] == "track"), default=-1)
    since = entries[last_track + 1 :]
    return int(1000 * min((e["start"] for e in since), default=time.time()))


def inputs_digest(reports: Path, params_file: Path, context: dict[str, str]) -> str:
    """sha256 over the config and every report a stage wrote: equal when nothing re-ran. Left out: logs,
    and reference.json, which the always-run reference stage rewrites (its count of recorded runs grows
    with every run); what it changes that matters, the best durations, shows in score.json.
    `context`: the sweep trial it is (tracking.run_context): a trial is its own run, a child of its
    sweep's, even where its results equal an earlier run's (all its stages came from DVC's cache)."""
    digest = hashlib.sha256(params_file.read_bytes())
    digest.update(json.dumps(context, sort_keys=True).encode())
    skipped = {"logs", "reference.json"}
    for path in sorted(p for p in reports.rglob("*") if p.is_file() and p.relative_to(reports).parts[0] not in skipped):
        digest.update(str(path.relative_to(reports)).encode() + b"\0" + file_sha256(path).encode())
    return digest.hexdigest()


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
    from soarlab.config import compose
    from soarlab.errors import SoarError
    from soarlab.tracking import run_params

    def is_preset(item: str) -> bool:  # `engine=sglang`, not `engine.port=0`
        return "." not in item.split("=", 1)[0]

    default = run_params(compose())
    presets = [d for d in config_delta(params, default, incidental) if is_preset(d)]
    try:
        reference = run_params(compose(presets))
    except SoarError:  # a group `name` set by hand, not a preset in conf/: its keys follow it, unnamed
        reference = default
    return presets + [d for d in config_delta(params, reference, incidental) if not is_preset(d)]


def run_name(cfg, params: dict[str, str]) -> str:
    """'gptq_w4', 'none', 'gptq_w4 · engine=sglang, engine.server_args.kv-cache-dtype=fp8_e4m3': the preset
    and what changed (incidental keys left out)."""
    rest = [d for d in overrides_of(params, cfg.decide.incidental_params) if not d.startswith("quant=")]
    name = str(cfg.quant.name) + (" · " + ", ".join(rest) if rest else "")
    return name if len(name) <= 250 else name[:249] + "…"


def dataset_inputs(cfg, data_dir: Path) -> list:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    sets = (("speed", "speed set", data_dir / "speed.jsonl"), ("correctness", "correctness set", data_dir / "correctness.jsonl"))
    inputs = []
    for context, name, path in sets:
        if not path.is_file():
            continue
        sha = file_sha256(path)
        rows = sum(1 for line in path.read_text().splitlines() if line.strip())
        dataset = Dataset(
            name=f"{name} ({cfg.model.name})", digest=sha[:_DIGEST_CHARS], source_type="local",
            source=json.dumps({"uri": str(path.resolve())}), profile=json.dumps({"rows": rows, "sha256": sha}),
        )
        inputs.append(DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)]))
    return inputs


def checkpoint_out(root: Path, cfg) -> dict:
    """The quantized model's entry in dvc.lock (path, md5, size, nfiles), or {} before DVC recorded it."""
    lock = root / "dvc.lock"
    if not lock.is_file():
        return {}
    stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
    for out in stages.get("quantize", {}).get("outs", []):
        if out.get("path") == str(cfg.paths.quantized_model):
            return out
    return {}


def log_checkpoint(client, experiment_id: str, run_id: str, cfg, root: Path, tags: dict[str, str]) -> str:
    """A logged model that points at the DVC-versioned checkpoint (a pointer file, not gigabytes)."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    out = checkpoint_out(root, cfg)
    pointer = {
        "path": str(cfg.paths.quantized_model),
        "dvc_md5": out.get("md5"), "size_bytes": out.get("size"), "nfiles": out.get("nfiles"),
        "git_commit": tags.get("git.commit"), "dvc_experiment": tags.get("dvc.experiment"),
        "get_it": reproduction_steps(tags),
    }
    model = client.create_logged_model(
        experiment_id, name=f"checkpoint-{cfg.quant.name}", source_run_id=run_id, model_type="quantized checkpoint",
        tags={"soarlab.dvc_path": pointer["path"], **({"soarlab.dvc_md5": out["md5"]} if out.get("md5") else {})},
        params={"quant.name": str(cfg.quant.name), "model.name": str(cfg.model.name)},
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "checkpoint.dvc-pointer.yaml").write_text(yaml.safe_dump(pointer, sort_keys=False))
        client.log_model_artifacts(model.model_id, tmp)
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])
    return model.model_id


def reproduction_steps(tags: dict[str, str]) -> list[str]:
    steps = [f"git checkout {tags.get('git.commit', '<commit>')}"]
    if tags.get("dvc.experiment"):
        steps.append(f"dvc exp apply {tags['dvc.experiment']}")
    steps += ["dvc pull  # or `dvc checkout` where the DVC cache holds the outputs", "dvc repro  # re-runs only what is missing"]
    return steps


def recipe_markdown(tags: dict[str, str]) -> str:
    lines = "\n".join(f"    {step}" for step in reproduction_steps(tags))
    return f"**Reproduce this run** (commit {tags.get('git.commit', '?')}, DVC experiment {tags.get('dvc.experiment') or 'none: dvc repro'}):\n\n{lines}\n"


# A GPU sample's fields (soarlab.bench.server_metrics) under MLflow's own names for GPU system metrics
# (mlflow.system_metrics), so that the run page charts them with its system metrics.
GPU_SERIES = {"utilization_pct": "system/gpu_{i}_utilization_percentage", "memory_used_mb": "system/gpu_{i}_memory_usage_megabytes"}


def gpu_series(report: dict, first_step: int) -> list:
    """A level report's NVML samples as MLflow system metrics (`system/gpu_0_utilization_percentage`, ...),
    timed from the level's start; steps go on from `first_step` (the levels run one after another)."""
    import datetime as dt

    from mlflow.entities import Metric

    samples = (report.get("server_metrics") or {}).get("gpu") or []
    start_ms = int(1000 * dt.datetime.fromisoformat(report["started"]).timestamp()) if samples else 0
    return [Metric(name.format(i=s["gpu"]), float(s[key]), start_ms + int(1000 * s["t_s"]), first_step + n)
            for n, s in enumerate(samples) for key, name in GPU_SERIES.items()]


def bench_series(reports: Path, levels, now_ms: int) -> list:
    """`bench.<level>_repeat_duration_s` (step = repeat), `bench.<level>_request_latency_s` (step = request),
    and the GPU samples as system metrics."""
    from mlflow.entities import Metric

    metrics, gpu_steps = [], 0
    for level in levels:
        report = reports / "bench" / f"{level}.json"
        if not report.is_file():
            continue
        data = json.loads(report.read_text())
        for step, value in enumerate(data.get("durations_s") or []):
            metrics.append(Metric(f"bench.{level}_repeat_duration_s", float(value), now_ms, step))
        metrics += gpu_series(data, gpu_steps)
        gpu_steps += len((data.get("server_metrics") or {}).get("gpu") or [])
        rows = reports / "bench" / f"{level}.requests.jsonl"
        lines = rows.read_text().splitlines() if rows.is_file() else []
        latencies = [json.loads(line).get("latency_s") for line in lines if line.strip()]
        metrics += [Metric(f"bench.{level}_request_latency_s", float(v), now_ms, i) for i, v in enumerate(latencies) if v is not None]
    return metrics
