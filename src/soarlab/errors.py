"""The one error type users see: a problem and its fix, printed on one line; and that line for any error."""

import errno


class SoarError(Exception):
    """A user-facing failure. The CLI prints it as one line and exits non-zero."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"{problem}. Fix: {fix}")
        self.problem = problem
        self.fix = fix


_OS_ERROR_FIXES = {
    errno.ENOSPC: "free space on that file system (`df -h` shows how much is left), or write elsewhere",
    errno.EDQUOT: "free space within your disk quota, or write elsewhere",
    errno.EROFS: "the file system is mounted read-only: run from a writable checkout",
    errno.EACCES: "make it writable for you (`ls -ld` shows the owner and mode; `chmod u+w` on your files)",
    errno.EPERM: "make it writable for you (`ls -ld` shows the owner and mode; `chmod u+w` on your files)",
}


def os_error_line(exc: OSError) -> str:
    """An OS error as `<problem>. Fix: <fix>`, the file it hit named."""
    where = " ".join(f"'{name}'" for name in (exc.filename, exc.filename2) if name)
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
    return (f"unexpected {type(exc).__name__}: {first}. "
            "Fix: rerun with --debug (or SOARLAB_DEBUG=1) for the traceback, and report it"), 1
