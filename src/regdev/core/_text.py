"""Text that an untrusted party controls, made safe to show and to store.

Model output reaches messages, logs and terminals; this module is the one place that decides
how such text is escaped and whether a string is Unicode text at all.

Two uses, one rule (what is shown is printable ASCII, ``" "`` to ``"~"``):

- :func:`escape_text` quotes a piece of untrusted text inside a message (a tool name, an
  argument name, a string value): every character outside printable ASCII, and the backslash
  and backtick, escaped, and the result cut short. Done once, where the message is composed.
- :func:`display_text` is the last step before a line is written for a person (the text
  output of ``regdev audit``, ``replay``, ``demo``, ``shell``, ``serve``'s log, the error
  lines on stderr): every character outside printable ASCII escaped, so that nothing a model
  sent can end the line, start a forged one, or reach the terminal as a control or escape
  sequence (ESC, CSI, OSC, a carriage return, a backspace, a bidirectional override). Text
  that is printable ASCII already (a message made with :func:`escape_text`) is shown as it is.

:func:`unicode_problem` says why bytes are not UTF-8 (or a str is not Unicode) in regdev's
words, for every reader of text (a JSON or SystemRDL map, a call's arguments) alike.
"""

from __future__ import annotations

import re

__all__ = ["display_text", "escape_text", "is_text", "text_bytes", "unicode_problem"]


def escape_text(text: str, limit: int | None = 40) -> str:
    """Untrusted text as a piece of a message: escaped, and cut to ``limit`` characters.

    Control characters, every non-ASCII character, the backslash and the backtick are written
    as Python escapes (``\\n``, ``\\x1b``, ``\\u202e``, ``\\\\``, ``\\x60``), so the result is
    printable ASCII and says exactly what was sent. Longer than ``limit`` characters (None:
    no limit), it is cut to ``limit - 3`` and ends in ``...``.
    """
    if text.isascii() and text.isprintable() and "`" not in text and "\\" not in text:
        shown = text  # nothing to escape (the usual name): no codec lookup
    else:
        shown = text.encode("unicode_escape").decode("ascii").replace("`", "\\x60")
    return shown if limit is None or len(shown) <= limit else shown[: limit - 3] + "..."


#: A character a line for a person may not hold as it is: anything but printable ASCII.
_UNSHOWABLE = re.compile(r"[^\x20-\x7e]")
#: The short escapes JSON and Python share; any other character is ``\\uXXXX``.
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code > 0xFFFF:  # a UTF-16 surrogate pair, as JSON writes it
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def display_text(text: str, limit: int | None = None) -> str:
    """``text`` made safe to write for a person as (part of) one line.

    Every character outside printable ASCII (``" "`` to ``"~"``) is escaped: ``\\n``,
    ``\\r``, ``\\t``, ``\\b``, ``\\f``, else ``\\uXXXX`` (a UTF-16 surrogate pair above
    U+FFFF), the forms JSON and Python share. Printable ASCII, the backslash included, is kept
    as it is, so text that is safe already (a message, JSON text from an encoder) is shown
    unchanged, and JSON text stays the same JSON. The result holds no line break, control
    character or escape sequence. Longer than ``limit`` characters (None: no limit), it is cut
    to ``limit - 3`` and ends in ``...``.
    """
    shown = text if text.isascii() and text.isprintable() else _UNSHOWABLE.sub(_escape, text)
    return shown if limit is None or len(shown) <= limit else shown[: limit - 3] + "..."


def is_text(value: str) -> bool:
    """True when ``value`` is Unicode text: it holds no lone surrogate (``"\\ud800"``), so it
    can be written as UTF-8. Decoded JSON always is (the parser refuses a lone surrogate
    escape); a string handed over as Python data may not be."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_bytes(text: str) -> bytes:
    """The bytes that a str of raw model output stands for: its UTF-8 encoding.

    A str that is not Unicode text holds lone surrogates. U+DC80..U+DCFF are how Python
    carries bytes that are not UTF-8 in a str (the ``surrogateescape`` error handler of
    ``sys.argv``, ``os.environ``, file names and streams opened with it): each stands for
    its byte, 0x80..0xFF, so the bytes received come back exactly. Any other lone surrogate
    (no bytes decode to one) is written as ``surrogatepass`` writes it, 3 bytes, as is every
    lone surrogate of a str holding one of those. Either way the result is not UTF-8, and a
    call made of it is ``not-json``.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def unicode_problem(error: UnicodeError) -> str:
    """Why text is not UTF-8 (decoding bytes) or not Unicode (encoding a str), in words.

    A str that came from bytes that were not UTF-8 holds them as ``\\udc80``..``\\udcff``
    (Python's ``surrogateescape``, as ``sys.argv`` does): that is said as the byte it was.

    Args:
        error: a ``UnicodeDecodeError`` or ``UnicodeEncodeError``.

    Returns:
        e.g. ``invalid UTF-8: byte 7 is 0xFF`` (the offset counted in bytes from 0) or
        ``character 3 is a lone surrogate (U+D800), which is not Unicode text``.
    """
    start = getattr(error, "start", 0)
    subject = getattr(error, "object", b"")
    if isinstance(subject, (bytes, bytearray)):
        byte = subject[start] if start < len(subject) else 0
        return f"invalid UTF-8: byte {start} is 0x{byte:02X}"
    if isinstance(subject, str) and start < len(subject):
        code = ord(subject[start])
        if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, carried in a str
            return f"invalid UTF-8: character {start} is the byte 0x{code - 0xDC00:02X}"
        return (f"character {start} is a lone surrogate (U+{code:04X}), which is not Unicode "
                "text")
    return "the text is not UTF-8"
