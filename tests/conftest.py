"""Shared fixtures and pytest hooks (the helpers tests share are in support.py). The tiny model is the shipped
checkpoint, installed once per test session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.register_assert_rewrite("support")  # its asserts report their values, as a test's do

from support import ROOT, copy_conf, make_fresh_project, make_project  # noqa: E402


def pytest_xdist_auto_num_workers(config) -> int | None:
    """`-n auto`: one and a half workers per core (at least 2; `--maxprocesses` caps it). The pipeline tests
    spend about a third of their time waiting (loopback servers' per-token delays, server starts, Podman),
    so a worker beyond the cores keeps them busy; more than that loses time (docs/PERFORMANCE.md, "Test
    suite"). With PYTEST_XDIST_AUTO_NUM_WORKERS set, xdist's own hook reads it."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return max(2, len(os.sched_getaffinity(0)) * 3 // 2)


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist, each worker's torch (in this process and in the stages it starts) gets its share
    of the cores, and idle OpenMP threads sleep. Torch takes every core by default, and two workers' thread
    pools on the same cores spin at their barriers waiting for a descheduled thread, and two stages side by
    side take many times as long as one alone (docs/PERFORMANCE.md, "CPU contention"). Set before any
    test imports torch; a value the developer set wins. A CPU server takes engine.cpu_threads; GPTQ keeps
    its pinned thread count (quant.cpu_numerics: its bytes depend on it), and the sleeping threads are what
    spare it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = str(max(1, len(os.sched_getaffinity(0)) // workers))
        for name, value in (("OMP_NUM_THREADS", threads), ("MKL_NUM_THREADS", threads), ("OMP_WAIT_POLICY", "PASSIVE")):
            os.environ.setdefault(name, value)


_share_the_cores_between_workers()


def pytest_collection_modifyitems(items):
    """Files with the most whole-pipeline tests (e2e, container) first, then by their slow tests. xdist
    hands each worker a file at a time in this order (`--no-loadscope-reorder` in pyproject.toml), so the
    longest files start first and the workers finish together, instead of one worker left with a long file
    that happened to sort last (the default order is by test count, which the quick parametrized files lead)."""
    from collections import Counter

    heavy, slow = Counter(), Counter()
    for item in items:
        heavy[item.path] += bool(item.get_closest_marker("e2e") or item.get_closest_marker("container"))
        slow[item.path] += bool(item.get_closest_marker("slow"))
    items.sort(key=lambda item: (-heavy[item.path], -slow[item.path]))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The embedded tiny MiniCPM-SALA checkpoint (real tokenizer, config, remote code, bf16 weights), as fetch-model installs it."""
    from soarlab.tiny import install_tiny_model

    return install_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir, trust_remote_code=True)


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    """Port and GPU leases of this test only (the machine's others, other tests' included, are left
    alone); subprocesses inherit it."""
    from soarlab.names.environment import STATE_DIR_ENV

    folder = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(folder))
    return folder


@pytest.fixture
def source_project(tmp_path, monkeypatch) -> Path:
    """A copy (the working directory) of the project's conf/, src/soarlab and pyproject.toml (what package bundles)."""
    proj = copy_conf(tmp_path / "proj")
    shutil.copytree(ROOT / "src" / "soarlab", proj / "src" / "soarlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    monkeypatch.chdir(proj)
    return proj


@pytest.fixture
def conf_project(tmp_path, monkeypatch) -> Path:
    """A project folder (the working directory) holding a copy of the project's conf/ and nothing else,
    so that a test writes nothing into the checkout."""
    proj = copy_conf(tmp_path / "proj")
    monkeypatch.chdir(proj)
    return proj


@pytest.fixture
def project_with_accuracy(tmp_path, monkeypatch):
    """(folder, composed config) of a project (the working directory) whose accuracy report is written and
    whose bench report is the test's to write: conf/, a speed set, a params.yaml and
    reports/accuracy/metrics.json; no DVC_ROOT. What the reference, score and track stages read."""
    from soarlab.atomic import write_json
    from soarlab.config import compose

    copy_conf(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "speed.jsonl").write_text('{"question": "q", "model_response": "a"}\n')
    (tmp_path / "params.yaml").write_text("a: 1\n")
    write_json(tmp_path / "reports" / "accuracy" / "metrics.json", {"ori_accuracy": 55.56})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    return tmp_path, compose()


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """support.make_project's copy of this repository (a git repo) and the environment to run `dvc` and
    `soarlab` in it; one per test module, which its tests share (and change)."""
    return make_project(tmp_path_factory.mktemp("repo-copy"))


@pytest.fixture(scope="module")
def repo_copy_without_outputs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """repo_copy without dvc.lock (support.make_fresh_project): no stage has run in it; one per test module."""
    return make_fresh_project(tmp_path_factory.mktemp("fresh-repo-copy"))
