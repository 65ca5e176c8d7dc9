"""regdev's words for what libraries raise: the one place an exception becomes a message.

Rules of this file:

* Text a model reads (an observation's ``message``) or a person reads (a command's error
  line, a refusal, a file error) never quotes a library. Not msgspec (``Input data was
  truncated``, ``JSON is malformed: invalid character (byte 6)``), not Python's codecs
  (``'utf-8' codec can't encode character '\\udcff' in position 7: surrogates not
  allowed``), not pyserial (``device reports readiness to read but returned no data (device
  disconnected or multiple access on port?)``), not SQLite (``database or disk is full``).
  Each function below turns one family of exceptions into regdev's own words, saying what
  is wrong, where (a byte offset, a line), and what is allowed.
* A library message that is not in the tables gets a general sentence of regdev's (with the
  place the library named, when it named one), never the library's text, so a new version
  of a library cannot put its wording in front of a model.
* The operating system's reason for a failed system call (``strerror``: ``No such file or
  directory``, ``Input/output error``) is kept, without the errno number: it is the
  platform's standard text, the one a person searches for. Python's own phrasing around it
  (``[Errno 5]``, ``could not open port ...: ...``) is not.
* The library's exception stays in the chain (``raise ... from error``) for whoever debugs
  regdev; nothing here logs or raises.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3

import serial

from ._text import escape_text, unicode_problem  # here too: the wording of every library's errors

__all__ = [
    "serial_problem",
    "sqlite_problem",
    "toml_problem",
    "unicode_problem",
]

# --- TOML text -------------------------------------------------------------------------------

#: The start of tomllib's message -> regdev's words (the place is added after).
_TOML = [
    ("Expected '=' after a key", "expected `=` after a key"),
    ("Invalid value", "a value that is not TOML (a string needs quotes)"),
    ("Unclosed array", "an array is not closed"),
    ("Unclosed inline table", "an inline table is not closed"),
    ("Unterminated string", "a string is not closed"),
    ("Cannot overwrite a value", "a key is given a value twice"),
    ("Cannot declare", "a table is declared twice"),
    ("Expected newline or end of document", "more text after a value on the same line"),
    ("Invalid statement", "a line that is neither `key = value` nor a `[table]` header"),
    ("Invalid initial character for a key part", "an invalid key (a bare key holds letters, "
                                                  "digits, `_` and `-`; quote any other)"),
    ("Found invalid character in key name", "an invalid key (a bare key holds letters, "
                                             "digits, `_` and `-`; quote any other)"),
    ("Illegal character", "a control character TOML does not allow"),
]
_TOML_PLACE = re.compile(r"\((at line \d+, column \d+|at end of document)\)\s*\Z")


def toml_problem(error: ValueError) -> str:
    """Why text is not TOML, in regdev's words, with the place tomllib found.

    Args:
        error: a ``tomllib.TOMLDecodeError``.

    Returns:
        e.g. ``expected `=` after a key, at line 1, column 2``.
    """
    text = str(error)
    place = _TOML_PLACE.search(text)
    where = f", {place[1]}" if place else ""
    if text.startswith("Invalid value") and where.endswith("end of document"):
        return "the text ends where a value should be"
    words = next((words for start, words in _TOML if text.startswith(start)),
                 "not valid TOML")
    return words + where


# --- serial ports ----------------------------------------------------------------------------

#: pyserial's own messages (no OS error inside): the start of the text -> regdev's words.
_SERIAL = [
    ("device reports readiness to read but returned no data",
     "the port signalled data but gave none (the device was unplugged, or another program "
     "is using the port)"),
    ("Attempting to use a port that is not open", "the port is not open"),
    ("Port is already open", "the port is already open"),
    ("Port must be configured", "the port is not configured"),
    ("socket disconnected", "the other end closed the connection"),
    ("connection failed (reader thread died)", "the connection failed"),
    ("Remote does not accept parameter change", "the RFC 2217 server refused the port settings"),
    ("timeout while waiting for option",
     "the RFC 2217 server did not confirm the port settings in time"),
    ("Could not configure port", "the port's settings could not be applied"),
    ("Can only operate on", "the port is not open"),
    ("read failed", "reading from the port failed"),
    ("write failed", "writing to the port failed"),
    ("could not open port", "the port could not be opened"),
    ("Could not open port", "the port could not be opened"),
    ("expected a string in the form", "the URL is not of the form the port type takes"),
    ("invalid URL", "unknown URL scheme"),
    ("port not in range", "the URL's port is not in 0..65535"),
    ("unknown option", "the URL has an option the port type does not know"),
    ("Not a valid baudrate", "the port does not take this baud rate"),
    ("Invalid baud rate", "the port does not take this baud rate"),
    ("invalid baudrate", "the port does not take this baud rate"),
    ("Failed to set custom baud rate", "the port does not take this baud rate"),
    ("Not a valid byte size", "the port does not take this byte size"),
    ("Invalid char len", "the port does not take this byte size"),
    ("Not a valid parity", "the port does not take this parity"),
    ("Invalid parity", "the port does not take this parity"),
    ("Not a valid stop bit size", "the port does not take this number of stop bits"),
    ("Invalid stop bit specification", "the port does not take this number of stop bits"),
    ("Not a valid timeout", "the port does not take this timeout"),
]


def serial_problem(error: BaseException) -> str:
    """What went wrong with a serial port, in the fewest words of regdev's (or the OS's).

    pyserial wraps the OS's error, sometimes twice (``read failed: [Errno 5] Input/output
    error``): the innermost OS reason is used when there is one; else pyserial's message is
    said in regdev's words (:data:`_SERIAL`), and one regdev does not know is said as a
    failure of the port.

    Args:
        error: a ``serial.SerialException``, an ``OSError``, or the ``ValueError``,
            ``OverflowError`` or ``NotImplementedError`` pyserial raises for a setting.
    """
    if isinstance(error, serial.SerialTimeoutException):
        return "writing timed out (is the line blocked by flow control?)"
    if isinstance(error, TimeoutError) and not error.strerror:  # a socket's, "timed out"
        return "no answer in time"
    if "exclusively lock" in str(error):
        return "it is in use (could not lock it exclusively)"
    outer = error
    while (inner := error.__cause__ or error.__context__) is not None:
        error = inner
    # The OS's (errno, text): an OSError's, or termios.error's, whose args are that pair; a
    # SerialException made as (errno, pyserial's text) gets the OS's text for its errno.
    code, text = error.args if len(error.args) == 2 else (None, None)
    text = text if isinstance(code, int) and isinstance(text, str) else None
    if text is not None and isinstance(error, serial.SerialException):
        text = os.strerror(code) if isinstance(code, int) else None
    if code == errno.ENOTTY and text:  # a file, not a terminal: the port settings cannot be applied
        return f"not a serial port ({text})"
    if text:
        return text
    for said in (str(error), str(outer)):
        for start, words in _SERIAL:
            if said.startswith(start):
                return words
    if isinstance(error, OverflowError):
        return "a port setting is too large for the operating system"
    if isinstance(error, NotImplementedError):
        return "the port type does not support a setting asked for"
    if isinstance(error, ValueError):
        return "the port does not take the settings asked for"
    return "the port failed"


# --- the audit database -----------------------------------------------------------------------

#: SQLite's primary result codes (``sqlite3.Error.sqlite_errorcode & 0xFF``) -> regdev's words.
_SQLITE = {
    3: "permission denied",  # SQLITE_PERM
    5: "another program is writing it (the database is locked)",  # SQLITE_BUSY
    6: "another connection is writing it (a table is locked)",  # SQLITE_LOCKED
    7: "out of memory",  # SQLITE_NOMEM
    8: "the file is read-only",  # SQLITE_READONLY
    10: "reading or writing the file failed (a disk I/O error)",  # SQLITE_IOERR
    11: "the file is damaged (not a valid SQLite database)",  # SQLITE_CORRUPT
    13: "the disk is full",  # SQLITE_FULL
    14: "the file cannot be opened",  # SQLITE_CANTOPEN
    15: "the file's lock could not be taken",  # SQLITE_PROTOCOL
    18: "a value is too big for the database",  # SQLITE_TOOBIG
    19: "a record breaks the database's rules",  # SQLITE_CONSTRAINT
    20: "a value is of the wrong type for the database",  # SQLITE_MISMATCH
    23: "access is not authorized",  # SQLITE_AUTH
    26: "the file is not an SQLite database",  # SQLITE_NOTADB
}


def postgres_problem(error: BaseException) -> str:
    """What went wrong with a PostgreSQL store, in one line: the server's primary message
    (or libpq's, for a connection that failed), its whitespace folded, escaped, at most 300
    characters.

    Args:
        error: what psycopg raised.
    """
    diag = getattr(error, "diag", None)
    text = getattr(diag, "message_primary", None) or str(error)
    text = " ".join(text.split()) or f"the database failed ({type(error).__name__})"
    return escape_text(text, 300)


def sqlite_problem(error: BaseException) -> str:
    """What went wrong with the audit database, in regdev's words (by SQLite's result code,
    never SQLite's text).

    Args:
        error: what ``sqlite3`` raised (or a value SQLite could not bind: an
            ``OverflowError``, a ``TypeError``).
    """
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _SQLITE:
        return _SQLITE[code & 0xFF]
    if isinstance(error, OverflowError):
        return "a number is too large for the database (SQLite holds 64-bit integers)"
    if isinstance(error, sqlite3.InterfaceError | TypeError):
        return "a value the database cannot store"
    if isinstance(error, sqlite3.ProgrammingError):
        return "the database connection was used after it was closed"
    return f"the database failed ({type(error).__name__})"
