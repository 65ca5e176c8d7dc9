"""Python source for JSON values: what a generated module carries as data.

The compiler (``_compile.py``) writes a tool set's enum and const values with these, and the
tools of a register map (``_maptools.py``) write their rule table into the standalone rules
they give ``regdev compile --map``. Every leaf goes through :func:`str_literal` or
:func:`int_literal`, so the text is ASCII and no value's ``repr`` (a subclass's) can inject
code.
"""

from __future__ import annotations

from decimal import Decimal

from ..core._errors import SchemaError
from ._schema import MAX_DEPTH

__all__ = ["INT64", "MAX_VALUE_DEPTH", "int_literal", "render_json", "render_value",
           "str_literal"]

#: enum/const values nested deeper than this are refused (by ``check_input_schema`` first;
#: the Python parser's own limit on nested brackets is 200).
MAX_VALUE_DEPTH = MAX_DEPTH

#: Ints in -INT64..INT64-1 are written as decimal literals; larger ones as hex.
INT64 = 2**63


def str_literal(value: str) -> str:
    """A str literal in ASCII: the base class repr (a subclass cannot change the text), with
    every non-ASCII character as its escape (``'\\xe9'``), so the module's text is ASCII.

    Raises:
        TypeError: ``value`` is not a str.
    """
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    return str.__repr__(value).encode("ascii", "backslashreplace").decode("ascii")


def int_literal(value: int) -> str:
    """An int literal; past 64 bits as ``int('<hex>', 16)`` (no 4300-digit repr limit).

    Raises:
        TypeError: ``value`` is not an int (or is a bool).
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected int, got {type(value).__name__}")
    if -INT64 <= value < INT64:
        return int.__repr__(value)
    return f"int({str_literal(format(int(value), 'x'))}, 16)"


def render_json(value: object, pointer: str, depth: int = 0) -> str:
    """Source for a JSON value (None, bool, int, float, Decimal, str, list, dict).

    Every leaf goes through :func:`str_literal` or :func:`int_literal`; containers are built
    around them.

    Raises:
        SchemaError: the value is not a JSON value, or is nested too deeply; ``pointer`` is
            the error's place.
    """
    if depth > MAX_VALUE_DEPTH:
        raise SchemaError(f"a value nested more than {MAX_VALUE_DEPTH} levels deep is not "
                          "supported", pointer)
    if value is None or value is True or value is False:
        return repr(value)
    if isinstance(value, int):
        return int_literal(value)
    if isinstance(value, float):
        return f"float({str_literal(float.__repr__(value))})"
    if isinstance(value, Decimal):
        return f"Decimal({str_literal(Decimal.__str__(value))})"
    if isinstance(value, str):
        return str_literal(value)
    if type(value) is list:
        return "[" + ", ".join(render_json(v, pointer, depth + 1) for v in value) + "]"
    if type(value) is dict:
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise SchemaError("object keys in a JSON value must be strings", pointer)
            items.append(f"{str_literal(key)}: {render_json(item, pointer, depth + 1)}")
        return "{" + ", ".join(items) + "}"
    raise SchemaError(f"a JSON value was expected, got a Python {type(value).__name__}", pointer)


def render_value(value: object) -> str:
    """Source for a JSON-like value (as :func:`render_json`), for data a generated module
    carries (a register map's rule table).

    Raises:
        SchemaError: the value is not JSON-like data, or is nested too deeply.
    """
    return render_json(value, "")
