"""Speculative decoding (the `spec` group): refusals, the flags each engine gets, the submission, acceptance,
the losslessness check and the sweep's trade table. The CPU engine runs for real on the tiny model and
its shipped draft; SGLang needs a GPU, so its side is checked as the command it would be given.
"""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pytest

from soarlab.bench.client import Record
from soarlab.bench.server_metrics import acceptance, parse_prometheus
from soarlab.config import compose, plain
from soarlab.engines import cpu_speculation, open_engine
from soarlab.engines import sglang as sglang_engine
from soarlab.errors import SoarError
from soarlab.names.mlflow_tags import ANSWERS_KEY_TAG, SPEC_TAG
from soarlab.sweep.spec_gains import spec_gains_table
from soarlab.tracking import lossless

from support import ROOT


def refusal(overrides: list[str]) -> str:
    with pytest.raises(SoarError) as err:
        compose(overrides, root=ROOT)
    text = str(err.value)
    assert "\n" not in text and "Fix:" in text, text
    return text


@pytest.mark.parametrize("overrides, said", [
    (["spec=standalone", "spec.eagle_topk=2"], r"spec.eagle_topk=2 on model=tiny.*chains only.*RULES.md 6"),
    (["spec=eagle3", "spec.draft.local_path=/d"], r"spec.algorithm=EAGLE3 is not offered by engine=transformers"),
    (["spec=ngram", "engine=sglang", "+engine.server_args.device=cpu"], r"NGRAM.*CUDA only \(RULES.md 6\)"),
    (["spec=standalone", "spec.draft.source=none"], r"STANDALONE needs a draft model"),
    (["spec=eagle3", "engine=sglang", "spec.draft.source=huggingface", "spec.draft.repo_id=o/d"], r"pinned spec.draft.revision"),
    (["spec=standalone", "model=minicpm_sala"], r"the tiny model's draft, and model=minicpm_sala is another model"),
])
def test_known_bad_combinations_are_refused_in_one_line(overrides, said):
    assert re.search(said, refusal(overrides)), refusal(overrides)


def test_sglang_gets_the_speculative_flags_and_refuses_them_in_server_args():
    cfg = compose(["engine=sglang", "spec=eagle3", "spec.draft.local_path=/drafts/eagle3", "model=minicpm_sala"], root=ROOT)
    argv = sglang_engine.build_command(cfg, Path("/m"), "127.0.0.1", 30000)
    tail = argv[argv.index("--speculative-algorithm"):]
    assert tail[:2] == ["--speculative-algorithm", "EAGLE3"]
    assert tail[tail.index("--speculative-draft-model-path") + 1] == str(Path(cfg.paths.draft_model).resolve())
    assert tail[tail.index("--speculative-eagle-topk") + 1] == "1"
    engine = type(cfg.engine).model_validate({**plain(cfg.engine), "server_args": {"speculative-num-steps": 5}})
    with pytest.raises(SoarError, match="speculative decoding is the spec group's"):
        sglang_engine.server_flags(engine, None)


def test_launcher_takes_sglangs_flags_off_transformers_argv():
    argv = ["serve", "/m", "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "3", "--port", "1"]
    spec = cpu_speculation.pop_flags(argv)
    assert argv == ["serve", "/m", "--port", "1"] and spec == cpu_speculation.Speculation("NGRAM", num_draft_tokens=3)
    assert cpu_speculation.pop_flags(["serve", "/m"]) is None


def test_the_bench_reads_the_counters_the_launcher_serves():
    """conf/bench names the CPU launcher's counters: the two must agree, or acceptance is never seen."""
    counters = compose([], root=ROOT).bench.server_metrics.counters
    counts = cpu_speculation.Counts()
    counts.add(verify_steps=4, draft_tokens=12, accepted_tokens=6)
    found = parse_prometheus(counts.prometheus(), counters)
    assert found == {"spec_verify_steps": 4, "spec_draft_tokens": 12, "spec_accepted_tokens": 6}


def test_acceptance_from_sglang_meta_info_then_counters_then_the_gauge():
    records = [Record(0, 1, 8, 10, server_tokens=10, spec_verify_ct=4), Record(1, 2, 8, 6, server_tokens=6, spec_verify_ct=4)]
    assert acceptance({}, records) == {"accept_length": 2.0, "accept_rate": None, "verify_steps": 8, "source": "meta_info"}
    counted = {"counters": {"spec_verify_steps": 10, "spec_draft_tokens": 30, "spec_accepted_tokens": 15}}
    assert acceptance(counted, [Record(0, 1, 8, 10, server_tokens=10)]) == {
        "accept_length": 2.5, "accept_rate": 0.5, "verify_steps": 10, "source": "counters"}
    gauge = {"prometheus": {"spec_accept_length": {"mean": 1.8, "max": 2.0, "samples": 3}}}
    assert acceptance(gauge, [])["accept_length"] == 1.8
    assert acceptance({"counters": {"spec_verify_steps": 0}}, []) is None


def test_cpu_engine_drafts_with_the_shipped_draft_and_counts_what_it_accepts(tiny_model_dir, tiny_tokenizer, tmp_path):
    """A real `transformers serve` with spec=standalone, measured as bench measures a level: every streamed
    answer has exactly the asked length, and the target accepted drafted tokens (a trained draft's are)."""
    from soarlab.atomic import write_jsonl
    from soarlab.bench.preflight import prepare
    from soarlab.bench.runner import run_level
    from soarlab.datasets.speed import make_speed_set
    from soarlab.tiny import DRAFT_DIR, install_tiny_model

    draft = install_tiny_model(tmp_path / "draft", DRAFT_DIR)
    cfg = compose(["spec=standalone", f"paths.draft_model={draft}", "engine.port=0", "bench.repeats=1",
                   "bench.pause_after_flush_s=0", "bench.progress=false"], root=ROOT)
    rows = make_speed_set(tiny_tokenizer, cfg.bench.profiles["tiny"].model_dump(), num_requests=4)
    write_jsonl(tmp_path / "speed.jsonl", rows)
    requests, info = prepare(tmp_path / "speed.jsonl", tiny_tokenizer, cfg.bench)
    with open_engine(cfg, tiny_model_dir, tmp_path / "server.log") as server:
        report, _ = run_level(server, requests, "S1", 1, cfg.bench, tiny_tokenizer, info)
    assert report.valid, report.invalid_reasons
    spec = report.server_metrics["spec"]
    assert spec["source"] == "counters" and spec["verify_steps"] >= 1 and spec["accept_length"] > 1, spec
    assert 0 < spec["accept_rate"] <= 1


def test_submission_ships_the_draft_and_points_sglang_at_it(tmp_path):
    """The package stage on a project copy with spec=standalone: the tarball holds the draft, the size
    report gives its share, and prepare_env.sh, sourced where the tarball is unpacked, names that folder."""
    from support import make_project

    dest, env = make_project(tmp_path / "proj")
    subprocess.run(["soarlab", "params", "spec=standalone"], cwd=dest, env=env, check=True)
    for stage in ("fetch-model", "fetch-draft", "package"):
        subprocess.run(["soarlab", "stage", stage], cwd=dest, env=env, check=True, capture_output=True)
    out = dest / "reports" / "package"
    metrics = json.loads((out / "metrics.json").read_text())
    shipped = sorted(p.name for p in (dest / "models" / "draft").iterdir())
    assert metrics["draft_bytes"] == sum((dest / "models" / "draft" / n).stat().st_size for n in shipped) > 0
    assert metrics["draft_share_of_limit"] == round(metrics["draft_bytes"] / metrics["size_limit_bytes"], 6)
    unpacked = tmp_path / "platform" / "sub"
    unpacked.mkdir(parents=True)
    with tarfile.open(out / "submission.tar.gz") as tar:
        assert sorted(n.removeprefix("draft/") for n in tar.getnames() if n.startswith("draft/")) == shipped
    subprocess.run(["tar", "-xzf", str(out / "submission.tar.gz"), "-C", str(unpacked)], check=True)  # as the platform unpacks it
    args = subprocess.run(["bash", "-c", "SOARLAB_SKIP_INSTALL=1 source prepare_env.sh >/dev/null; echo \"$SGLANG_SERVER_ARGS\""],
                          cwd=unpacked, capture_output=True, text=True, check=True).stdout.split()
    assert args[args.index("--speculative-algorithm") + 1] == "STANDALONE"
    assert args[args.index("--speculative-draft-model-path") + 1] == str(unpacked / "draft")
    # One sweep may pair spec=none,standalone,ngram with standalone's draft: an algorithm without one fetches none.
    subprocess.run(["soarlab", "params", "spec=ngram", "spec.draft.source=embedded"], cwd=dest, env=env, check=True)
    subprocess.run(["soarlab", "stage", "fetch-draft"], cwd=dest, env=env, check=True, capture_output=True)
    assert [p.name for p in (dest / "models" / "draft").iterdir()] == ["NO_DRAFT"]


def test_compare_answers_names_the_questions_that_changed():
    before = [{"task": "qa", "prediction": "Paris"}, {"task": "mcq", "prediction": "ANSWER: B"}]
    after = [{"task": "qa", "prediction": "Paris"}, {"task": "mcq", "prediction": "ANSWER: C"}]
    result = lossless.compare_answers(before, after)
    assert result == {"questions": 2, "differ": 1,
                      "changed": [{"index": 1, "task": "mcq", "before": "ANSWER: B", "after": "ANSWER: C"}]}


def test_lossless_check_against_the_recorded_run_without_spec(tmp_path):
    """A real MLflow store: the spec=none run of the same answers key is found, its predictions read back."""
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("soarlab", artifact_location=str(tmp_path / "artifacts"))
    predictions = tmp_path / "reports" / "accuracy" / "predictions.jsonl"
    predictions.parent.mkdir(parents=True)

    def logged(spec: str, key: str, answers: list[str]) -> str:
        predictions.write_text("".join(json.dumps({"task": "qa", "prediction": a}) + "\n" for a in answers))
        run = client.create_run(experiment, tags={SPEC_TAG: spec, ANSWERS_KEY_TAG: key})
        client.log_artifact(run.info.run_id, str(predictions), "reports/accuracy")
        client.set_terminated(run.info.run_id, "FINISHED")
        return run.info.run_id

    baseline = logged("none", "k1", ["a", "b", "c"])
    logged("none", "other-config", ["x", "y", "z"])
    spec_run = logged("standalone", "k1", ["a", "B", "c"])
    result = lossless.check(client, experiment, spec_run, "k1", predictions)
    assert result["checked"] and result["baseline_run"] == baseline and result["differ"] == 1
    assert client.get_run(spec_run).data.metrics["lossless.answers_differ"] == 1
    assert "1 of 3 answers differ" in lossless.describe(result) and "questions 1" in lossless.describe(result)
    unmatched = lossless.check(client, experiment, spec_run, "k-unrecorded", predictions)
    assert not unmatched["checked"] and "spec=none" in lossless.describe(unmatched)


def test_answers_key_ignores_what_cannot_change_an_answer():
    incidental = ["engine.port"]
    base = {"quant.name": "gptq_w4", "spec.name": "none", "bench.repeats": 3, "engine.port": 1, "eval.limit": None}
    same = {**base, "spec.name": "ngram", "bench.repeats": 1, "engine.port": 2}
    assert lossless.answers_key(base, incidental, "sha") == lossless.answers_key(same, incidental, "sha")
    assert lossless.answers_key(base, incidental, "sha") != lossless.answers_key({**base, "quant.name": "none"}, incidental, "sha")
    assert lossless.answers_key(base, incidental, "sha") != lossless.answers_key(base, incidental, "other-set")


def test_sweep_gains_table_weighs_levels_as_the_score_does():
    trial = lambda overrides, s1, s8, smax: SimpleNamespace(  # noqa: E731 - a sweep TrialResult's fields
        overrides=overrides, final=50.0, durations={"S1": s1, "S8": s8, "Smax": smax})
    weights = {"S1": 0.4, "S8": 0.3, "Smax": 0.3}
    results = [trial(["quant=none", "spec=none"], 10.0, 10.0, 10.0), trial(["quant=none", "spec=ngram"], 5.0, 10.0, 20.0),
               trial(["quant=gptq_w4", "spec=ngram"], 1.0, 1.0, 1.0)]  # no spec=none trial of its own: no row
    table = spec_gains_table(results, weights).splitlines()
    assert len(table) == 2 and table[1].split()[-1] == "spec=ngram"
    # S1 twice as fast, S8 the same, Smax half as fast: 0.4*2 + 0.3 + 0.3*0.5 = 1.25 of the baseline's speed
    assert table[1].split()[:4] == ["+50.0%", "+0.0%", "-100.0%", "+25.0%"]
    assert spec_gains_table(results[:1], weights) is None
