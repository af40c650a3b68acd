"""The score columns of the MLflow runs table, as a saved view of the experiment.

MLflow 3's runs table starts every metric and param column hidden, however few there are: it shows the
columns its view state selects, which is the browser's own for that experiment, else MLflow's default
(Source, Models, Dataset). A saved view is an experiment tag (`mlflow.sharedViewState.<id>`) that the
table opens with from a link (`viewStateShareKey=<id>`) and lists under Views. This one selects
final, C, ori and the three level durations (as read by the experiment page in mlflow/server/js).
"""

from __future__ import annotations

import json
import time

from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS

SCORE_FINAL, SCORE_C, SCORE_ORI = "score.final", "score.C", "accuracy.ori_accuracy"
DURATION_METRICS = {level: "bench." + level_key(level, "duration_s") for level in LEVELS}
SCORE_METRICS = (SCORE_FINAL, SCORE_C, SCORE_ORI, *DURATION_METRICS.values())

VIEW_ID = "soarlab-scores"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
VIEW_NAME = "Scores"


def _column(kind: str, key: str) -> str:
    """A runs-table column's id: `metrics.\\`score.final\\``, `attributes.\\`Dataset\\``."""
    return f"{kind}.`{key}`"


def view_state() -> dict:
    """The runs table's state in the view: the score columns shown in SCORE_METRICS order, wide enough for
    their names, right after the run's name and date (pinned), then the dataset and the duration."""
    scores = [_column("metrics", key) for key in SCORE_METRICS]
    dataset = _column("attributes", "Dataset")
    return {
        "selectedColumns": [dataset, *scores],
        "columnOrder": [_column("attributes", "Run Name"), "runDateAndNestInfo", *scores, dataset, "duration"],
        "columnWidths": {column: 7 * len(key) + 24 for column, key in zip(scores, SCORE_METRICS)},
    }


def is_current(tag_value: str | None) -> bool:
    """Whether an experiment's VIEW_TAG holds this view's state already."""
    try:
        return json.loads(json.loads(tag_value)["state"]) == view_state()
    except (TypeError, ValueError, KeyError):
        return False


def view_tag_value() -> str:
    """VIEW_TAG's value: MLflow's saved-view envelope around the state, as JSON text."""
    now_ms = int(time.time() * 1000)
    return json.dumps({"name": VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(view_state())})


def runs_table_page(experiment_id: str) -> str:
    """The UI's page of the experiment's runs table in this view: `/runs`, as the UI keeps the view's key
    only there, and workflowType, as MLflow 3 shows its GenAI pages otherwise."""
    return f"#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={VIEW_ID}"
