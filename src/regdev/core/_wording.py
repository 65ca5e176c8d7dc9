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
import sys
from decimal import DecimalException
from typing import cast

import msgspec
import serial

from ._text import unicode_problem  # here too: the wording of every library's errors

__all__ = [
    "MAX_INT_DIGITS",
    "json_fault",
    "json_problem",
    "serial_problem",
    "sqlite_problem",
    "toml_problem",
    "unicode_problem",
]

#: The most digits msgspec decodes in one JSON integer (measured on msgspec 0.23: it caps them
#: at 4300, CPython's default ``sys.get_int_max_str_digits()``, whatever that is set to above
#: it; a lower setting applies).
MAX_INT_DIGITS = 4300


# --- JSON text -------------------------------------------------------------------------------

#: msgspec's "JSON is malformed: <what> (byte N)": regdev's words for each <what>. The place
#: (", at byte N") is added after.
_MALFORMED = {
    "trailing characters": "more text after the end of the JSON document",
    "expected ':'": "expected `:` after an object key",
    "expected ',' or ']'": "expected `,` or `]` after an array item",
    "expected ',' or '}'": "expected `,` or `}` after an object member",
    "expected '\"'": "expected an object key (a string in double quotes)",
    "object keys must be strings": "an object key must be a string in double quotes",
    "trailing comma in object": "a comma with no member after it before `}`",
    "trailing comma in array": "a comma with no item after it before `]`",
    "invalid escape character in string": (
        "an invalid escape in a string (JSON's escapes are \\\" \\\\ \\/ \\b \\f \\n \\r "
        "\\t and \\uXXXX)"),
    "invalid escaped character": (
        "an invalid escape in a string (JSON's escapes are \\\" \\\\ \\/ \\b \\f \\n \\r "
        "\\t and \\uXXXX)"),
    "invalid character in unicode escape": "a \\u escape needs four hexadecimal digits",
    "invalid utf-16 surrogate pair": (
        "a \\u escape of a high surrogate must be followed by one of a low surrogate"),
    "unexpected end of escaped utf-16 surrogate pair": "the text ends inside a \\u escape",
    "unexpected end of hex escape": "the text ends inside a \\u escape",
    "invalid number": ("an invalid number (JSON numbers have no leading zeros, no `+`, and "
                       "digits after `.` and after `e`)"),
}
_MALFORMED_TEXT = re.compile(r"JSON is malformed: (.*) \(byte (\d+)\)\Z", re.S)
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
#: One escape in JSON text: ``\\uXXXX`` (the code unit in group 1) or a backslash and a character.
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)
_TRUNCATED = "Input data was truncated"


def _as_bytes(data: bytes | str) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")


def _lone_surrogate(text: str) -> str | None:
    """The first ``\\uXXXX`` escape in ``text`` that is half of a UTF-16 surrogate pair
    without its other half (RFC 8259 section 7), or None."""
    high: re.Match[str] | None = None  # a high surrogate waiting for its low half
    for escape in _ESCAPE.finditer(text):
        unit = int(escape[1], 16) if escape[1] else -1
        is_low = 0xDC00 <= unit <= 0xDFFF
        if high is not None:
            if not (is_low and escape.start() == high.end()):
                return high[0]
            high = None
        elif is_low:
            return escape[0]
        elif 0xD800 <= unit <= 0xDBFF:
            high = escape
    return high[0] if high is not None else None


def _character_at(raw: bytes, at: int) -> str:
    """What starts at byte ``at`` of ``raw``, in words for a message."""
    piece = raw[at : at + 4].decode("utf-8", "replace")[:1]
    if not piece:
        return "the end of the text"
    code = ord(piece)
    if 0x21 <= code <= 0x7E:
        return f"`{piece}`"
    if code == 0xFFFD and not raw.startswith(b"\xef\xbf\xbd", at):  # no UTF-8 character
        return f"byte 0x{raw[at]:02X}"
    return f"U+{code:04X}"


#: A value that is NaN or an infinity in other languages' JSON (any case, an optional sign).
_NOT_A_NUMBER = re.compile(rb"-?(nan|inf(inity)?)", re.IGNORECASE)


def _invalid_character(raw: bytes, at: int) -> str:
    """What is wrong with the byte at ``at`` (one no JSON document can have there), in words."""
    rest = raw[at:]
    if rest.startswith(b"\xef\xbb\xbf") and not raw[:at].strip(b" \t\n\r"):
        return "a byte-order mark (U+FEFF) before the JSON is not allowed"
    if rest[:1] and rest[0] < 0x20:
        return (f"a raw control character (U+{rest[0]:04X}) at byte {at}: inside a string "
                f"it must be escaped (\\u{rest[0]:04x})")
    if rest.startswith(b"'"):
        return f"a single quote at byte {at}: JSON strings and keys take double quotes"
    shown = _character_at(raw, at)
    if shown.startswith("byte 0x"):  # not a UTF-8 character there
        return f"invalid UTF-8: byte {at} is 0x{raw[at]:02X}"
    return f"unexpected {shown} at byte {at}"


# --- where a JSON text goes wrong ------------------------------------------------------------

_WS = frozenset(b" \t\n\r")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = frozenset(b'"\\/bfnrtu')
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
#: The states of a number, by what it has read: "-", "0", "1" (digits after a nonzero),
#: "." (a point), ".1" (fraction digits), "e", "e+" (a sign after e), "e1" (exponent digits).
_NUMBER_ENDS = frozenset({"0", "1", ".1", "e1"})


def _number_step(state: str, byte: int) -> str | None:
    """The state of a number after ``byte``, or None when ``byte`` does not continue it."""
    digit = byte in _DIGITS
    if state == "-":
        return "0" if byte == 0x30 else "1" if digit else None
    if state in ("0", "1"):
        if state == "1" and digit:
            return "1"
        return "." if byte == 0x2E else "e" if byte in b"eE" else None
    if state in (".", ".1"):
        if digit:
            return ".1"
        return "e" if state == ".1" and byte in b"eE" else None
    if state == "e":
        return "e+" if byte in b"+-" else "e1" if digit else None
    return "e1" if digit else None  # "e+" and "e1"


def json_fault(raw: bytes) -> tuple[int, int]:
    """Where ``raw`` stops being the start of one JSON document (RFC 8259; no byte-order mark).

    Returns:
        ``(at, start)``: ``at`` is the offset (UTF-8 bytes from 0) of the first byte that no
        JSON document continuing ``raw[:at]`` can have there (``len(raw)`` when all of
        ``raw`` could begin a document but it ends too early; -1 when ``raw`` is one whole
        document); ``start`` is the offset where the token holding that byte begins (a
        literal, number, string or escape; ``at`` itself when the byte starts nothing).
        A byte that is not UTF-8 inside a string is not looked at (decoding finds it).
    """
    stack: list[int] = []  # the open containers: ord("[") or ord("{")
    expect = "value"  # value, first-value (after "["), key, first-key (after "{"), colon,
    # after (a value ended), end (the document ended)
    at, size = 0, len(raw)
    while at < size:
        byte = raw[at]
        if byte in _WS:
            at += 1
            continue
        if expect in ("value", "first-value"):
            start = at
            if byte in (0x5B, 0x7B):  # [ {
                stack.append(byte)
                expect = "first-value" if byte == 0x5B else "first-key"
                at += 1
                continue
            if byte == 0x5D and expect == "first-value":  # ]: an empty array
                stack.pop()
            elif byte == 0x22:  # "
                at = _string_end(raw, at)
                if at < 0:
                    return size if at == -1 else ~at, start
            elif byte in _LITERALS:
                word = _LITERALS[byte]
                for offset in range(1, len(word)):
                    if at + offset >= size:
                        return size, start
                    if raw[at + offset] != word[offset]:
                        return at + offset, start
                at += len(word) - 1
            elif byte == 0x2D or byte in _DIGITS:  # - or a digit
                state: str | None = "-" if byte == 0x2D else "0" if byte == 0x30 else "1"
                while at + 1 < size:
                    step = _number_step(cast(str, state), raw[at + 1])
                    if step is None:
                        break
                    state, at = step, at + 1
                if at + 1 >= size and state not in _NUMBER_ENDS:
                    return size, start
                if state not in _NUMBER_ENDS:
                    return at + 1, start
            else:
                return at, at
            at += 1
            expect = "after" if stack else "end"
            continue
        if expect in ("key", "first-key"):
            if byte == 0x7D and expect == "first-key":  # }: an empty object
                stack.pop()
                at += 1
                expect = "after" if stack else "end"
                continue
            if byte != 0x22:
                return at, at
            start, at = at, _string_end(raw, at)
            if at < 0:
                return size if at == -1 else ~at, start
            at += 1
            expect = "colon"
            continue
        if expect == "colon":
            if byte != 0x3A:
                return at, at
            expect = "value"
        elif expect == "after":
            close = 0x5D if stack[-1] == 0x5B else 0x7D
            if byte == 0x2C:  # ,
                expect = "value" if close == 0x5D else "key"
            elif byte == close:
                stack.pop()
                expect = "after" if stack else "end"
            else:
                return at, at
        else:  # the document ended: only whitespace may follow
            return at, at
        at += 1
    return (-1, -1) if expect == "end" else (size, size)


def _string_end(raw: bytes, at: int) -> int:
    """The offset of the closing quote of the string opening at ``raw[at]``; else ``~n``
    for ``n`` the offset of the first byte that cannot be in it (-1: the text ends inside
    it)."""
    at, size = at + 1, len(raw)
    while at < size:
        byte = raw[at]
        if byte == 0x22:
            return at
        if byte < 0x20:
            return ~at
        if byte == 0x5C:  # \
            if at + 1 >= size:
                return -1
            escape = raw[at + 1]
            if escape not in _ESCAPES:
                return ~(at + 1)
            if escape == 0x75:  # \uXXXX
                for offset in range(2, 6):
                    if at + offset >= size:
                        return -1
                    if raw[at + offset] not in _HEX:
                        return ~(at + offset)
                at += 6
                continue
            at += 2
            continue
        at += 1
    return -1


def json_problem(error: BaseException, data: bytes | str) -> str:
    """Why ``data`` is not one strict JSON document, in regdev's words.

    Args:
        error: what decoding ``data`` raised: a ``msgspec.DecodeError`` or
            ``msgspec.ValidationError``, a ``UnicodeError``, a ``RecursionError``, a
            ``decimal.DecimalException``, or any other ``ValueError``/``TypeError``.
        data: the text that was decoded (UTF-8 bytes or str).

    Returns:
        One phrase without a final period, naming the place as ``at byte N`` (an offset into
        the UTF-8 bytes, from 0) when there is one: e.g. ``expected `:` after an object key,
        at byte 5``, ``the input is empty``, ``NaN, at byte 6, is not a JSON number (JSON
        has no NaN or Infinity)``.
    """
    if isinstance(error, UnicodeError):
        return unicode_problem(error)
    if isinstance(error, RecursionError):
        return "JSON is nested too deeply"
    if isinstance(error, DecimalException):
        return "a number's exponent is out of range"
    text = str(error) if isinstance(error, msgspec.MsgspecError) else ""
    raw = _as_bytes(data)
    if text.startswith("Integer value out of range"):
        limit = min(MAX_INT_DIGITS, sys.get_int_max_str_digits() or MAX_INT_DIGITS)
        return (f"an integer has more than {limit} digits, the most regdev reads (Python's "
                "limit for converting text to int)")
    if text.startswith("Number out of range"):
        return "a number is out of range (its exponent is too large)"
    if text == _TRUNCATED or "surrogate" in text:
        lone = _lone_surrogate(raw.decode("latin-1"))
        if lone is not None:
            return (f"invalid \\u escape {lone}: a lone surrogate (half of a UTF-16 pair) is "
                    "not a character")
    if text == "Invalid UTF-8 encoded string":
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            return unicode_problem(bad)
        return "the text is not UTF-8"
    if not raw.strip(b" \t\n\r"):  # JSON's whitespace
        return "the input is empty"
    at, start = json_fault(raw) if isinstance(error, msgspec.DecodeError) else (-1, -1)
    if at < 0:  # no fault in the text's grammar: the place named, in general words
        place = _AT_BYTE.search(text)
        return f"not valid JSON at byte {place[1]}" if place else "not valid JSON"
    word = _NOT_A_NUMBER.match(raw, start)
    if word is not None:
        shown = word[0].decode("ascii")
        return (f"{shown}, at byte {start}, is not a JSON number (JSON has no NaN or "
                "Infinity)")
    if at == len(raw):
        return (f"the text ends at byte {at}, before the JSON document does (a string, "
                "array or object is not closed, or a value is missing)")
    malformed = _MALFORMED_TEXT.match(text)
    what = malformed[1] if malformed is not None else ""
    if raw[at] < 0x20 or raw.startswith(b"\xef\xbb\xbf", at):
        return _invalid_character(raw, at)
    if what in _MALFORMED:  # msgspec's kind of fault, at the place found above
        return f"{_MALFORMED[what]}, at byte {at}"
    # msgspec said "invalid character" or "truncated" where the text goes wrong mid-token
    if raw[at - 1:at] == b"\\" and at > start:
        return f"{_MALFORMED['invalid escape character in string']}, at byte {at}"
    if raw[start:start + 1] == b'"' and raw[at] >= 0x20 and at > start:
        return f"{_MALFORMED['invalid character in unicode escape']}, at byte {at}"
    if raw[start:start + 1] in b"-0123456789" and at > start:
        return f"{_MALFORMED['invalid number']}, at byte {at}"
    return _invalid_character(raw, at)


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
