"""accuracy: the official correctness evaluation (RULES.md 3) through lm-eval against the served engine.

Reads  eval, score, model.baseline_accuracy, engine; data/correctness.jsonl; models/quantized.
Writes reports/accuracy/summary.json    ori, normalized, C, per-task scores, bootstrap CI, answer lengths, warnings
       reports/accuracy/predictions.jsonl one line per dataset row: prediction, extracted answer, score, tokens
       reports/accuracy/metrics.json    flat numbers (for tracking)
       reports/accuracy/server.log      the engine's log (when run alone; under `evaluate`, reports/logs/evaluate-server.log)
"""

from __future__ import annotations

from soarlab.atomic import write_json, write_jsonl
from soarlab.paths import (
    ACCURACY_DIR, BENCH_DIR, CORRECTNESS_SET_FILE, METRICS_FILE, PREDICTIONS_FILE, project_root,
)
from soarlab.schema import SoarConfig


def evaluate(server, data_file, model_dir, cfg: SoarConfig) -> tuple[dict, list[dict]]:
    """(summary, per-sample records) of the correctness set against a running server."""
    from soarlab.accuracy.lengths import summarize_lengths
    from soarlab.accuracy.runner import run_correctness, run_standard_tasks
    from soarlab.accuracy.grading import score_rows, summarize
    from soarlab.datasets.correctness import read_correctness_set

    rows = read_correctness_set(data_file)
    predictions, lm_eval_info = run_correctness(server.base_url, server.model, data_file, model_dir, cfg.eval)
    if cfg.eval.limit:
        rows = rows[: len(predictions)]
    records = score_rows(rows, predictions)
    for record, prediction in zip(records, predictions):
        record.update(tokens=prediction["tokens"], capped=prediction["capped"])
    summary = summarize(records, cfg.model.baseline_accuracy, cfg.score, cfg.eval.bootstrap)
    summary["lengths"] = summarize_lengths(records, cfg.eval.max_tokens, lm_eval_info.pop("lengths_source"))
    summary["lm_eval"] = lm_eval_info
    lm_eval_acc = lm_eval_info["metrics"].get("acc")
    if lm_eval_acc is not None and abs(100.0 * lm_eval_acc - summary["ori_accuracy"]) > 1e-3:
        summary["warnings"].append(f"lm-eval's acc {100 * lm_eval_acc:.4f} differs from the per-sample ori {summary['ori_accuracy']}")
    summary["server"] = {"base_url": server.base_url, "api": server.api, "model": server.model}
    summary["standard_tasks"] = run_standard_tasks(server.base_url, server.model, model_dir, cfg.eval, server.api)
    for name, result in summary["standard_tasks"].items():
        if result["status"] != "ok":
            summary["warnings"].append(f"standard task {name} skipped: {result['reason']}")
    return summary, records


def run(cfg: SoarConfig, server=None) -> dict:
    """`server`: one already serving the quantized model (stage `evaluate`); None starts one. Returns the summary."""
    import contextlib

    from soarlab.accuracy.lengths import describe
    from soarlab.accuracy.grading import flat_metrics
    from soarlab.engines import open_engine

    root = project_root()
    data_file = root / cfg.paths.data / CORRECTNESS_SET_FILE
    model_dir = root / cfg.paths.quantized_model
    out = root / cfg.paths.reports / ACCURACY_DIR
    out.mkdir(parents=True, exist_ok=True)
    alone = server is None  # under `evaluate`, after_bench prints the lengths with the official pass's estimate
    with contextlib.nullcontext(server) if server else open_engine(cfg, model_dir, out / "server.log") as server:
        summary, records = evaluate(server, data_file, model_dir, cfg)
    write_jsonl(out / PREDICTIONS_FILE, records)
    write_json(out / METRICS_FILE, flat_metrics(summary))
    write_json(out / "summary.json", summary)
    for warning in summary["warnings"]:
        print(f"accuracy: warning: {warning}")
    print(
        f"accuracy: ori {summary['ori_accuracy']:.2f}  normalized {summary['normalized_accuracy']:.2f}  C {summary['C']}"
    )
    if alone:
        print(describe(summary["lengths"], None))
    return summary


def after_bench(cfg: SoarConfig, server) -> dict:
    """Under `evaluate`, after the bench levels on the same server: the official pass's wall time at the speed
    bench measured (soarlab.accuracy.lengths), and the after-load check (eval.after_load; 0 questions: off).
    Both go into accuracy's summary and metrics. Returns the summary."""
    import json

    from soarlab.accuracy import after_load, lengths
    from soarlab.accuracy.grading import flat_metrics

    root = project_root()
    out = root / cfg.paths.reports / ACCURACY_DIR
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / PREDICTIONS_FILE).read_text().splitlines() if line.strip()]
    bench_metrics = json.loads((root / cfg.paths.reports / BENCH_DIR / METRICS_FILE).read_text())
    summary["lengths"]["official_pass"] = lengths.official_pass(records, bench_metrics, cfg.eval.official_pass)
    print(lengths.describe(summary["lengths"], summary["lengths"]["official_pass"]))
    if cfg.eval.after_load.questions:
        summary["after_load"] = after_load.check(server, root / cfg.paths.data / CORRECTNESS_SET_FILE,
                                                 root / cfg.paths.quantized_model, cfg, records)
        print(after_load.describe(summary["after_load"]))
    write_json(out / METRICS_FILE, flat_metrics(summary))
    write_json(out / "summary.json", summary)
    return summary
