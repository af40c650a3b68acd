"""Hooks of the soar_correctness lm-eval task. The scoring itself is soarlab.accuracy.scoring (one implementation)."""

from __future__ import annotations

import json

from soarlab.accuracy.scoring import FAILED_PREFIX, KNOWN_TASKS, read_correctness_set, score_prediction


def load_correctness(data_files=None, **_metadata):
    """custom_dataset hook: the correctness set as {"test": Dataset}; gold is JSON-encoded (its type varies by task)."""
    import datasets

    from soarlab.errors import SoarError

    path = data_files.get("test") if isinstance(data_files, dict) else data_files
    if not path:
        raise SoarError("soar_correctness needs a data file", "pass dataset_kwargs={'data_files': {'test': PATH}}")
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
