"""Format sensitivity: the same tools declared in another wording, or without strict mode.

Rules of this file:

* A wording is a name and an ordered table of rewrites (a regular expression and its
  replacement, applied in order to every ``description`` of a tool definition: the tool's own
  and each parameter's, at any depth). ``original`` is regdev's own wording (no rewrite);
  ``reworded`` (version 1) says the same facts in other words: other verbs (Fetch for Read,
  Store for Write, Change for Set), other phrasings of each parameter and of the return value.
  The rewrites name regdev's own phrases only (the words the map-derived tools are built
  from, ``regdev.gate._maptools``), so a map's own names and descriptions pass unchanged: the
  facts a model needs (addresses, ranges, names, units) are the same in both wordings.
* A wording is derived deterministically (the same tools give the same text, byte for byte),
  kept here in the package, and versioned: its hash (:attr:`Wording.hash`, over its name,
  version and table) is in every result's pin, so figures of two versions are never mixed
  unknowingly. A change to the table is a new version.
* Strict mode is the provider's flag on each tool definition: OpenAI's ``strict: true`` (the
  arguments are constrained to the schema while decoding) and Anthropic's strict tool use
  (``strict: true``, grammar-constrained sampling of the tool input, on the models that
  support it). :data:`VARIANTS` is the sweep of ``regdev eval --format-sensitivity``: each
  wording with strict on and off; the first is the reference the others are compared with.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["VARIANTS", "WORDINGS", "Wording", "variant_name", "wording"]


@dataclass(frozen=True, slots=True)
class Wording:
    """One wording of the tool descriptions.

    Attributes:
        name: ``original`` or ``reworded``.
        version: the table's version (a change to the table is a new version).
        rewrites: ``(pattern, replacement)`` pairs applied in order (:func:`re.sub`).
    """

    name: str
    version: int
    rewrites: tuple[tuple[str, str], ...] = ()

    @property
    def hash(self) -> str:
        """``sha256:`` and 16 hex digits over the name, the version and the table (JSON)."""
        text = json.dumps([self.name, self.version, [list(r) for r in self.rewrites]],
                          separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def text(self, description: str) -> str:
        """One description in this wording."""
        for pattern, replacement in self._compiled():
            description = pattern.sub(replacement, description)
        return description

    def _compiled(self) -> list[tuple[re.Pattern[str], str]]:
        return _COMPILED.setdefault(self.name, [(re.compile(p), r) for p, r in self.rewrites])

    def apply(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Provider tool definitions (:func:`regdev.tool_definitions`, any format) with every
        ``description`` in this wording, at any depth; a new list (the input is not changed).
        """
        if not self.rewrites:
            return tools
        return [self._walk(copy.deepcopy(tool)) for tool in tools]

    def _walk(self, value: Any) -> Any:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "description" and isinstance(item, str):
                    value[key] = self.text(item)
                else:
                    self._walk(item)
        elif isinstance(value, list):
            for item in value:
                self._walk(item)
        return value


_COMPILED: dict[str, list[tuple[re.Pattern[str], str]]] = {}

#: The reworded wording, version 1: regdev's phrases in the tool descriptions
#: (``regdev.gate._maptools``) and their rewrites, in the order they are applied.
_REWORDED_1 = (
    # the tools' first verbs
    (r"^Read one of the device's", "Fetch one of the device's"),
    (r"^Read one register of the device", "Fetch a single register of the device"),
    (r"^Read (\d+)\.\.(\d+) consecutive registers", r"Fetch from \1 to \2 adjacent registers"),
    (r"^Read one typed value", "Fetch a single typed value"),
    (r"^Write one byte to one", "Store a single byte in one"),
    (r"^Write (\d+)\.\.(\d+) consecutive registers", r"Store from \1 to \2 adjacent registers"),
    (r"^Write one typed value", "Store a single typed value"),
    (r"^Set one field of one register", "Change a single field of a register"),
    # the arguments named in a tool's description
    (r"\baddr is the register address \(integer ", "addr gives the register's address (an "
     "integer, "),
    (r"\bdata is the value \(integer ", "data gives the byte to store (an integer, "),
    (r"\bdata is the values, lowest address first", "data lists the bytes from the lowest "
     "address up"),
    (r"\bcount is how many \(integer ", "count gives the number of registers (an integer, "),
    (r"\bfield is \"REGISTER\.FIELD\"", "field is written \"REGISTER.FIELD\""),
    (r"\bname is one of the values\.", "name names one of the values below."),
    (r"\bregister is one of the registers:", "register names one of these registers:"),
    # what a call returns
    (r"\bReturns the ", "The result holds the "),
    # the parameters' own descriptions
    (r"^Register address, ", "Address of the register, "),
    (r"^Value to store, ", "Byte to write, "),
    (r"^How many registers to read, ", "Number of registers to read, "),
    (r"^The values to write ", "Bytes to write "),
    (r"^The field, as ", "Which field, written as "),
    (r"^The field's new value: ", "New value of the field: "),
    (r"^The register's name\.", "Name of the register."),
    (r"^The value's name\.", "Name of the typed value."),
    (r"^The new value, in the value's unit\.", "New value, in the unit of the value."),
)

#: The wordings by name.
WORDINGS = {"original": Wording("original", 1), "reworded": Wording("reworded", 1, _REWORDED_1)}

#: The variants of a format-sensitivity sweep, (wording, strict), the reference first.
VARIANTS: tuple[tuple[str, bool], ...] = (("original", True), ("original", False),
                                          ("reworded", True), ("reworded", False))


def wording(name: str) -> Wording:
    """The wording named ``name``.

    Raises:
        ValueError: no such wording (the message lists the names).
    """
    try:
        return WORDINGS[name]
    except KeyError:
        raise ValueError(f"no wording {name!r}; expected one of {', '.join(WORDINGS)}") \
            from None


def variant_name(wording_name: str, strict: bool) -> str:
    """A variant's name in a report: ``original/strict-on``, ``reworded/strict-off``..."""
    return f"{wording_name}/strict-{'on' if strict else 'off'}"
