"""The MLflow store the project logs to: `tracking.uri` (a server) or a sqlite file at the project root."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from soarlab.errors import SoarError, short_path
from soarlab.names.mlflow_tags import EXPERIMENT_KIND_TAG
from soarlab.paths import cache_dir, owning_project_root
from soarlab.schema import SoarConfig

# MLflow 3's UI opens an experiment on its GenAI pages unless this experiment tag says otherwise
# (read by the experiment page in mlflow/server/js; "genai_development" is the other value).
RUNS_TABLE_KIND = "custom_model_development"


def tracking_uri(cfg: SoarConfig) -> str:
    if cfg.tracking.uri:
        return cfg.tracking.uri
    return f"sqlite:///{owning_project_root() / 'mlflow.db'}"


def sqlite_file(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def store_not_made(cfg: SoarConfig) -> bool:
    """Whether the store is a local sqlite file that does not exist yet: it holds no run, which is known
    without MLflow (whose import and new-store migrations cost seconds)."""
    db = sqlite_file(tracking_uri(cfg))
    return db is not None and not db.exists()


# Where the inputs stage records store_stamp, under the reports folder (dvc.yaml lists it for reference and track).
STAMP_REPORT = ("inputs", "store.json")


def store_stamp(cfg: SoarConfig) -> str | None:
    """The sqlite store's path, size and modification time, which every write changes; None for a tracking
    server (no such stamp) or a store not made yet."""
    db = sqlite_file(tracking_uri(cfg))
    try:
        st = db.stat() if db is not None else None
    except FileNotFoundError:
        return None
    return None if st is None else f"{db}:{st.st_size}:{st.st_mtime_ns}"


def _store_lock(uri: str):
    """A lock beside a local sqlite store, held while the store and the experiment are created:
    two processes migrating one new database at once fail (`_alembic_tmp_experiments already exists`)."""
    from filelock import FileLock

    db = sqlite_file(uri)
    if db is None:
        return contextlib.nullcontext()
    db.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{db}.lock")


def inputs_lock(cfg: SoarConfig):
    """Held from looking up a run with these inputs to creating it, so that two `track`s of the same
    inputs at once log one run, not two. Beside a sqlite store; for a tracking server, one per server
    on this machine (runs on other machines are not covered)."""
    import hashlib

    from filelock import FileLock

    from soarlab.paths import state_dir

    uri = tracking_uri(cfg)
    db = sqlite_file(uri)
    path = Path(f"{db}.inputs.lock") if db is not None else (
        state_dir() / f"track-{hashlib.sha256(uri.encode()).hexdigest()[:16]}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(path)


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every sqlite database file


def _set_aside_fix(db: Path) -> str:
    return f"move it aside: `mv {db.name} {db.name}.bad`; a run makes a new one (`soarlab stage track` re-logs)"


def check_store(cfg: SoarConfig) -> None:
    """A local sqlite store that exists is a sound sqlite database, or a SoarError naming the file, what
    is wrong and the fix (before MLflow fails on it with a bare DatabaseError, or migrates an empty file)."""
    import sqlite3

    db = sqlite_file(tracking_uri(cfg))
    if db is None or not db.exists():
        return
    try:
        with open(db, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
        problem = "is empty (0 bytes)" if not head else None if head == SQLITE_HEADER else "is not an SQLite database"
        if problem is None:
            with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=0)) as conn:
                found = conn.execute("PRAGMA quick_check").fetchone()[0]
            problem = None if found == "ok" else f"is damaged ({found[:80]})"
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            return  # a writer holds it: wait_for_store waits, where a write is coming
        problem = f"cannot be read ({exc})"
    except (sqlite3.DatabaseError, OSError) as exc:
        problem = f"is damaged ({getattr(exc, 'strerror', None) or exc})"
    if problem:
        raise SoarError(f"the MLflow store {short_path(db)} {problem}", _set_aside_fix(db))


def _holders(db: Path) -> list[str]:
    """'pid (command)' of the other processes with `db` open (from /proc): who holds a lock. The program
    is named by its file name, so that a long install path leaves room for the arguments that say what it is."""
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        if fd_dir.parent.name == str(os.getpid()):
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == str(db) for fd in fd_dir.iterdir()):
                program, *args = (fd_dir.parent / "cmdline").read_bytes().split(b"\0")
                command = [Path(program.decode(errors="replace")).name, *(a.decode(errors="replace") for a in args[:2])]
                words = " ".join(command).split()  # one line, whatever it held
                found.append(f"{fd_dir.parent.name} ({' '.join(words)[:60]})")
    return found


def wait_for_store(cfg: SoarConfig) -> None:
    """Wait, at most `tracking.lock_wait_s` and saying so, while another process holds a local store's
    write lock; then a SoarError naming the holders and their fix."""
    import sqlite3

    db = sqlite_file(tracking_uri(cfg))
    if db is None or not db.exists():
        return
    limit, said = cfg.tracking.lock_wait_s, False
    deadline = time.monotonic() + limit
    while True:
        try:
            with contextlib.closing(sqlite3.connect(db, timeout=0, isolation_level=None)) as conn:
                conn.execute("BEGIN IMMEDIATE")  # a writer's lock, given back at once
                conn.execute("ROLLBACK")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        holders = ", ".join(_holders(db)) or "another process"
        if time.monotonic() >= deadline:
            raise SoarError(f"the MLflow store {short_path(db)} stayed locked by {holders} for {limit:g} s "
                            "(tracking.lock_wait_s)", "let that process finish, or end it; then run again")
        if not said:
            print(f"soarlab: {db.name} is locked by {holders}; waiting up to {limit:g} s (tracking.lock_wait_s)",
                  file=sys.stderr, flush=True)
            said = True
        time.sleep(0.5)


@contextlib.contextmanager
def store_faults_named(cfg: SoarConfig):
    """MLflow's bare sqlite errors as one line naming the store: locked (a writer kept it past MLflow's own
    wait) or damaged."""
    try:
        yield
    except Exception as exc:  # MLflow wraps SQLAlchemy's errors in its own, so the text is what tells
        db = sqlite_file(tracking_uri(cfg))
        text = str(exc)
        if db is None or isinstance(exc, SoarError):
            raise
        if "database is locked" in text:
            raise SoarError(f"the MLflow store {short_path(db)} was locked by {', '.join(_holders(db)) or 'another process'}",
                            "let that process finish, or end it; then run again") from None
        if "file is not a database" in text or "malformed" in text:
            raise SoarError(f"the MLflow store {short_path(db)} is damaged", _set_aside_fix(db)) from None
        raise


def _copy_empty_store(db: Path) -> None:
    """A new local store, made as a copy of an empty one that MLflow made and migrated once per MLflow
    version on this machine (paths.cache_dir()): migrating each new database anew (MLflow's alembic
    scripts) costs seconds of CPU. The copy's Default experiment gets what MLflow gives a new store's: the
    folder `mlruns/0` under the working directory, and the time now."""
    import shutil
    import sqlite3

    import mlflow

    from soarlab.atomic import atomic_path

    template = cache_dir() / "mlflow" / f"empty-store-{mlflow.__version__}.db"
    if not template.is_file():
        with atomic_path(template) as tmp:
            mlflow.MlflowClient(f"sqlite:///{tmp}").search_experiments(max_results=1)  # made and migrated
    with atomic_path(db) as tmp:
        shutil.copyfile(template, tmp)
        now_ms = int(time.time() * 1000)
        with contextlib.closing(sqlite3.connect(tmp)) as conn, conn:
            conn.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                         "WHERE experiment_id = 0", (str(Path.cwd() / "mlruns" / "0"), now_ms, now_ms))


def open_store(cfg: SoarConfig):
    """(MlflowClient, experiment id) of `tracking.experiment`, created on first use, with the tags that
    make the UI open it on the runs table and offer the runs table's score view (runs_view)."""
    import mlflow

    from soarlab.tracking import runs_view

    uri = tracking_uri(cfg)
    check_store(cfg)
    wait_for_store(cfg)
    mlflow.set_tracking_uri(uri)
    with _store_lock(uri):
        db = sqlite_file(uri)
        if db is not None and not db.exists():
            _copy_empty_store(db)
        experiment = mlflow.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:
            # A local store keeps artifacts beside the database, not in whatever folder DVC ran from.
            location = (owning_project_root() / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
            experiment_id = mlflow.create_experiment(cfg.tracking.experiment, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
        client = mlflow.MlflowClient(uri)
        tags = experiment.tags if experiment else {}
        if tags.get(EXPERIMENT_KIND_TAG) != RUNS_TABLE_KIND:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, RUNS_TABLE_KIND)  # opens on the runs table
        if not runs_view.is_current(tags.get(runs_view.VIEW_TAG)):  # the runs table's score columns
            client.set_experiment_tag(experiment_id, runs_view.VIEW_TAG, runs_view.view_tag_value())
    return client, experiment_id
