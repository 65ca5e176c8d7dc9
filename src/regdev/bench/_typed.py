"""Types for the peers that need them (pydantic strict, msgspec), built from a tool's schema.

Rules of this file:

* One translation of the schema subset into Python types, for both libraries: ``type`` (a
  list becomes a union), ``properties``, ``required`` (an optional argument may be absent,
  never null unless its type says so), ``additionalProperties: false`` (unknown arguments
  refused), the bounds and ``multipleOf`` (pydantic's ``Field``, msgspec's ``Meta``: both
  compute ``multipleOf`` on floats), ``minLength``/``maxLength``, ``items``,
  ``minItems``/``maxItems``, and ``enum``/``const`` of strings or integers (``Literal``).
* A keyword the libraries' types cannot say (``uniqueItems``, ``prefixItems``,
  ``minProperties``, ``maxProperties``, an ``enum`` or ``const`` of other values, a bound
  without a numeric ``type``, ``additionalProperties`` as a schema) makes the whole tool
  :class:`Inexpressible`, with the keyword and its JSON Pointer: that peer is listed as unable
  for that tool's cases, never timed on a schema that says something else.
* Argument names enter the types as aliases of fields named ``f0``, ``f1``... so a name such
  as ``model_config`` or ``json`` cannot clash with the libraries' own attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal, Union

import msgspec
from pydantic import BaseModel, ConfigDict, Field, create_model

from ..gate._schema import ANNOTATION_KEYWORDS

__all__ = ["Inexpressible", "msgspec_call", "pydantic_call"]

#: What the types express, besides annotations.
_EXPRESSED = frozenset({"type", "properties", "required", "additionalProperties", "minimum",
                        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                        "minLength", "maxLength", "items", "minItems", "maxItems", "enum",
                        "const"})
_BOUNDS = {"minimum": "ge", "maximum": "le", "exclusiveMinimum": "gt",
           "exclusiveMaximum": "lt", "multipleOf": "multiple_of", "minLength": "min_length",
           "maxLength": "max_length", "minItems": "min_length", "maxItems": "max_length"}


class Inexpressible(Exception):
    """A schema keyword the peer's types cannot say: ``keyword`` at ``pointer``."""

    def __init__(self, keyword: str, pointer: str) -> None:
        super().__init__(f"cannot express `{keyword}` (at {pointer})")
        self.keyword = keyword
        self.pointer = pointer


def _plain(number: Any) -> Any:
    """A schema number as the libraries take it: a Decimal becomes an int or a float."""
    if isinstance(number, Decimal):
        return int(number) if number == number.to_integral_value() else float(number)
    return number


class _Builder:
    def __init__(self, library: str) -> None:
        self.library = library  # "pydantic" or "msgspec"
        self.count = 0

    def constrained(self, base: Any, limits: dict[str, Any]) -> Any:
        if not limits:
            return base
        if self.library == "pydantic":
            return Annotated[base, Field(strict=True, **limits)]
        return Annotated[base, msgspec.Meta(**limits)]

    def type_of(self, schema: Any, pointer: str) -> Any:
        if schema is True or schema == {}:
            return Any
        if not isinstance(schema, Mapping):
            raise Inexpressible("false", pointer)
        for keyword in schema:
            if keyword not in _EXPRESSED and keyword not in ANNOTATION_KEYWORDS:
                raise Inexpressible(keyword, f"{pointer}/{keyword}")
        for keyword in ("enum", "const"):
            if keyword in schema:
                values = schema["enum"] if keyword == "enum" else [schema["const"]]
                if not values or not all(type(v) in (str, int) for v in values) or any(
                        k not in ("enum", "const", "type") and k not in ANNOTATION_KEYWORDS
                        for k in schema):
                    raise Inexpressible(keyword, f"{pointer}/{keyword}")
                return Literal[tuple(values)]
        kind = schema.get("type")
        if kind is None:
            for keyword in schema:
                if keyword not in ANNOTATION_KEYWORDS:
                    raise Inexpressible(keyword, f"{pointer}/{keyword}")
            return Any
        kinds = [kind] if isinstance(kind, str) else list(kind)
        members = [self.one_type(schema, name, pointer) for name in kinds]
        return members[0] if len(members) == 1 else Union[tuple(members)]  # noqa: UP007

    def limits(self, schema: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        return {_BOUNDS[k]: _plain(schema[k]) for k in keys if k in schema}

    def one_type(self, schema: Mapping[str, Any], name: str, pointer: str) -> Any:
        if name == "integer":
            return self.constrained(int, self.limits(schema, (
                "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")))
        if name == "number":
            return self.constrained(float, self.limits(schema, (
                "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")))
        if name == "string":
            return self.constrained(str, self.limits(schema, ("minLength", "maxLength")))
        if name == "boolean":
            return bool
        if name == "null":
            return type(None)
        if name == "array":
            items = self.type_of(schema.get("items", True), f"{pointer}/items")
            return self.constrained(list[items],  # type: ignore[valid-type]
                                    self.limits(schema, ("minItems", "maxItems")))
        if name == "object":
            return self.model(schema, pointer)
        raise Inexpressible("type", f"{pointer}/type")  # pragma: no cover - checked schemas

    def model(self, schema: Mapping[str, Any], pointer: str, *,
              tag: str | None = None) -> Any:
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, bool):
            raise Inexpressible("additionalProperties", f"{pointer}/additionalProperties")
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        for name in required - set(properties):
            raise Inexpressible("required", f"{pointer}/required ({name!r} undeclared)")
        fields = []
        for index, (name, sub) in enumerate(properties.items()):
            fields.append((f"f{index}", name,
                           self.type_of(sub, f"{pointer}/properties/{name}"),
                           name in required))
        self.count += 1
        if self.library == "pydantic":
            definitions: dict[str, Any] = {
                field: (kind, Field(alias=alias) if needed else Field(None, alias=alias))
                for field, alias, kind, needed in fields}
            config = ConfigDict(strict=True, extra="allow" if extra else "forbid")
            return create_model(f"Arguments{self.count}", __config__=config, **definitions)
        struct_fields: list[Any] = [
            (field, kind) if needed else (field, kind, msgspec.UNSET)
            for field, _, kind, needed in fields]
        struct_fields.sort(key=lambda f: len(f) == 3)  # fields without default first
        return msgspec.defstruct(
            f"Arguments{self.count}", struct_fields, forbid_unknown_fields=not extra,
            rename={field: alias for field, alias, _, _ in fields})


def pydantic_call(name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """A strict pydantic model of one tool's call: ``{"tool": name, "arguments": ...}``.

    Raises:
        Inexpressible: the schema uses a keyword pydantic's types cannot say.
    """
    arguments = _Builder("pydantic").model(schema, "#")
    call: type[BaseModel] = create_model(
        f"Call_{name}", __config__=ConfigDict(strict=True),
        tool=(Literal[name], ...), arguments=(arguments, ...))  # type: ignore[arg-type]
    return call


def msgspec_call(name: str, schema: Mapping[str, Any]) -> Any:
    """A msgspec Struct of one tool's call, tagged by ``tool``.

    Raises:
        Inexpressible: the schema uses a keyword msgspec's types cannot say.
    """
    arguments = _Builder("msgspec").model(schema, "#")
    return msgspec.defstruct(f"Call_{name}", [("arguments", arguments)], tag_field="tool",
                             tag=name)


#: How the types are built, for the rows' names.
BUILT = ("types built by regdev.bench from each tool's schema (its supported subset: "
         "regdev.bench._typed)")
