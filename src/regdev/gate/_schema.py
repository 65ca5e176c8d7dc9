"""The supported JSON Schema subset: schema checks, and the JSON semantics both validators share.

Rules of this file:

* Keyword meanings follow JSON Schema draft 2020-12, Validation vocabulary
  (https://json-schema.org/draft/2020-12/json-schema-validation), sections 6.1 (type, enum,
  const), 6.2 (minimum, maximum, exclusiveMinimum, exclusiveMaximum), 6.3 (minLength,
  maxLength) and 6.5.3 (required); ``properties`` and ``additionalProperties`` follow the Core
  vocabulary, section 10.3.2; ``prefixItems`` and ``items`` the Core vocabulary, section 10.3.1;
  ``multipleOf`` Validation 6.2.1, ``minItems``, ``maxItems``, ``uniqueItems`` Validation 6.4,
  ``minProperties`` and ``maxProperties`` Validation 6.5.
* A keyword outside :data:`VALIDATION_KEYWORDS` and :data:`ANNOTATION_KEYWORDS` is refused
  with a :class:`~regdev.SchemaError`; nothing is silently ignored.
* Numbers are compared exactly: ``int`` and ``decimal.Decimal`` compare by value in Python
  without rounding, and a JSON number with a fraction part is decoded to ``Decimal``; a
  ``float`` is read as the decimal its ``repr`` writes (``written_number`` in ``_runtime``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, cast

from ..core._errors import SchemaError
from ..core._text import display_text, escape_text
from ._runtime import is_integer, is_number, json_equal

__all__ = [
    "ANNOTATION_KEYWORDS",
    "MAX_DEPTH",
    "SCHEMA_DIALECTS",
    "TYPE_NAMES",
    "VALIDATION_KEYWORDS",
    "a_json_type",
    "check_input_schema",
    "is_integer",
    "is_number",
    "iter_properties",
    "json_equal",
    "json_pointer",
    "json_type_name",
    "matches_type",
]

#: Keywords that constrain an instance and that both validators implement.
VALIDATION_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "enum",
        "const",
        "minLength",
        "maxLength",
        "multipleOf",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    }
)
#: Keywords that only annotate (draft 2020-12 Core 8.3, Meta-Data vocabulary section 9);
#: they have no effect on validity, so accepting them ignores nothing.
ANNOTATION_KEYWORDS = frozenset(
    {
        "$schema",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
#: The seven JSON Schema type names (draft 2020-12 Core 4.2.1).
TYPE_NAMES = ("null", "boolean", "object", "array", "number", "string", "integer")


# --- JSON semantics (is_number, is_integer, json_equal live in _runtime) -----------------


def matches_type(value: object, name: str) -> bool:
    """True when ``value`` is an instance of the JSON Schema type ``name`` (one of TYPE_NAMES)."""
    if type(value) is int:  # the usual value, told at once
        return name in ("integer", "number")
    if name == "integer":
        return is_integer(value)
    if name == "number":
        return is_number(value)
    if name == "string":
        return type(value) is str
    if name == "object":
        return type(value) is dict
    if name == "boolean":
        return type(value) is bool
    if name == "null":
        return value is None
    if name == "array":
        return type(value) is list
    return False


_TYPE_NAME_OF: dict[type, str] = {str: "string", int: "integer", bool: "boolean",
                                  type(None): "null", dict: "object", list: "array"}


def json_type_name(value: object) -> str:
    """Name the JSON type of a decoded value for a message: ``"string"``, ``"boolean"``, ..."""
    name = _TYPE_NAME_OF.get(type(value))  # the usual decoded types, by one lookup
    if name is not None:
        return name
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    if is_integer(value):
        return "integer"
    if is_number(value):
        return "number"
    if type(value) is str:
        return "string"
    if type(value) is dict:
        return "object"
    if type(value) is list:
        return "array"
    return f"Python {type(value).__name__}"


_ARTICLE = {"integer": "an integer", "array": "an array", "object": "an object", "null": "null"}


def a_json_type(value: object) -> str:
    """The JSON type of a value with its article: ``"a string"``, ``"an array"``, ``"null"``."""
    name = json_type_name(value)
    return _ARTICLE.get(name, f"a {name}")


#: Keywords refused on the input schema itself: the arguments object is matched field by
#: field, and a code names one field, so a whole-object ``enum``, ``const`` or count of
#: properties has no code.
_NOT_AT_TOP = ("enum", "const", "minProperties", "maxProperties")

#: Schemas nested deeper than this (``properties``, ``items`` or ``prefixItems`` in each
#: other), and ``enum``,
#: ``const``, ``default`` or ``examples`` values nested deeper than this, are refused: both
#: validators and the compiler recurse once per level, and a generated module spells a value
#: with one bracket per level (the Python parser's limit on nested brackets is 200).
MAX_DEPTH = 64

#: ``$schema`` values accepted (without a trailing ``#``, ``http`` read as ``https``): draft
#: 2020-12, and the drafts in which every supported keyword means exactly the same (2019-09,
#: draft-07 and draft-06: a numeric ``exclusiveMinimum``, ``1.0`` an integer, ``const``).
#: Draft-04 and older differ (a boolean ``exclusiveMinimum``; ``1.0`` not an integer), so
#: they are refused. Draft-07 is what zod-to-json-schema, and so many MCP servers, declare.
SCHEMA_DIALECTS = frozenset({
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft-07/schema",
    "https://json-schema.org/draft-06/schema",
})

#: The type each annotation's value must have, from the draft 2020-12 meta-schemas
#: (meta/core: ``$comment``, ``$schema``; meta/meta-data: the rest); ``default`` may be any
#: JSON value.
_ANNOTATION_TYPES: dict[str, tuple[type, str]] = {
    "$comment": (str, "a string"),
    "$schema": (str, "a string"),
    "title": (str, "a string"),
    "description": (str, "a string"),
    "deprecated": (bool, "a boolean"),
    "readOnly": (bool, "a boolean"),
    "writeOnly": (bool, "a boolean"),
    "examples": (list, "an array"),
}

# --- Schema checking --------------------------------------------------------------------------


def json_pointer(path: tuple[str | int, ...]) -> str:
    """JSON Pointer (RFC 6901) for a path, escaping ``~`` and ``/``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _is_non_negative_integer(value: object) -> bool:
    return is_integer(value) and value >= 0  # type: ignore[operator]


def _check_annotation(keyword: str, value: object, where: str) -> None:
    if keyword == "default":
        _check_json_value(value, where)
        return
    kind, name = _ANNOTATION_TYPES[keyword]
    if type(value) is not kind:
        raise SchemaError(f"`{keyword}` must be {name}", where)
    if keyword == "$schema":
        uri = str(value).removesuffix("#")
        if uri.startswith("http://"):
            uri = "https://" + uri[len("http://"):]
        if uri not in SCHEMA_DIALECTS:
            raise SchemaError(f"`$schema` names a dialect this validator does not implement "
                              f"({escape_text(str(value), 60)}); supported: JSON Schema draft "
                              "2020-12 (and 2019-09, draft-07, draft-06, identical for the "
                              "supported keywords)", where)
    elif keyword == "examples":
        for index, item in enumerate(cast(list[object], value)):
            _check_json_value(item, f"{where}/{index}")


def _check_subschema(schema: object, path: tuple[str | int, ...], depth: int) -> None:
    if type(schema) is bool:
        return
    if type(schema) is not dict:
        raise SchemaError(f"a schema must be an object or a boolean, got {type(schema).__name__}",
                          json_pointer(path))
    if depth > MAX_DEPTH:
        raise SchemaError(f"schemas nested more than {MAX_DEPTH} levels deep are not "
                          "supported", json_pointer(path))
    for keyword, value in schema.items():
        if type(keyword) is not str:
            raise SchemaError("schema keywords must be strings, got "
                              f"{display_text(repr(keyword), 40)}", json_pointer(path))
        where = json_pointer((*path, keyword))
        if keyword in ANNOTATION_KEYWORDS:
            _check_annotation(keyword, value, where)
            continue
        if keyword not in VALIDATION_KEYWORDS:
            raise SchemaError(f"keyword `{escape_text(keyword)}` is not supported", where)
        if keyword == "type":
            names = value if type(value) is list else [value]
            if not names or any(type(n) is not str or n not in TYPE_NAMES for n in names):
                raise SchemaError(
                    f"`type` must be one of {', '.join(TYPE_NAMES)} or a non-empty list of them",
                    where,
                )
            if len(set(names)) != len(names):
                raise SchemaError("`type` lists a type twice", where)
        elif keyword == "properties":
            if type(value) is not dict:
                raise SchemaError("`properties` must be an object", where)
            for name, sub in value.items():
                if type(name) is not str:
                    raise SchemaError("property names must be strings, got "
                                      f"{display_text(repr(name), 40)}", where)
                _check_subschema(sub, (*path, keyword, name), depth + 1)
        elif keyword == "required":
            if type(value) is not list or any(type(n) is not str for n in value):
                raise SchemaError("`required` must be an array of strings", where)
            if len(set(value)) != len(value):
                raise SchemaError("`required` names a property twice", where)
        elif keyword == "additionalProperties":
            if type(value) is not bool:
                raise SchemaError(
                    "`additionalProperties` is supported only as true or false", where
                )
        elif keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not is_number(value):
                raise SchemaError(f"`{keyword}` must be a number", where)
        elif keyword == "multipleOf":
            if not is_number(value) or value <= 0:
                raise SchemaError("`multipleOf` must be a number above 0", where)
        elif keyword in _COUNTS:
            if not _is_non_negative_integer(value):
                raise SchemaError(f"`{keyword}` must be a non-negative integer", where)
        elif keyword == "uniqueItems":
            if type(value) is not bool:
                raise SchemaError("`uniqueItems` must be a boolean", where)
        elif keyword == "items":
            _check_subschema(value, (*path, keyword), depth + 1)
        elif keyword == "prefixItems":
            if type(value) is not list or not value:
                raise SchemaError("`prefixItems` must be a non-empty array of schemas", where)
            for index, sub in enumerate(value):
                _check_subschema(sub, (*path, keyword, index), depth + 1)
        elif keyword == "enum":
            if type(value) is not list:
                raise SchemaError("`enum` must be an array", where)
            for index, item in enumerate(value):
                _check_json_value(item, json_pointer((*path, keyword, index)))
        elif keyword == "const":
            _check_json_value(value, where)


#: Keywords whose value is a count: a non-negative integer (``2.0`` and ``Decimal("2")`` too).
_COUNTS = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties"})


def _check_json_value(value: object, where: str, depth: int = 0) -> None:
    """Refuse a value that is not JSON (a tuple, bytes, NaN, an infinity) or nests too deep."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise SchemaError(f"a value nested more than {MAX_DEPTH} levels deep is not supported",
                          where)
    if kind is list:
        for index, item in enumerate(cast(list[object], value)):
            _check_json_value(item, f"{where}/{index}", depth + 1)
    elif kind is dict:
        for key, item in cast(dict[object, object], value).items():
            if type(key) is not str:
                raise SchemaError("object keys in a JSON value must be strings, got "
                                  f"{display_text(repr(key), 40)}", where)
            _check_json_value(item, where + json_pointer((key,)), depth + 1)
    elif kind in (float, Decimal):
        if not is_number(value):
            raise SchemaError(f"{escape_text(str(value))} is not a JSON number (JSON has no "
                              "NaN or infinities)", where)
    elif value is not None and kind not in (bool, int, str):
        raise SchemaError(f"a JSON value was expected, got a Python {kind.__name__}", where)


def check_input_schema(schema: object, pointer: str = "") -> None:
    """Check that ``schema`` is a tool input schema within the supported subset.

    A tool input schema is a JSON Schema object whose ``type`` is ``"object"`` (or
    ``["object"]``, the same), as MCP, OpenAI and Anthropic require. Every keyword below it
    must be in :data:`VALIDATION_KEYWORDS` or :data:`ANNOTATION_KEYWORDS`, with a value of the
    type the draft 2020-12 meta-schemas prescribe; values in ``enum``, ``const``, ``default``
    and ``examples`` must be JSON values (no NaN or infinities); schemas and values may nest
    at most :data:`MAX_DEPTH` levels. ``enum``, ``const``, ``minProperties`` and
    ``maxProperties`` are refused on the input schema itself (a verdict code names one
    argument).

    Args:
        schema: the decoded schema.
        pointer: JSON Pointer prefix for error locations, e.g. ``/tools/0/inputSchema``.

    Raises:
        SchemaError: the schema is malformed or uses an unsupported keyword; the message names
            the keyword and its JSON Pointer.
    """
    if type(schema) is not dict or schema.get("type") not in ("object", ["object"]):
        raise SchemaError('a tool input schema must be an object with "type": "object"', pointer)
    for keyword in _NOT_AT_TOP:
        if keyword in schema:
            raise SchemaError(f"`{keyword}` is not supported on the arguments object itself "
                              "(only on its properties: a verdict code names one argument)",
                              f"{pointer}/{keyword}")
    try:
        _check_subschema(schema, (), 0)
    except SchemaError as error:
        raise error.at(pointer) from None


def iter_properties(schema: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Yield ``(name, subschema)`` for a schema's ``properties`` in declared order."""
    props = schema.get("properties")
    if isinstance(props, dict):
        yield from props.items()
