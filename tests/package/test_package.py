"""package: the submission files, the tarball, the checks, the scripts run under real bash. A Docker
engine cannot run here (no daemon), so a fake `docker` on PATH stands in for one where the Docker
command line is checked; the real image build and run with Podman are in test_container_image.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from soarlab.config import compose, plain
from soarlab.errors import SoarError
from soarlab.package import checks
from soarlab.stages import package

from support import ROOT, package_cfg


def bash(script: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def test_package_outputs_and_tarball(source_project):
    out = package.run(package_cfg())
    assert out == source_project / "reports" / "package"
    sub = out / "submission"
    with tarfile.open(out / "submission.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"prepare_env.sh", "prepare_model.sh", "soarlab/pyproject.toml", "soarlab/src/soarlab/cli.py",
            "soarlab/src/soarlab/engines/sglang.py", "soarlab/conf/config.yaml",
            "soarlab/conf/quant/submission.yaml"} <= names
    assert not any("__pycache__" in n for n in names)
    frozen = yaml.safe_load((sub / "soarlab" / "conf" / "quant" / "submission.yaml").read_text())
    assert frozen == {**plain(compose(root=ROOT).quant), "name": "gptq_w4_test"}
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["tarball_bytes"] == (out / "submission.tar.gz").stat().st_size
    assert metrics["image_built"] == 0 and all(isinstance(v, (int, float)) for v in metrics.values())
    for name, base in (("Dockerfile", "ghcr.io/openbmb/soar-toolkit:latest"), ("Dockerfile.cpu", "localhost/debian-base:bookworm")):
        dockerfile = (out / name).read_text()
        assert f"FROM {base}" in dockerfile.splitlines()
        assert "COPY submission.tar.gz /submission.tar.gz" in dockerfile and "source /submission/prepare_env.sh" in dockerfile
        assert "ENV SOARLAB_MODEL_INPUT=/models/MiniCPM-SALA" in dockerfile and "{{" not in dockerfile
    assert "'transformers[serving]==" in (out / "Dockerfile.cpu").read_text()  # pyproject's pin
    # reproducible: packaging twice gives the same bytes
    first = (out / "submission.tar.gz").read_bytes()
    assert package.run(package_cfg()) and (out / "submission.tar.gz").read_bytes() == first


def test_scripts_pass_bash_n(source_project):
    out = package.run(package_cfg())
    for script in ("submission/prepare_env.sh", "submission/prepare_model.sh", "container-entrypoint.sh"):
        result = subprocess.run(["bash", "-n", str(out / script)], capture_output=True, text=True)
        assert result.returncode == 0, (script, result.stderr)


def test_server_args_hyphenated_with_quantization(source_project):
    out = package.run(package_cfg())
    args = json.loads((out / "summary.json").read_text())["sglang_server_args"]
    assert args == ("--disable-radix-cache --attention-backend minicpm_flashinfer --chunked-prefill-size 8192 "
                    "--skip-server-warmup --dense-as-sparse --dtype bfloat16 --quantization gptq_marlin")
    assert all("_" not in tok for tok in args.split() if tok.startswith("--"))


def test_prepare_env_sourced_in_subshell_does_not_exit_it(source_project, tmp_path):
    out = package.run(package_cfg())
    env_sh = out / "submission" / "prepare_env.sh"
    # a fake `uv` records the install (no package index here); the shell keeps running after sourcing
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/uv-args\nexit 1\n')  # even a failing install
    (bin_dir / "uv").chmod(0o755)
    result = bash(f'set +e; source "{env_sh}"; echo "still here:$-:$SGLANG_SERVER_ARGS:$SOARLAB_HOME"; '
                  'type _soarlab_install_deps >/dev/null 2>&1 && echo LEAKED; exit 0',
                  env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert result.returncode == 0, result.stderr
    line = [l for l in result.stdout.splitlines() if l.startswith("still here:")][0]
    flags, server_args, home = line.split(":")[1:4]
    assert "e" not in flags and "u" not in flags  # no set -e / set -u leaking into the caller
    assert server_args.startswith("--disable-radix-cache") and "--quantization gptq_marlin" in server_args
    assert home == str(out / "submission" / "soarlab")
    assert "LEAKED" not in result.stdout and "WARNING" in result.stderr
    uv_args = (tmp_path / "uv-args").read_text().split()
    assert uv_args[:2] == ["pip", "install"] and "gptqmodel==7.6.0" in uv_args
    # under the caller's own `set -eu` it still returns
    result = bash(f'set -eu; SOARLAB_SKIP_INSTALL=1 source "{env_sh}"; echo ok', env={"PATH": os.environ["PATH"]})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr


def test_prepare_model_calls_bundled_soarlab(source_project, tmp_path):
    out = package.run(package_cfg())
    fake_py = tmp_path / "fake-python"
    fake_py.write_text(f'#!/bin/sh\necho "cwd=$(pwd)" > {tmp_path}/call\necho "pp=$PYTHONPATH" >> {tmp_path}/call\n'
                       f'echo "$@" >> {tmp_path}/call\n')
    fake_py.chmod(0o755)
    model_in = tmp_path / "in"
    model_in.mkdir()
    (model_in / "config.json").write_text("{}")
    script = out / "submission" / "prepare_model.sh"
    result = bash(f'bash "{script}" --input "{model_in}" --output "{tmp_path}/processed"', env={"SOARLAB_PYTHON": str(fake_py)})
    assert result.returncode == 0, result.stderr
    cwd, pp, argv = (tmp_path / "call").read_text().splitlines()
    assert cwd == f"cwd={out / 'submission' / 'soarlab'}"
    assert pp.startswith(f"pp={out / 'submission' / 'soarlab' / 'src'}")
    assert argv == f"-m soarlab.cli prepare-model --input {model_in} --output {tmp_path / 'processed'} quant=submission model=minicpm_sala"
    result = bash(f'bash "{script}" --input "{model_in}" --output "{tmp_path}/processed"',
                  env={"SOARLAB_PYTHON": str(fake_py), "SOARLAB_MODEL_GROUP": "tiny"})
    assert (tmp_path / "call").read_text().splitlines()[2].endswith("quant=submission model=tiny")
    result = bash(f'bash "{script}" --input "{model_in}"')
    assert result.returncode == 2 and "usage" in result.stderr


def test_bundled_config_composes_with_frozen_quant(source_project, tmp_path):
    """The bundle is self-contained for config: what prepare_model.sh passes composes from its conf/."""
    from soarlab.config import compose

    out = package.run(package_cfg())
    cfg = compose(["quant=submission", "model=minicpm_sala"], root=out / "submission" / "soarlab")
    assert cfg.quant.serve_quantization == "gptq_marlin" and cfg.quant.name == "gptq_w4_test"
    assert cfg.model.name == "minicpm_sala"


def test_size_limit(source_project):
    with pytest.raises(SoarError, match=r"over the limit of 1000 bytes \(package.max_size_bytes"):
        package.run(package_cfg(max_size_bytes=1000))
    assert not (source_project / "reports" / "package").exists()  # nothing half-written


@pytest.mark.parametrize("bad_file, why", [
    ("src/soarlab/mlflow.db", "mlflow.db"),
    ("src/soarlab/.venv/lib/site.py", ".venv"),
    ("conf/data/speed.jsonl", "data"),
    ("src/soarlab/weights.safetensors", "*.safetensors"),
    ("conf/.env", ".env"),
])
def test_contents_check_refuses_what_the_platform_must_not_get(source_project, bad_file, why):
    (source_project / bad_file).parent.mkdir(parents=True, exist_ok=True)
    (source_project / bad_file).write_text("x")
    with pytest.raises(SoarError, match=rf"must not get: .*{bad_file.split('/', 1)[1] if bad_file.startswith('src') else bad_file}.*{re.escape(repr(why))}"):
        package.run(package_cfg())
    assert not (source_project / "reports" / "package").exists()


def test_contents_check_refuses_secrets_and_build_machine_paths(source_project):
    (source_project / "src" / "soarlab" / "leak.py").write_text(f'TOKEN = "hf_{"a" * 34}"\nHOME = "{source_project}/models"\n')
    with pytest.raises(SoarError) as err:
        package.run(package_cfg())
    assert "leak.py (holds what looks like a key or token)" in str(err.value)
    assert f"leak.py (holds {source_project}, a path of the build machine)" in str(err.value)


def test_a_clean_submission_passes_the_contents_check(source_project):
    out = package.run(package_cfg())
    assert checks.content_problems(out / "submission.tar.gz", list(package_cfg().package.forbidden), [str(source_project)]) == []


@pytest.mark.parametrize("req", ["git+https://github.com/x/y", "pkg @ https://host/pkg.whl", "/tmp/pkg.whl", "./local"])
def test_pip_packages_must_come_from_the_index(source_project, req):
    with pytest.raises(SoarError, match="fetched from outside the package index"):
        package.run(package_cfg(pip_packages=["hydra-core==1.3.8", req]))


def fake_docker(tmp_path, monkeypatch, info_ok: bool) -> Path:
    """A `docker` that records its calls: `info` answers (or not), `image inspect` finds every image."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "docker").write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path}/docker-calls\n'
        f'if [ "$1" = info ]; then exit {0 if info_ok else 1}; fi\n'
        'if [ "$1" = image ] && [ "$3" = --format ]; then echo 123456; fi\n'
        f'if [ "$1" = build ]; then eval "ctx=\\${{$#}}"; ls "$ctx" > {tmp_path}/context; fi\n')
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path / "docker-calls"


def test_no_engine_auto_skips_and_true_fails(source_project, tmp_path, monkeypatch):
    fake_docker(tmp_path, monkeypatch, info_ok=False)
    out = package.run(package_cfg(build_image="auto", container_cli="docker"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["image_built"] is False and "engine.launcher is not container" in summary["image_status"]
    assert json.loads((out / "metrics.json").read_text())["image_built"] == 0
    with pytest.raises(SoarError, match="no container engine answers"):
        package.run(package_cfg(build_image=True, container_cli="docker"))


def test_docker_build_command(source_project, tmp_path, monkeypatch):
    """The Docker command line (no Docker daemon can run here): the CA bundle as a build secret, the
    wheel directory as a build context, never copied into the context."""
    calls_file = fake_docker(tmp_path, monkeypatch, info_ok=True)
    out = package.run(package_cfg(build_image=True, container_cli="docker"))
    calls = calls_file.read_text().splitlines()
    build = next(c for c in calls if c.startswith("build ")).split()
    assert build[:3] == ["build", "--network", "host"]
    assert any(a.startswith("id=ca_bundle,src=") for a in build) and any(a.startswith("wheels=") for a in build)
    assert build[build.index("-f") + 1].endswith("Dockerfile.cpu") and build[build.index("-t") + 1] == "soarlab-submission-cpu:latest"
    context = set((tmp_path / "context").read_text().split())
    assert {"Dockerfile", "Dockerfile.cpu", "submission.tar.gz", "container-entrypoint.sh"} <= context
    assert not any(name.endswith((".crt", ".pem", ".whl")) for name in context)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["image_built"] == 1 and metrics["image_bytes"] == 123456 and "start_to_healthy_s" not in metrics


def test_submission_flags_come_from_package_sglang_when_the_pipeline_runs_another_engine(source_project):
    cfg = package_cfg(engine="transformers")
    cfg.package.sglang.server_args["chunked-prefill-size"] = 4096
    args = json.loads((package.run(cfg) / "summary.json").read_text())["sglang_server_args"]
    assert "--chunked-prefill-size 4096" in args and "--quantization gptq_marlin" in args


def test_sglang_engine_config_is_used_when_engine_is_sglang(source_project):
    cfg = package_cfg(engine="sglang", quant={"name": "none", "serve_quantization": None})
    cfg.engine.server_args["chunked-prefill-size"] = 16384
    out = package.run(cfg)
    args = json.loads((out / "summary.json").read_text())["sglang_server_args"]
    assert "--chunked-prefill-size 16384" in args and "--quantization" not in args
