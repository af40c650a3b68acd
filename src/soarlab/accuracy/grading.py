"""Score correctness predictions exactly as the official method does (RULES.md 3).

One prediction, everything case-insensitive:
  1. keep only the text after the last `</think>` (all of it when there is none);
  2. `mcq`: `ANSWER: X` (spaces around the colon allowed), else `\\boxed{\\text{X}}`, else
     `\\boxed{X}`, X in A-D; 1 when it equals the gold letter;
  3. `qa`, `niah`, `lcx`: 1 when any gold item is a substring;
  4. `cwe`, `fwe`: the share of gold items that are substrings;
  5. any other task: 1 when the gold string is a substring (a gold list: any of them).
The first `ANSWER:` match counts (a regex search, as in the evaluation code the official
prompt wording comes from). A request that failed is scored 0 and kept, never dropped.

`score_files` is what `soarlab eval-score` runs: it scores predictions made elsewhere (for example the
official `eval_model.py`) against a dataset, line by line.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from soarlab.datasets.correctness import ANY_OF_TASKS, COVERAGE_TASKS, KNOWN_TASKS, read_correctness_set
from soarlab.errors import SoarError
from soarlab.schema import Bootstrap, ScoreGroup, SoarConfig

THINK_END = "</think>"
_MCQ_PATTERNS = (  # in the order RULES.md 3 tries them
    re.compile(r"ANSWER\s*:\s*([A-D])", re.IGNORECASE),
    re.compile(r"\\boxed\{\s*\\text\{\s*([A-D])\s*\}\s*\}", re.IGNORECASE),
    re.compile(r"\\boxed\{\s*([A-D])\s*\}", re.IGNORECASE),
)
# What soarlab's chat client returns in place of a generation when a request failed after its retries.
FAILED_PREFIX = "\x00soarlab-request-failed\x00"
# Field names a predictions file may use for the model output, tried in this order.
PREDICTION_FIELDS = ("prediction", "pred", "response", "output", "model_output", "completion", "generated_text")


def answer_part(prediction: str | None) -> str:
    """The text after the last `</think>` (case-insensitive), or all of it."""
    text = prediction or ""
    cut = text.lower().rfind(THINK_END)
    return text[cut + len(THINK_END):] if cut >= 0 else text


def extract_mcq(text: str) -> str | None:
    """The chosen letter (upper case) of an mcq answer, or None when no format matches."""
    for pattern in _MCQ_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1).upper()
    return None


def score_prediction(task: str, gold: Any, prediction: str | None) -> tuple[float, Any]:
    """(score in [0, 1], what was extracted or matched) for one prediction. Gold must be valid (`check_gold`)."""
    text = answer_part(prediction)
    lowered = text.lower()
    if task == "mcq":
        letter = extract_mcq(text)
        return (1.0 if letter is not None and letter == str(gold).strip().upper() else 0.0), letter
    if task in ANY_OF_TASKS:
        found = [g for g in gold if str(g).lower() in lowered]
        return (1.0 if found else 0.0), found
    if task in COVERAGE_TASKS:
        found = [g for g in gold if str(g).lower() in lowered]
        return len(found) / len(gold), found
    # Unknown task: the fallback rule (a gold string as a substring; a list: any of it).
    items = gold if isinstance(gold, list) else [gold]
    found = [g for g in items if str(g).lower() in lowered]
    return (1.0 if found else 0.0), found


def score_rows(rows: Sequence[Mapping], predictions: Sequence[Mapping]) -> list[dict]:
    """One record per row: task, gold, prediction, extracted, score, failed (+ error). Same length and order as rows.

    A prediction mapping has `prediction` (str or None) and optionally `failed` / `error`.
    A failed or missing prediction scores 0 and stays in the list.
    """
    if len(rows) != len(predictions):
        raise SoarError(
            f"{len(predictions)} predictions for {len(rows)} dataset lines",
            "give exactly one prediction per dataset line, in the dataset's order",
        )
    records = []
    for index, (row, pred) in enumerate(zip(rows, predictions)):
        failed = bool(pred.get("failed"))
        text = pred.get("prediction")
        if not isinstance(text, str):
            text = ""
        score, extracted = (0.0, None) if failed else score_prediction(row["task"], row["gold"], text)
        record = {
            "index": index,
            "line": row.get("line", index + 1),
            "task": row["task"],
            "gold": row["gold"],
            "prediction": text,
            "answer_text": answer_part(text),
            "extracted": extracted,
            "score": score,
            "failed": failed,
        }
        if failed:
            record["error"] = pred.get("error") or "request failed"
        records.append(record)
    return records


def bootstrap_ci(scores: Sequence[float], resamples: int, seed: int, confidence: float) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean score, in percent (ori), resampling samples with replacement."""
    if not scores or resamples <= 0:
        mean = 100.0 * sum(scores) / len(scores) if scores else 0.0
        return mean, mean
    rng = random.Random(seed)
    n = len(scores)
    means = sorted(100.0 * sum(scores[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    lo = means[min(resamples - 1, max(0, int(tail * resamples)))]
    hi = means[min(resamples - 1, max(0, int((1.0 - tail) * resamples) - 1))]
    return lo, hi


def summarize(records: Sequence[Mapping], baseline: float, score_cfg: ScoreGroup,
              bootstrap_cfg: Bootstrap | None = None) -> dict:
    """ori, normalized, C, per-task scores, failures, unknown tasks, and (with bootstrap_cfg) the CI and its warning."""
    from soarlab.final_score import coefficient, normalized_accuracy

    scores = [float(r["score"]) for r in records]
    ori = 100.0 * sum(scores) / len(scores) if scores else 0.0
    cap, table, floor = score_cfg.accuracy_cap, score_cfg.c_table, score_cfg.c_floor
    norm = normalized_accuracy(ori, baseline, cap)
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by_task[r["task"]].append(float(r["score"]))
    per_task = {
        task: {"accuracy": round(100.0 * sum(v) / len(v), 4), "n": len(v)} for task, v in sorted(by_task.items())
    }
    unknown = sorted(t for t in by_task if t not in KNOWN_TASKS)
    summary: dict[str, Any] = {
        "ori_accuracy": round(ori, 4),
        "normalized_accuracy": round(norm, 4),
        "C": coefficient(norm, table, floor),
        "baseline_accuracy": baseline,
        "n": len(records),
        "per_task": per_task,
        "failed": sum(1 for r in records if r.get("failed")),
        "empty_predictions": sum(1 for r in records if not (r.get("prediction") or "").strip()),
        "unknown_tasks": unknown,
        "warnings": [],
    }
    if unknown:
        summary["warnings"].append(
            f"tasks {unknown} are not in RULES.md 3; scored by the fallback rule (gold as a substring)"
        )
    if summary["failed"]:
        summary["warnings"].append(f"{summary['failed']} request(s) failed after retries and were scored 0")
    if bootstrap_cfg is not None:
        lo, hi = bootstrap_ci(scores, bootstrap_cfg.resamples, bootstrap_cfg.seed, bootstrap_cfg.confidence)
        c_lo = coefficient(normalized_accuracy(lo, baseline, cap), table, floor)
        c_hi = coefficient(normalized_accuracy(hi, baseline, cap), table, floor)
        summary["bootstrap"] = {
            "confidence": bootstrap_cfg.confidence,
            "resamples": bootstrap_cfg.resamples,
            "seed": bootstrap_cfg.seed,
            "ori_low": round(lo, 4),
            "ori_high": round(hi, 4),
            "C_low": c_lo,
            "C_high": c_hi,
            "crosses_c_band": c_lo != c_hi,
        }
        if c_lo != c_hi:
            summary["warnings"].append(
                f"the {bootstrap_cfg.confidence:.0%} interval of ori [{lo:.2f}, {hi:.2f}] crosses a C band boundary "
                f"(C from {c_lo} to {c_hi}): C of this run is not settled by this set"
            )
    return summary


def flat_metrics(summary: Mapping) -> dict[str, float]:
    """The numbers of a summary as one flat mapping (reports/accuracy/metrics.json, MLflow metrics)."""
    flat = {
        "ori_accuracy": summary["ori_accuracy"],
        "normalized_accuracy": summary["normalized_accuracy"],
        "C": summary["C"],
        "n": summary["n"],
        "failed": summary["failed"],
        "empty_predictions": summary["empty_predictions"],
    }
    for task, values in summary["per_task"].items():
        flat[f"accuracy_{task}"] = values["accuracy"]
    lengths = summary.get("lengths") or {}
    for stat in ("p50", "p95", "max", "at_cap"):
        if stat in lengths:
            flat[f"length_{stat}"] = lengths[stat]
    if (lengths.get("official_pass") or {}).get("estimated"):
        flat["official_pass_estimate_s"] = lengths["official_pass"]["seconds"]
    if "after_load" in summary:
        flat["after_load_questions"] = summary["after_load"]["questions"]
        flat["after_load_changed"] = summary["after_load"]["differ"]
    if "bootstrap" in summary:
        flat["ori_ci_low"] = summary["bootstrap"]["ori_low"]
        flat["ori_ci_high"] = summary["bootstrap"]["ori_high"]
    for name, result in summary.get("standard_tasks", {}).items():
        for metric, value in result.get("metrics", {}).items():
            if isinstance(value, (int, float)):
                flat[f"{name}.{metric}"] = value
    return flat


def read_predictions(path: str | Path) -> list[dict]:
    """One {"prediction", "failed"} per line of a predictions file, in order.

    Accepted per line: a JSON object with `prediction` (or one of PREDICTION_FIELDS), a null
    prediction (scored 0), or a bare JSON string. An object with `failed`/`error` is a failed request.
    """
    from soarlab.datasets.soar import iter_json_lines

    out = []
    for number, obj in iter_json_lines(path, what="predictions file"):
        if isinstance(obj, str):
            out.append({"prediction": obj})
            continue
        if not isinstance(obj, dict):
            raise SoarError(f"{path} line {number} is not a JSON object", "write one JSON object per line")
        field = next((f for f in PREDICTION_FIELDS if f in obj), None)
        if field is None:
            raise SoarError(
                f"{path} line {number} has no prediction field (looked for {', '.join(PREDICTION_FIELDS)})",
                "give every line a `prediction` field holding the model's output text",
            )
        value = obj[field]
        if value is not None and not isinstance(value, str):
            raise SoarError(f"{path} line {number}: {field} must be a string or null", "write the model output as a JSON string")
        failed = bool(obj.get("failed")) or bool(obj.get("error"))
        out.append({"prediction": value, "failed": failed, "error": obj.get("error")})
    return out


def score_files(dataset: str | Path, predictions: str | Path, cfg: SoarConfig) -> dict:
    rows = read_correctness_set(dataset)
    records = score_rows(rows, read_predictions(predictions))
    summary = summarize(records, cfg.model.baseline_accuracy, cfg.score)
    return {
        "ori_accuracy": summary["ori_accuracy"],
        "normalized_accuracy": summary["normalized_accuracy"],
        "C": summary["C"],
        "per_task": {task: v["accuracy"] for task, v in summary["per_task"].items()},
        "n": summary["n"],
        "failed": summary["failed"],
        "warnings": summary["warnings"],
    }
