"""The correctness set the accuracy stage runs on: `fetch_correctness_set(dataset_cfg, dest)`.

Sources (`eval.dataset.source`):
  embedded  the offline default set shipped with soarlab (datasets/embedded/correctness.jsonl);
  github    perf_public_set.jsonl of the SOAR toolkit repository, from raw.githubusercontent.com at a
            pinned commit, checked against a pinned sha256;
  file      a SOAR-format JSONL file of the user's.
Whatever the source, the result is validated (RULES.md 3 format, line-numbered errors) before it
is written, atomically, to `dest`.
"""

from __future__ import annotations

import re
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
            src = Path(dataset_cfg.get("path") or "")
            if not dataset_cfg.get("path") or not src.is_file():
                raise SoarError(f"correctness set {src} not found", "set eval.dataset.path to an existing SOAR-format JSONL file")
            read_correctness_set(src)  # a bad row fails here, naming its line
            shutil.copyfile(src, tmp)
        elif source == "github":
            commit, sha = dataset_cfg.get("commit"), dataset_cfg.get("sha256")
            if not commit or not re.fullmatch(r"[0-9a-f]{40}", str(commit)):
                raise SoarError(
                    f"eval.dataset.commit is {commit!r}, a placeholder: no commit of {dataset_cfg['repo']} is pinned",
                    "fill in the 40-hex commit of the SOAR toolkit whose perf_public_set.jsonl you want "
                    "(conf/eval/soar.yaml, or eval.dataset.commit=...), and its sha256",
                )
            if not sha or not re.fullmatch(r"[0-9a-f]{64}", str(sha)):
                raise SoarError(
                    f"eval.dataset.sha256 is {sha!r}, a placeholder: the download cannot be verified",
                    "fill in the sha256 of perf_public_set.jsonl at that commit (sha256sum), in conf/eval/soar.yaml or eval.dataset.sha256=...",
                )
            url = RAW_URL.format(repo=dataset_cfg["repo"], commit=commit, file=dataset_cfg["file"])
            _download(url, tmp)
            got = file_sha256(tmp)
            if got != sha:
                raise SoarError(
                    f"{url} has sha256 {got}, not the pinned {sha}",
                    "check eval.dataset.commit and eval.dataset.sha256 belong together; never score against an unverified set",
                )
            read_correctness_set(tmp)
        else:
            raise SoarError(f"unknown eval.dataset.source {source!r}", "use embedded, github or file")
    return dest
