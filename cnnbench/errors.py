"""Errors a user can fix: bad specs, missing files, impossible requests.

They carry one line of text naming what is wrong; the CLI prints it to stderr and exits with
code 2, without a traceback and without appending anything.
"""

from __future__ import annotations

import re

ERROR_LINE_LIMIT = 500  # characters of a row's error (the traceback stays in the worker's log)


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


def error_line(exc: BaseException | str) -> str:
    """A failure as one line for a row's ``error`` and the run's summary line: ``Type: message``.

    TensorFlow's graph errors carry the Python stack of the op that failed inside their message
    ("Detected at node X defined at (most recent call last):" and one ``File`` line per frame, sixty
    under Keras ``fit``); those frames are dropped, with the node name and the real cause kept, e.g.
    ``InvalidArgumentError: Graph execution error: Detected at node X: Received a label value of 12
    which is outside the valid range of [0, 10)``.
    """
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    kept, in_stack = [], False
    for line in text.splitlines():
        if "(most recent call last)" in line:
            head = line.split(" defined at (most recent call last)")[0].rstrip(":")
            kept.append(head + ":" if head != line.rstrip(":") else "")
            in_stack = True
            continue
        if in_stack and (not line.strip() or line[:1].isspace()):
            continue  # a frame of the stack, its code, or the blank lines between
        in_stack = False
        if line.strip().startswith("[[{{node"):  # TensorFlow's op annotation: the node is named above
            continue
        kept.append(line)
    one = re.sub(r"\s+", " ", " ".join(kept)).strip()
    return one if len(one) <= ERROR_LINE_LIMIT else one[:ERROR_LINE_LIMIT - 3] + "..."
