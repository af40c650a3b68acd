"""The MLflow store the project logs to: `tracking.uri` (a server) or a sqlite file at the project root."""

from __future__ import annotations

import contextlib
from pathlib import Path

from soarlab.paths import owning_project_root
from soarlab.schema import SoarConfig

# MLflow 3's UI opens an experiment on its GenAI pages unless this experiment tag says otherwise
# (read by the experiment page in mlflow/server/js; "genai_development" is the other value).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
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


def open_store(cfg: SoarConfig):
    """(MlflowClient, experiment id) of `tracking.experiment`, created on first use."""
    import mlflow

    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    with _store_lock(uri):
        experiment = mlflow.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:
            # A local store keeps artifacts beside the database, not in whatever folder DVC ran from.
            location = (owning_project_root() / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
            experiment_id = mlflow.create_experiment(cfg.tracking.experiment, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
        client = mlflow.MlflowClient(uri)
        if (experiment.tags if experiment else {}).get(EXPERIMENT_KIND_TAG) != RUNS_TABLE_KIND:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, RUNS_TABLE_KIND)  # opens on the runs table
    return client, experiment_id
