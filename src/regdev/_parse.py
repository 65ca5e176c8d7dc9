"""Parse: raw model output -> one strict JSON document -> the canonical call.

Rules of this file:

* The byte cap is checked before any parsing (``too-large``).
* JSON is parsed by msgspec, which is strict (RFC 8259): NaN and Infinity, raw control
  characters in strings, trailing data, invalid UTF-8 and truncated input are refused
  (``not-json``), as is nesting deeper than msgspec's limit (about 1000 levels).
* Integers stay exact Python ``int`` at any size. Numbers with a fraction or an exponent are
  decoded to ``decimal.Decimal``, so ``3.0`` and ``1e2`` stay exact and can be recognised as
  integers, and no value is rounded through ``float``.
* Duplicate object keys: the last one wins (RFC 8259 section 4 leaves this to the parser).
* A dialect adapter only renames: it never judges the call. The one exception is OpenAI's
  ``function.arguments``, which is JSON text and is parsed here with the same strictness.
  The dialect is declared by the caller; it is never guessed.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal, get_args

import msgspec

from ._observation import Refusal
from ._schema import json_type_name

__all__ = ["DEFAULT_MAX_INPUT_BYTES", "DIALECTS", "Dialect", "ParsedCall", "parse"]

Dialect = Literal["canonical", "mcp", "openai", "anthropic"]
#: The declared shapes of a tool call, see ``docs/errors.md``.
DIALECTS: tuple[str, ...] = get_args(Dialect)
#: Default cap on raw model output, in bytes (64 KiB).
DEFAULT_MAX_INPUT_BYTES = 64 * 1024

_decoder = msgspec.json.Decoder(float_hook=Decimal)


class ParsedCall(msgspec.Struct, frozen=True):
    """The canonical call after parsing, before validation.

    Attributes:
        call: the canonical call ``{"tool": ..., "arguments": ...}`` as decoded, or whatever
            non-object document was sent (the validator's shape step refuses it).
        id: the call's correlation id when it carried a string one, else None.
    """

    call: object
    id: str | None = None


def _decode(data: bytes | str) -> tuple[object, str | None]:
    """Decode one strict JSON document; return ``(value, None)`` or ``(None, error text)``."""
    try:
        return _decoder.decode(data), None
    except msgspec.DecodeError as error:
        return None, str(error)
    except RecursionError:
        return None, "JSON is nested too deeply"
    except (ValueError, TypeError) as error:  # e.g. an integer past Python's digit limit
        return None, f"JSON could not be decoded: {error}"


def _string_id(value: object) -> str | None:
    return value if type(value) is str else None


def _adapt(doc: dict[str, Any], dialect: str) -> ParsedCall | Refusal:
    """Rename a dialect's fields into the canonical call (absent fields stay absent)."""
    out: dict[str, Any] = {}
    if dialect == "canonical":
        return ParsedCall(doc, _string_id(doc.get("id")))
    if dialect == "mcp":
        name_key, args_key, holder = "name", "arguments", doc
    elif dialect == "anthropic":
        name_key, args_key, holder = "name", "input", doc
    else:  # openai
        function = doc.get("function")
        if type(function) is not dict:
            return ParsedCall({}, _string_id(doc.get("id")))
        name_key, args_key, holder = "name", "arguments", function
    if name_key in holder:
        out["tool"] = holder[name_key]
    if args_key in holder:
        out["arguments"] = holder[args_key]
    if dialect == "openai" and "arguments" in out:
        text = out["arguments"]
        if type(text) is not str:
            return Refusal(
                "validate",
                "bad-arguments",
                f"function.arguments must be JSON text (a string), got {json_type_name(text)}",
            )
        out["arguments"], error = _decode(text)
        if error is not None:
            return Refusal("parse", "not-json",
                           f"function.arguments is not one JSON document: {error}")
    return ParsedCall(out, _string_id(doc.get("id")))


def parse(
    raw: str | bytes,
    dialect: str = "canonical",
    *,
    max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> ParsedCall | Refusal:
    """Parse raw model output into the canonical call.

    Args:
        raw: the model's output: JSON text as ``str`` or UTF-8 ``bytes``.
        dialect: one of :data:`DIALECTS`: ``canonical`` ``{"tool", "arguments"}``, ``mcp``
            ``{"name", "arguments"}``, ``openai`` ``{"type": "function", "function": {"name",
            "arguments": "<JSON text>"}}``, ``anthropic`` ``{"type": "tool_use", "id", "name",
            "input"}``.
        max_bytes: cap on the raw size in bytes (UTF-8), checked before parsing.

    Returns:
        The :class:`ParsedCall`, or a parse-stage :class:`Refusal` (``too-large``,
        ``not-json``); for the openai dialect a ``function.arguments`` that is not a string
        is refused as ``bad-arguments``.

    Raises:
        ValueError: ``dialect`` is not one of :data:`DIALECTS` (a caller's mistake, not the
            model's).
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
    size = len(raw) if type(raw) is bytes else None
    if size is None:
        if type(raw) is not str:
            return Refusal("parse", "not-json",
                           f"expected JSON text, got a Python {type(raw).__name__}")
        # A str of n code points is at least n UTF-8 bytes; encode only when it could fit.
        if len(raw) > max_bytes:
            size = len(raw)
        else:
            raw = raw.encode("utf-8", "surrogatepass")
            size = len(raw)
    if size > max_bytes:
        return Refusal("parse", "too-large",
                       f"the call is over {max_bytes} bytes; send one call of at most "
                       f"{max_bytes} bytes")
    doc, error = _decode(raw)
    if error is not None:
        return Refusal("parse", "not-json",
                       f"not one strict JSON document: {error}; send one JSON object")
    if type(doc) is not dict:
        return ParsedCall(doc)
    return _adapt(doc, dialect)
