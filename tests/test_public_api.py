"""The public names are pinned: a change to regdev.__all__ is a deliberate API change."""

from __future__ import annotations

import regdev

EXPECTED = {
    "DATA_MAX", "DIALECTS", "READ_REGISTER", "REGISTER_COUNT", "REGISTER_TOOLS",
    "WRITE_REGISTER", "Device", "DeviceBusy", "DeviceError", "DeviceRefused", "DeviceTimeout",
    "Gate",
    "LocalProtocolError", "LoopResult", "Observation", "ParsedCall", "ProtocolError",
    "ReferenceValidator", "Refusal", "RegdevError", "RegisterFile", "RegisterRangeError",
    "RemoteProtocolError", "ReplyLost", "SchemaError", "ScriptedProposer", "SerialDevice",
    "Step", "Tool", "ToolSet", "TransportError", "__version__", "call_with_retry", "parse",
    "run_loop",
    "PROVIDER_FORMATS", "tool_definitions", "mcp_result", "openai_result", "anthropic_result",
    "openai_tool_results", "anthropic_tool_results",
    # the safety issue: policy, sessions, timeout, audit log
    "Approval", "ApprovalRequest", "AuditError", "AuditInUse", "AuditLog", "AuditRecord", "Policy",
    "PolicyError", "RateLimit", "RegisterMap", "Session", "SessionPolicy", "TimeoutDevice",
    "read_audit", "open_audit",
    # the Modbus issue
    "ModbusDevice",
    # the validator issue: the schema compiler
    "CompiledValidator", "compile_validator",
    # who a device is and when it last started over (idempotency keys, audit)
    "DeviceIdentity",
    # register maps; the policy's registers became RegisterPolicy
    "Field", "Register", "RegisterPolicy", "MapError", "map_tools",
    # the device factory: one table of URL schemes for every command and library user
    "open_device",
    # the benchmark as a library: regdev.bench(tools, ...) (the package is callable)
    "bench",
}


def test_all_is_pinned() -> None:
    """regdev.__all__ is exactly the documented public API."""
    assert set(regdev.__all__) == EXPECTED
    assert len(regdev.__all__) == len(EXPECTED)


def test_every_public_name_exists_and_is_documented() -> None:
    """Each public class and function has a docstring."""
    for name in regdev.__all__:
        obj = getattr(regdev, name)
        if callable(obj):
            assert obj.__doc__, name


def test_exception_tree() -> None:
    """Every regdev exception derives from RegdevError."""
    for name in regdev.__all__:
        obj = getattr(regdev, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, regdev.RegdevError), name
