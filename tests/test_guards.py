"""Guards of issue 39: the length of every answer (and the flag against the unquantized run), correctness after
load, and FP8 (the refused SGLang flag combinations, the CPU's FP8 rounding).

Real components: lm-eval against a loopback chat server (soarlab.bench.loopback) that answers with chosen
lengths and changes its answers after N requests, a real MLflow sqlite store for the flag, the shipped tiny
model's weights. Nothing here needs a GPU; SGLang's FP8 itself cannot run here, and is not imported.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from soarlab.bench.loopback import LoopbackServer
from soarlab.config import compose, plain
from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED
from soarlab.engines import Server
from soarlab.errors import SoarError
from soarlab.schema import EvalGroup

ROOT = Path(__file__).resolve().parents[1]
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


def _store(tmp_path) -> tuple[object, str]:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    return client, uri


def _log_run(client, experiment_id: str, quant: str, serve: str | None, p95: float, at_cap: int, seconds: float) -> str:
    run = client.create_run(experiment_id, tags={"soarlab.model": "tiny", "soarlab.speed_set_sha": "s"})
    run_id = run.info.run_id
    params = {"quant.name": quant, "quant.method": "none" if quant in ("none", "fp8") else "rtn",
              "quant.serve_quantization": json.dumps(serve), "eval.max_tokens": "48", "model.baseline_accuracy": "70.63"}
    for key, value in params.items():
        client.log_param(run_id, key, value)
    metrics = {"accuracy.length_p95": p95, "accuracy.length_at_cap": at_cap, "accuracy.ori_accuracy": 73.0,
               "accuracy.ori_ci_low": 72.0, "accuracy.ori_ci_high": 74.0, "accuracy.C": 1.0}
    for level in ("S1", "S8", "Smax"):
        metrics.update({f"bench.{level}_valid": 1.0, f"bench.{level}_duration_s": seconds})
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    client.set_terminated(run_id)
    return run_id


def test_length_flag_fires_at_the_margin_and_gate_refuses(tmp_path, monkeypatch, capsys):
    from soarlab.decide import gate, length_flag
    from soarlab.prediction.calibration import fit
    from soarlab.decide.leaderboard import rows
    from soarlab.tracking.runs import load_runs

    client, uri = _store(tmp_path)
    experiment_id = client.create_experiment("soarlab")
    cfg = compose([f"tracking.uri={uri}"], root=ROOT)
    margins = cfg.decide.lengths
    ref_p95 = 40.0
    edge = ref_p95 * (1 + margins.p95_growth_pct / 100)
    reference = _log_run(client, experiment_id, "none", None, ref_p95, 1, 10.0)
    at_edge = _log_run(client, experiment_id, "rtn_w4", None, edge, 1 + margins.at_cap_growth, 9.0)
    longer = _log_run(client, experiment_id, "rtn_w4", None, edge + 1, 1, 5.0)
    more_capped = _log_run(client, experiment_id, "fp8", "fp8", ref_p95, 2 + margins.at_cap_growth, 9.0)
    _, _, runs = load_runs(cfg, with_repeats=False)
    by_id = {r.run_id: r for r in runs}
    assert length_flag.reference_run(by_id[longer], runs).run_id == reference
    assert length_flag.flag(by_id[reference], runs, margins) is None  # the reference itself
    assert length_flag.flag(by_id[at_edge], runs, margins) is None
    assert "p95" in length_flag.flag(by_id[longer], runs, margins) and reference[:8] in length_flag.flag(by_id[longer], runs, margins)
    assert "at the cap" in length_flag.flag(by_id[more_capped], runs, margins)
    table = {row["run_id"]: row for row in rows(runs, fit(runs, cfg), cfg)}
    assert table[longer]["long_answers"] and not table[at_edge]["long_answers"]

    monkeypatch.chdir(ROOT)
    args = argparse.Namespace(target=longer, against=at_edge, min_gain=None, experiment=None,
                              overrides=[f"tracking.uri={uri}"], allow_long_answers=False)
    from soarlab.commands.decide import compare_cli, gate_cli

    refused = gate_cli(args)
    out = capsys.readouterr().out
    assert refused == gate.EXIT_FAIL and "refused (--allow-long-answers to accept)" in out
    args.allow_long_answers = True
    gate_cli(args)
    assert "allowed by --allow-long-answers" in capsys.readouterr().out

    compare_cli(argparse.Namespace(a=at_edge, b=longer, experiment=None, rerun=None, json=True,
                                   overrides=[f"tracking.uri={uri}"]))
    flagged = json.loads(capsys.readouterr().out)["lengths"]
    assert flagged["A"] == {"p95": edge, "at_cap": 1 + margins.at_cap_growth, "flag": None}
    assert flagged["B"]["p95"] == edge + 1 and "p95" in flagged["B"]["flag"] and reference[:8] in flagged["B"]["flag"]


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


@pytest.mark.parametrize("overrides, refused", [
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e4m3"], "RULES.md 6"),
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e5m2", "engine.server_args.attention-backend=null"], "(unset)"),
    (["+package.sglang.server_args.kv-cache-dtype=fp8_e4m3"], "package.sglang.server_args"),  # the submission's flags
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp4_e2m1"], "RULES.md 7"),
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e4m3", "+engine.server_args.force-dense-minicpm=true"], None),
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e4m3", "engine.server_args.attention-backend=flashinfer"], None),
    (["quant=fp8", "engine=sglang", "+engine.server_args.kv-cache-dtype=auto"], None),
])
def test_known_bad_fp8_combinations_are_refused_citing_rules(overrides, refused):
    if refused is None:
        compose(overrides, root=ROOT)
        return
    with pytest.raises(SoarError) as info:
        compose(overrides, root=ROOT)
    assert refused in str(info.value) and "RULES.md" in str(info.value)


def test_a_second_hand_fact_warns_naming_its_source(capsys):
    rule = ('package.sglang.known_bad=[{when: {kv-cache-dtype: [fp8_e5m2]}, unless: {}, why: slow, '
            'source: "SGLang PR 1234", secondhand: true}]')
    compose(["engine=sglang", rule, "+engine.server_args.kv-cache-dtype=fp8_e5m2"], root=ROOT)
    assert "SGLang PR 1234), second-hand" in capsys.readouterr().err


def test_fp8_rounding_of_the_shipped_tiny_model(tiny_model_dir):
    """Every linear weight but lm_head moves by at most e4m3's rounding step of its row; rounding again moves it
    by no more than bf16's own rounding."""
    import torch

    from soarlab.quant import fp8
    from soarlab.quant.hf_compat import load_causal_lm

    model = load_causal_lm(tiny_model_dir)
    before = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    rounded = fp8.round_linear_weights(model)
    after = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert rounded == len(before) - 1 and torch.equal(before["lm_head"], after["lm_head"])
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert changed and "lm_head" not in changed
    for name in changed:
        w0, w1 = before[name].float(), after[name].float()
        row_max = w0.abs().amax(dim=1, keepdim=True)
        assert ((w1 - w0).abs() <= row_max * 2.0 ** -4 + 1e-6).all(), name  # e4m3: 3 mantissa bits
    assert fp8.round_linear_weights(model) == rounded
    again = {n: m.weight for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert all(torch.allclose(again[n].float(), after[n].float(), rtol=2 ** -7, atol=0) for n in changed)


def test_the_cpu_launcher_takes_sglangs_fp8_flag_only():
    from soarlab.engines.transformers_engine import build_command
    from soarlab.quant import fp8

    argv = ["serve", "m", "--quantization", "fp8", "--port", "1"]
    assert fp8.pop_flag(argv) and argv == ["serve", "m", "--port", "1"]
    argv = ["serve", "m", "--quantization", "bnb-4bit"]
    assert not fp8.pop_flag(argv) and "bnb-4bit" in argv  # transformers' own quantization stays
    command = build_command(compose(["quant=fp8"], root=ROOT), Path("m"), "127.0.0.1", 1)
    assert command[command.index("--quantization") + 1] == "fp8"
    assert "--quantization" not in build_command(compose(["quant=none"], root=ROOT), Path("m"), "127.0.0.1", 1)
