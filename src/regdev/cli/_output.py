"""Standard output as the commands write it: a failed write (a closed pipe, a full disk) is the
command's failure, in one line, never a traceback."""

from __future__ import annotations

import errno
import io
import logging
import os
import sys
from typing import TextIO

from ..core._text import display_text
from ._common import STDOUT_CLOSED


def output_failed(error: OSError, command: str | None) -> int:
    """Report a failed write to standard output in one line (none for a closed pipe); the
    exit status, 1: the output is incomplete, never a success."""
    drop_stdout()
    if not isinstance(error, BrokenPipeError):  # the reader went away (`| head`): silent
        name = "regdev" if command is None else f"regdev {command}"
        print(f"{name}: error: cannot write the output: {error.strerror or error}",
              file=sys.stderr)
    return 1


class Output(io.TextIOBase):
    """Standard output as the commands write it, keeping the OSError a write or flush raised
    (a closed pipe, a full disk), so that :func:`main` tells it from any other. With file
    descriptor 1 closed (`>&-`) Python has no ``sys.stdout`` at all (None): the first write
    fails with EBADF, as a write to a closed descriptor does."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__()
        self.stream = stream
        self.failure: OSError | None = None

    def _open(self) -> TextIO:
        if self.stream is None:
            self.failure = OSError(errno.EBADF, STDOUT_CLOSED)
            raise self.failure
        return self.stream

    def write(self, text: str, /) -> int:
        stream = self._open()
        try:
            return stream.write(text)
        except OSError as error:
            self.failure = error
            raise

    def flush(self) -> None:
        if self.stream is None:  # nothing was written, or the write failed already
            return
        try:
            self.stream.flush()
        except OSError as error:
            self.failure = error
            raise

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def fileno(self) -> int:
        return self._open().fileno()


def drop_stdout() -> None:
    """Point standard output at the null device, so that the interpreter's last flush of the
    text still buffered does not fail again (the recipe of the Python docs, "Note on
    SIGPIPE", https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    if sys.stdout is None:  # file descriptor 1 closed: no last flush to fail
        return
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file descriptor (a test's capture): nothing to do
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


class LogFormatter(logging.Formatter):
    """A log record as one line for a person: its message (which may quote a client's tool
    name, or a library's words about what a client sent) shown through
    :func:`~regdev.core._text.display_text`. A traceback or stack that goes with it follows on
    lines of its own, each escaped and indented by four spaces, so that no line of it can pass
    for a record."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = display_text(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        lines = [display_text(self.formatMessage(record))]
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for extra in (record.exc_text, record.stack_info and self.formatStack(record.stack_info)):
            if extra:
                lines.extend("    " + display_text(line) for line in extra.splitlines())
        return "\n".join(lines)
