"""When each stage of a pipeline execution ran: `soarlab stage` appends one line per stage, and the
MLflow run's start is the first stage's (not when `track`, the last one, began)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from soarlab.paths import LOGS_DIR

STAGE_TIMES = Path(LOGS_DIR) / "stages.jsonl"  # under the reports folder; not a DVC output


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
