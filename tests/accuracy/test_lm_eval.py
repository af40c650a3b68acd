"""A real lm-eval run (its `evaluate`, the soar_correctness task, the chat-completions client) against a
real HTTP server on loopback.

The server is an aiohttp OpenAI-compatible chat server written here, not `transformers serve`: it
answers deterministically (so scores are exact), can be told to fail on chosen questions (so the
retry-then-score-0 path is tested), records every request body (so temperature, max_tokens, stop
strings and chat_template_kwargs are checked), and starts in milliseconds. The stage's run against
`transformers serve` on the tiny model is the slow test at the end.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections import Counter

import pytest
from aiohttp import web

from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED
from soarlab.config import compose, plain, to_yaml
from soarlab.schema import EvalGroup

from support import ROOT, copy_conf, wait_for


class FakeChatServer:
    """POST /v1/chat/completions answering `answer(question)`; HTTP 500 for questions in `fail`;
    `hang`: no answer until the server closes. GET /v1/models names one model (engine=external's health)."""

    def __init__(self, answer, fail=(), completions_logprobs: bool = False, hang: bool = False):
        self.answer = answer
        self.fail = set(fail)
        self.completions_logprobs = completions_logprobs
        self.hang = hang
        self.requests: list[dict] = []
        self.attempts: Counter = Counter()

    async def _chat(self, request):
        body = await request.json()
        self.requests.append(body)
        if self.hang:
            await self.closing.wait()
        question = body["messages"][-1]["content"]
        self.attempts[question] += 1
        if question in self.fail:
            return web.json_response({"error": "injected failure"}, status=500)
        message = {"role": "assistant", "content": self.answer(question)}
        return web.json_response(
            {"id": "c", "object": "chat.completion", "model": body["model"],
             "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
        )

    async def _completions(self, request):
        await request.json()
        choice = {"index": 0, "text": "x", "finish_reason": "length"}  # like transformers serve: no logprobs
        return web.json_response({"id": "c", "object": "text_completion", "choices": [choice]})

    async def _models(self, request):
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def __enter__(self):
        self.loop = asyncio.new_event_loop()
        self.closing = asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = self.runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.closing.set)
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def eval_cfg(**changes) -> EvalGroup:
    """The composed eval group, quick to retry, with `changes` (typed by the schema)."""
    return EvalGroup.model_validate({**plain(compose(root=ROOT).eval), "retry_backoff_s": 0.01, **changes})


def rows():
    return [json.loads(line) for line in EMBEDDED.read_text().splitlines() if line.strip()]


def perfect_answer(question: str) -> str:
    row = next(r for r in rows() if r["question"] == question)
    if row["task"] == "mcq":
        return f"<think>Let me think. ANSWER: Z</think>\nanswer: {row['gold'].lower()}"
    return "<think>draft</think>\n" + ", ".join(row["gold"])


def test_lm_eval_run_sends_the_official_request_and_scores_every_row(tiny_model_dir, monkeypatch):
    from soarlab.accuracy.runner import run_correctness
    from soarlab.accuracy.grading import score_rows
    from soarlab.datasets.correctness import read_correctness_set

    data = rows()
    failing = data[0]["question"]  # an mcq row: fails on every attempt
    started = []  # every process the run starts (the real Popen runs them)
    popen_init = subprocess.Popen.__init__
    monkeypatch.setattr(subprocess.Popen, "__init__", lambda self, args, *a, **k: started.append(args) or popen_init(self, args, *a, **k))
    with FakeChatServer(perfect_answer, fail=[failing]) as server:
        preds, info = run_correctness(server.base_url + "/v1", "tiny", EMBEDDED, tiny_model_dir, eval_cfg(retries=2))
    # no process of lm-eval's environment report (`pip list`, git) or any other
    assert started == []
    # one prediction per row, in order, the failed one kept
    assert len(preds) == len(data)
    assert preds[0]["failed"] and preds[0]["prediction"] == "" and "500" in preds[0]["error"]
    assert server.attempts[failing] == 3  # 1 + eval.retries
    assert all(not p["failed"] for p in preds[1:])
    # the request: one user message = question, temperature 0, max_tokens from config,
    # EOS strings from the model dir, thinking on through chat_template_kwargs
    body = next(b for b in server.requests if b["messages"][-1]["content"] == data[5]["question"])
    assert body["messages"] == [{"role": "user", "content": data[5]["question"]}]
    assert body["temperature"] == 0 and body["max_tokens"] == 48 and body["model"] == "tiny"
    assert body["stop"] == ["</s>", "<|im_end|>"]
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    # scores: everything right except the failed row
    records = score_rows(read_correctness_set(EMBEDDED), preds)
    assert [r["score"] for r in records] == [0.0] + [1.0] * (len(data) - 1)
    assert info["metrics"]["acc"] == pytest.approx((len(data) - 1) / len(data))
    mcq = sum(r["task"] == "mcq" for r in data)
    assert info["metrics"]["acc_mcq"] == pytest.approx((mcq - 1) / mcq)
    assert info["metrics"]["acc_fwe"] == 1.0


def test_stage_evaluate_writes_ci_and_skips_loglikelihood_tasks_without_echo(tiny_model_dir, monkeypatch):
    """evaluate() as the stage calls it; a loglikelihood task is skipped with a reason (no echo/logprobs)."""
    from soarlab.accuracy import runner
    from soarlab.engines import Server
    from soarlab.stages.accuracy import evaluate

    def half_right(question: str) -> str:
        row = next(r for r in rows() if r["question"] == question)
        return "ANSWER: A" if row["task"] == "mcq" else ", ".join(row["gold"][:1]) if row["task"] != "cwe" else ""

    class FakeTask:
        def get_config(self, key):
            return "multiple_choice"

    class FakeManager:  # the standard task's dataset is on a hub (unreachable); only its type matters here
        def load(self, names):
            return {"tasks": {names[0]: FakeTask()}}

    monkeypatch.setattr(runner, "_standard_task_manager", FakeManager)
    composed = compose(root=ROOT)
    cfg = composed.model_copy(update={"eval": eval_cfg(tasks=["hellaswag"]),
                                      "model": composed.model.model_copy(update={"baseline_accuracy": 80.0})})
    with FakeChatServer(half_right) as fake:
        server = Server(base_url=fake.base_url, api="openai", model="tiny", supports_ignore_eos=False)
        summary, records = evaluate(server, EMBEDDED, tiny_model_dir, cfg)
        ok, why = runner.supports_echo_logprobs(fake.base_url, "tiny", 10)
    assert not ok and "ignores echo" in why  # the server answered; a probe decided, not the engine's name
    assert summary["per_task"]["cwe"]["accuracy"] == 0.0
    assert summary["per_task"]["niah"]["accuracy"] == 100.0
    assert len(records) == len(rows())
    assert summary["bootstrap"]["ori_low"] <= summary["ori_accuracy"] <= summary["bootstrap"]["ori_high"]
    assert summary["standard_tasks"]["hellaswag"]["status"] == "skipped"
    assert "echo" in summary["standard_tasks"]["hellaswag"]["reason"]


def test_sigterm_mid_accuracy_says_stopped_and_nothing_else(tiny_model_dir, tmp_path):
    """A real `soarlab stage accuracy` (engine=external, requests in flight) stopped by SIGTERM: lm-eval logged
    every cancelled request as `Exception:CancelledError(), (no outputs), retrying.` (issue 21)."""
    import shutil
    import signal
    import sys

    proj = copy_conf(tmp_path / "proj")
    (proj / "data").mkdir()
    shutil.copy(EMBEDDED, proj / "data" / "correctness.jsonl")
    with FakeChatServer(perfect_answer, hang=True) as server:
        cfg = compose(["engine=external", f"engine.url={server.base_url}", "engine.api=openai",
                       f"paths.quantized_model={tiny_model_dir}", f"paths.data={proj / 'data'}",
                       f"paths.reports={proj / 'reports'}"], root=proj)
        (proj / "params.yaml").write_text(to_yaml(cfg))
        stage = subprocess.Popen([sys.executable, "-m", "soarlab.cli", "stage", "accuracy"], cwd=proj,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: len(server.requests) >= 2 or stage.poll() is not None, "requests in flight")
            stage.send_signal(signal.SIGTERM)
            out, err = stage.communicate(timeout=120)
        finally:
            if stage.poll() is None:
                stage.kill()
    assert stage.returncode == 128 + signal.SIGTERM, out + err
    assert "soarlab: stopped by SIGTERM" in err and "Traceback" not in err
    assert "CancelledError" not in out + err and "retrying" not in out + err, out + err


def test_fetch_correctness_set_sources(tmp_path, monkeypatch):
    import hashlib

    from soarlab.datasets import correctness as dataset
    from soarlab.errors import SoarError

    pinned = compose(["eval=soar"], root=ROOT).eval.dataset  # the official set as conf/eval/soar.yaml pins it

    def source(**keys):
        return pinned.model_copy(update=keys)

    dest = tmp_path / "data" / "correctness.jsonl"
    dataset.fetch_correctness_set(source(source="embedded"), dest)
    assert dest.read_bytes() == EMBEDDED.read_bytes()

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "mcq", "question": "q", "gold": "A"}\n{"task": "mcq", "question": "q", "gold": "Z"}\n')
    with pytest.raises(SoarError, match="line 2"):
        dataset.fetch_correctness_set(source(source="file", path=str(bad)), dest)
    assert dest.read_bytes() == EMBEDDED.read_bytes()  # the old file is untouched

    unpinned = dict(source="github", repo="o/r", file="f", commit=None, git_blob_sha1=None, sha256=None,
                    download_timeout_s=10.0)
    with pytest.raises(SoarError, match="commit is not set"):
        dataset.fetch_correctness_set(source(**unpinned), dest)
    with pytest.raises(SoarError, match="neither git_blob_sha1 nor sha256"):
        dataset.fetch_correctness_set(source(**{**unpinned, "commit": "a" * 40}), dest)

    # github: raw.githubusercontent.com is unreachable here, so a loopback server stands in for it
    payload = EMBEDDED.read_bytes()
    served = []

    async def raw(request):
        served.append(request.match_info["path"])
        return web.Response(body=payload)

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/{path:.*}", raw)
    app_runner = web.AppRunner(app)
    loop.run_until_complete(app_runner.setup())
    site = web.TCPSite(app_runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        port = app_runner.addresses[0][1]
        monkeypatch.setattr(dataset, "RAW_URL", f"http://127.0.0.1:{port}/{{repo}}/{{commit}}/{{file}}")
        # the pinned config: the right URL, and a file that is not the official one is refused by its blob hash
        with pytest.raises(SoarError, match=f"git blob sha1 {dataset.git_blob_sha1(EMBEDDED)}, not the pinned "
                                            "391ed46494c5d72937be8cac1e46c4c33584a6ee"):
            dataset.fetch_correctness_set(pinned, tmp_path / "official.jsonl")
        assert served == ["OpenBMB/SOAR-Toolkit/2ed4ade13a601f2f8879c2bc482ed7d0f11c61ef/eval_dataset/perf_public_set.jsonl"]
        assert not (tmp_path / "official.jsonl").exists()
        # our blob hash is git's own (the real `git hash-object`); it alone, sha256 alone, or both verify
        git_says = subprocess.run(["git", "hash-object", str(EMBEDDED)], capture_output=True, text=True, check=True).stdout
        assert dataset.git_blob_sha1(EMBEDDED) == git_says.strip()
        sha256 = hashlib.sha256(payload).hexdigest()
        for hashes in ({"git_blob_sha1": git_says.strip(), "sha256": None}, {"git_blob_sha1": None, "sha256": sha256},
                       {"git_blob_sha1": git_says.strip(), "sha256": sha256}):
            dest2 = tmp_path / "gh.jsonl"
            dataset.fetch_correctness_set(source(**{**unpinned, "commit": "a" * 40, **hashes}), dest2)
            assert dest2.read_bytes() == payload
        with pytest.raises(SoarError, match="sha256"):
            dataset.fetch_correctness_set(source(**{**unpinned, "commit": "a" * 40, "git_blob_sha1": git_says.strip(),
                                                    "sha256": "0" * 64}), tmp_path / "gh2.jsonl")
        assert not (tmp_path / "gh2.jsonl").exists()
    finally:
        asyncio.run_coroutine_threadsafe(app_runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@pytest.mark.slow
def test_accuracy_stage_against_transformers_serve(tiny_model_dir, tmp_path, monkeypatch):
    """The stage end to end: soarlab.engines starts `transformers serve` on the (untrained) tiny model,
    lm-eval runs a few rows through it, the reports are written. Untrained: the scores are not checked."""
    from soarlab.datasets.correctness import fetch_correctness_set
    from soarlab.stages import accuracy

    copy_conf(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "quantized").symlink_to(tiny_model_dir)
    monkeypatch.chdir(tmp_path)
    cfg = compose(["engine.port=0", "eval.limit=3", "eval.max_tokens=4"])
    fetch_correctness_set(cfg.eval.dataset, tmp_path / "data" / "correctness.jsonl")
    accuracy.run(cfg)
    out = tmp_path / "reports" / "accuracy"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 3 and summary["failed"] == 0
    assert summary["server"]["api"] == "openai"
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["prediction"] for r in records)
    assert json.loads((out / "metrics.json").read_text())["n"] == 3
