"""Refusals and observations: what each stage decides, and what goes back to the model.

An observation is one JSON object (see ``docs/errors.md``)::

    {"ok": true,  "tool": "write_register", "result": {"addr": 3, "data": 255}}
    {"ok": false, "stage": "validate", "code": "range-addr",
     "message": "addr 16 is outside 0..15", "retryable": true}

An optional ``"id"`` echoes the call's correlation id, and ``"replay": true`` marks the
stored observation of an earlier call with the same idempotency key (nothing ran again).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, get_args

import msgspec

#: Decimal numbers (exact numbers of a result) as JSON numbers, never as strings.
_encode_json = msgspec.json.Encoder(decimal_format="number").encode

__all__ = [
    "CODES",
    "FIXED_CODES",
    "NAMED",
    "NAMED_CODES",
    "PIPELINE",
    "Code",
    "Observation",
    "PipelineStage",
    "Refusal",
    "Stage",
    "code_entry",
    "refuse",
]

#: The stages of the pipeline, in order. The names are spelled here only: the gate runs its
#: methods by them (``Gate._parse`` ...), and the audit log names its columns after them
#: (``parse_ns`` ...).
PipelineStage = Literal["parse", "validate", "authorize", "execute", "observe"]
#: The stage a refusal names: one of the pipeline's, or ``internal`` (a failure in regdev).
Stage = Literal[PipelineStage, "internal"]
#: The pipeline's stages in order, as a tuple (from :data:`PipelineStage`).
PIPELINE: tuple[PipelineStage, ...] = get_args(PipelineStage)

class Code(NamedTuple):
    """What the table of verdict codes says of one code (or one family of named codes)."""

    #: The stages that give it; the first is its section in ``docs/errors.md``. A code given
    #: by more than one stage (``audit-error``: the log is closed, a write's intent or its
    #: record could not be committed) says so, and its refusals name the stage.
    stages: tuple[Stage, ...]
    #: Whether a corrected call could succeed (false for policy denials, device errors).
    retryable: bool


#: Every verdict code that names no tool and no argument: the one table. ``docs/errors.md`` has
#: a section for each, under its first stage (``tests/test_docs.py`` checks it against this).
CODES: dict[str, Code] = {
    "too-large": Code(("parse",), True),
    "not-json": Code(("parse",), True),
    # (a tool call written into the reply's text instead of made: the loop's, never the gate's)
    "call-in-text": Code(("parse",), True),
    "not-an-object": Code(("validate",), True),
    "missing-tool": Code(("validate",), True),
    "bad-arguments": Code(("validate",), True),
    "wrong-tool": Code(("validate",), True),
    "unknown-tool": Code(("validate",), True),
    "unknown-argument": Code(("validate",), True),
    "bad-idempotency-key": Code(("validate",), True),
    "no-register": Code(("validate",), True),
    "read-only-field": Code(("validate",), False),
    "reserved-bits": Code(("validate",), True),
    "field-value": Code(("validate",), True),
    # (at execute: a value with a scale factor, which converts only once the factor is read)
    "resolution": Code(("validate", "execute"), True),
    "read-only-register": Code(("authorize", "validate"), False),
    # (a raw write into the registers of a typed value with a range: write_value writes it)
    "value-register": Code(("validate",), True),
    "idempotency-conflict": Code(("authorize",), False),
    "idempotency-in-progress": Code(("authorize",), True),
    # (a device that cannot say its reset epoch: a key used is neither run again nor replayed)
    "idempotency-unconfirmed": Code(("authorize",), False),
    "rate-limited": Code(("authorize",), True),
    # (at execute: an approved register no longer holds the value its approver was shown)
    "approval-denied": Code(("authorize", "execute"), False),
    "device-timeout": Code(("execute",), True),
    # (at authorize: the device could not be asked its reset epoch for a keyed write)
    "device-unavailable": Code(("execute", "authorize"), True),
    "device-busy": Code(("execute", "authorize"), True),
    # (a serial line another process of the fleet holds the lease of; at authorize: asked for
    # the device's reset epoch before a keyed write)
    "line-elsewhere": Code(("execute", "authorize"), True),
    "device-error": Code(("execute",), False),
    "outcome-unknown": Code(("execute",), False),
    "output-too-large": Code(("observe",), False),
    # (at authorize: the log is closed or failing; at execute: a write's intent not recorded)
    "audit-error": Code(("observe", "authorize", "execute"), False),
    "internal-error": Code(("internal",), False),
}
#: The families of verdict codes followed by a name, ``KIND-NAME``: an argument's dotted path
#: (``missing-limits.low``), or a tool's name (``denied-write_register``).
NAMED: dict[str, Code] = {
    "missing": Code(("validate",), True),
    "type": Code(("validate",), True),
    "range": Code(("validate",), True),
    "denied": Code(("authorize",), False),
}
#: The codes of :data:`CODES` (what ``regdev audit --code`` and replay check against).
FIXED_CODES: frozenset[str] = frozenset(CODES)
#: The kinds of :data:`NAMED`.
NAMED_CODES: tuple[str, ...] = tuple(NAMED)


def code_entry(code: str) -> Code | None:
    """The table's entry for ``code`` (a fixed code, or ``KIND-NAME`` of a named family), or
    None when it is no verdict code of regdev's."""
    entry = CODES.get(code)
    if entry is None:
        kind, dash, _ = code.partition("-")
        if dash:  # (the name may be empty: a schema may declare a property "")
            entry = NAMED.get(kind)
    return entry


def refuse(code: str, message: str, stage: Stage | None = None) -> Refusal:
    """A refusal with ``code``, at the stage the table gives it.

    Args:
        code: a verdict code of :data:`CODES`, or ``KIND-NAME`` of a family of :data:`NAMED`.
        message: one line for the model: what was wrong and what is allowed.
        stage: which of its stages, for a code that more than one stage gives; else None.

    Raises:
        ValueError: ``code`` is in no table; or ``stage`` is not one of its stages, or is
            None for a code that more than one stage gives (a mistake in regdev's source).
    """
    entry = code_entry(code)
    if entry is None:
        raise ValueError(f"{code!r} is not a verdict code in the table")
    if stage is None:
        if len(entry.stages) > 1:
            raise ValueError(f"{code!r} is given at {', '.join(entry.stages)}: name the stage")
        stage = entry.stages[0]
    elif stage not in entry.stages:
        raise ValueError(f"{code!r} is not given at {stage}")
    return Refusal(stage, code, message)


def _retryable(code: str) -> bool:
    """Whether the model can fix the call and try again (a policy denial it cannot); a code
    in no table (an old audit record's) counts as retryable."""
    entry = code_entry(code)
    return entry is None or entry.retryable


class Refusal(msgspec.Struct, frozen=True, gc=False):
    """One stage's refusal of a call.

    (A frozen ``msgspec.Struct``, like :class:`Observation`: made on every call, and a frozen
    dataclass takes about 1 us to build where a Struct takes 0.1 to 0.2 us.)

    Attributes:
        stage: the stage that refused: one of :data:`PIPELINE`, or ``internal``.
        code: the verdict code, e.g. ``"range-addr"`` (see ``docs/errors.md``).
        message: one line for the model: what was wrong and what is allowed.
    """

    stage: Stage
    code: str
    message: str

    @property
    def retryable(self) -> bool:
        """True when a corrected call could succeed (false for policy denials, device errors)."""
        return _retryable(self.code)


class Observation(msgspec.Struct, frozen=True, gc=False):
    """The one JSON object that goes back to the model after a call.

    Whether the call succeeded is not stored apart from why it failed: :attr:`ok` is
    ``refusal is None``, so an observation can never say both (and :meth:`to_dict`, the MCP
    ``isError`` and the audit log's ``ok`` column all read the same thing).

    Attributes:
        tool: the tool that ran (on success), else None.
        result: the tool's result object (on success), e.g. ``{"addr": 3, "data": 255}``.
        refusal: why the call was refused or failed; None when it succeeded.
        id: the call's correlation id, echoed back when the call carried one.
        replay: True when this is the stored observation of an earlier call with the same
            idempotency key and arguments: the call was not executed again.
    """

    tool: str | None = None
    result: dict[str, Any] | None = None
    refusal: Refusal | None = None
    id: str | None = None
    replay: bool = False

    @classmethod
    def success(cls, tool: str, result: dict[str, Any], call_id: str | None = None) -> Observation:
        """An accepted call's observation."""
        return cls(tool, result, id=call_id)

    @classmethod
    def refused(cls, refusal: Refusal, call_id: str | None = None) -> Observation:
        """A refused or failed call's observation."""
        return cls(refusal=refusal, id=call_id)

    @property
    def ok(self) -> bool:
        """True when the call ran on the device and the device acknowledged it: no refusal."""
        return self.refusal is None

    @property
    def stage(self) -> str | None:
        """The refusing stage, or None on success."""
        return self.refusal.stage if self.refusal else None

    @property
    def code(self) -> str | None:
        """The verdict code, or None on success."""
        return self.refusal.code if self.refusal else None

    @property
    def message(self) -> str | None:
        """The one-line message for the model, or None on success."""
        return self.refusal.message if self.refusal else None

    def to_dict(self) -> dict[str, Any]:
        """The observation as the JSON object sent to the model (see the module docstring)."""
        out: dict[str, Any]
        if self.refusal is None:
            out = {"ok": True, "tool": self.tool, "result": self.result}
        else:
            out = {
                "ok": False,
                "stage": self.refusal.stage,
                "code": self.refusal.code,
                "message": self.refusal.message,
                "retryable": self.refusal.retryable,
            }
        if self.id is not None:
            out["id"] = self.id
        if self.replay:
            out["replay"] = True
        return out

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Observation:
        """Rebuild an observation from :meth:`to_dict`'s output (e.g. a stored one).

        Raises:
            KeyError, TypeError: ``value`` is not an observation object.
        """
        if value["ok"]:
            return cls(value.get("tool"), value.get("result"), id=value.get("id"),
                       replay=bool(value.get("replay")))
        return cls(refusal=Refusal(value["stage"], value["code"], value["message"]),
                   id=value.get("id"), replay=bool(value.get("replay")))

    def to_json(self) -> str:
        """The observation as one line of JSON text (a ``Decimal`` in a result written as the
        exact JSON number it is, never as a string)."""
        return _encode_json(self.to_dict()).decode()
