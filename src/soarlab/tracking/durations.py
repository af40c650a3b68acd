"""The per-level durations of recorded pipeline runs: what the reference stage takes its best from."""

from __future__ import annotations

from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.schema import SoarConfig
from soarlab.tracking.store import open_store


def recorded_durations(cfg: SoarConfig, speed_set_sha: str, run_id: str | None = None) -> list[dict[str, float]]:
    """Per-level durations of finished valid runs of this model on this speed set (or of one run)."""
    client, experiment_id = open_store(cfg)
    if run_id:
        runs = [client.get_run(run_id)]
    else:
        query = f"tags.`soarlab.model` = '{cfg.model.name}' and tags.`soarlab.speed_set_sha` = '{speed_set_sha}'"
        runs = client.search_runs([experiment_id], filter_string=query, max_results=5000)
    found = []
    for run in runs:
        metrics = run.data.metrics
        durations = {level: metrics.get("bench." + level_key(level, "duration_s")) for level in LEVELS}
        valid = all(metrics.get("bench." + level_key(level, "valid")) == 1.0 for level in LEVELS)
        if all(durations.values()) and valid:
            found.append(durations)
    return found
