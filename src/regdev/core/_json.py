"""Strict JSON: the one decoder of every JSON text regdev reads, its lenient reading of a
refused message's top level, and regdev's words for what is wrong with a text.

Rules of this file:

* JSON is decoded by msgspec, which is strict (RFC 8259): NaN and Infinity, raw control
  characters in strings, trailing data, invalid UTF-8 and truncated input are refused, as is
  nesting deeper than msgspec's limit (about 1000 levels).
* Integers stay exact Python ``int`` up to :data:`MAX_INT_DIGITS` digits (msgspec's limit, the
  default of Python's ``sys.get_int_max_str_digits()``; a lower one set in Python also
  applies); a longer one is refused. Numbers with a fraction or an exponent are decoded to
  ``decimal.Decimal``, so ``3.0`` and ``1e2`` stay exact and can be recognised as integers,
  and no value is rounded through ``float``.
* Repeated object keys are refused (:func:`repeated_key`): RFC 8259 section 4 leaves them to
  the parser, and parsers disagree, so an approver, the audit log and the device could each
  see a different call. I-JSON (RFC 7493 section 2.3) forbids them; so do we.
* What is wrong with a text is said in regdev's words (:func:`json_problem`), never msgspec's
  or Python's codec's: what, and where (``at byte N``).
* The lenient reading (:func:`lenient_members`) is for a message the strict decoder refused,
  when a server still owes it an answer under its own id: a flat scan of the top level (no
  recursion), whose values are then decoded strictly (:func:`strict_value`).
"""

from __future__ import annotations

import json
import re
import sys
from decimal import Decimal, DecimalException
from typing import Any, cast

import msgspec

from ._text import escape_text, text_bytes, unicode_problem

__all__ = [
    "MAX_INT_DIGITS",
    "NOT_JSON",
    "decode_json",
    "decode_strict",
    "json_fault",
    "json_problem",
    "lenient_members",
    "load_json",
    "strict_value",
]

#: The most digits msgspec decodes in one JSON integer (measured on msgspec 0.23: it caps them
#: at 4300, CPython's default ``sys.get_int_max_str_digits()``, whatever that is set to above
#: it; a lower setting applies).
MAX_INT_DIGITS = 4300

_decoder = msgspec.json.Decoder(float_hook=Decimal)
# Bound once: looking a method up on these C objects costs about as much as a check.
_decode_json = _decoder.decode
#: One strict JSON document's text to its value (integers exact, fractions as Decimal); it
#: raises one of :data:`NOT_JSON` (repeated keys are not its business: see
#: :func:`decode_strict`).
decode_json = _decode_json
_encode_json = msgspec.json.Encoder().encode
# The lenient reading's values, decoded as the MCP SDK's own reading would (a fraction as float).
_decode_plain = msgspec.json.decode

#: What msgspec raises for text that is not one strict JSON document.
NOT_JSON = (msgspec.DecodeError, RecursionError, DecimalException, ValueError, TypeError)


# --- strict decoding -------------------------------------------------------------------------


class _DuplicateKey(Exception):
    pass


class _TooDeep(Exception):
    """The duplicate-key scan could not follow the document's nesting."""


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _repeated_key(data: bytes | str, doc: object) -> str | None:
    r"""Return a key that appears twice in one object of ``data``, else None.

    In the raw text each key occurrence is followed by one colon outside strings; every other
    colon is inside a string, written as ``:`` or as the escape ``\u003a``. A repeated key
    loses an occurrence in decoding, so:

    1. When the document is an object and the text has exactly as many colons as its top
       two levels kept keys, no key repeats (the usual call: no deeper object, no colon in a
       string).
    2. Else msgspec's compact encoding of the document (one colon per kept key at any depth,
       plus the colons inside strings, never escaped) has as many colons as the text, counting
       each ``:`` escape too, only when no key repeats.
    3. Else (a repeat, or text such as ``\u003a`` that only looks like the escape) the
       standard library's parser finds the repeated key exactly.
    """
    if type(doc) is not dict and type(doc) is not list:
        return None  # a scalar holds no object
    # (A colon is one byte in UTF-8, and no byte of a longer character: bytes count as text.)
    colons = data.count(b":") if isinstance(data, bytes) else data.count(":")
    if type(doc) is dict:
        kept = len(doc)
        for value in doc.values():
            if type(value) is dict:
                kept += len(value)
        if colons == kept:
            return None
    text = data.decode("utf-8", "surrogatepass") if type(data) is bytes else data
    assert type(text) is str
    if "\\" in text:
        colons += text.count("\\u003a") + text.count("\\u003A")
    try:
        if colons == _encode_json(doc).count(b":"):
            return None
        json.loads(text, object_pairs_hook=_pairs_without_duplicates, parse_int=str,
                   parse_float=str)
    except _DuplicateKey as error:
        return str(error.args[0])
    except RecursionError:
        # msgspec decoded it, but the standard library's parser (with this call stack) cannot
        # follow it that deep: refuse rather than let an unchecked object through.
        raise _TooDeep from None
    return None


def _repeated_words(key: str) -> str:
    return f'key "{escape_text(key)}" appears twice in one object'


def decode_strict(data: bytes | str) -> tuple[object, str | None]:
    """Decode one strict JSON document; return ``(value, None)`` or ``(None, error text)``.

    A str carrying bytes that are not UTF-8 (lone surrogates) is decoded as those bytes
    (:func:`text_bytes`, the bytes the audit log records), so that it gets the verdict and
    the words those bytes get.
    """
    try:
        doc = _decode_json(data)
    except UnicodeEncodeError:  # (a ValueError) only a str holding a lone surrogate
        data = text_bytes(cast(str, data))
        try:
            doc = _decode_json(data)
        except NOT_JSON as error:
            return None, json_problem(error, data)
    except NOT_JSON as error:
        return None, json_problem(error, data)
    try:
        duplicate = _repeated_key(data, doc)
    except _TooDeep:
        return None, "JSON is nested too deeply"
    if duplicate is not None:
        return None, _repeated_words(duplicate)
    return doc, None


def load_json(data: bytes | str) -> Any:
    """Decode a JSON file's text as strictly as the gate decodes a call.

    The one loader for every JSON file regdev reads (tool definitions, policy files, each
    line of a replay file). Its rules are the parser's (see the module docstring): a key
    repeated in one object, NaN and Infinity, raw control characters in strings, trailing
    data, invalid UTF-8 and nesting past about 1000 levels are refused; integers are exact
    ``int``; a number with a fraction or an exponent is an exact ``decimal.Decimal``. Unlike a
    call, the text may start with a UTF-8 byte order mark (an editor's), which is skipped
    (a message's ``at byte N`` still counts the file's bytes, the mark's three among them).

    Args:
        data: the text, as UTF-8 bytes or str.

    Returns:
        The decoded document: dict, list, str, int, Decimal, bool or None.

    Raises:
        ValueError: the text is not one strict JSON document; the message says why, e.g.
            ``key "maximum" appears twice in one object``.
    """
    # The mark's three UTF-8 bytes become three spaces (JSON's whitespace), so that a message's
    # "at byte N" is still the file's byte N.
    data = (b"   " + data[3:] if data.startswith(b"\xef\xbb\xbf") else data) \
        if isinstance(data, bytes) else ("   " + data[1:] if data[:1] == "\ufeff" else data)
    doc, error = decode_strict(data)
    if error is not None:
        raise ValueError(error)
    return doc


# --- the lenient reading of a refused message's top level -------------------------------------

_SPACE = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
# Bytes that cannot change the structure of a top-level scan (no quote, bracket, comma or
# colon): spaces, and bytes that are not JSON at all (a no-break space, a BOM, a letter).
_JUNK = re.compile(rb'[^"{}\[\],:]*')
_SPECIAL = re.compile(rb'["\[\]{},]')  # where a string starts, a bracket, or a comma


def _value_end(text: bytes, pos: int) -> int:
    """The end of the member value starting at ``pos``, read leniently; -1 if the text ends.

    The value runs to the first comma, ``}`` or ``]`` outside its strings and brackets,
    whatever else it holds: bytes that are not JSON (a no-break space or a BOM before an
    object, ``NaN``) stay inside the value, so the members of an object that follows them
    are never read as the message's own. Linear in the text: each string is matched once,
    from its opening quote (a string that never closes ends the scan), and between strings
    only brackets and commas are looked at.
    """
    depth = 0
    while (match := _SPECIAL.search(text, pos)) is not None:
        found = match.group()
        if found == b'"':
            string = _STRING.match(text, match.start())
            if string is None:
                return -1
            pos = string.end()
            continue
        if depth == 0 and found in (b",", b"}", b"]"):
            return match.start()
        depth += 1 if found in (b"[", b"{") else -1 if found in (b"]", b"}") else 0
        pos = match.end()
    return -1


def lenient_members(text: bytes) -> dict[str, list[bytes]]:
    """The top-level members of a JSON object read leniently: name -> the texts of its
    values (a repeated name has several). Bytes that are not JSON before the object, or
    between its members, are skipped; the scan stops where the text stops looking like an
    object (a bracket where a name should be, a name without a colon, the end)."""
    found: dict[str, list[bytes]] = {}
    pos = _skip(_JUNK, text, 0)
    if text[pos : pos + 1] != b"{":
        return found
    pos += 1
    while True:
        pos = _skip(_JUNK, text, pos)
        key = _STRING.match(text, pos)
        if key is None:
            break
        pos = _skip(_JUNK, text, key.end())
        if text[pos : pos + 1] != b":":
            break
        start = _skip(_SPACE, text, pos + 1)
        end = _value_end(text, start)
        name = strict_value(key.group())
        if type(name) is str:  # a value cut short is kept as b"", which is no JSON value
            found.setdefault(name, []).append(text[start:end].rstrip(b" \t\r\n")
                                              if end >= 0 else b"")
        if end < 0 or text[end : end + 1] != b",":
            break
        pos = end + 1
    return found


def _skip(pattern: re.Pattern[bytes], text: bytes, pos: int) -> int:
    """Where the run of ``pattern`` (one that matches the empty text) starting at ``pos`` ends."""
    match = pattern.match(text, pos)
    return match.end() if match else pos


def strict_value(text: bytes) -> object:
    """One JSON value decoded strictly, or None when it is not one."""
    try:
        return _decode_plain(text)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None


# --- regdev's words for what is wrong with a text --------------------------------------------



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
