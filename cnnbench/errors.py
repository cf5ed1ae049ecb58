"""Errors a user can fix: bad specs, missing files, impossible requests.

They carry one line of text naming what is wrong; the CLI prints it to stderr and exits with
code 2, without a traceback and without appending anything.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input: the message is one line that names the file/field and what was expected."""

    exit_code = 2


class SpecError(UserError):
    """A spec file that cannot be read or does not validate."""

    def __init__(self, source: str, field: str | None, message: str) -> None:
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")
        self.source = source
        self.field = field


class DataError(UserError):
    """A dataset that is missing or malformed on disk."""


class ResultsFileError(UserError):
    """A results CSV that cannot be appended to (foreign header, unreadable)."""
