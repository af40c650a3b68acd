"""Write outputs so that a crash, Ctrl-C or full disk never leaves a half-written file looking valid.

Everything is written under a temporary name beside the target and renamed into place:
a rename within one directory is atomic on POSIX file systems. Temporary names carry the writing
process's id (`.<name>.<pid>-<random>.tmp`), so that what a killed run left behind is recognised
and removed by the next write to the same place (`remove_stale`), while another live run's
temporaries are left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?:(?P<pid>\d+)-)?[^.]*\.tmp$")


def is_temp_output(path: Path) -> bool:
    """A temporary of this module: `.<name>.<pid>-<random>.tmp`, or `.<name>.old` (a folder being replaced)."""
    return bool(_TEMP_NAME.match(path.name)) or (path.name.startswith(".") and path.name.endswith(".old"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temp_outputs(folder: Path, name: str | None = None) -> list[Path]:
    """Temporaries in `folder` (of target `name`, or of any) whose writer is no longer running."""
    found = []
    for path in sorted(Path(folder).glob(f".{name or '*'}.*")):
        match = _TEMP_NAME.match(path.name)
        if path.name.endswith(".old") and (name is None or path.name == f".{name}.old"):
            found.append(path)
        elif match and (name is None or match["name"] == name):
            pid = match["pid"]
            if pid is None or (int(pid) != os.getpid() and not _pid_alive(int(pid))):
                found.append(path)
    return found


def remove_stale(folder: Path, name: str | None = None) -> list[Path]:
    """Remove what `stale_temp_outputs` finds; returns what was removed."""
    removed = stale_temp_outputs(folder, name)
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return removed


def _umask() -> int:
    """The process umask, read without changing it (Linux /proc), else the common 022."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("Umask:"))
        return int(line.split()[1], 8)
    return 0o022


def _prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}-"


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary file path; on success it replaces `target`, on failure it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target.parent, target.name)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(target), suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~_umask())  # mkstemp makes it owner-only; a report is read like any file
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def scratch_dir(beside: str | Path, name: str) -> Iterator[Path]:
    """A temporary folder `.<name>.<pid>-<random>.tmp` in `beside`, removed afterwards, and by the
    next use if a killed run could not."""
    beside = Path(beside)
    beside.mkdir(parents=True, exist_ok=True)
    remove_stale(beside, name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.{os.getpid()}-", suffix=".tmp", dir=beside))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it owner-only; outputs are shared like any folder
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield an empty temporary directory; on success it replaces `target` as a whole."""
    target = Path(target)
    with scratch_dir(target.parent, target.name) as tmp:
        yield tmp
        replace_dir(tmp, target)


def replace_dir(src: Path, target: Path) -> None:
    """Rename the finished folder `src` into place as `target` (an old `target` is removed afterwards)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(src, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, target)


def write_text(target: str | Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def write_json(target: str | Path, obj: Any) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_jsonl(target: str | Path, rows: Iterable[dict]) -> None:
    write_text(target, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def project_temp_outputs(root: Path, paths) -> list[Path]:
    """Stale temporaries where the pipeline writes (`paths`: the config's paths section): the
    reports folder and its subfolders, the models' and the data's folders."""
    reports = Path(root) / paths.reports
    folders = {reports, Path(root) / paths.data, (Path(root) / paths.base_model).parent,
               (Path(root) / paths.quantized_model).parent}
    if reports.is_dir():
        folders |= {p for p in reports.iterdir() if p.is_dir() and not is_temp_output(p)}
    return sorted(p for folder in folders if folder.is_dir() for p in stale_temp_outputs(folder))
