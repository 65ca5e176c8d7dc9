"""Text that an untrusted party controls, made safe to show and to store.

Model output reaches messages, logs and terminals; these helpers are the one place that decides
how such text is escaped and whether a string is Unicode text at all.
"""

from __future__ import annotations

__all__ = ["escape_text", "is_text"]

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
