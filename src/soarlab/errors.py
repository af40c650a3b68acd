"""The one error type users see: a problem and its fix, printed on one line."""


class SoarError(Exception):
    """A user-facing failure. The CLI prints it as one line and exits non-zero."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"{problem}. Fix: {fix}")
        self.problem = problem
        self.fix = fix
