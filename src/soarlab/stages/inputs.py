"""inputs: the content digests of the files and folders that params name, so that editing one re-runs the
stages that read it, and nothing else.

`bench.dataset.path`, `eval.dataset.path` (eval.dataset.source=file), `quant.calibration.source` (a path),
`model.local_path` (model.source=local) and `spec.draft.local_path` (a local draft) name files the fetch and quantize stages read, but DVC sees
only the names, as params. This stage always runs (cheap: soarlab.digest remembers each file's digest
under its identity and modification time) and writes one small file per input,
reports/inputs/<input>.json = {"param", "path", "sha256"}: path and sha256 are null when the param names
no file in this config, sha256 alone when the file is missing (the stage that reads it says so). The stage
that reads an input lists that file in its deps. docs/ARCHITECTURE.md says why this and not `dvc add` or
`dvc import-url`.

It writes each other stage's code digest too, reports/inputs/code/<stage>.json (soarlab.stage_code): the
stage lists that file in its deps instead of its code files (soarlab.stage_code says why).

It also writes reports/inputs/store.json, the MLflow store's stamp (soarlab.tracking.store.store_stamp):
`reference` and `track` read the store, state DVC cannot see, and list this file in their deps instead of
always running, so a no-op `dvc repro` runs only this stage, while a new store or a new (or deleted) run
still re-runs them. A tracking server has no stamp: the file then changes on every run, and so do they.
"""

from __future__ import annotations

import time
from pathlib import Path

from soarlab.atomic import write_json
from soarlab.digest import content_digest
from soarlab.errors import SoarError
from soarlab.paths import project_root
from soarlab.schema import SoarConfig
from soarlab.stage_code import CODE_DIR, SourceTree
from soarlab.tracking.store import STAMP_REPORT, check_store, store_stamp, tracking_uri


def named_inputs(cfg: SoarConfig) -> dict[str, tuple[str, str | None]]:
    """{input: (param, the path it names in this config, or None when the config reads no such file)}."""
    from soarlab.speculative import needs_draft

    calibration, draft = cfg.quant.calibration.source, cfg.spec.draft
    return {
        "model": ("model.local_path", cfg.model.local_path if cfg.model.source == "local" else None),
        "draft": ("spec.draft.local_path", draft.local_path if needs_draft(cfg.spec) and draft.source == "local" else None),
        "speed_set": ("bench.dataset.path", cfg.bench.dataset.path or None),
        "correctness_set": ("eval.dataset.path", cfg.eval.dataset.path if cfg.eval.dataset.source == "file" else None),
        "calibration": ("quant.calibration.source", calibration if calibration != "corpus" else None),
    }


def resolve(named, root: Path) -> Path | None:
    path = None if named is None else Path(str(named)).expanduser()
    return root / path if path is not None and not path.is_absolute() else path  # the stages read from the root


def check_named_files(cfg: SoarConfig, root: Path) -> None:
    """Refuse here what the stage reading a file would refuse: DVC removes a stage's outputs before it
    runs, and this stage runs before every reader, so a bad file stops the pipeline with them intact."""
    from soarlab.datasets.correctness import read_correctness_set
    from soarlab.datasets.soar import read_speed_set
    from soarlab.hub import validate_model_dir
    from soarlab.speculative import needs_draft
    from soarlab.tiny import DRAFT_DIR, verify_checkpoint

    readers = {"model": validate_model_dir, "draft": validate_model_dir, "correctness_set": read_correctness_set,
               "speed_set": lambda path: read_speed_set(path, cfg.bench.dataset.max_line_bytes)}
    for name, (param, named) in named_inputs(cfg).items():
        path = resolve(named, root)
        if path is not None and not path.exists():
            raise SoarError(f"{param} names {named}, which does not exist", f"set {param} to an existing path")
        if path is not None and name in readers:
            readers[name](path)
    if cfg.model.source == "embedded":  # the shipped checkpoint fetch-model installs, checked by sha256
        verify_checkpoint()
    if needs_draft(cfg.spec) and cfg.spec.draft.source == "embedded":  # likewise the draft fetch-draft installs
        verify_checkpoint(DRAFT_DIR)


def run(cfg: SoarConfig) -> None:
    root = project_root()
    check_named_files(cfg, root)
    check_store(cfg)  # a damaged store refused here, before reference and track remove their outputs
    for name, (param, named) in named_inputs(cfg).items():
        path = resolve(named, root)
        record = {"param": param, "path": None if named is None else str(named),
                  "sha256": None if path is None else content_digest(path)}
        write_json(root / cfg.paths.reports / "inputs" / f"{name}.json", record)
        if named is not None:
            print(f"{param}={named}: sha256 {record['sha256'] or '(missing)'}")
    write_code_digests(root, root / cfg.paths.reports)
    # A server (or a store not made yet) has no stamp: a new value each run makes reference and track run.
    stamp = store_stamp(cfg) or f"unknown, asked at {time.time_ns()}"
    write_json(root.joinpath(cfg.paths.reports, *STAMP_REPORT), {"uri": tracking_uri(cfg), "stamp": stamp})


def write_code_digests(root: Path, reports: Path) -> None:
    """reports/inputs/code/<stage>.json for each stage of the project's dvc.yaml but this one (always run)."""
    import yaml

    tree = SourceTree(root / "src")
    for stage in yaml.safe_load((root / "dvc.yaml").read_text())["stages"]:
        if stage != "inputs":
            write_json(reports.joinpath(*CODE_DIR, f"{stage}.json"), tree.code_record(stage))
