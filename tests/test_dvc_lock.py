"""The committed dvc.lock is what a fresh clone runs: the stages dvc.yaml has, code and params hashes of
this tree, and outputs (models/base, data/) that fetch-model and fetch-data reproduce byte for byte.
Real DVC on a copy of the project's files (what a clone holds)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, make_project

OUTPUT_ROOTS = ("models/", "data/", "reports/")  # outputs and their files: absent in a clone until `dvc repro`


def test_lock_has_exactly_the_pipeline_stages():
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]
    pipeline = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert set(lock) == set(pipeline), "dvc.lock and dvc.yaml name different stages: run `dvc repro` and drop the rest"


def test_lock_code_and_params_hashes_match_the_tree(tmp_path):
    dest, env = make_project(tmp_path / "proj")
    proc = subprocess.run(["dvc", "status", "--json"], cwd=dest, env=env, capture_output=True, text=True, check=True)
    stale = []
    for stage, entries in json.loads(proc.stdout).items():
        for entry in entries:
            if not isinstance(entry, dict):
                continue  # "always changed" (inputs)
            for path, why in entry.get("changed deps", {}).items():
                if path == "params.yaml" or not path.startswith(OUTPUT_ROOTS):
                    stale.append(f"{stage}: {path} {why}")
    assert stale == [], "dvc.lock is older than the tree; run `dvc repro` and commit dvc.lock: " + "; ".join(stale)


@pytest.mark.slow
def test_fetch_stages_reproduce_the_committed_outputs(tmp_path):
    """A fresh clone's fetch-model and fetch-data write the bytes the committed lock records, on any CPU
    (the tiny model is shipped, the data generated from it deterministically)."""
    dest, env = make_project(tmp_path / "proj")
    subprocess.run(["dvc", "repro", "fetch-model", "fetch-data"], cwd=dest, env=env, capture_output=True, check=True)
    diff = subprocess.run(["git", "diff", "--stat", "dvc.lock"], cwd=dest, env=env, capture_output=True, text=True)
    assert diff.stdout == "", diff.stdout
    assert Path(dest / "models" / "base" / "model.safetensors").is_file()
