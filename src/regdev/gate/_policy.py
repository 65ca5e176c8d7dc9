"""Authorize: who may call which tool, on which registers, how often, with whose approval.

A call reaches this stage only when it parsed and validated. The checks run in this order; the
first refusal decides, nothing after it runs, and the call never reaches the device:

====  ===============  ==========================  ============================================
 #    check            code                        refused when
====  ===============  ==========================  ============================================
 0    audit log        ``audit-error``             the audit log is closed (every call), or
                                                   its last commit failed (calls that change
                                                   the device, until a commit succeeds)
 1    scope            ``denied-<tool>``           the session's scopes do not cover the tool:
                                                   a tool that changes the device needs
                                                   ``write``, a read-only tool needs ``read``
 2    register map     ``read-only-register``      a write to a register marked read-only
                                                   (by the policy, or by the device's
                                                   register map)
 3    idempotency key  ``idempotency-conflict``,   the key was used for a different call, or
                       ``idempotency-in-progress`` its first call is still running; a key seen
                                                   with the same call returns the stored
                                                   observation as a replay (``_idempotency.py``)
 4    rate limit       ``rate-limited``            the session's token bucket is empty
 5    approval         ``approval-denied``         a write to a protected register (or one
                                                   that sets a protected field, or a value
                                                   in a protected range) that the approval
                                                   hook did not approve (or no hook)
====  ===============  ==========================  ============================================

A tool that changes the device and takes no integer ``addr`` (the shell's ``reset_device``)
changes every register: it is refused when the policy makes any register read-only (the
registers the device's map makes read-only do not refuse it: a reset sets them to their reset
values, as the hardware does), and needs approval when any is protected.

Why this order: the audit check (0) comes first because a call that cannot be recorded must
not run (``_gate.py`` does it, since only the gate has the log). The static rights (1, 2) come
first: they are cheap, they never change during a
session, and no retry helps. The key (3) comes before the rate limit so that a runtime re-sending
an acknowledged write gets its answer without spending a token: a replay costs no device time.
The rate limit (4) comes before approval so that a flood never reaches the approver, and the
approval hook (5), which may ask a person, is asked only for a call that will run at once if
approved.

The tool allowlist is not here: a tool the session is not offered is ``unknown-tool`` at the
validate stage, with the same message as a tool that does not exist, so a session learns
nothing about tools it is not offered (``Gate`` validates each call against the tools its
session is offered).

A policy is declared in Python (:class:`Policy`) or in a TOML or JSON file
(:meth:`Policy.from_file`, by the suffix ``.toml`` or ``.json``), validated by pydantic. The
file format is in ``docs/safety.md``.

The registers a policy marks are merged with the device's register map
(:meth:`RegisterPolicy.for_map`): the map's read-only registers are read-only whatever the
policy says (the device refuses to write them anyway), and the policy's ``read_only`` adds to
them; the map's protected registers (``regdev_protected`` in SystemRDL) are protected unless
the policy lists ``protected`` itself, which then overrides the map's. A policy names
registers by address or by the map's names, and may protect a field (``"CTRL.MODE"``) or a
range of a field's or register's values (:class:`Guard`), resolved against the map
(:attr:`RegisterPolicy.guards`).
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, Self, cast, get_args, get_origin

import msgspec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..core._errors import PolicyError
from ..core._json import load_json
from ..core._limits import seconds_problem, seconds_range
from ..core._observation import Refusal, refuse
from ..core._text import escape_text
from ..core._wording import toml_problem
from ..devices._device import REGISTER_COUNT
from ..devices._regmap import RegisterMap as DeviceMap
from ._schema import a_json_type
from ._tools import Tool
from ._validate import show_value

__all__ = [
    "MAX_BURST",
    "MIN_RATE",
    "SCOPES",
    "Approval",
    "ApprovalRequest",
    "Approver",
    "FieldGuard",
    "Guard",
    "Policy",
    "RateLimit",
    "RegisterPolicy",
    "Scope",
    "Session",
    "SessionPolicy",
    "TokenBucket",
    "ValueGuard",
    "ask_approval",
    "changed_registers",
    "check_read_only",
    "guarded",
]

Scope = Literal["read", "write"]
#: The scopes a session can hold.
SCOPES: tuple[Scope, ...] = ("read", "write")

logger = logging.getLogger("regdev")

#: The policy file formats :meth:`Policy.from_file` reads, by suffix (in any case).
POLICY_SUFFIXES = (".toml", ".json")

#: Addresses a policy names: those of a Modbus table (0..65535; regdev's serial protocol's
#: 0..255 among them). A register elsewhere is named by its name.
MAX_REGISTERS = 0x10000
_Address = Annotated[int, Field(strict=True, ge=0, le=MAX_REGISTERS - 1)]
#: The most a register holds (8 bits).
REGISTER_MAX = 0xFF
#: The slowest rate limit, calls per second: one call in about 32 years. A slower one would
#: keep a caller waiting longer than any wait regdev can state or time (a rate of 5e-324
#: leaves 1/rate = inf seconds to wait).
MIN_RATE = 1e-9
#: The largest burst: a float (the bucket's count of tokens) holds every whole number up to
#: 2**53 exactly; a larger burst is refused rather than rounded (or overflowing to inf).
MAX_BURST = 2**53


def _a_duration(value: object) -> float:
    """A policy file's duration as a float: an int, float or (JSON's exact) Decimal in
    ``MIN_SECONDS..MAX_SECONDS``; refused with the range and the number as the file gave it."""
    if type(value) in (int, float) or isinstance(value, Decimal):
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except OverflowError:  # an int past a float: past the range too
            seconds = math.inf
        if seconds_problem(seconds) is None:
            return seconds
        raise PydanticCustomError("seconds_range", "must be a number of seconds in {range}",
                                  {"range": seconds_range()})
    raise PydanticCustomError("float_type", "must be a number")


#: A duration in a policy file: seconds, a number in 0.001..86400 (``MIN_SECONDS`` and
#: ``MAX_SECONDS`` of ``core/_limits.py``); NaN, infinities, zero, subnormals and numbers past
#: a day are refused, naming the range.
Seconds = Annotated[float, PlainValidator(_a_duration)]
_Rate = Annotated[float, Field(strict=True, ge=MIN_RATE, allow_inf_nan=False)]
_Burst = Annotated[int, Field(strict=True, ge=1, le=MAX_BURST)]
_Bytes = Annotated[int, Field(strict=True, gt=0)]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the approval hook is asked to approve: one write to a protected register.

    Attributes:
        session: the name of the session that sent the call.
        tool: the tool, e.g. ``"write_register"``.
        arguments: the validated arguments, e.g. ``{"addr": 15, "data": 1}``.
        addr: the protected register address (a register of the device's map; the first
            protected one of a block), or None for a tool that changes every register (such as
            the shell's ``reset_device``).
        caller: who sent the call, as the session's :attr:`Session.caller` names it (over
            ``regdev serve --http``, the bearer token's identity: ``token:NAME`` or
            ``oauth:SUBJECT``); None when the caller is not authenticated (in process, stdio).
    """

    session: str
    tool: str
    arguments: Mapping[str, Any]
    addr: int | None
    caller: str | None = None


@dataclass(frozen=True, slots=True)
class Approval:
    """An approval hook's answer, when it says more than True or False: who answered and how.

    The gate records :attr:`approver` and :attr:`via` in the audit log (columns ``approver``
    and ``approval``) whatever the answer, and a denial's :attr:`reason` in the refusal's
    message.

    Attributes:
        approved: True lets the write run; False denies it (``approval-denied``).
        approver: who answered, e.g. ``"token:bob"``; None when not known (or nobody
            answered: a timeout).
        via: how the question was asked, e.g. ``"hook"``, ``"elicitation"`` (the caller's MCP
            client asked its user), ``"url"`` (a page the server serves).
        reason: for a denial, why, in a few words for the model ("declined", "no answer
            within 120 s"); None says only that the approver denied it. With a reason and no
            ``approver`` (nobody answered: a timeout, the caller gone), the refusal says the
            write "was not approved (REASON)", not that an approver denied it.
        holds: for a yes, the registers the question showed and the values it showed them
            holding, as ``(address, value)`` pairs: the write runs only if each still holds
            its value when the write is sent. The gate re-reads them and sends the write in
            one atomic step for those registers (each protected register's lock is held from
            the re-read to the write's answer), so two approved writes of one register never
            both run over the value their approvers saw; a register that changed makes the
            call ``approval-denied``. Empty (the default): the yes is of the call, whatever
            the registers hold.
    """

    approved: bool
    approver: str | None = None
    via: str = "hook"
    reason: str | None = None
    holds: tuple[tuple[int, int], ...] = ()


#: ``approve(request) -> True`` (or an :class:`Approval` with ``approved``) approves; False,
#: anything else, or an exception denies.
Approver = Callable[[ApprovalRequest], bool | Approval]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RateLimit(_Model):
    """A token bucket: ``burst`` calls at once, refilled at ``rate`` calls per second.

    Attributes:
        rate: calls per second, refilled continuously: a finite number of at least
            :data:`MIN_RATE` (1e-9, one call in about 32 years).
        burst: calls allowed at once when the bucket is full: 1..:data:`MAX_BURST` (2**53).

    Raises:
        pydantic.ValidationError: a field is out of range (a policy file's is a
            :class:`~regdev.PolicyError`).
    """

    rate: _Rate
    burst: _Burst


#: A register or field named in a policy: ``CTRL``, ``CTRL.MODE`` (the names of the device's
#: register map, as ``regdev map FILE`` shows them).
_Name = Annotated[str, Field(strict=True, min_length=1, max_length=200)]
_FieldValue = Annotated[int, Field(strict=True, ge=0, le=2**64 - 1)]


class Guard(_Model):
    """A protected field or register value range: a write that sets ``field`` (or
    ``register``) to a value in ``min..max`` needs approval; other writes do not.

    Attributes:
        field: ``REGISTER.FIELD`` of the device's map; or None with ``register``.
        register_name: a register's name or address (``register`` in a file); or None with
            ``field``.
        min: the lowest value that needs approval (inclusive); None: from 0.
        max: the highest (inclusive); None: up to the field's or register's top.

    Raises:
        pydantic.ValidationError: neither or both of ``field`` and ``register``, or ``min``
            above ``max``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    field: _Name | None = None
    #: ``register`` in a policy file (the name pydantic's BaseModel keeps for itself).
    register_name: _Name | _Address | None = Field(default=None, alias="register")
    min: _FieldValue | None = None
    max: _FieldValue | None = None

    @model_validator(mode="after")
    def _one_target(self) -> Guard:
        if (self.field is None) == (self.register_name is None):
            raise ValueError("a protected range names one `field` (\"REG.FIELD\") or one "
                             "`register`, not both and not neither")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"a protected range's min {self.min} is above its max {self.max}")
        return self


class ValueGuard(_Model):
    """A protected range of a typed value, in its unit: a ``write_value`` of ``value`` within
    ``min..max`` needs approval (``{value = "WMaxLimPct", min = 80}``); a write below it does
    not. Any other write to the value's registers asks (its value in units is not known).

    Attributes:
        value: the typed value's name in the device's map.
        min: the lowest value that needs approval, in the value's unit (inclusive, exact);
            None: no lower bound.
        max: the highest (inclusive); None: no upper bound.

    Raises:
        pydantic.ValidationError: a bound that is not a finite decimal, or ``min`` above
            ``max``.
    """

    value: _Name
    min: Decimal | None = None
    max: Decimal | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ValueGuard:
        for bound in (self.min, self.max):
            if bound is not None and not bound.is_finite():
                raise ValueError("a protected value range takes finite bounds")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"a protected range's min {self.min} is above its max {self.max}")
        return self


@dataclass(frozen=True, slots=True)
class FieldGuard:
    """A protected field or value range, resolved against the device's map.

    Attributes:
        addr: the register's address.
        mask: the guarded bits of the register (a field's, or all of them).
        lsb: the lowest guarded bit: a value is ``(data & mask) >> lsb``.
        low: the lowest value that needs approval (inclusive).
        high: the highest (inclusive).
        what: how a message names it: ``field CTRL.MODE``, ``register CALIB (0x03)``, with
            ``values 1..2`` when it is a range.
    """

    addr: int
    mask: int
    lsb: int
    low: int
    high: int
    what: str
    #: A typed value's range (:class:`ValueGuard`): its name, bounds in units, registers.
    value: str | None = None
    value_low: Decimal | None = None
    value_high: Decimal | None = None
    value_addrs: tuple[int, ...] = ()


_ENTRY = "a register's address 0..{top} or name{more}"


def _register_entry(value: object, *,
                    ranges: bool = False) -> int | str | Guard | ValueGuard:
    """One entry of ``registers.read_only`` (``ranges`` False) or ``registers.protected``:
    an address, a name, or (protected only) a :class:`Guard` table; refused in one line
    saying what an entry may be."""
    what = _ENTRY.format(top=MAX_REGISTERS - 1,
                         more=", a field \"REG.FIELD\", or a table {field = ..., min = ..., "
                              "max = ...}" if ranges else "")
    if type(value) is int:
        if 0 <= value < MAX_REGISTERS:
            return value
        bound = f"at most {MAX_REGISTERS - 1}" if value > 0 else "at least 0"
        raise ValueError(f"must be {bound}, got {_show(value)}")
    if type(value) is str:
        if 1 <= len(value) <= 200:
            return value
        raise ValueError(f"an entry is {what}; got a name of {len(value)} characters")
    if ranges and isinstance(value, Mapping):
        try:
            if "value" in value:  # a typed value's range, in its unit
                return ValueGuard.model_validate(dict(value))
            return Guard.model_validate(dict(value))
        except ValidationError as error:
            first = error.errors()[0]
            if first["type"] == "extra_forbidden":
                raise ValueError(f"a protected range takes field or register, min and max; "
                                 f"not `{escape_text(str(first['loc'][-1]), 40)}`") from None
            raise ValueError(f"a protected range: {_describe(error)}") from None
    if isinstance(value, (Guard, ValueGuard)) and ranges:
        return value
    raise ValueError(f"an entry is {what}; got {_show(value)}")


_ReadOnlyEntry = Annotated[int | str, PlainValidator(_register_entry)]
_ProtectedEntry = Annotated[int | str | Guard | ValueGuard,
                            PlainValidator(lambda value: _register_entry(value, ranges=True))]


class RegisterPolicy(_Model):
    """Which registers tool calls may not write, or may write only with approval.

    Attributes:
        read_only: registers (addresses 0..65535, or names of the device's map) no tool call
            may write (``read-only-register``).
        protected: registers (addresses or names), typed values by name (``"SETPOINT"``:
            every register it holds), a typed value's range in units (:class:`ValueGuard`:
            ``{value = "SETPOINT", min = 30}``), fields (``"CTRL.MODE"``) or value ranges
            (:class:`Guard`: ``{field = "CTRL.MODE", min = 1}``) written only when the
            approval hook approves (``approval-denied`` otherwise). A field is guarded
            against writes that set it; a range against writes that set a value in it.
        guards: (after :meth:`for_map`) the protected fields and ranges, resolved.

    Raises:
        pydantic.ValidationError: an address is outside 0..65535, a name is empty, or a
            register is in both sets.
    """

    read_only: frozenset[_ReadOnlyEntry] = frozenset()
    protected: frozenset[_ProtectedEntry] = frozenset()
    guards: tuple[FieldGuard, ...] = Field(default=(), exclude=True)

    @model_validator(mode="after")
    def _disjoint(self) -> RegisterPolicy:
        both = sorted(self.read_only & self.protected, key=str)
        if both:
            raise ValueError(f"register {both[0]} is both read_only and protected; pick one")
        if self.guards:
            raise ValueError("`guards` is worked out from `protected`; it cannot be declared")
        return self

    def for_map(self, regmap: DeviceMap) -> RegisterPolicy:
        """These registers merged with the defaults of the device's map, names resolved to
        addresses: read-only is the map's read-only registers and this policy's; protected
        is this policy's when it lists ``protected`` at all (even empty), else the map's. A
        register both read-only and protected is read-only. Protected fields and ranges go to
        :attr:`guards`.

        Raises:
            PolicyError: this policy names an address, a register or a field that is not in
                ``regmap`` (the closest names said), or a range outside a field's values.
        """
        read_only = frozenset(_resolve(regmap, "read_only", item) for item in self.read_only)
        whole: set[int] = set()
        guards: list[FieldGuard] = []
        for item in sorted(self.protected, key=str):  # names, addresses and ranges
            if isinstance(item, Guard):
                guards.append(_guard(regmap, item))
            elif isinstance(item, ValueGuard):
                guards.append(_value_guard(regmap, item))
            elif isinstance(item, str) and regmap.named(item) is None and (
                    codec := getattr(regmap, "value", lambda _: None)(item)) is not None:
                # a typed value by name: every register it holds (its holding registers)
                whole.update(codec.addresses if codec.value.table == "holding" else ())
            elif isinstance(item, str) and regmap.named(item) is None and "." in item:
                guards.append(_guard(regmap, Guard(field=item)))
            else:
                whole.add(_resolve(regmap, "protected", item))
        both = sorted(read_only & whole)
        if both:
            raise PolicyError(f"register {regmap.label(both[0])} is both read_only and "
                              "protected; pick one")
        read_only |= regmap.read_only()
        protected = frozenset(whole) if "protected" in self.model_fields_set \
            else regmap.protected()
        kept = tuple(g for g in guards if g.addr not in read_only)
        return RegisterPolicy.model_construct(read_only=read_only,
                                              protected=protected - read_only, guards=kept)


def _resolve(regmap: DeviceMap, kind: str, item: object) -> int:
    """The address of a register a policy names (by address or by name).

    Raises:
        PolicyError: no register of ``regmap`` is at that address or has that name.
    """
    if isinstance(item, int):
        if regmap.at(item) is None:
            last = regmap.last
            raise PolicyError(
                f"`registers.{kind}`: register {item} is not a register of the device's map "
                f"(its registers are at "
                f"{'0..' + str(last) if regmap.contiguous else 'other addresses'})")
        return item
    register = regmap.named(str(item))
    if register is None:
        names = [r.name for r in regmap.registers if r.name]
        raise PolicyError(f"`registers.{kind}`: no register `{escape_text(str(item))}` in the "
                          f"device's map{_closest(str(item), names, 'registers')}")
    if register.table != "holding":  # the policy's lists are of holding registers
        raise PolicyError(f"`registers.{kind}`: register {register.label} is in the "
                          f"{register.table} table; the policy names holding registers "
                          "(input registers and discrete inputs are read-only already)")
    return register.addr


def _closest(name: str, names: list[str], kind: str) -> str:
    """``; did you mean X?`` (difflib, case-folded), or the names it has; or that it has none."""
    if not names:
        return f" (it names no {kind}: a map without names takes addresses)"
    folded = {each.casefold(): each for each in reversed(names)}
    if name.casefold() in folded:  # the same name but for case: that one alone
        return f"; did you mean {folded[name.casefold()]}? (names are case-sensitive)"
    close = difflib.get_close_matches(name.casefold(), list(folded), n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(folded[c] for c in close)}?"
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    return f"; its {kind}: {shown}"


def _guard(regmap: DeviceMap, guard: Guard) -> FieldGuard:
    """A :class:`Guard` resolved against ``regmap``.

    Raises:
        PolicyError: its field or register is not in ``regmap``, or its range is outside the
            values the field or register holds.
    """
    if guard.field is not None:
        found = regmap.find_field(guard.field)
        if found is None:
            paths = [f"{r.name}.{f.name}" for r in regmap.registers if r.name for f in r.fields]
            raise PolicyError(f"`registers.protected`: no field `{escape_text(guard.field)}` "
                              f"in the device's map{_closest(guard.field, paths, 'fields')}")
        register, field = found
        mask, lsb, top = field.mask, field.lsb, field.top
        what = f"field {register.name}.{field.name}"
    else:
        addr = _resolve(regmap, "protected", guard.register_name)
        held = regmap.at(addr)
        assert held is not None
        register, lsb, mask = held, 0, held.top  # its width's (255 for 8 bits)
        top = held.top
        what = f"register {register.label}"
    low = guard.min or 0
    high = top if guard.max is None else guard.max
    if high > top or low > top:
        shown = f"{low}..{guard.max}" if guard.max is not None else f"from {low}"
        raise PolicyError(f"`registers.protected`: {what} holds 0..{top}; the range {shown} "
                          "goes past that")
    if (low, high) != (0, top):
        what += f" (values {low}..{high})"
    return FieldGuard(register.addr, mask, lsb, low, high, what)


def _value_guard(regmap: DeviceMap, guard: ValueGuard) -> FieldGuard:
    """A :class:`ValueGuard` resolved against ``regmap``: its value's holding registers.

    Raises:
        PolicyError: the map has no such value (or none of its registers is a holding one).
    """
    codec = getattr(regmap, "value", lambda _: None)(guard.value)
    if codec is None or codec.value.table != "holding":
        names = [v.name for v in getattr(regmap, "values", ())]
        raise PolicyError(f"`registers.protected`: no typed value `{escape_text(guard.value)}` "
                          f"of holding registers in the device's map"
                          f"{_closest(guard.value, names, 'typed values')}")
    low = "" if guard.min is None else str(guard.min)
    high = "" if guard.max is None else str(guard.max)
    unit = f" {codec.value.unit}" if codec.value.unit else ""
    what = f"value {guard.value} (values {low}..{high}{unit})"
    return FieldGuard(codec.addresses[0], REGISTER_MAX, 0, 0, REGISTER_MAX,
                      escape_text(what, 120), guard.value, guard.min, guard.max,
                      codec.addresses)


def _value_hit(guard: FieldGuard, tool: Tool, arguments: Mapping[str, Any]) -> bool:
    """Whether a call that changes a guarded value's registers trips its range: a
    ``write_value`` of a number within it (compared exactly), or any other write to them."""
    if tool.name != "write_value" or arguments.get("name") != guard.value:
        return True
    given = arguments.get("value")
    if type(given) not in (int, Decimal, float):
        return True  # an enumerated name, text: not known in units
    number = Decimal(repr(given)) if type(given) is float else Decimal(cast("int", given))
    return ((guard.value_low is None or guard.value_low <= number)
            and (guard.value_high is None or number <= guard.value_high))


def guarded(guards: Iterable[FieldGuard], tool: Tool, arguments: Mapping[str, Any],
            changed: tuple[int, ...], regmap: DeviceMap) -> list[FieldGuard]:
    """The guards a call may trip: those of the registers it changes whose guarded bits it
    sets to a value in the guard's range. What a call writes is known for ``write_register``,
    ``write_registers`` and ``write_field`` (a field's write leaves the register's other
    fields as they are); any other tool that changes a guarded register trips its guard
    (approval is asked rather than a write let through unseen).
    """
    hits = []
    for guard in guards:
        if guard.value is not None:  # a typed value's range, in units
            if set(guard.value_addrs).intersection(changed) and _value_hit(
                    guard, tool, arguments):
                hits.append(guard)
            continue
        if guard.addr not in changed:
            continue
        written = _written(tool.name, arguments, guard.addr, regmap)
        if written is None:  # not known what the call writes there: ask
            hits.append(guard)
            continue
        bits, data = written
        if not bits & guard.mask:
            continue  # the call leaves the guarded bits as they are
        value = (data & guard.mask) >> guard.lsb
        if bits & guard.mask != guard.mask or guard.low <= value <= guard.high:
            hits.append(guard)
    return hits


def _written(tool: str, arguments: Mapping[str, Any], addr: int,
             regmap: DeviceMap) -> tuple[int, int] | None:
    """``(the bits written, their value)`` of register ``addr`` by a call, or None when it is
    not known."""
    held = regmap.at(addr)
    every = held.top if held is not None else REGISTER_MAX  # every bit of its width
    if tool == "write_register" and type(arguments.get("data")) is int:
        return every, arguments["data"]
    if tool == "write_registers" and type(arguments.get("addr")) is int:
        data = arguments.get("data")
        index = addr - arguments["addr"]
        if isinstance(data, list) and 0 <= index < len(data) and type(data[index]) is int:
            return every, data[index]
        return None
    if tool == "write_field":
        found = regmap.find_field(str(arguments.get("field")))
        if found is None or found[0].addr != addr:
            return None
        field = found[1]
        value = arguments.get("value")
        number = field.values.get(value) if type(value) is str else value
        if type(number) is not int:
            return None
        return field.mask, (number << field.lsb) & field.mask
    return None


class SessionPolicy(_Model):
    """What one named session may do.

    Attributes:
        scopes: ``["read"]`` (read-only) or ``["read", "write"]``; at least one scope.
        tools: the tool names offered to the session, in order; None offers every tool.
        rate_limit: this session's rate limit; None takes the policy's ``rate_limit``.
    """

    scopes: Annotated[frozenset[Scope], Field(min_length=1)] = frozenset(SCOPES)
    tools: tuple[str, ...] | None = None
    rate_limit: RateLimit | None = None


class Policy(_Model):
    """The gate's safety policy: limits, the register map, rate limits and sessions.

    Every field is optional; the empty policy allows everything, as a gate without one does.
    The public :class:`regdev.Policy` is this class with the MCP server's tables of a policy
    file, ``[http]`` and ``[approval]`` (``server/_access.py``): the gate enforces what is
    here, the server the rest, and a file with either table loads as ``regdev.Policy``.

    Attributes:
        timeout: seconds the gate waits for one device call before answering
            ``device-timeout`` (see :class:`~regdev.Gate`): a number in 0.001..86400 (one
            millisecond to one day, ``core/_limits.py``); None waits as long as the device
            backend does.
        max_input_bytes: cap on a raw call, in bytes; None keeps the gate's default (65536).
        max_output_bytes: cap on an observation, in bytes; None keeps the default (8192).
        registers: the read-only and protected registers (merged with the device's register
            map's, see :meth:`RegisterPolicy.for_map`).
        rate_limit: every session's rate limit unless its own says otherwise; None: no limit.
        sessions: named sessions; ``"default"`` is used when a caller names none (and allows
            every scope and tool when not declared).
        tool_call_ids_as_keys: when True, the tool call id that OpenAI and Anthropic give each
            tool call (``call_...``, ``toolu_...``) is the call's idempotency key, as
            ``"openai:<id>"`` or ``"anthropic:<id>"`` (scoped to the call's loop when it has
            one: ``"openai@<n>:<loop id>:<id>"``); a runtime that re-sends an assistant
            turn then gets replays, not second writes. Only for ids unique per call: a
            repeated id (Kimi K2's ``functions.NAME:0`` restarts each turn; models copy
            ``call_3`` from the history) is answered as a replay of the earlier call, not run
            (docs/safety.md, "Ids that repeat"). False (the default): those ids are only
            correlation ids, and calls in those dialects carry no key.
        approve: the approval hook for protected registers (Python only, never in a file);
            None denies every protected write.

    Raises:
        pydantic.ValidationError: a field is invalid (:meth:`from_file` and :meth:`from_dict`
            turn it into a one-line :class:`~regdev.PolicyError`).
    """

    timeout: Seconds | None = None
    max_input_bytes: _Bytes | None = None
    max_output_bytes: _Bytes | None = None
    registers: RegisterPolicy = RegisterPolicy()
    rate_limit: RateLimit | None = None
    sessions: dict[str, SessionPolicy] = Field(default_factory=dict)
    tool_call_ids_as_keys: Annotated[bool, Field(strict=True)] = False
    approve: Approver | None = Field(default=None, exclude=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "policy",
                  approve: Approver | None = None) -> Self:
        """Validate a policy given as decoded TOML or JSON.

        Args:
            data: the policy object (the file format in ``docs/safety.md``).
            source: names the policy in error messages, e.g. a file path.
            approve: the approval hook (it cannot be declared in data).

        Raises:
            PolicyError: one line naming ``source``, the field and the problem.
        """
        if not isinstance(data, Mapping):
            raise PolicyError(f"{source}: a policy must be an object (a TOML table)")
        if "approve" in data:
            raise PolicyError(f"{source}: `approve` is a Python callable; it cannot be "
                              "declared in a file")
        try:
            policy = cls.model_validate(dict(data))
        except ValidationError as error:
            raise PolicyError(f"{source}: {_describe(error, cls)}") from None
        return policy.model_copy(update={"approve": approve}) if approve else policy

    @classmethod
    def from_file(cls, path: str | Path, *, approve: Approver | None = None) -> Self:
        """Load a policy from a TOML (``.toml``) or JSON (``.json``) file, the suffix in any
        case. Any other suffix is refused, before the file is read: a policy in Python (one
        with an approval hook, say) is built in your own program, as ``Policy(...)``, never
        loaded from a file.

        A key given twice in one table or object is an error in both formats (TOML 1.0
        forbids it; for JSON, RFC 8259 leaves it to the parser, and a silent "last one wins"
        could drop a restriction).

        Args:
            path: the policy file, UTF-8.
            approve: the approval hook for protected registers.

        Raises:
            PolicyError: the file's suffix is not ``.toml`` nor ``.json``, the file cannot be
                read, is not TOML or strict JSON (no repeated keys, no NaN or Infinity), or is
                not a valid policy; one line naming the file and the field.
        """
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in POLICY_SUFFIXES:
            got = f"the suffix {path.suffix}" if path.suffix else "no suffix"
            python = (" (a policy in Python is built in your own program as regdev.Policy(...) "
                      "and given to Gate(policy=...); a file is data only)"
                      if suffix in (".py", ".pyw") else "")
            raise PolicyError(f"{path}: a policy file is TOML (.toml) or JSON (.json), by its "
                              f"suffix; this one has {got}{python}")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise PolicyError(f"cannot read {path}: {error.strerror or error}") from None
        except UnicodeDecodeError as error:
            raise PolicyError(f"cannot read {path}: not UTF-8 text (byte {error.start})"
                              ) from None
        toml = suffix == ".toml"
        try:
            data = tomllib.loads(text) if toml else load_json(text)
        except tomllib.TOMLDecodeError as error:
            raise PolicyError(f"{path}: not valid TOML: {toml_problem(error)}") from None
        except ValueError as error:
            if toml:  # int() refused a number tomllib read
                reason = (f"an integer has more than {sys.get_int_max_str_digits()} digits, "
                          "the most Python reads")
                raise PolicyError(f"{path}: not valid TOML: {reason}") from None
            # load_json's message is in regdev's words already
            raise PolicyError(f"{path}: not valid JSON: {error}") from None
        return cls.from_dict(data, source=str(path), approve=approve)

    def session_policy(self, name: str = "default") -> SessionPolicy:
        """The declared session ``name`` (``"default"`` allows everything when not declared).

        Raises:
            PolicyError: no session of that name is declared.
        """
        if name in self.sessions:
            return self.sessions[name]
        if name == "default":
            return SessionPolicy()
        known = ", ".join(sorted(self.sessions)) or "none"
        raise PolicyError(f"the policy declares no session `{escape_text(name)}`; sessions: "
                          f"{known}")

    def session(self, name: str = "default", *, caller: str | None = None,
                shared: Callable[[str, float, int], Bucket | None] | None = None) -> Session:
        """A new live session (with its own full rate-limit bucket) declared as ``name``.

        :meth:`Gate.session <regdev.Gate.session>` keeps one per name, so that a named
        session's rate limit holds across calls; use that one for calls through a gate.
        ``regdev serve --http`` makes one per authenticated caller (``caller``), so that each
        caller has its own rate limit whatever connections it uses; with ``shared`` (the
        audit store's :meth:`~regdev.AuditLog.shared_bucket`), that bucket is the store's,
        shared by every process of the store (PostgreSQL), named by the caller and session.

        Raises:
            PolicyError: no session of that name is declared.
        """
        spec = self.session_policy(name)
        limit = spec.rate_limit or self.rate_limit
        bucket = None
        if shared is not None and limit is not None:
            bucket = shared(f"{caller or ''}/{name}", limit.rate, limit.burst)
        return Session(name, scopes=spec.scopes, tools=spec.tools, rate_limit=limit,
                       caller=caller, bucket=bucket)


def _describe(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """A pydantic error as one line: the first problem's location (in ``model``, the policy
    by default), what is expected, and what was given."""
    first = error.errors()[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                    for part in first["loc"] if part != "[key]").lstrip(".")
    kind, ctx = first["type"], first.get("ctx") or {}
    if kind == "extra_forbidden":
        fields = _fields_at(first["loc"][:-1], model or Policy)
        message = f"unknown field; allowed here: {', '.join(fields)}"
    elif kind == "value_error":  # our own validators: their message is already ours
        message = str(ctx.get("error", first["msg"]))
    else:
        bounds = {name: int(value) if type(value) is float and value.is_integer() else value
                  for name, value in ctx.items()}  # "greater than 0", not "0.0"
        message = _EXPECTED.get(kind, "").format(**bounds) or first["msg"]
        given = first.get("input")
        exact = type(given) is int or (isinstance(given, Decimal) and given.is_finite())
        if kind in ("float_type", "finite_number") and exact:  # a finite number past a float
            message = "must be a finite number (at most about 1.8e308)"
        if kind != "missing" and "input" in first:
            message += f", got {_show(given)}"
            if kind == "greater_than" and isinstance(given, Decimal) and exact and given > 0:
                message += " (0 as a 64-bit float)"  # 1E-400 is greater than 0, its float not
    more = error.error_count() - 1
    tail = f" (and {more} more problem{'s' * (more > 1)})" if more else ""
    if not where and kind == "value_error":  # a check across fields: its message names them
        return f"{message}{tail}"
    return f"`{where or '(top)'}`: {message}{tail}"


#: What a field expects, by pydantic error type (``{name}``: the error's context values).
_EXPECTED: dict[str, str] = {
    "missing": "required",
    "greater_than": "must be greater than {gt}",
    "seconds_range": "must be a number of seconds in {range}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "finite_number": "must be a finite number",
    "too_short": "needs at least {min_length} item(s)",
    "too_long": "takes at most {max_length} item(s)",
    "literal_error": "must be {expected}",
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "dict_type": "must be a table (a JSON object)",
    "model_type": "must be a table (a JSON object)",
    "model_attributes_type": "must be a table (a JSON object)",
    "list_type": "must be an array",
    "tuple_type": "must be an array",
    "set_type": "must be an array",
    "frozen_set_type": "must be an array",
    "callable_type": "must be a callable",
    "string_pattern_mismatch": "must match the pattern {pattern}",
}


def _show(value: object) -> str:
    """A value given in a policy, as TOML or JSON would show it (a number exactly as decoded,
    ``1E+2`` for JSON's ``1e2``; an integer too long to write out by its size), cut to 40
    characters."""
    if type(value) is int or isinstance(value, Decimal):
        return show_value(value)
    try:
        if isinstance(value, (list, dict)):
            text = _encode_json(value).decode()
        else:
            text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):  # not JSON, or an integer too long to write, deep inside
        text = a_json_type(value)
    return text if len(text) <= 40 else text[:39] + "..."


_encode_json = msgspec.json.Encoder(decimal_format="number").encode


def _nested(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field's annotation holds (``Model``, ``Model | None``), else the model of
    each entry of a table of named entries (``dict[str, Model]``, then True)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if get_origin(annotation) is dict:
        return _nested(get_args(annotation)[1])[0], True
    for arg in get_args(annotation):
        found = _nested(arg)
        if found[0] is not None:
            return found
    return None, False


def _fields_at(loc: tuple[int | str, ...], model: type[BaseModel]) -> list[str]:
    """The fields a policy file may give at ``loc`` (a pydantic error location) of ``model``
    (the policy, or an extension of it), found through the models' own annotations."""
    parts = list(loc)
    while parts:
        field = model.model_fields.get(str(parts.pop(0)))
        nested, named = _nested(field.annotation) if field is not None else (None, False)
        if nested is None:
            return []
        if named and parts:
            parts.pop(0)  # the entry's name
        model = nested
    return [name for name in model.model_fields if name != "approve"]


class Bucket(Protocol):
    """A rate limit's bucket: this process's :class:`TokenBucket`, or one a shared store
    keeps for every process (:meth:`~regdev.AuditLog.shared_bucket`)."""

    rate: float
    burst: int

    def take(self) -> float:
        """Take one token; return 0.0 when taken, else the seconds until one is available."""
        ...


class TokenBucket:
    """A thread-safe token bucket (the classic rate limiter).

    Args:
        rate: tokens added per second (> 0).
        burst: the bucket's size, and its content at the start (>= 1).
        clock: a monotonic clock in seconds (for tests).
    """

    def __init__(self, rate: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Take one token; return 0.0 when taken, else the seconds until one is available."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            return (1.0 - self._tokens) / self.rate


class Session:
    """One caller of the gate: a name, its scopes, the tools it is offered, its rate limit.

    A session is live state (its token bucket); share one object between the calls of one
    caller. Thread-safe.

    Args:
        name: names the session in refusals and in the audit log.
        scopes: ``{"read"}`` for a read-only session, ``{"read", "write"}`` (the default)
            for full access.
        tools: the tool names offered to this session; None offers every tool of the gate.
        rate_limit: calls per second and burst; None: no limit.
        caller: who the caller is, when it was authenticated (``regdev serve --http`` makes
            one session per bearer token's identity, e.g. ``"token:alice"``); recorded with
            each call in the audit log (column ``caller``) and named in approval questions.
            None: not authenticated (in process, stdio).
        bucket: the rate limit's bucket when it is kept elsewhere (a shared store's); None:
            a :class:`TokenBucket` of this session's own.

    Raises:
        ValueError: no scope, or a scope other than ``read`` and ``write``.
    """

    __slots__ = ("_bucket", "_can", "caller", "limited", "name", "rate_limit", "scopes",
                 "tools")

    def __init__(self, name: str = "default", *, scopes: Iterable[str] = SCOPES,
                 tools: Iterable[str] | None = None,
                 rate_limit: RateLimit | None = None, caller: str | None = None,
                 bucket: Bucket | None = None) -> None:
        self.name = name
        self.caller = caller
        self.scopes = frozenset(scopes)
        if not self.scopes or not self.scopes <= set(SCOPES):
            raise ValueError(f"scopes must be a non-empty subset of {SCOPES}, "
                             f"got {sorted(self.scopes)}")
        #: The offered tool names in order, or None for every tool.
        self.tools = tuple(tools) if tools is not None else None
        self.rate_limit = rate_limit
        self._bucket: Bucket | None = None
        if rate_limit is not None:
            self._bucket = bucket or TokenBucket(rate_limit.rate, rate_limit.burst)
        self._can = ("write" in self.scopes, "read" in self.scopes)  # indexed by read_only
        #: True when the scopes or the rate limit can refuse a call (else authorize has
        #: nothing to ask this session).
        self.limited = not all(self._can) or self._bucket is not None

    def offers(self, tool: str) -> bool:
        """True when the tool named ``tool`` is offered to this session."""
        return self.tools is None or tool in self.tools

    def check_scope(self, tool: Tool) -> Refusal | None:
        """Step 1: ``denied-<tool>`` when the scopes do not cover ``tool``, else None."""
        if self._can[tool.read_only]:
            return None
        needed = "read" if tool.read_only else "write"
        held = " and ".join(sorted(self.scopes))
        return refuse(f"denied-{tool.name}",
                      f"session {escape_text(self.name)} holds the {held} scope; {tool.name} "
                      f"needs the {needed} scope, so this session cannot call it")

    def take_token(self) -> Refusal | None:
        """Step 4: spend one call of the rate limit; ``rate-limited`` when none is left."""
        if self._bucket is None:
            return None
        wait = self._bucket.take()
        if not wait:
            return None
        limit = self._bucket
        return refuse("rate-limited",
                      f"session {escape_text(self.name)} is over its rate limit of {limit.rate:g} "
                      f"call{'s' * (limit.rate != 1)} per second (burst {limit.burst}); "
                      f"retry in {_duration(wait)}")

    def __repr__(self) -> str:
        caller = f", caller={self.caller!r}" if self.caller is not None else ""
        return (f"Session({self.name!r}, scopes={sorted(self.scopes)!r}, "
                f"tools={self.tools!r}, rate_limit={self.rate_limit!r}{caller})")


#: Units for a long wait, largest first: (seconds in one, its name).
_UNITS = ((365.25 * 86400, "years"), (86400, "days"), (3600, "h"), (60, "min"))


def _duration(seconds: float) -> str:
    """A wait in words: ``0.25 s`` under 100 seconds, else in the largest unit that keeps
    at least 2 of it (``2.5 h``, ``31.7 years``); finite because a rate is at least
    :data:`MIN_RATE`."""
    if seconds < 100:
        return f"{seconds:.2f} s"
    for size, unit in _UNITS:
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds / 60:.1f} min"


#: Every register address of the default map: what a tool that changes the device without an
#: ``addr`` changes there.
EVERY_REGISTER: tuple[int, ...] = tuple(range(REGISTER_COUNT))


def changed_registers(tool: Tool, arguments: Mapping[str, Any],
                      every: tuple[int, ...] = EVERY_REGISTER) -> tuple[int, ...]:
    """The registers a call may change: none for a read-only tool; what the tool's
    ``changes`` says when it has one (``every`` for None); else ``arguments["addr"]`` when it
    is an integer; else ``every`` (a tool such as a reset touches them all)."""
    if tool.read_only:
        return ()
    if tool.changes is not None:
        return tool.changes(dict(arguments)) or every
    addr = arguments.get("addr")
    return (addr,) if type(addr) is int else every


def _register(addr: int) -> str:
    return str(addr)


def check_read_only(registers: RegisterPolicy, tool: Tool, changed: tuple[int, ...], *,
                    every: tuple[int, ...] = EVERY_REGISTER,
                    label: Callable[[int], str] = _register,
                    by_map: frozenset[int] = frozenset()) -> Refusal | None:
    """Step 2: ``read-only-register`` when the call changes a register marked read-only.

    The message names what made the register read-only: the device's register map (an
    address in ``by_map``) or the policy (``registers.read_only`` of a :class:`Policy`).

    Args:
        registers: the read-only and protected registers.
        tool: the tool called.
        changed: the registers the call changes (:func:`changed_registers`).
        every: every register of the device (a call changing these changes "every register").
        label: how a message names a register (``CTRL (0x01)``; the address by default).
        by_map: the registers the device's register map makes read-only (every field
            ``sw = r``); the others in ``registers.read_only`` are the policy's.
    """
    read_only = cast("frozenset[int]", registers.read_only)  # addresses, after for_map
    if len(changed) == 1:
        if changed[0] not in read_only:
            return None
        return refuse("read-only-register",
                      f"register {label(changed[0])} is read-only {_source(changed[0], by_map)}"
                      "; no call can write it", "authorize")
    whole = changed == every
    # A call that changes every register (a device reset) sets the map's read-only registers
    # to their reset values as the hardware does: only the policy's read-only ones refuse it.
    hit = sorted(read_only.intersection(changed) - (by_map if whole else set()))
    if not hit:
        return None
    if not whole:
        return refuse("read-only-register",
                      f"{tool.name} writes register {label(hit[0])}, which is read-only "
                      f"{_source(hit[0], by_map)}; no call can write it (leave it out)",
                      "authorize")
    return refuse("read-only-register",
                  f"{tool.name} changes every register, and register {label(hit[0])} is "
                  f"read-only {_source(hit[0], by_map)}; no call can run it", "authorize")


def _source(addr: int, by_map: frozenset[int]) -> str:
    """What made register ``addr`` read-only, as the end of "register 0 is read-only ..."."""
    return "in this device's register map" if addr in by_map else "by the gate's policy"


def ask_approval(registers: RegisterPolicy, tool: Tool, changed: tuple[int, ...],
                 approve: Approver | None,
                 request: Callable[[int | None], ApprovalRequest], *,
                 every: tuple[int, ...] = EVERY_REGISTER,
                 label: Callable[[int], str] = _register,
                 answered: Callable[[Approval], None] | None = None,
                 guards: Sequence[FieldGuard] = ()) -> Refusal | None:
    """Step 5: for a call that changes a protected register, ask ``approve``;
    ``approval-denied`` unless it returns ``True`` or an :class:`Approval` that approves
    (anything else it returns, or an ``Exception`` it raises, denies; ``KeyboardInterrupt``
    and ``SystemExit`` go on up).

    Args:
        registers: the read-only and protected registers.
        tool: the tool called.
        changed: the registers the call changes (:func:`changed_registers`).
        approve: the approval hook, or None (every protected write is denied).
        request: builds the :class:`ApprovalRequest` for an address, or None for every
            register (called only when the hook is asked).
        every: every register of the device.
        label: how a message names a register.
        answered: called with the hook's :class:`Approval` when it returned one (the gate
            records who answered, and how).
        guards: the protected fields and ranges the call trips (:func:`guarded`): asked
            about as a protected register is.
    """
    hit = sorted(cast("frozenset[int]", registers.protected).intersection(changed))
    if not hit and not guards:
        return None
    whole = len(changed) > 1 and changed == every
    shown = f"register {label(hit[0])}" if hit else guards[0].what
    addr = hit[0] if hit else guards[0].addr
    what = (f"{tool.name} changes every register, and {shown} is protected"
            if whole else f"{shown} is protected")
    if approve is None:
        return refuse("approval-denied",
                      f"{what}: writing it needs approval, and no approver is configured",
                      "authorize")
    reason, nobody = None, False
    try:
        answer = approve(request(None if whole else addr))
    except Exception:  # the hook's failure is a denial, never an approval
        logger.exception("the approval hook raised; the call is denied")
        answer = False
    if type(answer) is Approval:
        if answered is not None:
            answered(answer)
        approved, reason = answer.approved is True, answer.reason
        nobody = answer.approver is None and reason is not None  # no one said no: why not
    else:
        approved = answer is True
    if approved:
        return None
    why = f" ({reason})" if reason else ""
    if nobody:  # a timeout, a caller gone, too many questions open: not a person's no
        return refuse("approval-denied", f"{what} and this "
                      f"{'call' if whole else 'write'} was not approved{why}", "authorize")
    return refuse("approval-denied", f"{what} and the approver denied this "
                  f"{'call' if whole else 'write'}{why}", "authorize")
