"""Guards of issue 39 on the correctness run: the length of every answer (soarlab.accuracy.lengths; the flag
against the unquantized run is tests/decide/test_length_flag.py) and correctness after load
(soarlab.accuracy.after_load).

Real components: lm-eval against a loopback chat server (soarlab.bench.loopback) that answers with chosen
lengths and changes its answers after N requests, the shipped tiny model's tokenizer.
"""

from __future__ import annotations

import json

from soarlab.bench.loopback import LoopbackServer
from soarlab.config import compose, plain
from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED
from soarlab.engines import Server
from soarlab.schema import EvalGroup

from support import ROOT

QUESTIONS = [json.loads(line)["question"] for line in EMBEDDED.read_text().splitlines() if line.strip()]


def eval_cfg(**changes) -> EvalGroup:
    return EvalGroup.model_validate({**plain(compose(root=ROOT).eval), "retry_backoff_s": 0.01, **changes})


def chosen_length(question: str) -> int:
    """A length per question, some of them past the tiny default's cap (eval.max_tokens)."""
    return 5 + (QUESTIONS.index(question) * 7) % 60


def answer(payload: dict, n: int) -> tuple[str, int]:
    """The loopback's answer: as many tokens as chosen, cut at the request's max_tokens (as a server does)."""
    question = payload["messages"][-1]["content"]
    tokens = min(chosen_length(question), payload["max_tokens"])
    return f"answer {QUESTIONS.index(question)}: " + "w " * tokens, tokens


def test_lengths_and_cap_counts_are_recorded_from_the_server(tiny_model_dir):
    from soarlab.accuracy.lengths import percentile, summarize_lengths
    from soarlab.accuracy.runner import run_correctness

    cfg = eval_cfg()
    with LoopbackServer(api="openai", chat=answer) as server:
        predictions, info = run_correctness(server.base_url, "tiny", EMBEDDED, tiny_model_dir, cfg)
    assert info["lengths_source"] == "server usage"
    expected = [min(chosen_length(q), cfg.max_tokens) for q in QUESTIONS]
    assert [p["tokens"] for p in predictions] == expected
    assert [p["capped"] for p in predictions] == [chosen_length(q) >= cfg.max_tokens for q in QUESTIONS]
    lengths = summarize_lengths(predictions, cfg.max_tokens, info["lengths_source"])
    assert 0 < lengths["at_cap"] < len(QUESTIONS)
    assert lengths["at_cap"] == sum(chosen_length(q) >= cfg.max_tokens for q in QUESTIONS)
    assert (lengths["p50"], lengths["p95"], lengths["max"]) == (
        sorted(expected)[len(expected) // 2 - (len(expected) % 2 == 0)], percentile(expected, 0.95), cfg.max_tokens)


def test_lengths_fall_back_to_the_tokenizer_without_usage(tiny_model_dir):
    from transformers import AutoTokenizer

    from soarlab.accuracy.lengths import count_tokens

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir), trust_remote_code=True)
    text = "the answer is B because the second line says so"
    predictions = [{"prediction": text, "failed": False}, {"prediction": "", "failed": True}]
    assert count_tokens(predictions, {}, tiny_model_dir, max_tokens=4) == "tokenizer"
    assert predictions[0]["tokens"] == len(tokenizer(text, add_special_tokens=False)["input_ids"]) > 4
    assert predictions[0]["capped"] and predictions[1]["tokens"] is None


def test_official_pass_estimate_follows_the_measured_speed():
    from soarlab.accuracy.lengths import official_pass

    official = compose(root=ROOT).eval.official_pass
    records = [{"tokens": 10, "capped": False}, {"tokens": 30, "capped": False}, {"tokens": 48, "capped": True}]
    bench = {"S1_mean_tpot_ms": 20.0, "S1_output_throughput": 50.0, "Smax_output_throughput": 400.0}
    result = official_pass(records, bench, official)
    tokens = (10 + 30 + official.max_tokens) * official.questions / 3  # the capped answer at the official cap
    assert result["level"] == "Smax" and result["tokens"] == round(tokens)
    assert result["seconds"] == round(max(tokens / 400.0, official.max_tokens * 0.020), 1)
    assert result["within_limit"] == (result["seconds"] <= official.time_limit_s)
    slower = official_pass(records, {**bench, "Smax_output_throughput": 40.0}, official)
    assert slower["seconds"] > result["seconds"]


def test_the_limit_is_settled_only_where_answers_at_a_lower_cap_cannot_change_it():
    """An answer at this run's cap (48) might have ended soon after or run on to the official cap: the pass is
    estimated both ways, and within/OVER is said only where both agree."""
    from soarlab.accuracy.lengths import describe, official_pass

    official = compose(root=ROOT).eval.official_pass
    records = [{"tokens": 10, "capped": False}, {"tokens": 30, "capped": False}, {"tokens": 48, "capped": True}]
    lengths = {"answers": 3, "p50": 30, "p95": 48, "max": 48, "at_cap": 1, "max_tokens": 48}

    def at(throughput: float) -> tuple[dict, str]:
        estimate = official_pass(records, {"S1_mean_tpot_ms": 20.0, "Smax_output_throughput": throughput}, official)
        return estimate, describe(lengths, estimate)

    limit = f"{official.time_limit_s / 3600:g} h limit"
    ended = (10 + 30 + 48) * official.questions / 3  # the answer at the cap ended there
    ran_on = (10 + 30 + official.max_tokens) * official.questions / 3
    fast, said = at(throughput=ran_on / official.time_limit_s * 2)  # even running on, half the limit
    assert fast["within_limit"] and not fast["over_limit"] and f"within the {limit}" in said
    unsettled, said = at(throughput=ran_on / official.time_limit_s / 2)
    assert unsettled["seconds_if_capped_ended"] == round(max(ended / unsettled["output_throughput"], 48 * 0.020), 1)
    assert not unsettled["within_limit"] and not unsettled["over_limit"], unsettled
    assert f"{limit} (RULES.md 4) unsettled" in said and "OVER" not in said and "within" not in said
    assert f"{unsettled['seconds_if_capped_ended'] / 3600:.2f}-{unsettled['seconds'] / 3600:.2f} h" in said
    slow, said = at(throughput=ended / official.time_limit_s / 2)  # over even if the answer ended at the cap
    assert slow["over_limit"] and f"OVER the {limit}" in said
    assert len(describe(lengths | {"p50": 13, "at_cap": 16, "answers": 108}, unsettled)) <= 200  # one terminal line


def changing_after(n_first: int):
    """Chat answers that change once `n_first` requests were answered (a server whose state goes bad under load)."""
    def chat(payload: dict, n: int) -> tuple[str, int]:
        text, tokens = answer(payload, n)
        return (text if n < n_first else "garbled " + text), tokens
    return chat


def test_after_load_finds_answers_a_server_changed(tiny_model_dir):
    from soarlab.accuracy import after_load
    from soarlab.accuracy.runner import run_correctness

    composed = compose(root=ROOT)
    cfg = composed.model_copy(update={"eval": eval_cfg()})
    sample, untouched = cfg.eval.after_load.questions, 3
    assert 0 < untouched < sample
    with LoopbackServer(api="openai", chat=changing_after(len(QUESTIONS) + untouched)) as loop:
        server = Server(base_url=loop.base_url, api="openai", model="tiny", supports_ignore_eos=False)
        first, _ = run_correctness(server.base_url, "tiny", EMBEDDED, tiny_model_dir, cfg.eval)
        records = [{**p, "task": "qa"} for p in first]
        result = after_load.check(server, EMBEDDED, tiny_model_dir, cfg, records)
    assert result["questions"] == sample and result["differ"] == sample - untouched
    assert result["finding"] and not result["engine_varies"]  # engine=transformers decodes greedily, deterministic
    assert "a finding" in after_load.describe(result)
    sglang = compose(["engine=sglang"], root=ROOT)
    assert after_load.engine_varies(sglang)
    assert not after_load.engine_varies(compose(["engine=sglang", "+engine.server_args.enable-deterministic-inference=true"], root=ROOT))
