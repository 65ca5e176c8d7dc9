"""regdev: a validating tool backend for register devices driven by model agents.

A device is described by a :class:`RegisterMap` (from SystemRDL, or its compiled JSON form;
by default 16 unnamed read-write registers of 8 bits): it gives the tools offered to models
(:func:`map_tools`), the checks before the device, the policy's defaults, and the behaviour of
the in-process register file and the firmware simulator.

A model's tool call is untrusted data: :class:`Gate` parses it, validates it in a fixed order
(shape, name, fields, types, ranges; the first failure decides), authorizes it against a
:class:`Policy` for the caller's :class:`Session`, and only then runs it on a :class:`Device`:
the in-process :class:`RegisterFile`, a :class:`SerialDevice` at the end of a serial line, or
a :class:`ModbusDevice` (Modbus TCP or RTU); :func:`open_device` opens any of them from a URL.
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
from . import bench
from .agents._demo import ScriptedProposer
from .agents._loop import LoopResult, Step, call_with_retry, run_loop
from .audit._log import AuditLog, AuditRecord, open_audit, read_audit
from .core._errors import (
    AuditError,
    AuditInUse,
    DeviceBusy,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    LocalProtocolError,
    MapError,
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
from .devices._open import open_device
from .devices._regmap import Field, Register, RegisterMap
from .devices._serial import SerialDevice
from .gate._compile import CompiledValidator, compile_validator
from .gate._gate import Gate
from .gate._maptools import map_tools
from .gate._parse import DIALECTS, ParsedCall, parse
from .gate._policy import (
    Approval,
    ApprovalRequest,
    RateLimit,
    RegisterPolicy,
    Session,
    SessionPolicy,
)
from .gate._providers import (
    PROVIDER_FORMATS,
    anthropic_result,
    anthropic_tool_results,
    mcp_result,
    openai_result,
    openai_tool_results,
    tool_definitions,
)
from .gate._tools import READ_REGISTER, REGISTER_TOOLS, WRITE_REGISTER, Tool, ToolSet
from .gate._validate import ReferenceValidator
from .server._access import Policy

__all__ = [
    "DATA_MAX",
    "DIALECTS",
    "PROVIDER_FORMATS",
    "READ_REGISTER",
    "REGISTER_COUNT",
    "REGISTER_TOOLS",
    "WRITE_REGISTER",
    "Approval",
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
    "Field",
    "Gate",
    "LocalProtocolError",
    "LoopResult",
    "MapError",
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
    "Register",
    "RegisterFile",
    "RegisterMap",
    "RegisterPolicy",
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
    "bench",
    "call_with_retry",
    "compile_validator",
    "map_tools",
    "mcp_result",
    "open_audit",
    "open_device",
    "openai_result",
    "openai_tool_results",
    "parse",
    "read_audit",
    "run_loop",
    "tool_definitions",
]
