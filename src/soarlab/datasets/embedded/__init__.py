"""The embedded correctness set (task/question/gold per line): the tiny model trains on it, eval=tiny scores it.

Its own module, so that only the code that reads the file depends on it (tests/repo/test_dvc_graph.py).
"""

from pathlib import Path

CORRECTNESS = Path(__file__).resolve().parent / "correctness.jsonl"


def read_embedded_correctness() -> list[dict]:
    """The rows of the embedded correctness set, which scripts/build_tiny_model.py trains on."""
    import json

    return [json.loads(line) for line in CORRECTNESS.read_text().splitlines() if line.strip()]
