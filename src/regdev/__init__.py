"""regdev: a validating tool backend for a 16-register, 8-bit device driven by model agents.

A model's tool call is untrusted data: :class:`Gate` parses it, validates it in a fixed order
(shape, name, fields, types, ranges; the first failure decides), authorizes it against a
:class:`Policy` for the caller's :class:`Session`, and only then runs it on a :class:`Device`.
The result or the refusal comes back as one :class:`Observation`, and an :class:`AuditLog`
records every call.
"""

from __future__ import annotations

__version__ = "0.1.0"

from ._audit import AuditLog, AuditRecord, read_audit
from ._demo import ScriptedProposer
from ._device import DATA_MAX, REGISTER_COUNT, Device, RegisterFile, TimeoutDevice
from ._errors import (
    AuditError,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    LocalProtocolError,
    PolicyError,
    ProtocolError,
    RegdevError,
    RegisterRangeError,
    RemoteProtocolError,
    SchemaError,
    TransportError,
)
from ._gate import Gate
from ._loop import LoopResult, Step, call_with_retry, run_loop
from ._observation import Observation, Refusal
from ._parse import DIALECTS, ParsedCall, parse
from ._policy import ApprovalRequest, Policy, RateLimit, RegisterMap, Session, SessionPolicy
from ._tools import READ_REGISTER, REGISTER_TOOLS, WRITE_REGISTER, Tool, ToolSet
from ._validate import ReferenceValidator

__all__ = [
    "DATA_MAX",
    "DIALECTS",
    "READ_REGISTER",
    "REGISTER_COUNT",
    "REGISTER_TOOLS",
    "WRITE_REGISTER",
    "ApprovalRequest",
    "AuditError",
    "AuditLog",
    "AuditRecord",
    "Device",
    "DeviceError",
    "DeviceRefused",
    "DeviceTimeout",
    "Gate",
    "LocalProtocolError",
    "LoopResult",
    "Observation",
    "ParsedCall",
    "Policy",
    "PolicyError",
    "ProtocolError",
    "RateLimit",
    "ReferenceValidator",
    "Refusal",
    "RegdevError",
    "RegisterFile",
    "RegisterMap",
    "RegisterRangeError",
    "RemoteProtocolError",
    "SchemaError",
    "ScriptedProposer",
    "Session",
    "SessionPolicy",
    "Step",
    "TimeoutDevice",
    "Tool",
    "ToolSet",
    "TransportError",
    "__version__",
    "call_with_retry",
    "parse",
    "read_audit",
    "run_loop",
]
