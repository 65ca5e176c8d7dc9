"""Parse: raw model output -> one strict JSON document -> the canonical call.

Rules of this file:

* The byte cap is checked before any parsing (``too-large``).
* The raw text is decoded by :func:`regdev.core._json.decode_strict`, whose rules are the
  rules of every JSON text regdev reads (strict RFC 8259, integers exact, fractions as exact
  ``Decimal``, no key repeated in one object, nesting bounded, the message in regdev's words);
  text it refuses is ``not-json``.
* A correlation id is a string of at most :data:`MAX_ID_CHARS` characters; anything else is not
  echoed (it is not a correlation id).
* A dialect adapter only renames: it never judges the call. The one exception is OpenAI's
  ``function.arguments``, which is JSON text: once the call has a tool name, it is parsed here
  with the same strictness. The dialect is declared by the caller; it is never guessed.
* The idempotency key travels outside the arguments, in each dialect's own envelope (see
  ``docs/safety.md``): canonical ``"idempotency_key"``; MCP ``_meta.idempotency_key`` in the
  ``tools/call`` params; OpenAI and Anthropic carry no field for one, so the parser hands on
  the tool call's ``id`` and the gate uses it as the key only when the policy asks for it
  (``tool_call_ids_as_keys``; an id that is not a correlation id is no key either). An explicit
  key must be a string of 1..256 characters (``bad-idempotency-key`` otherwise, with the id
  kept).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Literal, cast, get_args

import msgspec

from ..core._json import (
    MAX_INT_DIGITS,
    NOT_JSON,
    decode_json,
    decode_strict,
    json_problem,
    load_json,
)
from ..core._observation import Refusal, refuse
from ..core._text import escape_text, is_text, text_bytes
from ._schema import a_json_type

__all__ = [
    "DEFAULT_MAX_INPUT_BYTES",
    "DIALECTS",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "MAX_ID_CHARS",
    "MAX_INT_DIGITS",
    "NOT_JSON",
    "Dialect",
    "ParsedCall",
    "check_dialect",
    "check_idempotency_key",
    "decode_canonical",
    "decode_json",
    "encode_json_data",
    "load_json",
    "not_json",
    "parse",
    "parse_tool_call",
]

Dialect = Literal["canonical", "mcp", "openai", "anthropic"]
#: The declared shapes of a tool call, see ``docs/errors.md``.
DIALECTS: tuple[str, ...] = get_args(Dialect)
#: Default cap on raw model output, in bytes (64 KiB).
DEFAULT_MAX_INPUT_BYTES = 64 * 1024
#: Longest correlation id echoed back, in characters.
MAX_ID_CHARS = 256
#: Longest idempotency key, in characters (as for a correlation id).
MAX_IDEMPOTENCY_KEY_CHARS = MAX_ID_CHARS

_encode_data = msgspec.json.Encoder(decimal_format="number").encode


class ParsedCall(msgspec.Struct, frozen=True, gc=False):
    """The canonical call after parsing, before validation.

    (``gc=False``: decoded JSON never refers back to the ParsedCall holding it, so there is no
    cycle for the garbage collector to find, and creating one is cheaper.)

    Attributes:
        call: the canonical call ``{"tool": ..., "arguments": ...}`` as decoded, or whatever
            non-object document was sent (the validator's shape step refuses it).
        id: the call's correlation id when it carried a string one, else None.
        refusal: set when the dialect adapter itself refused the call (OpenAI
            ``function.arguments`` that is not a string, or not JSON; a bad idempotency key);
            ``id`` is still known.
        idempotency_key: the call's idempotency key (see the module docstring), else None.
    """

    call: object
    id: str | None = None
    refusal: Refusal | None = None
    idempotency_key: str | None = None


#: Integers of more bits than this have more than MAX_INT_DIGITS digits (4300 x log2(10) is
#: 14284.4; at the edge, msgspec's own refusal decides).
_MAX_INT_BITS = 14286


def _string_id(value: object) -> str | None:
    return value if type(value) is str and len(value) <= MAX_ID_CHARS else None


def check_idempotency_key(value: object, field: str) -> str | Refusal | None:
    """An explicit idempotency key sent in ``field``: None when absent; the key when it is a
    string of 1..256 characters of Unicode text; else a ``bad-idempotency-key`` refusal naming
    ``field``."""
    if value is None:
        return None
    if type(value) is str and 0 < len(value) <= MAX_IDEMPOTENCY_KEY_CHARS and is_text(value):
        return value
    got = (("a string holding a lone surrogate (not Unicode text)" if not is_text(value)
            else f"{len(value)} characters") if type(value) is str else a_json_type(value))
    return refuse("bad-idempotency-key",
                  f"{field} must be a string of 1..{MAX_IDEMPOTENCY_KEY_CHARS} characters, "
                  f"got {got}")


def _with_key(call: dict[str, Any], call_id: str | None, key: str | Refusal | None) -> ParsedCall:
    if isinstance(key, Refusal):
        return ParsedCall(call, call_id, key)
    return ParsedCall(call, call_id, None, key)


def _adapt(doc: dict[str, Any], dialect: str) -> ParsedCall:
    """Rename a dialect's fields into the canonical call (absent fields stay absent)."""
    call_id = _string_id(doc.get("id"))
    if dialect == "canonical":
        key = doc.get("idempotency_key")
        if key is None:
            return ParsedCall(doc, call_id)
        return _with_key(doc, call_id, check_idempotency_key(key, "idempotency_key"))
    if dialect == "mcp":
        meta = doc.get("_meta")
        key = check_idempotency_key(meta.get("idempotency_key"), "_meta.idempotency_key") \
            if type(meta) is dict else None
        name_key, args_key, holder = "name", "arguments", doc
    else:  # openai, anthropic: the provider's tool call id is the key
        key = call_id or None
        if dialect == "anthropic":
            name_key, args_key, holder = "name", "input", doc
        else:
            function = doc.get("function")
            if type(function) is not dict:
                return ParsedCall({}, call_id)
            name_key, args_key, holder = "name", "arguments", function
    out: dict[str, Any] = {}
    if name_key in holder:
        out["tool"] = holder[name_key]
    if args_key in holder:
        out["arguments"] = holder[args_key]
    if dialect != "openai" or type(out.get("tool")) is not str or "arguments" not in out:
        return _with_key(out, call_id, key)
    # OpenAI: the arguments are JSON text. Without a tool name the shape step refuses first.
    text = out["arguments"]
    if type(text) is not str:
        return ParsedCall(out, call_id, refuse(
            "bad-arguments",
            f"function.arguments must be JSON text (a string), got {a_json_type(text)}"))
    out["arguments"], error = decode_strict(text)
    if error is not None:
        return ParsedCall(out, call_id, refuse(
            "not-json", f"function.arguments is not one strict JSON document: {error}"))
    return _with_key(out, call_id, key)


def check_dialect(dialect: str) -> None:
    """Raise ValueError unless ``dialect`` is one of :data:`DIALECTS`."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")


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
        ``not-json``) when the document cannot be read. For the openai dialect, a
        ``function.arguments`` that is not a string (``bad-arguments``) or not strict JSON
        (``not-json``) is refused in :attr:`ParsedCall.refusal`, so the id is kept.

    Raises:
        ValueError: ``dialect`` is not one of :data:`DIALECTS` (a caller's mistake, not the
            model's).
    """
    if dialect != "canonical":
        check_dialect(dialect)
    # bytes are sized by len(); n code points are at most 4n UTF-8 bytes, so a str of up to a
    # quarter of the cap fits without counting; anything else is sized (and a str encoded) by
    # _sized.
    kind = type(raw)
    if kind is bytes:
        if len(raw) > max_bytes:
            return _too_large(max_bytes)
    elif kind is not str or len(raw) > max_bytes >> 2:
        raw, refusal = _sized(raw, max_bytes)
        if refusal is not None:
            return refusal
    doc, problem = decode_strict(raw)
    if problem is not None:
        return _not_json(problem)
    if type(doc) is not dict:
        return ParsedCall(doc)  # the shape step refuses it
    if dialect == "canonical" and "idempotency_key" not in doc:  # the usual call, inline
        call_id = doc.get("id")
        return ParsedCall(doc, call_id if type(call_id) is str and len(call_id) <= MAX_ID_CHARS
                          else None)
    return _adapt(doc, dialect)


def parse_tool_call(name: object, arguments: object, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES
                    ) -> dict[str, Any] | Refusal:
    """A framework's raw tool call (a tool name and the model's arguments text, as the OpenAI
    Agents SDK, pydantic-ai and the providers' messages hold them) as the canonical call.

    The arguments text is read by the rules of raw text (:func:`parse`'s): the byte cap
    first (``too-large``), then one strict JSON document (``not-json``: a repeated key,
    truncated text, ``NaN``, trailing data). Nothing is judged here that validation judges:
    the name and the arguments' shape are the validator's (``unknown-tool``,
    ``bad-arguments``).

    Args:
        name: the tool name the model wrote (a str; anything else is kept for the shape step
            to refuse).
        arguments: the model's arguments, JSON text (``str`` or UTF-8 ``bytes``).
        max_bytes: cap on the arguments text in bytes (UTF-8).

    Returns:
        ``{"tool": name, "arguments": value}``, or a parse-stage :class:`Refusal`.
    """
    if type(arguments) is not str and type(arguments) is not bytes:
        return refuse("not-json", f"the arguments must be JSON text, got a Python "
                                  f"{type(arguments).__name__}")
    raw, refusal = _sized(arguments, max_bytes)
    if refusal is not None:
        return refusal
    value, problem = decode_strict(raw)
    if problem is not None:
        return refuse("not-json", f"the arguments are not one strict JSON document: "
                                  f"{problem}; send one JSON object")
    return {"tool": name, "arguments": value}


def decode_canonical(raw: object, max_bytes: int
                     ) -> tuple[str, dict[str, Any], str | None] | Refusal | None:
    """The usual canonical call, decoded and its repeated keys ruled out in the fewest steps:
    ``(tool, arguments, id)``; a ``not-json`` refusal for text that is not JSON; else None for
    :func:`parse` to decide. Whenever this answers, :func:`parse` gives the same answer.

    The usual call is a str or bytes within the cap (a str of at most a quarter of it, so
    that its UTF-8 size needs no counting), one JSON object with a string ``tool``, object
    ``arguments``, maybe an ``id`` and no idempotency key, and no other object inside.
    Repeated keys are ruled out by one colon count, the first step of
    :func:`~regdev.core._json.decode_strict`'s: each
    key occurrence in the text is followed by one colon outside strings, so when the text
    holds exactly as many colons as the top level and ``arguments`` kept keys, no key repeats
    (nor is there a deeper object, or a colon in a string). Anything else is None.

    :meth:`Gate.handle` calls this first for a call of the canonical dialect, and
    :func:`parse` when it answers None.

    Args:
        raw: the raw call, as :meth:`Gate.handle` takes it.
        max_bytes: the cap on its size in bytes.

    Returns:
        ``(tool name, arguments, correlation id or None)``, a parse-stage :class:`Refusal`,
        or None.
    """
    kind = type(raw)
    if kind is str:
        if len(raw) > max_bytes >> 2:  # type: ignore[arg-type]
            return None
        colon: Any = ":"
    elif kind is bytes:
        if len(raw) > max_bytes:  # type: ignore[arg-type]
            return None
        colon = b":"
    else:
        return None
    try:
        doc = decode_json(raw)  # type: ignore[arg-type]
    except NOT_JSON as error:
        return not_json(error, raw)  # type: ignore[arg-type]
    if type(doc) is not dict:
        return None
    name, arguments = doc.get("tool"), doc.get("arguments")
    if type(name) is not str or type(arguments) is not dict:
        return None
    kept = len(doc)
    if raw.count(colon) != kept + len(arguments):  # type: ignore[attr-defined]
        return None
    if kept == 2:  # tool and arguments: the usual call
        return name, arguments, None
    if "idempotency_key" in doc:
        return None
    call_id = doc.get("id")
    if type(call_id) is not str or len(call_id) > MAX_ID_CHARS:
        call_id = None
    return name, arguments, call_id


def not_json(error: Exception, raw: str | bytes) -> Refusal | None:
    """The ``not-json`` refusal of ``raw``, whose decoding by :data:`decode_json` raised
    ``error`` (one of :data:`NOT_JSON`), worded as :func:`parse` words it; None for a str
    holding a lone surrogate, which :func:`parse` decides."""
    if isinstance(error, UnicodeEncodeError):
        return None
    return _not_json(json_problem(error, raw))


def _not_json(error: str) -> Refusal:
    return refuse("not-json",
                  f"not one strict JSON document: {error}; send one JSON object")


def _sized(raw: object, max_bytes: int) -> tuple[str | bytes, Refusal | None]:
    """Check the cap on raw text: ``(text to decode, None)`` or ``("", refusal)``.

    A str is measured in UTF-8 bytes: exactly its length when it is ASCII (a flag CPython
    keeps), else by encoding it (:func:`text_bytes`: the bytes the audit log records; lone
    surrogates kept, so that msgspec refuses them).
    """
    if type(raw) is str:
        size = len(raw)
        if size <= max_bytes and not raw.isascii():
            raw = text_bytes(raw)
            size = len(raw)
    elif type(raw) is bytes:
        size = len(raw)
    else:
        return "", refuse("not-json",
                          f"expected JSON text, got a Python {type(raw).__name__}")
    if size > max_bytes:
        return "", _too_large(max_bytes)
    return raw, None


def _too_large(max_bytes: int) -> Refusal:
    return refuse("too-large",
                  f"the call is over the cap of {max_bytes} bytes; send one call of at most "
                  f"{max_bytes} bytes")


def encode_json_data(value: object, max_bytes: int) -> bytes | str:
    """A tool call given as Python data (not text), as JSON text, or where it is not JSON data.

    JSON data is dicts with string keys, lists (and tuples), strings of Unicode text, integers
    of up to 4300 digits, finite floats and decimals, booleans and None. Anything else (NaN,
    bytes, a set, a key that is not a string, a string holding a lone surrogate, a container
    that holds itself) is named, never converted into something the caller
    did not send. Both ways of handing the gate Python data use this one check: the provider
    helpers and :meth:`Gate.handle_call`.

    Args:
        value: the call, as decoded JSON values.
        max_bytes: the gate's cap on a call, in bytes. Text over it is returned without the
            look inside (the caller refuses it as ``too-large``); it also bounds the look
            inside a value that cannot be encoded.

    Returns:
        The compact JSON text (bytes), or a one-line reason (str) such as ``"a key of Python
        type int at `$.arguments`"``.
    """
    try:
        raw = _encode_data(value)
    except (TypeError, ValueError, RecursionError) as error:  # e.g. a complex, a cycle
        return _not_json_data(value, max_bytes) or (
            "a container that holds itself, or nesting deeper than regdev reads"
            if isinstance(error, RecursionError)
            else f"a value JSON cannot hold (Python type {type(value).__name__} at the top, "
                 "or past the first values looked at)")
    # Over the cap, the gate says too-large before looking inside (as for raw text).
    problem = _not_json_data(value, len(raw)) if len(raw) <= max_bytes else None
    return raw if problem is None else problem


def _not_json_data(value: object, budget: int) -> str | None:
    """Where ``value`` holds something that is not JSON data, or None when it is JSON data or
    ``budget`` values were looked at without finding the place. Iterative. (Every value takes
    at least one byte of JSON text, so a budget of the encoded size is never spent on JSON
    data; a container that holds itself spends it.) The place is worked out only when there
    is one to name: each value on the stack carries its parent's place and its key or index.
    """
    stack: list[tuple[object, _Place]] = [(value, None)]
    push = stack.append
    while stack and budget > 0:  # depth first, in document order
        budget -= 1
        item, place = stack.pop()
        kind = type(item)
        if kind is str:
            if not is_text(cast(str, item)):
                return f"a string holding a lone surrogate (not Unicode text) at `{_path(place)}`"
            continue
        if kind is int:
            if cast(int, item).bit_length() > _MAX_INT_BITS:
                return (f"an integer of more than {MAX_INT_DIGITS} digits at `{_path(place)}` "
                        "(the most regdev reads)")
            continue
        if kind is bool or item is None:
            continue
        if kind is dict:
            items = cast(dict[object, object], item)
            for key in items:
                if type(key) is not str:
                    return f"a key of Python type {type(key).__name__} at `{_path(place)}`"
                if not is_text(key):
                    return ("a key holding a lone surrogate (not Unicode text) at "
                            f"`{_path(place)}`")
            for key, sub in reversed(items.items()):
                push((sub, (place, key)))
        elif kind is list or kind is tuple:
            values = cast(list[object], item)
            for index in range(len(values) - 1, -1, -1):
                push((values[index], (place, index)))
        elif kind is float:
            if not math.isfinite(cast(float, item)):
                return f"{item} at `{_path(place)}` (JSON numbers are finite)"
        elif kind is Decimal:
            if not cast(Decimal, item).is_finite():
                return f"{item} at `{_path(place)}` (JSON numbers are finite)"
        else:
            return f"a Python {kind.__name__} at `{_path(place)}`"
    return None


#: Where a value sits: None for the top, else (the parent's place, the key or index in it).
_Place = tuple["_Place", object] | None


def _path(place: _Place) -> str:
    """A place as msgspec words it: ``$.arguments.addr``, ``$.items[2]``."""
    steps = []
    while place is not None:
        place, step = place
        steps.append(f"[{step}]" if type(step) is int else f".{escape_text(cast(str, step), 40)}")
    return "$" + "".join(reversed(steps))
