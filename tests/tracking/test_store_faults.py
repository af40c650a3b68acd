"""The MLflow store's faults named: a damaged `mlflow.db` (truncated, random bytes, empty) is refused by
`inputs` before reference or track run, in one line naming the file and the fix, and nothing is deleted
or re-created; a store another process holds locked (a real sqlite `BEGIN EXCLUSIVE` in another process)
is waited for, saying so, up to `tracking.lock_wait_s`, then named with its holder."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from soarlab.atomic import write_json
from soarlab.config import compose, to_yaml
from soarlab.errors import short_path
from soarlab.tracking.store import open_store

from support import copy_conf, soarlab_in

ERROR = "soarlab: error: "
HOLD = ("import sqlite3, sys, time\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('BEGIN EXCLUSIVE')\n"
        "print('held', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n")


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A project with a real MLflow store, a speed set and a reference report."""
    copy_conf(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = compose(["tracking.lock_wait_s=2"], root=tmp_path)
    (tmp_path / "params.yaml").write_text(to_yaml(cfg))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "speed.jsonl").write_text('{"question": "q w e", "model_response": "a s"}\n')
    write_json(tmp_path / "reports" / "reference.json", {"source": "best_recorded", "durations": {}, "runs": 0})
    open_store(cfg)
    assert (tmp_path / "mlflow.db").stat().st_size > 0
    return tmp_path, {**os.environ}


@pytest.mark.parametrize("damage,expected", [
    (lambda data: data[: len(data) // 2], "is damaged"),
    (lambda data: os.urandom(len(data)), "is not an SQLite database"),
    (lambda data: b"", "is empty (0 bytes)"),
], ids=["truncated", "random", "empty"])
def test_a_damaged_store_is_named_with_its_fix_and_nothing_deleted(lab, damage, expected):
    root, env = lab
    db = root / "mlflow.db"
    db.write_bytes(damage(db.read_bytes()))
    before = {name: sha(root / name) for name in ("mlflow.db", "reports/reference.json")}
    for stage in ("inputs", "reference"):
        done = soarlab_in((root, env), ["stage", stage], ok=(2,))
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith(ERROR + f"the MLflow store {short_path(db)} {expected}"), line
        assert "Fix: move it aside: `mv mlflow.db mlflow.db.bad`;" in line and "soarlab stage track" in line
        assert len(line) <= 200
    assert {name: sha(root / name) for name in before} == before, "nothing deleted, nothing re-created"


def _hold(db, seconds: float, python: str = sys.executable) -> subprocess.Popen:
    holder = subprocess.Popen([python, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_locked_store_is_waited_for_then_named_with_its_holder(lab):
    root, env = lab
    before = sha(root / "reports" / "reference.json")
    python = root / ("installed-" + "deep" * 20) / "python"  # as from a checkout with a long path
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    holder = _hold(root / "mlflow.db", 30, str(python))
    try:
        done = soarlab_in((root, env), ["stage", "reference"], ok=(2,))
    finally:
        holder.kill()
        holder.wait()
    lines = done.stderr.strip().splitlines()
    # the program by its file name: a long install path must not push out the arguments that say what it is
    assert lines[0].startswith(f"soarlab: mlflow.db is locked by {holder.pid} (python -c import sqlite3")
    assert lines[0].endswith("); waiting up to 2 s (tracking.lock_wait_s)") and len(lines[0]) <= 200
    assert lines[-1].startswith(ERROR + f"the MLflow store {short_path(root / 'mlflow.db')} stayed locked by {holder.pid} (")
    assert lines[-1].endswith("for 2 s (tracking.lock_wait_s). Fix: let that process finish, or end it; then run again")
    assert sha(root / "reports" / "reference.json") == before


def test_a_short_lock_is_waited_out(lab):
    root, env = lab
    (root / "params.yaml").write_text(to_yaml(compose(["tracking.lock_wait_s=60"], root=root)))
    holder = _hold(root / "mlflow.db", 3)
    try:
        done = soarlab_in((root, env), ["stage", "reference"])
    finally:
        holder.kill()
        holder.wait()
    assert "waiting up to 60 s (tracking.lock_wait_s)" in done.stderr and "reference (best_recorded, 0 run(s)" in done.stdout


def test_a_new_store_is_a_copy_of_the_migrated_empty_one(tmp_path, monkeypatch):
    """A project's first store is a copy of an empty store MLflow made and migrated once (per MLflow version,
    in the cache folder), not migrated anew: MLflow opens it as current, and its Default experiment is
    what MLflow gives a store made here."""
    import sqlite3

    import mlflow

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("DVC_ROOT", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    template = tmp_path / "cache" / "soarlab" / "mlflow" / f"empty-store-{mlflow.__version__}.db"
    stores = []
    for project in ("proj", "other"):  # the first makes the template, the second copies it
        copy_conf(tmp_path / project)
        monkeypatch.chdir(tmp_path / project)
        client, experiment_id = open_store(compose())
        assert template.is_file() and (tmp_path / project / "mlflow.db").is_file()
        stores.append(tmp_path / project / "mlflow.db")
        default = client.get_experiment("0")
        assert default.artifact_location == str(tmp_path / project / "mlruns" / "0")
        run = client.create_run(experiment_id)  # a working store: a run logged and read back
        client.log_metric(run.info.run_id, "m", 1.0)
        assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}
    version = lambda db: sqlite3.connect(db).execute("select version_num from alembic_version").fetchone()  # noqa: E731
    assert version(stores[0]) == version(stores[1]) == version(template)
    assert not sorted(tmp_path.glob("*/.mlflow.db.*.tmp"))  # no temporary left
