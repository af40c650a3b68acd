"""The correctness set (RULES.md 3 format): its tasks, `read_correctness_set` (validated rows, a bad row
named by its line) and `fetch_correctness_set(dataset_cfg, dest)`, what the fetch-data stage writes.

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
from typing import Any

from soarlab.atomic import atomic_path
from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED
from soarlab.datasets.soar import file_sha256, read_jsonl
from soarlab.errors import SoarError
from soarlab.schema import CorrectnessSource

RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{file}"
# The task types whose gold the official scorer reads in a known way (soarlab.accuracy.grading scores them).
ANY_OF_TASKS = ("qa", "niah", "lcx")
COVERAGE_TASKS = ("cwe", "fwe")
KNOWN_TASKS = ("mcq", *ANY_OF_TASKS, *COVERAGE_TASKS)
MCQ_LETTERS = "ABCD"


def check_gold(task: Any, gold: Any) -> str | None:
    """What is wrong with a row's task/gold, or None when it is usable."""
    if not isinstance(task, str) or not task:
        return "task must be a non-empty string"
    if task == "mcq":
        if not isinstance(gold, str) or len(gold.strip()) != 1 or gold.strip().upper() not in MCQ_LETTERS:
            return f"mcq gold must be one letter A-D, got {gold!r}"
        return None
    if task in ANY_OF_TASKS or task in COVERAGE_TASKS:
        if not isinstance(gold, list) or not gold or not all(isinstance(g, str) and g for g in gold):
            return f"{task} gold must be a non-empty list of non-empty strings, got {gold!r}"
        return None
    if isinstance(gold, str) and gold:
        return None
    if isinstance(gold, list) and gold and all(isinstance(g, str) and g for g in gold):
        return None
    return f"gold of task {task!r} must be a non-empty string (or list of strings), got {gold!r}"


def read_correctness_set(path: str | Path) -> list[dict]:
    """Rows {"task", "question", "gold", "line"} of a SOAR correctness set; a bad row raises with its line."""
    rows = []
    for row in read_jsonl(path, ["task", "question", "gold"]):
        problem = check_gold(row["task"], row["gold"])
        if problem is None and not isinstance(row["question"], str):
            problem = "question must be a string"
        if problem:
            raise SoarError(f"{path} line {row['_line']}: {problem}", "fix that line of the correctness set (RULES.md 3 format)")
        rows.append({"task": row["task"], "question": row["question"], "gold": row["gold"], "line": row["_line"]})
    return rows


def _download(url: str, target: Path, timeout: float) -> None:
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


def _pinned_hashes(dataset_cfg: CorrectnessSource) -> dict:
    """{name: (function, expected)} for every hash the config pins; at least one, and a commit."""
    if not dataset_cfg.commit:
        raise SoarError(f"eval.dataset.commit is not set: no commit of {dataset_cfg.repo} is pinned",
                        "set eval.dataset.commit to the 40-hex commit whose file you evaluate on (conf/eval/soar.yaml)")
    pinned = {name: (digest, expected) for name, expected, digest in (
        ("git blob sha1", dataset_cfg.git_blob_sha1, git_blob_sha1), ("sha256", dataset_cfg.sha256, file_sha256)) if expected}
    if not pinned:
        raise SoarError("eval.dataset pins neither git_blob_sha1 nor sha256: the download cannot be verified",
                        "set eval.dataset.git_blob_sha1 (`git hash-object FILE`) or eval.dataset.sha256 (`sha256sum FILE`)")
    return pinned


def fetch_correctness_set(dataset_cfg: CorrectnessSource, dest: str | Path) -> Path:
    """Write the configured correctness set to `dest` (validated, atomically) and return `dest`."""
    dest = Path(dest)
    source = dataset_cfg.source
    with atomic_path(dest) as tmp:
        if source == "embedded":
            read_correctness_set(EMBEDDED)
            shutil.copyfile(EMBEDDED, tmp)
        elif source == "file":
            src = Path(dataset_cfg.path or "")
            if not dataset_cfg.path or not src.is_file():
                raise SoarError(f"correctness set {src} not found", "set eval.dataset.path to an existing SOAR-format JSONL file")
            read_correctness_set(src)  # a bad row fails here, naming its line
            shutil.copyfile(src, tmp)
        else:  # github (soarlab.schema allows no other source)
            url = RAW_URL.format(repo=dataset_cfg.repo, commit=dataset_cfg.commit, file=dataset_cfg.file)
            pinned = _pinned_hashes(dataset_cfg)
            _download(url, tmp, dataset_cfg.download_timeout_s)
            for name, (digest, expected) in pinned.items():
                got = digest(tmp)
                if got != expected:
                    raise SoarError(
                        f"{url} has {name} {got}, not the pinned {expected}",
                        "check that eval.dataset.commit and its hashes belong together; never score against an unverified set",
                    )
            read_correctness_set(tmp)
    return dest
