"""What the MLflow UI shows of a pipeline run, beyond its numbers and tags:

- the speed set and the correctness set as dataset inputs with their digests;
- the checkpoint as a logged model that points at its DVC-versioned location and hash (nothing copied);
- a digest of its inputs, so that a no-op re-run
  (`dvc repro` with nothing changed) is recognised instead of logged twice;
- per-repeat level durations and per-request latencies as metric series (the run page's charts).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import yaml

from soarlab.datasets.soar import file_sha256
from soarlab.names.mlflow_tags import DVC_EXPERIMENT_TAG, DVC_MD5_TAG, DVC_PATH_TAG, GIT_COMMIT_TAG
from soarlab.paths import (
    BENCH_DIR, CORRECTNESS_SET_FILE, LOGS_DIR, REFERENCE_FILE, SCORE_FILE, SPEED_SET_FILE, level_report, level_requests,
)
from soarlab.schema import SoarConfig
from soarlab.tracking.store import STAMP_REPORT
from soarlab.tracking.tags import reproduction_steps

# MLflow stores a dataset digest in 36 characters; the full sha256 goes into the dataset's profile.
_DIGEST_CHARS = 32


def inputs_digest(reports: Path, params_file: Path, context: dict[str, str]) -> str:
    """sha256 over the config and every report of the measurement: equal when nothing re-ran, and when
    DVC restored every stage from its run cache (a configuration measured before). Left out: logs, the
    store's stamp (store.STAMP_REPORT: every logged run changes it), reference.json, which the reference
    stage rewrites when the store changed (its count of recorded runs grows with every run), and
    score.json, the measurement scored against that reference: a run that holds the measurement gets
    the new score (pipeline_run.rescore_run), not a second run.
    `context`: the sweep trial it is (tracking.tags.run_context): a trial is its own run, a child of its
    sweep's, even where its results equal an earlier run's (all its stages came from DVC's cache)."""
    digest = hashlib.sha256(params_file.read_bytes())
    digest.update(json.dumps(context, sort_keys=True).encode())
    skipped = {(LOGS_DIR,), (REFERENCE_FILE,), (SCORE_FILE,), STAMP_REPORT}  # path parts under reports/

    def is_skipped(path: Path) -> bool:
        parts = path.relative_to(reports).parts
        return any(parts[:len(prefix)] == prefix for prefix in skipped)

    for path in sorted(p for p in reports.rglob("*") if p.is_file() and not is_skipped(p)):
        digest.update(str(path.relative_to(reports)).encode() + b"\0" + file_sha256(path).encode())
    return digest.hexdigest()


def dataset_inputs(cfg: SoarConfig, data_dir: Path) -> list:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    sets = (("speed", "speed set", data_dir / SPEED_SET_FILE), ("correctness", "correctness set", data_dir / CORRECTNESS_SET_FILE))
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


def checkpoint_out(root: Path, cfg: SoarConfig) -> dict:
    """The quantized model's entry in dvc.lock (path, md5, size, nfiles), or {} before DVC recorded it."""
    lock = root / "dvc.lock"
    if not lock.is_file():
        return {}
    stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
    for out in stages.get("quantize", {}).get("outs", []):
        if out.get("path") == cfg.paths.quantized_model:
            return out
    return {}


def log_checkpoint(client, experiment_id: str, run_id: str, cfg: SoarConfig, root: Path, tags: dict[str, str]) -> str:
    """A logged model that points at the DVC-versioned checkpoint (a pointer file, not gigabytes)."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    out = checkpoint_out(root, cfg)
    pointer = {
        "path": cfg.paths.quantized_model,
        "dvc_md5": out.get("md5"), "size_bytes": out.get("size"), "nfiles": out.get("nfiles"),
        "git_commit": tags.get(GIT_COMMIT_TAG), "dvc_experiment": tags.get(DVC_EXPERIMENT_TAG),
        "get_it": reproduction_steps(tags),
    }
    model = client.create_logged_model(
        experiment_id, name=f"checkpoint-{cfg.quant.name}", source_run_id=run_id, model_type="quantized checkpoint",
        tags={DVC_PATH_TAG: pointer["path"], **({DVC_MD5_TAG: out["md5"]} if out.get("md5") else {})},
        params={"quant.name": cfg.quant.name, "model.name": cfg.model.name},
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "checkpoint.dvc-pointer.yaml").write_text(yaml.safe_dump(pointer, sort_keys=False))
        client.log_model_artifacts(model.model_id, tmp)
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])
    return model.model_id


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
        report = level_report(reports / BENCH_DIR, level)
        if not report.is_file():
            continue
        data = json.loads(report.read_text())
        for step, value in enumerate(data.get("durations_s") or []):
            metrics.append(Metric(f"bench.{level}_repeat_duration_s", float(value), now_ms, step))
        metrics += gpu_series(data, gpu_steps)
        gpu_steps += len((data.get("server_metrics") or {}).get("gpu") or [])
        rows = level_requests(reports / BENCH_DIR, level)
        lines = rows.read_text().splitlines() if rows.is_file() else []
        latencies = [json.loads(line).get("latency_s") for line in lines if line.strip()]
        metrics += [Metric(f"bench.{level}_request_latency_s", float(v), now_ms, i) for i, v in enumerate(latencies) if v is not None]
    return metrics
