"""How long each answer of the correctness set was, and what that costs the official correctness pass.

A quantized model that stops ending its answers gets slow, or runs out of the evaluation's time (RULES.md 4),
before its accuracy moves. Each answer's generated tokens come from the server's `usage` where it gives one
(with `finish_reason` "length" as the cap), else from the model's tokenizer on the answer's text (then an
answer is at the cap when its count reaches eval.max_tokens).

The official pass (eval.official_pass: RULES.md 3's 150 questions, up to 65,536 tokens each, 32 at once,
within RULES.md 4's 5 hours) is estimated at this run's measured decode speed: every answer as long as it was
here, an answer at this run's cap as long as the official cap (it had not ended), scaled to the official
number of questions; the pass then takes the longer of (a) those tokens at the output throughput of the
highest bench level and (b) the longest answer at S1's time per output token (one stream decodes it alone).
Where this run's cap is below the official one, an answer at it might have ended soon after: the pass is then
also estimated with those answers as long as here, and the limit is settled only where both estimates agree.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS


def percentile(values: Sequence[int], share: float) -> int:
    """Nearest-rank percentile (a value that occurred)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def count_tokens(predictions: list[dict], usage: Mapping[str, tuple[int, bool]], model_dir, max_tokens: int) -> str:
    """Set `tokens` and `capped` on each prediction; returns where the counts came from."""
    missing = [p for p in predictions if not p["failed"] and p["prediction"] not in usage]
    tokenizer = None
    if missing:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=True)
    for p in predictions:
        if p["failed"]:
            p["tokens"], p["capped"] = None, False
        elif p["prediction"] in usage:
            p["tokens"], p["capped"] = usage[p["prediction"]]
        else:
            p["tokens"] = len(tokenizer(p["prediction"], add_special_tokens=False)["input_ids"])
            p["capped"] = p["tokens"] >= max_tokens
    if not missing:
        return "server usage"
    return "tokenizer" if len(missing) == sum(not p["failed"] for p in predictions) else "server usage, else tokenizer"


def summarize_lengths(records: Sequence[Mapping], max_tokens: int, source: str) -> dict:
    """p50, p95, max of the generated tokens, and how many answers hit the cap (failed requests left out)."""
    lengths = [r["tokens"] for r in records if r.get("tokens") is not None]
    if not lengths:
        return {"answers": 0, "max_tokens": max_tokens, "source": source}
    return {"answers": len(lengths), "p50": percentile(lengths, 0.5), "p95": percentile(lengths, 0.95),
            "max": max(lengths), "at_cap": sum(1 for r in records if r.get("capped")), "max_tokens": max_tokens,
            "source": source}


def official_pass(records: Sequence[Mapping], bench_metrics: Mapping, official) -> dict:
    """The estimated wall time of the official correctness pass (module doc), or why there is none."""
    kept = [r for r in records if r.get("tokens") is not None]
    levels = [L for L in LEVELS if bench_metrics.get(level_key(L, "output_throughput"))]
    if not kept or not levels:
        return {"estimated": False, "reason": "no answer lengths" if not kept else "no bench level with an output throughput"}
    level = levels[-1]
    throughput = bench_metrics[level_key(level, "output_throughput")]
    tpot_ms = bench_metrics.get(level_key(LEVELS[0], "tpot_ms", "mean"))

    def pass_tokens(tokens: list[int]) -> float:  # this run's answers scaled to the official number of questions
        return sum(tokens) * official.questions / len(tokens)

    def pass_s(tokens: list[int]) -> float:
        return max(pass_tokens(tokens) / throughput, max(tokens) * tpot_ms / 1000 if tpot_ms else 0.0)

    tokens = [official.max_tokens if r["capped"] else r["tokens"] for r in kept]
    estimate, ended_at_cap = pass_s(tokens), pass_s([r["tokens"] for r in kept])
    return {"estimated": True, "seconds": round(estimate, 1), "seconds_if_capped_ended": round(ended_at_cap, 1),
            "limit_s": official.time_limit_s, "within_limit": estimate <= official.time_limit_s,
            "over_limit": ended_at_cap > official.time_limit_s, "tokens": round(pass_tokens(tokens)), "level": level,
            "output_throughput": throughput, "tpot_ms": tpot_ms,
            "how": f"{official.questions} questions x this run's answer lengths (answers at the cap counted at "
                   f"{official.max_tokens} tokens) at {level}'s output throughput {throughput:.1f} tok/s, or the longest "
                   f"answer at {LEVELS[0]}'s TPOT, whichever is longer"}


def describe(lengths: Mapping, estimate: Mapping | None) -> str:
    """One line for the terminal."""
    if not lengths.get("answers"):
        return "accuracy: answer lengths: none measured (every request failed)"
    head = (f"accuracy: answer lengths p50 {lengths['p50']}, p95 {lengths['p95']}, max {lengths['max']} tokens; "
            f"{lengths['at_cap']} of {lengths['answers']} at the cap ({lengths['max_tokens']})")
    if not estimate or not estimate.get("estimated"):
        return head
    hours, low_hours, limit = estimate["seconds"] / 3600, estimate["seconds_if_capped_ended"] / 3600, estimate["limit_s"] / 3600
    if estimate["within_limit"]:
        return f"{head}; official pass ~{hours:.2f} h at this speed, within the {limit:g} h limit (RULES.md 4)"
    if estimate["over_limit"]:
        return f"{head}; official pass ~{low_hours:.2f} h at this speed, OVER the {limit:g} h limit (RULES.md 4)"
    return (f"{head}; official pass {low_hours:.2f}-{hours:.2f} h here, as answers at the cap end there or run on: "
            f"{limit:g} h limit (RULES.md 4) unsettled")
