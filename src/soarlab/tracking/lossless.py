"""Did speculative decoding change an answer? A run with `spec` on against the same configuration without it.

Greedy speculative decoding should give the target's own tokens, so every answer of the correctness
set should be the same as without it; numerics may still differ (a verification pass batches tokens the
plain decode runs one at a time), so a difference is reported, with the questions, and never fails the
run. Every run is tagged with the digest of what decides its answers (`answers_key`: the config less
how speed is measured, scored and packaged, less speculative decoding, plus the correctness set's
content) and with its `spec` preset; `track` compares a run with `spec` on against the newest finished
run of the same key with spec=none, whose predictions it reads from MLflow.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Sequence

from soarlab.accuracy.answers import compare_answers
from soarlab.names.mlflow_tags import ANSWERS_KEY_TAG, SPEC_TAG
from soarlab.paths import ACCURACY_DIR, PREDICTIONS_FILE
from soarlab.tracking.params import incidental_key

PREDICTIONS = f"reports/{ACCURACY_DIR}/{PREDICTIONS_FILE}"  # the accuracy stage's answers, as track logs them
NOT_ANSWERS = ("spec.", "bench.", "score.", "package.")  # keys that cannot change a greedy answer
SHOWN = 5  # changed questions named in the printed line; the artifact lists them all


def answers_key(flat_config: dict, incidental: Sequence[str], correctness_sha: str) -> str:
    """sha256 of what decides the answers: the flattened config without NOT_ANSWERS and incidental keys,
    and the correctness set's content digest."""
    kept = {k: v for k, v in flat_config.items()
            if not k.startswith(NOT_ANSWERS) and not incidental_key(k, incidental)}
    return hashlib.sha256(json.dumps([kept, correctness_sha], sort_keys=True, default=str).encode()).hexdigest()


def _predictions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check(client, experiment_id: str, run_id: str, key: str, predictions: Path) -> dict:
    """Compare `predictions` with those of the newest finished spec=none run of the same answers key;
    log the result on `run_id` (metrics `lossless.*`, artifact lossless.json) and return it."""
    found = client.search_runs(
        [experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
        filter_string=f"tags.`{ANSWERS_KEY_TAG}` = '{key}' and tags.`{SPEC_TAG}` = 'none' "
                      "and attributes.status = 'FINISHED'")
    if not found or not predictions.is_file():
        result = {"checked": False, "reason": "no finished run of this configuration with spec=none is recorded"}
    else:
        baseline = found[0].info.run_id
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(client.download_artifacts(baseline, PREDICTIONS, tmp))
            result = {"checked": True, "baseline_run": baseline, **compare_answers(_predictions(path), _predictions(predictions))}
        client.log_metric(run_id, "lossless.answers_differ", result["differ"])
        client.log_metric(run_id, "lossless.questions", result["questions"])
    client.log_text(run_id, json.dumps(result, indent=2), "lossless.json")
    return result


def describe(result: dict) -> str:
    """One line for the terminal."""
    if not result["checked"]:
        return f"lossless: not checked: {result['reason']} (run it with spec=none to compare)"
    head = f"lossless: {result['differ']} of {result['questions']} answers differ from run {result['baseline_run']} (spec=none)"
    if not result["differ"]:
        return head
    shown = ", ".join(str(c["index"]) for c in result["changed"][:SHOWN])
    more = f" and {result['differ'] - SHOWN} more" if result["differ"] > SHOWN else ""
    return f"{head}: questions {shown}{more} (the run's lossless.json lists them)"
