"""regdev: a validating tool backend for a 16-register, 8-bit device driven by model agents.

A model's tool call is untrusted data: :class:`Gate` parses it, validates it in a fixed order
(shape, name, fields, types, ranges; the first failure decides), authorizes it against a
:class:`Policy` for the caller's :class:`Session`, and only then runs it on a :class:`Device`:
the in-process :class:`RegisterFile`, a :class:`SerialDevice` at the end of a serial line, or
a :class:`ModbusDevice` (Modbus TCP or RTU).
The result or the refusal comes back as one :class:`Observation`, and an :class:`AuditLog`
records every call.

:func:`tool_definitions` declares the tools in MCP, OpenAI or Anthropic form, and
:func:`openai_tool_results` / :func:`anthropic_tool_results` answer a provider's whole
assistant turn; ``regdev serve`` is the MCP server (the ``mcp`` extra).
"""

from __future__ import annotations

# First: _compile.py reads the version as `from . import __version__`.
from ._version import __version__

# isort: split
from .agents._demo import ScriptedProposer
from .agents._loop import LoopResult, Step, call_with_retry, run_loop
from .agents._providers import (
    PROVIDER_FORMATS,
    anthropic_result,
    anthropic_tool_results,
    mcp_result,
    openai_result,
    openai_tool_results,
    tool_definitions,
)
from .audit._log import AuditLog, AuditRecord, read_audit
from .core._errors import (
    AuditError,
    AuditInUse,
    DeviceBusy,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    LocalProtocolError,
    PolicyError,
    ProtocolError,
    RegdevError,
    RegisterRangeError,
    RemoteProtocolError,
    ReplyLost,
    SchemaError,
    TransportError,
)
from .core._observation import Observation, Refusal
from .devices._device import (
    DATA_MAX,
    REGISTER_COUNT,
    Device,
    DeviceIdentity,
    RegisterFile,
    TimeoutDevice,
)
from .devices._modbus import ModbusDevice
from .devices._serial import SerialDevice
from .gate._compile import CompiledValidator, compile_validator
from .gate._gate import Gate
from .gate._parse import DIALECTS, ParsedCall, parse
from .gate._policy import ApprovalRequest, Policy, RateLimit, RegisterMap, Session, SessionPolicy
from .gate._tools import READ_REGISTER, REGISTER_TOOLS, WRITE_REGISTER, Tool, ToolSet
from .gate._validate import ReferenceValidator

__all__ = [
    "DATA_MAX",
    "DIALECTS",
    "PROVIDER_FORMATS",
    "READ_REGISTER",
    "REGISTER_COUNT",
    "REGISTER_TOOLS",
    "WRITE_REGISTER",
    "ApprovalRequest",
    "AuditError",
    "AuditInUse",
    "AuditLog",
    "AuditRecord",
    "CompiledValidator",
    "Device",
    "DeviceBusy",
    "DeviceError",
    "DeviceIdentity",
    "DeviceRefused",
    "DeviceTimeout",
    "Gate",
    "LocalProtocolError",
    "LoopResult",
    "ModbusDevice",
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
    "ReplyLost",
    "SchemaError",
    "ScriptedProposer",
    "SerialDevice",
    "Session",
    "SessionPolicy",
    "Step",
    "TimeoutDevice",
    "Tool",
    "ToolSet",
    "TransportError",
    "__version__",
    "anthropic_result",
    "anthropic_tool_results",
    "call_with_retry",
    "compile_validator",
    "mcp_result",
    "openai_result",
    "openai_tool_results",
    "parse",
    "read_audit",
    "run_loop",
    "tool_definitions",
]
