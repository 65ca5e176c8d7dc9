"""The range of every duration a user gives regdev, and the one sentence that refuses one.

A duration comes from a policy file (``timeout``, ``approval.timeout``), a command-line flag
(``--timeout``, ``--request-timeout``, firmware-sim's ``--delay``) or a Python argument
(``ModbusDevice(timeout=)``, ``serve_http(body_seconds=)``). Each is a number of seconds from
:data:`MIN_SECONDS` to :data:`MAX_SECONDS`, and anything else (NaN, an infinity, a negative
number, zero, a subnormal such as 5e-324, a number past a day) is refused before it is used,
with :func:`seconds_problem`'s words after the name of the key or flag.

Why these bounds: below a millisecond no wait regdev makes can be kept (a thread switch, a
serial byte at 9600 baud, take longer), so a device call would always miss its deadline and the
refusal would state a wait of ``4.94066e-324 s``; past a day, a wait is no longer a time-out but
a hang, and a number such as 1e300 s is past what the platform's waits can take
(``threading.TIMEOUT_MAX``).
"""

from __future__ import annotations

import math

__all__ = ["MAX_SECONDS", "MIN_SECONDS", "seconds_problem", "seconds_range"]

#: The shortest duration regdev takes, in seconds: one millisecond.
MIN_SECONDS = 0.001
#: The longest duration regdev takes, in seconds: one day.
MAX_SECONDS = 86400.0


def seconds_range(minimum: float = MIN_SECONDS, maximum: float = MAX_SECONDS) -> str:
    """The accepted range in words: ``"0.001..86400"``."""
    return f"{minimum:g}..{maximum:g}"


def seconds_problem(value: object, *, minimum: float = MIN_SECONDS,
                    maximum: float = MAX_SECONDS) -> str | None:
    """What is wrong with ``value`` as a duration, or None when it is one.

    Args:
        value: the duration given, in seconds: an ``int`` or ``float`` (not a ``bool``).
        minimum: the shortest accepted, in seconds (inclusive).
        maximum: the longest accepted, in seconds (inclusive).

    Returns:
        None for a finite number in ``minimum..maximum``; else one line without a subject,
        for the caller to put after the key or flag: ``must be a number of seconds in
        0.001..86400, got 5e-324``.
    """
    if type(value) in (int, float) and minimum <= value <= maximum:  # type: ignore[operator]
        return None  # NaN compares false, so it is refused with the rest
    if type(value) is float:
        given = repr(value) if math.isfinite(value) else str(value)
    elif type(value) is int:
        given = (str(value) if value.bit_length() <= 64 else
                 f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits")
    else:
        given = f"a {type(value).__name__}"
    return f"must be a number of seconds in {seconds_range(minimum, maximum)}, got {given}"
