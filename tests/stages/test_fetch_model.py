"""fetch-model: the embedded tiny model is installed for real; the model hubs are unreachable here, so
`snapshot_download` is replaced by a fake and the test checks what it was asked for (repo, pinned
revision, local_dir) and what the stage does with the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from soarlab import hub
from soarlab.config import compose
from soarlab.errors import SoarError
from soarlab.schema import ModelGroup, SoarConfig
from soarlab.stages import fetch_model

from support import ROOT


@pytest.fixture
def bare_project(tmp_path, monkeypatch) -> Path:
    """An empty project folder (the working directory): only a conf/config.yaml, which makes it a project root."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text("# test project\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def make_cfg(model: dict) -> SoarConfig:
    """The composed config with `model` as its model group (typed by the schema) and relative paths."""
    cfg = compose(["paths.base_model=models/base", "paths.reports=reports"], root=ROOT)
    return cfg.model_copy(update={"model": ModelGroup.model_validate(model)})


def real_model_cfg(**changes) -> dict:
    return {**yaml.safe_load((ROOT / "conf" / "model" / "minicpm_sala.yaml").read_text()), **changes}


def test_huggingface_download_arguments_and_result(bare_project, monkeypatch):
    import torch
    from safetensors.torch import save_file

    calls = []

    def fake_snapshot_download(repo_id, revision=None, local_dir=None, **kw):  # hub unreachable here
        calls.append({"repo_id": repo_id, "revision": revision, "local_dir": local_dir, **kw})
        Path(local_dir, ".cache").mkdir(parents=True, exist_ok=True)  # what the hub keeps for resuming
        Path(local_dir, "config.json").write_text(json.dumps({"model_type": "minicpm_sala"}))
        save_file({"w": torch.zeros(8, 8)}, str(Path(local_dir, "model-00001-of-00004.safetensors")))  # complete: it is checked
        return local_dir

    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_snapshot_download)
    model = real_model_cfg()
    out = fetch_model.run(make_cfg(model))
    assert out == bare_project / "models" / "base"
    assert calls == [{"repo_id": "openbmb/MiniCPM-SALA", "revision": model["revision"],
                      "local_dir": str(bare_project / "models" / ".base.download")}]
    assert (out / "config.json").is_file() and not (out / ".cache").exists()
    assert not (bare_project / "models" / ".base.download").exists()
    metrics = json.loads((bare_project / "reports" / "fetch-model" / "metrics.json").read_text())
    assert metrics["model_files"] == 2 and metrics["model_bytes"] > 100


def test_download_without_config_json_is_rejected(bare_project, monkeypatch):
    monkeypatch.setattr("huggingface_hub.snapshot_download",
                        lambda repo_id, revision=None, local_dir=None, **kw: local_dir)  # an empty snapshot
    with pytest.raises(SoarError, match=r"models/.base.download has no config.json.*Fix: "):
        fetch_model.run(make_cfg(real_model_cfg()))
    assert not (bare_project / "models" / "base").exists()


def test_network_failure_names_repo_and_fixes(bare_project, monkeypatch):
    """The real snapshot_download, pointed at a closed loopback port (the hub is unreachable here anyway)."""
    import huggingface_hub.constants

    from soarlab.engines.server import free_port

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(SoarError) as info:
        fetch_model.run(make_cfg(real_model_cfg()))
    msg = str(info.value)
    assert "cannot download openbmb/MiniCPM-SALA@" in msg and "HF_ENDPOINT" in msg
    assert "model.source=modelscope" in msg and "model.source=local" in msg


def test_modelscope_missing_says_how_to_install(bare_project, monkeypatch):
    monkeypatch.setitem(sys.modules, "modelscope", None)  # makes `import modelscope` fail
    with pytest.raises(SoarError, match=r"pip install 'soarlab\[modelscope\]'"):
        fetch_model.run(make_cfg(real_model_cfg(source="modelscope")))


def test_modelscope_arguments(bare_project, monkeypatch):
    import types

    calls = []

    def fake(model_id, local_dir=None, **kw):  # ModelScope unreachable here too
        calls.append((model_id, local_dir, kw))
        Path(local_dir, "config.json").write_text("{}")
        return local_dir

    monkeypatch.setitem(sys.modules, "modelscope", types.SimpleNamespace(snapshot_download=fake))
    fetch_model.run(make_cfg(real_model_cfg(source="modelscope")))
    assert calls == [("OpenBMB/MiniCPM-SALA", str(bare_project / "models" / ".base.download"), {})]


def test_local_copy(bare_project, tiny_model_dir):
    out = fetch_model.run(make_cfg(real_model_cfg(source="local", local_path=str(tiny_model_dir))))
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in Path(tiny_model_dir).iterdir())


def test_embedded_installs_the_shipped_checkpoint(bare_project):
    from soarlab.tiny import CHECKPOINT_DIR

    out = fetch_model.run(make_cfg(yaml.safe_load((ROOT / "conf" / "model" / "tiny.yaml").read_text())))
    assert (out / "model.safetensors").read_bytes() == (CHECKPOINT_DIR / "model.safetensors").read_bytes()
    assert json.loads((out / "config.json").read_text())["model_type"] == "minicpm_sala"
    metrics = json.loads((bare_project / "reports" / "fetch-model" / "metrics.json").read_text())
    assert metrics["model_files"] == len(list(CHECKPOINT_DIR.iterdir())) - 1  # all but SHA256SUMS


def test_validate_model_dir(tmp_path):
    with pytest.raises(SoarError, match=f"model directory {tmp_path} has no config.json"):
        hub.validate_model_dir(tmp_path)
