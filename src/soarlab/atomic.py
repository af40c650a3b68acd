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


def share_as_umask_allows(path: Path) -> None:
    """Give group and others what the owner has of `path` (and of everything under it), as far as the
    umask allows: the modes a plain open() or mkdir() would have made. Temporaries (mkstemp, mkdtemp)
    are owner-only, and so are files some libraries write through their own temporaries (safetensors
    0.8 writes model.safetensors 0600); renamed into place as they are, outputs would be private."""
    allowed = 0o077 & ~_umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if item.is_symlink():
            continue
        mode = item.stat().st_mode & 0o7777
        owner = (mode & 0o700) >> 6
        wanted = mode | ((owner << 3 | owner) & allowed)
        if wanted != mode:
            with contextlib.suppress(OSError):  # not ours (a hard link to a shared file): left as it is
                item.chmod(wanted)


@contextlib.contextmanager
def _naming(target: Path) -> Iterator[None]:
    """An OS error that names no file (a library writing through a file object: a full disk mid-write)
    names the output being written, so that its line says which disk filled."""
    try:
        yield
    except OSError as exc:
        if not exc.filename:
            exc.filename = str(target)
        raise


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary file path; on success it replaces `target`, on failure it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target.parent, target.name)
    fd, tmp = tempfile.mkstemp(prefix=_prefix(target), suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        with _naming(target):
            yield tmp_path
        share_as_umask_allows(tmp_path)
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
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield an empty temporary directory; on success it replaces `target` as a whole."""
    target = Path(target)
    with scratch_dir(target.parent, target.name) as tmp:
        with _naming(target):
            yield tmp
        share_as_umask_allows(tmp)
        replace_dir(tmp, target)


def copy_tree(src: Path, dest: Path, **copytree_kwargs) -> None:
    """shutil.copytree that stops at the first file it cannot copy and raises that file's OSError.
    shutil.copytree goes on through every remaining file and raises one shutil.Error listing them
    all: on a full disk, thousands of entries and no errno."""
    class Failed(Exception):
        pass

    def copy(s: str, d: str) -> None:
        try:
            shutil.copy2(s, d)
        except OSError as exc:
            if not exc.filename2:  # a failed write names neither file: name what was written
                exc.filename, exc.filename2 = s, d
            raise Failed(exc) from None  # not an OSError, which copytree would collect and go on

    try:
        shutil.copytree(src, dest, copy_function=copy, **copytree_kwargs)
    except Failed as failed:
        raise failed.args[0] from None


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
    folders = {reports, Path(root) / paths.data,
               *((Path(root) / model).parent for model in (paths.base_model, paths.quantized_model, paths.draft_model))}
    if reports.is_dir():
        folders |= {p for p in reports.iterdir() if p.is_dir() and not is_temp_output(p)}
    return sorted(p for folder in folders if folder.is_dir() for p in stale_temp_outputs(folder))
