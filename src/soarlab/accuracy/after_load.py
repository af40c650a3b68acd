"""Correctness after load: the first questions of the correctness set asked again after the bench levels, on
the same server, and their answers compared with the first pass's (eval.after_load).

Accuracy runs on a fresh server; a bug that shows only after repeated serving (SGLang fixed a corruption of the
Lightning-attention state under its cache that collapsed accuracy on later requests: RULES.md 6, second-hand)
is never seen there. At temperature 0 an engine that decodes deterministically gives the same answers, so any
change is a finding; an engine whose greedy answers depend on the batch they share (eval.after_load.varying_engines)
is said to vary, and the share of changed answers is reported as a rate.
"""

from __future__ import annotations

from soarlab.accuracy.answers import compare_answers

SHOWN = 5  # changed questions named in a printed line; the report lists them all


def engine_varies(cfg) -> bool:
    """Whether the engine's greedy answers are known to vary with batching (config), its deterministic mode off."""
    engine = cfg.engine
    deterministic = getattr(engine, "server_args", {}).get("enable-deterministic-inference")
    return engine.name in cfg.eval.after_load.varying_engines and not deterministic


def check(server, data_file, model_dir, cfg, first_pass: list[dict]) -> dict:
    """Ask the first eval.after_load.questions rows again; compare with `first_pass` (the stage's records)."""
    from soarlab.accuracy.runner import run_correctness

    questions = min(cfg.eval.after_load.questions, len(first_pass))
    again, _ = run_correctness(server.base_url, server.model, data_file, model_dir,
                               cfg.eval.model_copy(update={"limit": questions}))
    after = [{**p, "task": r["task"]} for p, r in zip(again, first_pass)]
    result = compare_answers(first_pass[:questions], after)
    varies = engine_varies(cfg)
    return {**result, "rate": round(result["differ"] / questions, 4) if questions else 0.0,
            "engine_varies": varies, "finding": bool(result["differ"]) and not varies}


def describe(result: dict) -> str:
    """One line for the terminal."""
    head = f"accuracy: after load, {result['differ']} of {result['questions']} answers changed"
    if not result["differ"]:
        return head + " (same as the first pass)"
    shown = ", ".join(str(c["index"]) for c in result["changed"][:SHOWN])
    more = f" and {result['differ'] - SHOWN} more" if result["differ"] > SHOWN else ""
    why = (f"rate {result['rate']:.0%}; this engine's greedy answers are known to vary with batching" if result["engine_varies"]
           else "a finding: greedy decoding here is deterministic, so serving changed the answers")
    return f"{head}: questions {shown}{more} ({why}; reports/accuracy/summary.json lists them)"
