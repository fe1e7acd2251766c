"""The failures of a ``skupper`` command, with their exit codes (no imports: every command may need them)."""

from __future__ import annotations

__all__ = ["CliError", "Invalid"]


class CliError(Exception):
    """A failure the user can act on: its message is printed on standard output; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Invalid(CliError):
    """Arguments or flags that cannot work (all problems found, one per line): exit code 2."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems), code=2)
