"""Hooks of the soar_correctness lm-eval task. The scoring itself is soarlab.accuracy.grading (one implementation)."""

from __future__ import annotations

import json

from soarlab.accuracy.grading import FAILED_PREFIX, score_prediction
from soarlab.datasets.correctness import KNOWN_TASKS, read_correctness_set


def load_correctness(correctness_file=None, **_metadata):
    """custom_dataset hook: the correctness set as {"test": Dataset}; gold is JSON-encoded (its type varies by task).
    lm-eval calls it with the task's metadata, where run_correctness names the file."""
    import datasets

    from soarlab.errors import SoarError

    path = correctness_file
    if not path:
        raise SoarError("soar_correctness needs a data file", "pass TaskManager(metadata={'correctness_file': PATH})")
    rows = read_correctness_set(path)
    return {
        "test": datasets.Dataset.from_list(
            [
                {"index": i, "line": r["line"], "task": r["task"], "question": r["question"], "gold": json.dumps(r["gold"])}
                for i, r in enumerate(rows)
            ]
        )
    }


def doc_to_text(doc: dict) -> str:
    return doc["question"]


def doc_to_target(doc: dict) -> str:
    return doc["gold"]


def process_results(doc: dict, results: list[str]) -> dict:
    prediction = results[0] if results else ""
    if prediction is None or prediction.startswith(FAILED_PREFIX):
        score = 0.0
    else:
        score, _ = score_prediction(doc["task"], json.loads(doc["gold"]), prediction)
    key = doc["task"] if doc["task"] in KNOWN_TASKS else "other"
    return {"acc": score, f"acc_{key}": score}
