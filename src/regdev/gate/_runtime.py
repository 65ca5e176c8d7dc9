"""JSON semantics at validation time: what counts as a number, an integer, and equal values.

Rules of this file:

* The functions are one source text, :data:`RUNTIME_SOURCE`, standard library only (``math``,
  ``decimal``). It is executed here once, for the reference validator and the compiled ones
  made in process, and the schema compiler copies the same text into every generated module,
  so a module written by ``regdev compile`` runs without regdev installed and means exactly
  what the reference validator means. Edit the text and both change together.
* It is a string, not ``inspect.getsource`` of functions, so regdev works when it is installed
  as bytecode only (no ``.py`` files). The text is registered in :mod:`linecache` under
  :data:`RUNTIME_FILENAME`, so tracebacks through these functions show their lines.
* Decoded JSON numbers are ``int`` (any size) or ``decimal.Decimal`` (a fraction or an
  exponent); Python callers may also pass ``float``. ``bool`` is never a number. Python
  compares ``int``, ``float`` and ``Decimal`` by exact value, so nothing is rounded.
"""

from __future__ import annotations

import linecache
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

__all__ = [
    "RUNTIME_FILENAME",
    "RUNTIME_NAMES",
    "RUNTIME_SOURCE",
    "is_integer",
    "is_number",
    "json_equal",
    "json_in",
]

#: The functions a generated validator may call (names only ``math`` and ``Decimal``).
RUNTIME_SOURCE = '''\
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
'''

#: The names :data:`RUNTIME_SOURCE` defines, in order.
RUNTIME_NAMES = ("is_number", "is_integer", "json_equal", "json_in")

#: The fake file name the text is compiled and registered under (shown in tracebacks).
RUNTIME_FILENAME = "<regdev runtime (regdev.gate._runtime.RUNTIME_SOURCE)>"

_namespace: dict[str, Any] = {"__name__": __name__, "math": math, "Decimal": Decimal}
exec(compile(RUNTIME_SOURCE, RUNTIME_FILENAME, "exec"), _namespace)
linecache.cache[RUNTIME_FILENAME] = (len(RUNTIME_SOURCE), None,
                                     RUNTIME_SOURCE.splitlines(True), RUNTIME_FILENAME)

is_number: Callable[[object], bool] = _namespace["is_number"]
is_integer: Callable[[object], bool] = _namespace["is_integer"]
json_equal: Callable[[object, object], bool] = _namespace["json_equal"]
json_in: Callable[[object, tuple[object, ...]], bool] = _namespace["json_in"]
