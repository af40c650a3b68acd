"""Log one pipeline execution as an MLflow run, from the files the stages wrote: as params what describes
the configuration (tracking.params.table_params), the composed config itself as an artifact (the params
file, named by the CONFIG_TAG tag), every `reports/**/metrics.json` as metrics (prefixed by its folder,
e.g. `bench.S1_duration_s`), `reports/score.json`, all report files as artifacts, and the tags of tags.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

from soarlab.atomic import is_temp_output
from soarlab.config import flatten, params_data
from soarlab.datasets.soar import file_sha256
from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import ANSWERS_KEY_TAG, CONFIG_NAME_TAG, CONFIG_TAG, INPUTS_DIGEST_TAG, NOTE_TAG, TRIAL_TAG
from soarlab.paths import CORRECTNESS_SET_FILE, METRICS_FILE, REFERENCE_FILE, SCORE_FILE
from soarlab.schema import SoarConfig
from soarlab.tracking import run_page
from soarlab.tracking.lossless import answers_key
from soarlab.tracking.params import config_name, overrides_of, run_params, scored_name, table_params
from soarlab.tracking.stage_times import pipeline_start_ms
from soarlab.tracking.store import open_store
from soarlab.tracking.tags import recipe_markdown, run_tags


def _numbers(path: Path, prefix: str) -> Iterator[tuple[str, float]]:
    """The numbers of a flat JSON report as `prefix.key` metrics."""
    for key, value in json.loads(path.read_text()).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            yield f"{prefix}.{key}", float(value)


def _score_metrics(reports: Path) -> dict[str, float]:
    score = reports / SCORE_FILE
    return dict(_numbers(score, "score")) if score.is_file() else {}


def _report_metrics(reports: Path) -> Iterator[tuple[str, float]]:
    for path in sorted(reports.rglob(METRICS_FILE)):
        yield from _numbers(path, ".".join(path.parent.relative_to(reports).parts))
    yield from _score_metrics(reports).items()


def _in_temp_output(path: Path, reports: Path) -> bool:
    """Inside an unfinished write (soarlab.atomic): never a report, never uploaded."""
    return any(is_temp_output(Path(part)) for part in path.relative_to(reports).parts)


def run_with_inputs(cfg: SoarConfig, digest: str) -> str | None:
    """The id of a run already logged from exactly these inputs (a no-op re-run), or None."""
    client, experiment_id = open_store(cfg)
    found = client.search_runs([experiment_id], filter_string=f"tags.`{INPUTS_DIGEST_TAG}` = '{digest}'", max_results=1)
    return found[0].info.run_id if found else None


def rescore_run(cfg: SoarConfig, run_id: str, reports: Path) -> tuple[float | None, float | None] | None:
    """Give the run that holds this measurement (run_with_inputs; every stage restored from DVC's run
    cache) the score of reports/score.json, against the reference as it is now: its `score.*` metrics
    (a later value at the same step: MLflow shows the latest), its name (which carries the score:
    tracking.params.scored_name) and the score and reference reports.
    (final before, final now) when the score changed, else None (nothing re-ran)."""
    from mlflow.entities import Metric

    client, _ = open_store(cfg)
    run = client.get_run(run_id)
    logged = run.data.metrics
    changed = {k: v for k, v in _score_metrics(reports).items() if logged.get(k) != v}
    if not changed:
        return None
    now_ms = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now_ms, 0) for k, v in changed.items()])
    config = run.data.tags.get(CONFIG_NAME_TAG) or run.info.run_name
    client.update_run(run_id, name=scored_name(config, {**logged, **changed}))
    for name in (SCORE_FILE, REFERENCE_FILE):
        if (reports / name).is_file():
            client.log_artifact(run_id, str(reports / name), artifact_path=reports.name)
    return logged.get("score.final"), changed.get("score.final", logged.get("score.final"))


def log_pipeline_run(cfg: SoarConfig, reports: Path, params_file: Path, speed_set_sha: str = "", inputs_digest: str = "",
                     root: Path | None = None) -> str:
    """Log one MLflow run from the files under `reports` (`root`: the project, default the params file's folder);
    return its id."""
    from mlflow.entities import Metric, Param

    client, experiment_id = open_store(cfg)
    root = params_file.parent if root is None else root
    tags = {**run_tags(cfg, speed_set_sha), **({INPUTS_DIGEST_TAG: inputs_digest} if inputs_digest else {})}
    tags[NOTE_TAG] = recipe_markdown(tags)
    config = params_data(params_file)  # as written: `0`, not the typed `0.0`
    correctness = root / cfg.paths.data / CORRECTNESS_SET_FILE
    tags[ANSWERS_KEY_TAG] = answers_key(flatten(config), cfg.decide.incidental_params,
                                        file_sha256(correctness) if correctness.is_file() else "")
    flat = run_params(config)
    trial_overrides = json.loads(tags.get(TRIAL_TAG, "[]"))  # a sweep trial's own overrides (sweep.record.trial_key)
    overrides = overrides_of(flat, cfg.decide.incidental_params)  # two Hydra compositions: once, for both below
    params = table_params(flat, cfg.decide.incidental_params, overrides, trial_overrides)
    tags[CONFIG_TAG] = params_file.name  # the artifact below
    numbers = dict(_report_metrics(reports))
    tags[CONFIG_NAME_TAG] = config_name(cfg, overrides)
    run = client.create_run(experiment_id, start_time=pipeline_start_ms(reports),
                            run_name=scored_name(tags[CONFIG_NAME_TAG], numbers), tags=tags)
    run_id = run.info.run_id
    try:
        now_ms = int(time.time() * 1000)
        metrics = [Metric(k, v, now_ms, 0) for k, v in numbers.items()]
        metrics += run_page.bench_series(reports, LEVELS, now_ms)
        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow's batch limit is 100 params per call
            client.log_batch(run_id, params=items[start : start + 100])
        for start in range(0, len(metrics), 1000):  # and 1000 metrics
            client.log_batch(run_id, metrics=metrics[start : start + 1000])
        client.log_inputs(run_id, datasets=run_page.dataset_inputs(cfg, root / cfg.paths.data))
        run_page.log_checkpoint(client, experiment_id, run_id, cfg, root, tags)
        client.log_artifact(run_id, str(params_file))
        if (root / "dvc.lock").is_file():
            client.log_artifact(run_id, str(root / "dvc.lock"))
        for path in sorted(p for p in reports.rglob("*") if p.is_file() and not _in_temp_output(p, reports)):
            client.log_artifact(run_id, str(path), artifact_path=str(path.parent.relative_to(reports.parent)))
        client.set_terminated(run_id, "FINISHED", end_time=int(time.time() * 1000))
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    return run_id
