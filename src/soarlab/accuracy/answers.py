"""Two passes over the correctness set compared answer by answer (the after-load check, speculative decoding's
losslessness check). A leaf module: `track` imports it without the accuracy stage's client."""

from __future__ import annotations


def compare_answers(before: list[dict], after: list[dict]) -> dict:
    """{"questions", "differ", "changed": [{"index", "task", "before", "after"}]} of two prediction lists
    (predictions.jsonl rows, in dataset order)."""
    changed = [{"index": i, "task": a.get("task"), "before": b.get("prediction"), "after": a.get("prediction")}
               for i, (b, a) in enumerate(zip(before, after)) if b.get("prediction") != a.get("prediction")]
    return {"questions": min(len(before), len(after)), "differ": len(changed), "changed": changed}
