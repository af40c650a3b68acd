"""Download the real model at a pinned revision: Hugging Face, ModelScope, or a local copy.

Downloads go into a staging folder beside the target (`.base.download/`), which a rerun
resumes; only a complete, validated download is renamed into place, so `models/base` is never
half-written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from soarlab.atomic import copy_tree, replace_dir
from soarlab.errors import SoarError

SOURCES = ("huggingface", "modelscope", "local")


def read_model_config(model_dir: str | Path) -> dict:
    """config.json of a model folder, which must be one JSON object."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise SoarError(
            f"model directory {model_dir} has no config.json",
            "point it at a complete checkpoint (config.json, tokenizer, *.safetensors), or rerun "
            "`soarlab stage fetch-model` to finish the download",
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise SoarError(f"{path} is not valid JSON ({str(exc).splitlines()[0]})", _REFETCH) from None
    if not isinstance(config, dict):
        raise SoarError(f"{path} holds a JSON {type(config).__name__}, not an object", _REFETCH)
    return config


_REFETCH = "restore the checkpoint's files from their source (rerun `soarlab stage fetch-model`, or copy them again)"


def validate_model_dir(path: str | Path) -> Path:
    """A model folder holds a readable config.json and complete *.safetensors files (headers and
    sizes checked; the tensors are not read)."""
    from safetensors import safe_open

    path = Path(path)
    read_model_config(path)
    for weights in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except Exception as exc:  # noqa: BLE001 - SafetensorError and OSError: a file that cannot be served
            size = weights.stat().st_size
            raise SoarError(f"{weights} ({size} bytes) is not a complete safetensors file "
                            f"({str(exc).splitlines()[0][:200]})", _REFETCH) from None
    return path


def _network_fix(target: Path) -> str:
    return (
        "check the network; behind a mirror set HF_ENDPOINT (e.g. HF_ENDPOINT=https://hf-mirror.com); "
        "or download from ModelScope with model.source=modelscope; or copy a downloaded model in with "
        f"model.source=local model.local_path=/path/to/MiniCPM-SALA (it becomes {target}); "
        "a rerun resumes a partial download"
    )


def download_huggingface(repo_id: str, revision: str, local_dir: Path, target: Path) -> Path:
    """snapshot_download into `local_dir` (resumable, with progress bars)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from huggingface_hub import constants

    endpoint = constants.ENDPOINT  # HF_ENDPOINT, read by huggingface_hub
    network_errors: tuple[type[BaseException], ...] = (HfHubHTTPError, LocalEntryNotFoundError, OSError, TimeoutError)
    for http_lib in ("httpx2", "httpx", "requests"):  # whichever HTTP client this huggingface_hub uses
        try:
            module = __import__(http_lib)
        except ImportError:
            continue
        base = getattr(module, "HTTPError", None) or getattr(getattr(module, "exceptions", None), "RequestException", None)
        if isinstance(base, type) and issubclass(base, BaseException):
            network_errors += (base,)
    try:
        path = snapshot_download(repo_id=repo_id, revision=revision, local_dir=str(local_dir))
    except GatedRepoError:
        raise SoarError(f"{repo_id} on {endpoint} is gated", "accept its license on the hub and log in (`hf auth login`)") from None
    except RevisionNotFoundError:
        raise SoarError(f"revision {revision!r} not found in {repo_id} on {endpoint}", "fix model.revision (a commit sha or branch)") from None
    except RepositoryNotFoundError:
        raise SoarError(f"repository {repo_id} not found on {endpoint}", "fix model.repo_id, or log in (`hf auth login`) if it is private") from None
    except network_errors as exc:
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise SoarError(f"cannot download {repo_id}@{revision} from {endpoint} ({detail})", _network_fix(target)) from None
    return Path(path)


def download_modelscope(model_id: str, revision: str | None, local_dir: Path, target: Path) -> Path:
    try:
        from modelscope import snapshot_download
    except ImportError:
        raise SoarError(
            "model.source=modelscope needs the modelscope package, which is not installed",
            "pip install 'soarlab[modelscope]'",
        ) from None
    try:
        kwargs = {"revision": revision} if revision else {}
        path = snapshot_download(model_id, local_dir=str(local_dir), **kwargs)
    except (OSError, TimeoutError, ValueError, RuntimeError) as exc:  # modelscope wraps requests errors variously
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise SoarError(f"cannot download {model_id} from ModelScope ({detail})", _network_fix(target)) from None
    return Path(path)


def copy_local(source: Path, local_dir: Path) -> Path:
    source = Path(source).expanduser().resolve()
    validate_model_dir(source)
    copy_tree(source, local_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".cache", ".git"))
    return local_dir


def fetch_model(model_cfg, target: str | Path) -> Path:
    """Download/copy the model named by the `model` config section into `target`; returns it."""
    target = Path(target)
    source = model_cfg.source
    staging = target.with_name(f".{target.name}.download")
    staging.mkdir(parents=True, exist_ok=True)
    if source == "huggingface":
        download_huggingface(str(model_cfg.repo_id), str(model_cfg.revision), staging, target)
    elif source == "modelscope":
        download_modelscope(str(model_cfg.modelscope_id), model_cfg.modelscope_revision, staging, target)
    elif source == "local":
        local_path = model_cfg.local_path
        if not local_path:
            raise SoarError("model.source=local needs model.local_path", "add model.local_path=/path/to/model")
        copy_local(Path(local_path), staging)
    else:
        raise SoarError(f"unknown model.source {source!r}", f"use one of embedded, {', '.join(SOURCES)}")
    validate_model_dir(staging)
    # the hub's resume metadata stays out of the model folder
    shutil.rmtree(staging / ".cache", ignore_errors=True)
    replace_dir(staging, target)
    return target
