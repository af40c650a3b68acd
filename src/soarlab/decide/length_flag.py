"""Answer lengths against the reference configuration: did a change make the model's answers longer?

The reference is the newest run of the same model and answer cap (eval.max_tokens) that serves the weights
unquantized (quant.method none, no serve_quantization), as `reference` finds its durations among recorded
runs (soarlab.tracking.durations). A run is flagged when its p95 answer length grew by more than
decide.lengths.p95_growth_pct, or its count of answers at the cap by more than decide.lengths.at_cap_growth
(metrics accuracy.length_p95 and accuracy.length_at_cap, soarlab.accuracy.lengths).
"""

from __future__ import annotations

from typing import Sequence

from soarlab.tracking.runs import RunRecord
from soarlab.names.mlflow_tags import MODEL_TAG
from soarlab.schema import DecideLengths

P95, AT_CAP = "accuracy.length_p95", "accuracy.length_at_cap"
UNQUANTIZED = {"quant.method": "none", "quant.serve_quantization": "null"}  # as run_params flattens them (JSON)


def reference_run(run: RunRecord, runs: Sequence[RunRecord]) -> RunRecord | None:
    """The newest unquantized run of `run`'s model and answer cap with answer lengths (runs are newest first)."""
    same = ("eval.max_tokens",)
    return next((r for r in runs if r.run_id != run.run_id and P95 in r.metrics
                 and r.tags.get(MODEL_TAG) == run.tags.get(MODEL_TAG)
                 and all(r.config.get(k) == v for k, v in UNQUANTIZED.items())
                 and all(r.config.get(k) == run.config.get(k) for k in same)), None)


def flag(run: RunRecord, runs: Sequence[RunRecord], margins: DecideLengths) -> str | None:
    """Why `run`'s answers are longer than the reference's beyond the margins, or None (also without a reference)."""
    if P95 not in run.metrics or UNQUANTIZED.items() <= run.config.items():
        return None
    ref = reference_run(run, runs)
    if ref is None:
        return None
    p95, ref_p95 = run.metrics[P95], ref.metrics[P95]
    at_cap, ref_at_cap = run.metrics.get(AT_CAP, 0), ref.metrics.get(AT_CAP, 0)
    reasons = []
    if p95 > ref_p95 * (1 + margins.p95_growth_pct / 100):
        reasons.append(f"p95 {p95:.0f} tokens against {ref_p95:.0f} (over +{margins.p95_growth_pct:g}%)")
    if at_cap > ref_at_cap + margins.at_cap_growth:
        reasons.append(f"{at_cap:.0f} answers at the cap against {ref_at_cap:.0f} (over +{margins.at_cap_growth})")
    if not reasons:
        return None
    return f"longer answers than the unquantized run {ref.run_id[:8]}: " + "; ".join(reasons)
