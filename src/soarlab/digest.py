"""Content digests of files and folders, remembered per file by identity and modification time (as DVC's
own state is), so that digesting an unchanged 18 GB model folder again costs a `stat` per file."""

from __future__ import annotations

import hashlib
from pathlib import Path

from soarlab.atomic import write_text
from soarlab.datasets.soar import file_sha256
from soarlab.paths import cache_dir

# Never part of a model's or a data set's content: what hub.copy_local leaves out too.
_SKIPPED_FOLDERS = {".git", ".cache", "__pycache__"}


def cached_file_sha256(path: Path) -> str:
    """file_sha256, looked up first under the file's identity (path, device, inode, size, mtime)."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    record = cache_dir() / "digests" / key
    try:
        return record.read_text().strip()
    except OSError:
        digest = file_sha256(path)
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            write_text(record, digest)
        except OSError:  # a read-only home: digest again next time, never fail for a cache
            pass
        return digest


def content_digest(path: Path) -> str | None:
    """sha256 of a file's bytes; of a folder, over its files' relative paths and digests (sorted); None when
    nothing is there."""
    if path.is_file():
        return cached_file_sha256(path)
    if not path.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and not _SKIPPED_FOLDERS & set(p.relative_to(path).parts)):
        digest.update(f"{file.relative_to(path).as_posix()}\0{cached_file_sha256(file)}\n".encode())
    return digest.hexdigest()
