"""The correctness set the accuracy stage runs on: `fetch_correctness_set(dataset_cfg, dest)`.

Sources (`eval.dataset.source`):
  embedded  the offline default set shipped with soarlab (datasets/embedded/correctness.jsonl);
  github    perf_public_set.jsonl of the SOAR toolkit repository, from raw.githubusercontent.com at a
            pinned commit, checked against every pinned hash: its git blob sha1 (what GitHub lists and
            `git hash-object` prints; no sha256 is published) and/or its sha256;
  file      a SOAR-format JSONL file of the user's.
Whatever the source, the result is validated (RULES.md 3 format, line-numbered errors) before it
is written, atomically, to `dest`.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Mapping

from soarlab.atomic import atomic_path
from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED
from soarlab.datasets.soar import file_sha256
from soarlab.errors import SoarError

RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{file}"


def _download(url: str, target: Path, timeout: float = 120.0) -> None:
    import requests

    try:
        with requests.get(url, stream=True, timeout=timeout) as resp:
            resp.raise_for_status()
            with target.open("wb") as fh:
                for chunk in resp.iter_content(1 << 20):
                    fh.write(chunk)
    except requests.RequestException as exc:
        raise SoarError(f"cannot download {url} ({exc})", "check the network, or use eval.dataset.source=file with a local copy") from None


def git_blob_sha1(path: str | Path) -> str:
    """What `git hash-object FILE` prints (and GitHub lists): sha1 of "blob <size>\\0" + the bytes."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _pinned_hashes(dataset_cfg: Mapping) -> dict:
    """{name: (function, expected)} for every hash the config pins; at least one, and a commit."""
    if not dataset_cfg["commit"]:
        raise SoarError(f"eval.dataset.commit is not set: no commit of {dataset_cfg['repo']} is pinned",
                        "set eval.dataset.commit to the 40-hex commit whose file you evaluate on (conf/eval/soar.yaml)")
    pinned = {name: (digest, dataset_cfg[key]) for name, key, digest in (
        ("git blob sha1", "git_blob_sha1", git_blob_sha1), ("sha256", "sha256", file_sha256)) if dataset_cfg[key]}
    if not pinned:
        raise SoarError("eval.dataset pins neither git_blob_sha1 nor sha256: the download cannot be verified",
                        "set eval.dataset.git_blob_sha1 (`git hash-object FILE`) or eval.dataset.sha256 (`sha256sum FILE`)")
    return pinned


def fetch_correctness_set(dataset_cfg: Mapping, dest: str | Path) -> Path:
    """Write the configured correctness set to `dest` (validated, atomically) and return `dest`."""
    from soarlab.accuracy.scoring import read_correctness_set

    dest = Path(dest)
    source = dataset_cfg["source"]
    with atomic_path(dest) as tmp:
        if source == "embedded":
            read_correctness_set(EMBEDDED)
            shutil.copyfile(EMBEDDED, tmp)
        elif source == "file":
            src = Path(dataset_cfg["path"] or "")
            if not dataset_cfg["path"] or not src.is_file():
                raise SoarError(f"correctness set {src} not found", "set eval.dataset.path to an existing SOAR-format JSONL file")
            read_correctness_set(src)  # a bad row fails here, naming its line
            shutil.copyfile(src, tmp)
        elif source == "github":
            url = RAW_URL.format(repo=dataset_cfg["repo"], commit=dataset_cfg["commit"], file=dataset_cfg["file"])
            pinned = _pinned_hashes(dataset_cfg)
            _download(url, tmp)
            for name, (digest, expected) in pinned.items():
                got = digest(tmp)
                if got != expected:
                    raise SoarError(
                        f"{url} has {name} {got}, not the pinned {expected}",
                        "check that eval.dataset.commit and its hashes belong together; never score against an unverified set",
                    )
            read_correctness_set(tmp)
        else:
            raise SoarError(f"unknown eval.dataset.source {source!r}", "use embedded, github or file")
    return dest
