"""Text that an untrusted party controls, made safe to show and to store.

Model output reaches messages, logs and terminals; these helpers are the one place that decides
how such text is escaped and whether a string is Unicode text at all.
"""

from __future__ import annotations

__all__ = ["escape_text", "is_text", "text_bytes"]

def escape_text(text: str, limit: int = 40) -> str:
    """Escape untrusted text (control characters, non-ASCII, backticks) and cut it to ``limit``."""
    if text.isascii() and text.isprintable() and "`" not in text and "\\" not in text:
        shown = text  # nothing to escape (the usual name): no codec lookup
    else:
        shown = text.encode("unicode_escape").decode("ascii").replace("`", "\\x60")
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


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
