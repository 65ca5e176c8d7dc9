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
  compares ``int`` and ``Decimal`` by exact value, so nothing is rounded.
  A float is taken by its shortest round-trip decimal (``repr``), the number the JSON text
  said, wherever it meets another number (bounds, ``multipleOf``, ``enum``, ``const``,
  ``uniqueItems``), so a call decoded with ``json.loads`` gets the verdict its text gets.
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
    "coefficient_exponent",
    "is_integer",
    "is_multiple",
    "is_multiple_of",
    "is_number",
    "json_equal",
    "json_first_repeat",
    "json_in",
    "json_key",
    "written_number",
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


def written_number(value: object) -> object:
    """A number as JSON text wrote it: a ``float`` as its shortest round-trip decimal
    (``repr``: ``Decimal("0.1")``, not the binary value nearest 0.1), anything else as it is."""
    return Decimal(repr(value)) if type(value) is float else value


def json_equal(a: object, b: object) -> bool:
    """JSON equality as in draft 2020-12 Core 4.2.2: ``1 == 1.0``, but ``true != 1``; a float
    is the decimal its repr writes (``0.1 == Decimal("0.1")``)."""
    if is_number(a) and is_number(b):
        # two floats are equal when their reprs are; across types, compare the written numbers
        return a == b if type(a) is type(b) else written_number(a) == written_number(b)
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


def json_key(value: object) -> object:
    """A hashable key, equal for JSON-equal values (``1``, ``1.0`` and ``Decimal("1")`` share
    one, and so do ``0.1`` and ``Decimal("0.1")``; ``true`` and ``1`` do not). A value that is
    not JSON data is equal only to itself."""
    if isinstance(value, bool):
        return (bool, value)
    if is_number(value):
        # int and Decimal hash and compare by exact value; a float by its repr's decimal
        return Decimal(repr(value)) if type(value) is float else value
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is list:
        return (list, tuple(map(json_key, value)))
    if kind is dict:
        return (dict, frozenset((k, json_key(v)) for k, v in value.items()))
    return (kind, id(value))


def json_first_repeat(items: list[object]) -> tuple[int, int] | None:
    """The first ``(i, j)``, ``i < j``, with ``items[j]`` JSON-equal to an earlier ``items[i]``,
    in the order of ``j``; None when every item is unique (the ``uniqueItems`` keyword)."""
    seen: dict[object, int] = {}
    for index, item in enumerate(items):
        first = seen.setdefault(json_key(item), index)
        if first != index:
            return first, index
    return None


def _coefficient_exponent(number: object) -> tuple[int, int]:
    """``(c, e)`` with ``number == c * 10**e`` exactly, for an int or a Decimal; a float is
    taken by its shortest round-trip decimal (``repr``: ``0.1``, not the binary value nearest
    it), the number the JSON text it was decoded from said."""
    if isinstance(number, int):
        return int(number), 0
    if isinstance(number, float):  # repr: "3.2", "1e-05", "-1.5e+300"
        mantissa, _, power = repr(number).partition("e")
        whole, _, fraction = mantissa.partition(".")
        return int(whole + fraction), (int(power) if power else 0) - len(fraction)
    sign, digits, exponent = number.as_tuple()
    return int(Decimal((sign, digits, 0))), exponent


def is_multiple(value: object, divisor: object) -> bool:
    """True when ``value / divisor`` is an integer, computed exactly (the ``multipleOf``
    keyword): ``value`` a finite number, ``divisor`` a finite number above 0, a float of
    either taken by its shortest round-trip decimal (so ``0.3`` is a multiple of ``0.1``
    whether the JSON text was decoded to ``float`` or to ``Decimal``). No float or Decimal
    division rounds it, and a huge exponent (``1E+999999999``) costs no more than a small
    one."""
    if type(value) is int and type(divisor) is int:
        return value % divisor == 0
    m, f = _coefficient_exponent(divisor)
    return is_multiple_of(value, m, f)


def is_multiple_of(value: object, m: int, f: int) -> bool:
    """:func:`is_multiple` of a divisor given as ``m * 10**f`` (``m`` above 0), as a compiled
    check holds it: read once, when the check is compiled."""
    if m == 1 and f <= 0 and type(value) is float:  # 0.1, 0.01...: count the decimals
        text = repr(value)  # no trailing zero after the point but in "3.0"
        if "e" not in text:
            return text.endswith(".0") or len(text) - text.index(".") - 1 <= -f
    c, e = _coefficient_exponent(value)
    if c == 0:
        return True
    common = math.gcd(c, m)
    c, m = c // common, m // common
    shift = e - f  # value / divisor == (c / m) * 10**shift, with c and m coprime
    if shift >= 0:  # an integer when m divides 10**shift: m is 2**a * 5**b, a and b <= shift
        twos = (m & -m).bit_length() - 1
        m >>= twos
        fives = 0
        while m % 5 == 0:
            m //= 5
            fives += 1
        return m == 1 and twos <= shift and fives <= shift
    if -shift > c.bit_length():  # m * 10**-shift > abs(c) > 0: no whole quotient
        return False
    return c % (m * 10**-shift) == 0
'''

#: The names :data:`RUNTIME_SOURCE` defines, in order.
RUNTIME_NAMES = ("is_number", "is_integer", "written_number", "json_equal", "json_in",
                 "json_key", "json_first_repeat", "_coefficient_exponent", "is_multiple",
                 "is_multiple_of")

#: The fake file name the text is compiled and registered under (shown in tracebacks).
RUNTIME_FILENAME = "<regdev runtime (regdev.gate._runtime.RUNTIME_SOURCE)>"

_namespace: dict[str, Any] = {"__name__": __name__, "math": math, "Decimal": Decimal}
exec(compile(RUNTIME_SOURCE, RUNTIME_FILENAME, "exec"), _namespace)
linecache.cache[RUNTIME_FILENAME] = (len(RUNTIME_SOURCE), None,
                                     RUNTIME_SOURCE.splitlines(True), RUNTIME_FILENAME)

is_number: Callable[[object], bool] = _namespace["is_number"]
is_integer: Callable[[object], bool] = _namespace["is_integer"]
written_number: Callable[[object], object] = _namespace["written_number"]
json_equal: Callable[[object, object], bool] = _namespace["json_equal"]
json_in: Callable[[object, tuple[object, ...]], bool] = _namespace["json_in"]
json_key: Callable[[object], object] = _namespace["json_key"]
json_first_repeat: Callable[[list[object]], tuple[int, int] | None] = _namespace[
    "json_first_repeat"]
is_multiple: Callable[[object, object], bool] = _namespace["is_multiple"]
is_multiple_of: Callable[[object, int, int], bool] = _namespace["is_multiple_of"]
#: ``(c, e)`` with a number ``== c * 10**e`` exactly (a float by its repr).
coefficient_exponent: Callable[[object], tuple[int, int]] = _namespace["_coefficient_exponent"]
