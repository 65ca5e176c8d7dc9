"""JSON semantics at validation time: what counts as a number, an integer, and equal values.

Rules of this file:

* Standard library only (``math``, ``decimal``), and every function here stands alone: the
  schema compiler copies their source verbatim into each generated validator, so a module
  written by ``regdev compile`` runs without regdev installed and means exactly what the
  reference validator means. Edit a function here and both change together.
* Decoded JSON numbers are ``int`` (any size) or ``decimal.Decimal`` (a fraction or an
  exponent); Python callers may also pass ``float``. ``bool`` is never a number. Python
  compares ``int``, ``float`` and ``Decimal`` by exact value, so nothing is rounded.
"""

from __future__ import annotations

import math
from decimal import Decimal

__all__ = ["RUNTIME_FUNCTIONS", "is_integer", "is_number", "json_equal", "json_in"]


def is_number(value: object) -> bool:
    """True for a JSON number: an ``int`` (not ``bool``), a finite ``float`` or ``Decimal``."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Decimal):
        return value.is_finite()
    return False


def is_integer(value: object) -> bool:
    """True for a JSON Schema integer: a number with zero fractional part (so ``3.0`` and ``1e2``).

    Source: draft 2020-12 Validation 6.1.1, "integer ... any number with a zero fractional part".
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, Decimal):
        return value.is_finite() and value == value.to_integral_value()
    return False


def json_equal(a: object, b: object) -> bool:
    """JSON equality as in draft 2020-12 Core 4.2.2: ``1 == 1.0``, but ``true != 1``."""
    if is_number(a) and is_number(b):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return a == b


def json_in(value: object, items: tuple[object, ...]) -> bool:
    """True when ``value`` is JSON-equal to one of ``items`` (the ``enum`` keyword)."""
    return any(json_equal(value, item) for item in items)


#: The functions a generated validator may call, in the order their source is copied.
RUNTIME_FUNCTIONS = (is_number, is_integer, json_equal, json_in)
