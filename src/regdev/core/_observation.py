"""Refusals and observations: what each stage decides, and what goes back to the model.

An observation is one JSON object (see ``docs/errors.md``)::

    {"ok": true,  "tool": "write_register", "result": {"addr": 3, "data": 255}}
    {"ok": false, "stage": "validate", "code": "range-addr",
     "message": "addr 16 is outside 0..15", "retryable": true}

An optional ``"id"`` echoes the call's correlation id, and ``"replay": true`` marks the
stored observation of an earlier call with the same idempotency key (nothing ran again).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

#: Decimal numbers (exact numbers of a result) as JSON numbers, never as strings.
_encode_json = msgspec.json.Encoder(decimal_format="number").encode

__all__ = ["FIXED_CODES", "NAMED_CODES", "PIPELINE", "Observation", "PipelineStage", "Refusal",
           "Stage"]

#: The stages of the pipeline, in order. The names are spelled here only: the gate runs its
#: methods by them (``Gate._parse`` ...), and the audit log names its columns after them
#: (``parse_ns`` ...).
PipelineStage = Literal["parse", "validate", "authorize", "execute", "observe"]
#: The stage a refusal names: one of the pipeline's, or ``internal`` (a failure in regdev).
Stage = Literal[PipelineStage, "internal"]
#: The pipeline's stages in order, as a tuple (from :data:`PipelineStage`).
PIPELINE: tuple[PipelineStage, ...] = get_args(PipelineStage)

#: Every verdict code that names no tool and no argument, by stage (docs/errors.md has a
#: section for each). The others are ``missing-ARG``, ``type-ARG``, ``range-ARG`` (ARG an
#: argument's dotted path, e.g. ``limits.low``) and ``denied-TOOL``: see :data:`NAMED_CODES`.
FIXED_CODES: frozenset[str] = frozenset({
    "too-large", "not-json", "call-in-text",                                   # parse
    "not-an-object", "missing-tool", "bad-arguments", "wrong-tool", "unknown-tool",
    "unknown-argument", "bad-idempotency-key",
    "no-register", "read-only-field", "reserved-bits", "field-value",          # validate
    "read-only-register", "idempotency-conflict", "idempotency-in-progress",
    "rate-limited", "approval-denied",                                         # authorize
    "device-timeout", "device-unavailable", "device-busy", "device-error",     # execute
    "outcome-unknown",
    "output-too-large", "audit-error",                                         # observe
    "internal-error",                                                          # internal
})
#: The verdict codes followed by a name: an argument's dotted path, or a tool's name
#: (``denied``).
NAMED_CODES: tuple[str, ...] = ("missing", "type", "range", "denied")

_NOT_RETRYABLE = frozenset(
    {"approval-denied", "read-only-register", "read-only-field", "idempotency-conflict",
     "device-error", "outcome-unknown",
     "output-too-large", "internal-error", "audit-error"}
)


def _retryable(code: str) -> bool:
    """Whether the model can fix the call and try again (a policy denial it cannot)."""
    return code not in _NOT_RETRYABLE and not code.startswith("denied-")


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
