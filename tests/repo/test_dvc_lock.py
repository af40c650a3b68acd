"""The committed dvc.lock is what a fresh clone runs: the stages dvc.yaml has, code and params hashes of
this tree, and outputs (models/base, data/) that fetch-model and fetch-data reproduce byte for byte.
Real DVC on a copy of the project's files (what a clone holds)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from support import ROOT, make_project

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



def test_dvc_parses_yaml_with_the_c_loader():
    """DVC re-reads dvc.lock at every stage of a run: ruamel.yaml.clib parses it 4-5x as fast as pure
    Python (docs/PERFORMANCE.md, "A pipeline run's own cost"). Without it, DVC falls back silently."""
    from dvc.utils.serialize._yaml import parse_yaml
    from ruamel.yaml.composer import Composer

    calls = []
    original = Composer.compose_node
    Composer.compose_node = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    try:
        lock = parse_yaml((ROOT / "dvc.lock").read_text(), "dvc.lock")
    finally:
        Composer.compose_node = original
    assert "stages" in lock and calls == [], "DVC parses YAML in pure Python: `pip install ruamel.yaml.clib`"

@pytest.mark.slow
def test_fetch_stages_reproduce_the_committed_outputs(tmp_path):
    """A fresh clone's fetch-model and fetch-data write the bytes the committed lock records, on any CPU
    (the tiny model is shipped, the data generated from it deterministically)."""
    dest, env = make_project(tmp_path / "proj")
    subprocess.run(["dvc", "repro", "fetch-model", "fetch-data"], cwd=dest, env=env, capture_output=True, check=True)
    diff = subprocess.run(["git", "diff", "--stat", "dvc.lock"], cwd=dest, env=env, capture_output=True, text=True)
    assert diff.stdout == "", diff.stdout
    assert Path(dest / "models" / "base" / "model.safetensors").is_file()
