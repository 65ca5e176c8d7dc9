"""A register map's rules as one source text: the gate runs it, and ``regdev compile`` copies it.

Rules of this file:

* The rules a schema cannot say (``no-register``, ``read-only-field``, ``reserved-bits``,
  ``field-value``; see ``_maptools.py``) and which registers a call changes are decided here
  once, by functions over a map's **rule table** (plain data: lists, dicts, strings, ints,
  booleans and None, which ``_render.render_value`` writes as source). The map's tools
  (``_maptools.py``) word a finding for a model; the standalone module ``regdev compile
  --map`` writes carries the same text and the same table, and returns the finding's code,
  so the two cannot disagree.
* Standard library only, no import at all; a string, not ``inspect.getsource`` (regdev may be
  installed as bytecode only), registered in :mod:`linecache` so tracebacks show its lines.
* The arguments have passed the tool's schema: integers within their ranges (``3.0`` in a
  standalone module, which does not bind them: hence the ``int()`` calls, exact for those).

The rule table (:func:`rule_table` in ``_maptools.py`` builds it):

``{"tables": {TABLE: [first, rows]}, "fields": {"REG.FIELD": [addr, index]},
"read_only": [addr, ...], "values": {NAME: [table, first addr, count]}}`` (``values``: the
typed values, whose registers ``write_value`` changes), one entry per table the map has
(``"holding"``, ``"input"``, ``"coil"``, ``"discrete"``; a call's ``table`` argument picks
one, holding when absent),
where ``rows[addr - first]`` is None for no register, else ``[name, reserved_mask, fields,
top, writable, value]`` (``top`` the largest value of its width, ``writable`` False in a
read-only table, ``value`` the name of the **guarded** typed value whose registers include it,
else None: a writable value whose registers can hold what ``write_value`` refuses, one with a
``min`` or a ``max``, or a float that takes no NaN; a raw write there is refused,
``value-register``, so nothing outside the value's range reaches the device), and each field
is ``[name, lsb, mask, writable, checked, top, values]``: ``checked`` is True when a register
write's bits for it must be one of its enumerated ``values`` (a dict of name to number; None
for a plain number). Fields are of holding registers.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

__all__ = ["MAP_RULES_FILENAME", "MAP_RULES_SOURCE", "map_changes", "map_field_number",
           "map_finding"]

#: The rules' functions; a finding is None or a tuple whose first item is the verdict code.
MAP_RULES_SOURCE = '''\
def map_missing(rows, addr, count):
    """The addresses of ``addr``..``addr + count - 1`` that are no register of the table
    ``rows`` (``[first, rows]``), in order."""
    first, registers = rows
    top = first + len(registers)
    return [each for each in range(addr, addr + count)
            if not first <= each < top or registers[each - first] is None]


def map_value_finding(register, data):
    """For one value written to a register (a table row): None, ``("read-only-table",)``,
    ``("value-register", value name)``, ``("range", top)``, ``("reserved-bits", bits)`` or
    ``("field-value", field index, the field's number)``."""
    if not register[4]:
        return ("read-only-table",)
    if register[5] is not None:
        return ("value-register", register[5])
    if data > register[3]:
        return ("range", register[3])
    reserved = data & register[1]
    if reserved:
        return ("reserved-bits", reserved)
    for index, field in enumerate(register[2]):
        if field[4]:
            number = (data & field[2]) >> field[1]
            if number not in field[6].values():
                return ("field-value", index, number)
    return None


def map_field_number(field, value):
    """The number ``value`` (an enumerated name, or a number) means for ``field`` (a table
    field), or None when it is none of its values."""
    values = field[6]
    if type(value) is str:
        return None if values is None else values.get(value)
    value = int(value)
    if not 0 <= value <= field[5]:
        return None
    if values is not None and value not in values.values():
        return None
    return value


def map_finding(table, name, a):
    """The first of the map's rules the call of tool ``name`` with arguments ``a`` breaks:
    None, or ``(code, ...)``: ``("no-register", missing addresses)``, ``("read-only-register",
    index, addr, data)`` (a write to a read-only table), ``("value-register", index, addr,
    data, value name)`` (a raw write into a guarded typed value's registers), ``("range-data",
    index, addr, data, top)`` (``range-data[]`` in a block: a value wider than its register),
    ``("reserved-bits", index, addr, data, bits)``, ``("field-value", index, addr, data, field
    index, number)``
    (``index`` the position in a block, 0 for one register), ``("read-only-field", addr,
    field index)``, ``("field-value", addr, field index)`` (a write_field value). A typed
    value's checks (read_value, write_value) are not these rules: None."""
    if name == "read_value" or name == "write_value":
        return None
    if name == "write_field":
        addr, index = table["fields"][a["field"]]
        first, rows = table["tables"]["holding"]
        row = rows[addr - first]
        field = row[2][index]
        if not field[3]:
            return ("read-only-field", addr, index)
        if row[5] is not None:
            return ("value-register", addr, index, row[5])
        if map_field_number(field, a["value"]) is None:
            return ("field-value", addr, index)
        return None
    if name == "read_fields":
        return None
    addr = int(a["addr"])
    if name == "write_registers":
        data = [int(each) for each in a["data"]]
    elif name == "write_register":
        data = [int(a["data"])]
    else:
        data = None
    count = int(a["count"]) if name == "read_registers" else 1 if data is None else len(data)
    rows = table["tables"][a.get("table", "holding")]
    missing = map_missing(rows, addr, count)
    if missing:
        return ("no-register", missing)
    for index, value in enumerate(data or ()):
        found = map_value_finding(rows[1][addr + index - rows[0]], value)
        if found is not None:
            code = found[0]
            if code == "range":
                code = "range-data[]" if name == "write_registers" else "range-data"
            elif code == "read-only-table":
                code = "read-only-register"
            return (code, index, addr + index, value, *found[1:])
    return None


def map_changes(table, name, a):
    """The holding registers' addresses a call of tool ``name`` with arguments ``a`` may
    change (a coil's write changes no holding register)."""
    if a.get("table", "holding") != "holding":
        return ()
    if name == "write_register":
        return (int(a["addr"]),)
    if name == "write_registers":
        addr = int(a["addr"])
        return tuple(range(addr, addr + len(a["data"])))
    if name == "write_field":
        return (table["fields"][a["field"]][0],)
    if name == "write_value":
        kind, first, count = table["values"][a["name"]]
        return tuple(range(first, first + count)) if kind == "holding" else ()
    return ()
'''

#: The fake file name the text is compiled and registered under (shown in tracebacks).
MAP_RULES_FILENAME = "<regdev map rules (regdev.gate._maprules.MAP_RULES_SOURCE)>"

_namespace: dict[str, Any] = {"__name__": __name__}
exec(compile(MAP_RULES_SOURCE, MAP_RULES_FILENAME, "exec"), _namespace)
linecache.cache[MAP_RULES_FILENAME] = (len(MAP_RULES_SOURCE), None,
                                       MAP_RULES_SOURCE.splitlines(True), MAP_RULES_FILENAME)

map_finding: Callable[[dict[str, Any], str, dict[str, Any]], tuple[Any, ...] | None] = (
    _namespace["map_finding"])
map_changes: Callable[[dict[str, Any], str, dict[str, Any]], tuple[int, ...]] = (
    _namespace["map_changes"])
map_field_number: Callable[[list[Any], object], int | None] = _namespace["map_field_number"]
