"""Answers read from the MLflow store, remembered while the store is unchanged.

`reference` and `track` run again whenever the store changed (the `inputs` stage records its stamp,
soarlab.tracking.store.store_stamp), and opening the store (MLflow's import, its schema check) costs
seconds. For a local sqlite store, its size and modification time change with every write (a new run, a
deleted run, a recorded submission, a new file), so an answer recorded at the same stamp is still true
and MLflow need not be asked (e.g. track's own run, just written: the next `dvc repro` re-runs track for
it, and track answers from here; and the reference of the store track has just written, which the next
run's reference stage asks for). A tracking server has no such stamp: it is asked every time. The memo
lives in the owning project's `.dvc/tmp/` (shared with DVC's temporary experiment copies; one answer per kind, keyed by what
was asked), written atomically; a lost or stale memo only means asking MLflow again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from soarlab.atomic import write_json
from soarlab.paths import owning_project_root
from soarlab.schema import SoarConfig
from soarlab.tracking.store import store_stamp


def _memo_file() -> Path | None:
    """In the project's DVC folder (None outside a DVC project: nothing is remembered there)."""
    dvc = owning_project_root() / ".dvc"
    return dvc / "tmp" / "soarlab-store-memo.json" if dvc.is_dir() else None


def _read() -> dict:
    path = _memo_file()
    try:
        return json.loads(path.read_text()) if path is not None else {}
    except (FileNotFoundError, ValueError):
        return {}


def recall(cfg: SoarConfig, kind: str, key: Any) -> Any | None:
    """The answer remembered for `kind` asked with `key`, if the store has not changed since."""
    entry = _read().get(kind)
    stamp = store_stamp(cfg)
    if stamp is None or not entry or entry.get("key") != key or entry.get("stamp") != stamp:
        return None
    return entry.get("value")


def remember(cfg: SoarConfig, kind: str, key: Any, value: Any) -> None:
    """Record `value` as the answer for `kind` and `key` at the store's current stamp."""
    _record(kind, key, value, store_stamp(cfg))


def answer(cfg: SoarConfig, kind: str, key: Any, ask: Callable[[], Any]) -> tuple[Any, bool]:
    """(answer, whether it was remembered): the remembered one, else `ask()`'s, remembered at the stamp the
    store had while it was asked, and only if no other process wrote to it meanwhile (the answer could
    already be stale)."""
    found = recall(cfg, kind, key)
    if found is not None:
        return found, True
    before = store_stamp(cfg)
    value = ask()
    if before is not None and store_stamp(cfg) == before:
        _record(kind, key, value, before)
    return value, False


def _record(kind: str, key: Any, value: Any, stamp: str | None) -> None:
    path = _memo_file()
    if stamp is None or path is None:
        return
    memo = _read()
    memo[kind] = {"key": key, "stamp": stamp, "value": value}
    write_json(path, memo)
