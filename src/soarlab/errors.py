"""The one error type users see: a problem and its fix, printed on one line; and that line for any error."""

import errno
import os
from pathlib import Path

from soarlab.names.environment import DEBUG_ENV


class SoarError(Exception):
    """A user-facing failure. The CLI prints it as one line and exits non-zero."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"{problem}. Fix: {fix}")
        self.problem = problem
        self.fix = fix


_OS_ERROR_FIXES = {
    errno.ENOSPC: "free space there (`df -h`), or write elsewhere",
    errno.EDQUOT: "free space within your disk quota there, or write elsewhere",
    errno.EROFS: "the file system is mounted read-only: run from a writable checkout",
    errno.EACCES: "make it writable for you (`ls -ld` shows the owner and mode; `chmod u+w` on your files)",
    errno.EPERM: "make it writable for you (`ls -ld` shows the owner and mode; `chmod u+w` on your files)",
}
_FULL = (errno.ENOSPC, errno.EDQUOT)
_PATH_CHARS = 48  # each path named in a line, so that the line stays readable (about 200 characters)
_LINE_CHARS = 100  # of an unexpected error's first line: with its fix, about 200


def short_path(path) -> str:
    """`path` as a line names it: relative to the working folder when inside it, else cut in the middle."""
    text = os.fsdecode(path)
    if os.path.isabs(text) and text.startswith(os.getcwd() + os.sep):
        text = os.path.relpath(text)
    return text if len(text) <= _PATH_CHARS else f"{text[:25]}...{text[-(_PATH_CHARS - 28):]}"


def shorten(text: str, chars: int, rest_in: str) -> str:
    """`text` cut to about `chars` characters, saying where the rest is: a printed line stays readable."""
    return text if len(text) <= chars else f"{text[:chars].rstrip()}... (all of it in {rest_in})"


def mount_point(path) -> Path:
    """The mount point of the file system `path` is (or would be) on: its nearest existing folder's."""
    folder = Path(os.path.abspath(os.fsdecode(path)))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    while not os.path.ismount(folder):
        folder = folder.parent
    return folder


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _full_disk(written) -> str:
    """'on <mount> (<free> free of <size>), writing <file in it>': which disk filled."""
    mount = mount_point(written)
    inside = written if Path(mount) == Path("/") else os.path.relpath(written, mount)
    try:
        st = os.statvfs(mount)
        space = f" ({_size(st.f_bavail * st.f_frsize)} free of {_size(st.f_blocks * st.f_frsize)})"
    except OSError:
        space = ""
    return f"on {short_path(mount)}{space}, writing '{short_path(inside)}'"


def os_error_line(exc: OSError) -> str:
    """An OS error as `<problem>. Fix: <fix>`, the file it hit named; for a full disk, which disk."""
    names = [name for name in (exc.filename, exc.filename2) if name]
    if exc.errno in _FULL and names:
        problem = f"{exc.strerror or exc} {_full_disk(names[-1])}"  # a copy's destination
    else:
        where = " ".join(f"'{short_path(name)}'" for name in names)
        problem = f"{exc.strerror or exc}" + (f": {where}" if where else "")
    fix = _OS_ERROR_FIXES.get(exc.errno, "check that path and the machine's resources, or rerun with --debug")
    return f"{problem}. Fix: {fix}"


def error_line(exc: Exception) -> tuple[str, int]:
    """(`<problem>. Fix: <fix>`, exit code) for any error."""
    if isinstance(exc, SoarError):
        return str(exc), 2
    if isinstance(exc, OSError):
        return os_error_line(exc), 1
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(first) > _LINE_CHARS:  # e.g. shutil.Error: one entry per file that failed
        first = first[:_LINE_CHARS] + "..."
    return (f"unexpected {type(exc).__name__}: {first}. "
            f"Fix: rerun with --debug (or {DEBUG_ENV}=1) for the traceback, and report it"), 1
