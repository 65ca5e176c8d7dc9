"""The authorize stage: sessions, scopes, offered tools, register map, approval, rate limit,
timeout, and policy files. Nothing refused reaches the device."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import CALIB_WRITE_PAIRS, EXAMPLES, CountingDevice, HeldFirstWrite
from regdev import (
    READ_REGISTER,
    WRITE_REGISTER,
    Approval,
    ApprovalRequest,
    AuditLog,
    Gate,
    Observation,
    Policy,
    PolicyError,
    RateLimit,
    RegisterFile,
    RegisterPolicy,
    Session,
    TimeoutDevice,
    Tool,
    ToolSet,
)
from regdev.cli._main import main
from regdev.gate._policy import TokenBucket
from support.strategies import canonical_calls, huge_numbers, to_json


def write(addr: int, data: int = 1) -> str:
    return json.dumps({"tool": "write_register", "arguments": {"addr": addr, "data": data}})


def read(addr: int) -> str:
    return json.dumps({"tool": "read_register", "arguments": {"addr": addr}})


POLICY = Policy.from_dict({
    "registers": {"read_only": [0], "protected": [15]},
    "sessions": {
        "viewer": {"scopes": ["read"]},
        "reader": {"scopes": ["read"], "tools": ["read_register"]},
        "writer": {"scopes": ["write"]},
        "slow": {"rate_limit": {"rate": 0.001, "burst": 1}},
    },
})


@pytest.mark.parametrize(
    ("session", "raw", "stage", "code"),
    [
        ("viewer", write(3), "authorize", "denied-write_register"),
        ("writer", read(3), "authorize", "denied-read_register"),
        ("reader", write(3), "validate", "unknown-tool"),
        ("default", write(0), "authorize", "read-only-register"),
        ("default", write(15), "authorize", "approval-denied"),
    ],
)
def test_each_policy_refusal_has_its_stage_and_never_reaches_the_device(
        session: str, raw: str, stage: str, code: str) -> None:
    """Each policy code names its stage, and the device sees no access at all."""
    device = CountingDevice()
    gate = Gate(device, policy=POLICY)
    obs = gate.handle(raw, session=gate.session(session))
    assert (obs.ok, obs.stage, obs.code) == (False, stage, code)
    assert device.accesses == 0
    assert device.snapshot() == [0] * 16


def test_rate_limited_has_its_stage_and_never_reaches_the_device() -> None:
    """The call after the burst is rate-limited at authorize; the device saw only the first."""
    device = CountingDevice()
    gate = Gate(device, policy=POLICY)
    slow = gate.session("slow")
    first, second = gate.handle(read(1), session=slow), gate.handle(read(1), session=slow)
    assert first.ok
    assert (second.stage, second.code, second.refusal and second.refusal.retryable) == (
        "authorize", "rate-limited", True)
    assert "rate limit of 0.001 calls per second (burst 1); retry in" in (second.message or "")
    assert device.accesses == 1


def test_policy_denials_are_final_and_stop_a_loop_at_once() -> None:
    """denied-, read-only-register and approval-denied are not retryable."""
    gate = Gate(policy=POLICY)
    for session, raw in (("viewer", write(3)), ("default", write(0)), ("default", write(15))):
        refusal = gate.handle(raw, session=gate.session(session)).refusal
        assert refusal is not None and refusal.retryable is False, refusal


def test_allowed_calls_run() -> None:
    """The policy refuses only what it names: other reads and writes run."""
    device = RegisterFile()
    gate = Gate(device, policy=POLICY)
    assert gate.handle(write(3, 7), session=gate.session("writer")).ok
    assert gate.handle(read(0), session=gate.session("viewer")).result == {"addr": 0, "data": 0}
    assert gate.handle(read(3), session=gate.session("reader")).result == {"addr": 3, "data": 7}


def test_unoffered_tool_reads_exactly_like_a_missing_one() -> None:
    """A session learns nothing about tools it is not offered: same code, own tool list."""
    gate = Gate(policy=POLICY)
    reader = gate.session("reader")
    hidden = gate.handle(write(3), session=reader)
    missing = gate.handle('{"tool": "erase_chip", "arguments": {}}', session=reader)
    assert hidden.message == 'unknown tool "write_register"; available tools: read_register'
    assert missing.message == 'unknown tool "erase_chip"; available tools: read_register'
    nameless = gate.handle('{"arguments": {}}', session=reader)
    assert nameless.message == "the call names no tool; available tools: read_register"


@pytest.mark.parametrize(
    ("raw", "tool_choice", "code"),
    [
        ('{"tool": "write_register", "arguments": "x"}', None, "bad-arguments"),
        ('{"arguments": {}}', None, "missing-tool"),
        ('{"tool": "write_register", "arguments": {}}', None, "unknown-tool"),
        ('{"tool": "write_register", "arguments": {"addr": 99, "data": 1}}', None,
         "unknown-tool"),
        ('{"tool": "write_register", "arguments": {}}', "read_register", "wrong-tool"),
        ('{"tool": "read_register", "arguments": {}}', None, "missing-addr"),
    ],
)
def test_unoffered_tool_takes_the_unknown_tool_position(raw: str, tool_choice: str | None,
                                                        code: str) -> None:
    """Shape and wrong-tool come first; an unoffered tool hides its own field errors."""
    gate = Gate(policy=POLICY)
    assert gate.handle(raw, session=gate.session("reader"), tool_choice=tool_choice).code == code


def test_authorize_order_scope_before_register_map() -> None:
    """A read-only session writing a read-only register is told about its scope."""
    gate = Gate(policy=POLICY)
    assert gate.handle(write(0), session=gate.session("viewer")).code == "denied-write_register"


def test_a_rate_of_one_call_per_second_is_worded_in_the_singular() -> None:
    """rate 1: "1 call per second", not "1 calls"."""
    policy = Policy.from_dict({"sessions": {"one": {"rate_limit": {"rate": 1, "burst": 1}}}})
    gate = Gate(policy=policy)
    one = gate.session("one")
    assert gate.handle(read(1), session=one).ok
    refused = gate.handle(read(1), session=one)
    assert refused.code == "rate-limited"
    assert (refused.message or "").startswith(
        "session one is over its rate limit of 1 call per second (burst 1); retry in ")


def test_authorize_order_rate_limit_before_approval() -> None:
    """A rate-limited write to a protected register never reaches the approver."""
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    policy = Policy.from_dict({"registers": {"protected": [15]},
                               "rate_limit": {"rate": 0.001, "burst": 1}}, approve=approve)
    gate = Gate(policy=policy)
    assert gate.handle(write(15, 9)).ok
    assert gate.handle(write(15, 9)).code == "rate-limited"
    assert asked == [ApprovalRequest("default", "write_register", {"addr": 15, "data": 9}, 15)]


@pytest.mark.parametrize(
    ("answer", "ok"),
    [(True, True), (False, False), ("yes", False), (1, False), (None, False)],
)
def test_approval_hook_approves_only_with_true(answer: Any, ok: bool) -> None:
    """The write runs only when the hook returns True itself."""
    device = CountingDevice()
    gate = Gate(device, policy=Policy(registers=RegisterPolicy(protected=frozenset({15})),
                                      approve=lambda request: answer))
    obs = gate.handle(write(15, 3))
    assert obs.ok is ok
    assert device.accesses == (1 if ok else 0)
    if not ok:
        assert (obs.stage, obs.code) == ("authorize", "approval-denied")
        assert obs.message == "register 15 is protected and the approver denied this write"


@pytest.mark.parametrize(
    ("answer", "ok", "why"),
    [(Approval(True, "token:bob", "url"), True, None),
     (Approval(False, "token:bob", "url", "declined on the approval page"), False,
      " (declined on the approval page)"),
     (Approval(False, None, "elicitation", "no answer within 5 s"), False,
      " (no answer within 5 s)"),
     (Approval(False), False, "")],
)
def test_an_approval_answer_says_who_and_how_in_the_audit_log(
        tmp_path: Path, answer: Approval, ok: bool, why: str | None) -> None:
    """A hook may answer with an Approval: it approves only with approved=True; the audit
    record names the caller, the approver and how it was asked, and a denial says why."""
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Approval:
        asked.append(request)
        return answer

    device = CountingDevice()
    policy = Policy(registers=RegisterPolicy(protected=frozenset({15})), approve=approve)
    with Gate(device, policy=policy, audit=AuditLog(tmp_path / "audit.db")) as gate:
        obs = gate.handle(write(15, 3), session=Session(caller="oauth:alice"))
        records = gate.audit.records()  # type: ignore[union-attr]
    assert asked == [ApprovalRequest("default", "write_register", {"addr": 15, "data": 3}, 15,
                                     "oauth:alice")]
    assert obs.ok is ok and device.accesses == (1 if ok else 0)
    if not ok:  # a reason and no approver: nobody said no
        words = ("this write was not approved" if answer.approver is None and answer.reason
                 else "the approver denied this write")
        assert obs.message == f"register 15 is protected and {words}{why}"
    (record,) = records
    assert (record.caller, record.approver, record.approval) == (
        "oauth:alice", answer.approver, answer.via)


def test_approval_hook_that_raises_denies_and_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    """An approver's exception is a denial, logged, never an approval or a crash."""
    def broken(request: ApprovalRequest) -> bool:
        raise RuntimeError("approver is down")

    device = CountingDevice()
    gate = Gate(device, policy=Policy(registers=RegisterPolicy(protected=frozenset({15})),
                                      approve=broken))
    with caplog.at_level(logging.ERROR, logger="regdev"):
        obs = gate.handle(write(15))
    assert obs.code == "approval-denied" and device.accesses == 0
    assert "approver is down" in caplog.text


def test_approver_cannot_change_what_runs() -> None:
    """The hook gets a copy of the arguments: mutating it does not change the write."""
    def sneaky(request: ApprovalRequest) -> bool:
        request.arguments["data"] = 0  # type: ignore[index]
        return True

    device = RegisterFile()
    gate = Gate(device, policy=Policy(registers=RegisterPolicy(protected=frozenset({15})),
                                      approve=sneaky))
    assert gate.handle(write(15, 200)).result == {"addr": 15, "data": 200}
    assert device.snapshot()[15] == 200


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_the_approval_hook_is_recorded_then_raised(
        tmp_path: Path, interrupt: type[BaseException]) -> None:
    """Ctrl-C or exit inside the hook stops the program, as it should, but not unrecorded;
    the write never ran and its key stays free."""
    def hook(request: ApprovalRequest) -> bool:
        raise interrupt

    device = CountingDevice()
    gate = Gate(device, audit=AuditLog(tmp_path / "audit.db"),
                policy=Policy(registers=RegisterPolicy(protected=frozenset({15})), approve=hook))
    raw = json.dumps({"tool": "write_register", "arguments": {"addr": 15, "data": 1},
                      "idempotency_key": "k"})
    with pytest.raises(interrupt):
        gate.handle(raw)
    record = gate.audit.records()[-1]  # type: ignore[union-attr]
    assert (record.stage, record.code, record.idempotency_key) == (
        "internal", "internal-error", "k")
    assert {KeyboardInterrupt: "it was interrupted (Ctrl-C)",
            SystemExit: "it was interrupted (the program is exiting)"}[interrupt] in (
        record.message or "")
    assert device.accesses == 0
    assert gate.audit.idempotency.get(  # type: ignore[union-attr]
        (device.state_id(), "default", "k")) is None
    gate.close()


RESET = Tool("reset_device", "Every register to its reset value.",
             {"type": "object", "properties": {}, "additionalProperties": False},
             handler=lambda device, _: device.reset() or {"reset": True})
WITH_RESET = ToolSet([WRITE_REGISTER, READ_REGISTER, RESET])


@pytest.mark.parametrize(
    ("registers", "code", "message"),
    [
        ({"read_only": [0]}, "read-only-register",
         "reset_device changes every register, and register 0 is read-only by the gate's "
         "policy; no call can run it"),
        ({"protected": [15]}, "approval-denied",
         "reset_device changes every register, and register 15 is protected: writing it needs "
         "approval, and no approver is configured"),
    ],
)
def test_a_tool_without_an_address_changes_every_register(registers: dict[str, Any],
                                                          code: str, message: str) -> None:
    """A device-changing tool that names no register (a reset) is refused when any register
    is read-only, and needs approval when any is protected."""
    device = RegisterFile([7] * 16)
    device.write(0, 1)
    gate = Gate(device, WITH_RESET, policy=Policy.from_dict({"registers": registers}))
    obs = gate.handle('{"tool": "reset_device", "arguments": {}}')
    assert (obs.stage, obs.code, obs.message) == ("authorize", code, message)
    assert device.snapshot()[0] == 1


def test_an_approved_reset_is_asked_about_every_register() -> None:
    """The approver sees addr None for a call that changes every register."""
    asked: list[ApprovalRequest] = []
    device = RegisterFile()
    device.write(3, 9)
    policy = Policy(registers=RegisterPolicy(protected=frozenset({15})),
                    approve=lambda request: asked.append(request) or True)
    gate = Gate(device, WITH_RESET, policy=policy)
    assert gate.handle('{"tool": "reset_device", "arguments": {}}').ok
    assert asked == [ApprovalRequest("default", "reset_device", {}, None)]
    assert device.snapshot() == [0] * 16
    assert Gate(RegisterFile(), WITH_RESET).handle(
        '{"tool": "reset_device", "arguments": {}}').ok  # no register map: nothing to check


def test_no_approver_message_says_so() -> None:
    """Without a hook, a protected write is denied with a message saying why."""
    obs = Gate(policy=POLICY).handle(write(15))
    assert obs.message == ("register 15 is protected: writing it needs approval, and no "
                           "approver is configured")


def test_reads_of_protected_and_read_only_registers_are_allowed() -> None:
    """The register map restricts writes only."""
    gate = Gate(policy=POLICY)
    assert gate.handle(read(0)).ok and gate.handle(read(15)).ok


def test_session_without_policy_is_enforced() -> None:
    """A hand-made session applies its scopes and tools on a gate without a policy."""
    device = CountingDevice()
    gate = Gate(device)
    viewer = Session("viewer", scopes={"read"})
    assert gate.handle(write(1), session=viewer).code == "denied-write_register"
    assert gate.handle(read(1), session=viewer).ok
    assert device.accesses == 1


@pytest.mark.parametrize("scopes", [set(), {"admin"}, {"read", "root"}])
def test_session_scopes_are_checked(scopes: set[str]) -> None:
    """A session needs at least one scope, and only read and write exist."""
    with pytest.raises(ValueError, match="scopes must be a non-empty subset"):
        Session("s", scopes=scopes)


def test_token_bucket_refills_at_its_rate() -> None:
    """burst tokens at once, then one per 1/rate seconds of the clock."""
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)
    now[0] = 0.25
    assert bucket.take() == pytest.approx(0.25)
    now[0] = 0.5
    assert bucket.take() == 0.0
    now[0] = 100.0
    assert [bucket.take() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.5)]


def test_each_session_has_its_own_bucket() -> None:
    """Rate limits are per session: one session's burst does not spend another's."""
    gate = Gate(policy=Policy.from_dict({"rate_limit": {"rate": 0.001, "burst": 1},
                                         "sessions": {"a": {}, "b": {}}}))
    assert gate.handle(read(1), session=gate.session("a")).ok
    assert gate.handle(read(1), session=gate.session("a")).code == "rate-limited"
    assert gate.handle(read(1), session=gate.session("b")).ok


def test_a_named_session_keeps_its_bucket_across_lookups() -> None:
    """gate.session(name) is one live session per name: asking again does not refill it."""
    gate = Gate(policy=Policy(rate_limit=RateLimit(rate=0.001, burst=1)))
    assert gate.session() is gate.session("default") is gate.default_session
    assert gate.handle(read(1), session=gate.session()).ok
    assert gate.handle(read(1), session=gate.session()).code == "rate-limited"
    assert gate.handle(read(1)).code == "rate-limited"


def test_policy_limits_apply_and_explicit_arguments_win() -> None:
    """The policy's caps and timeout configure the gate unless the caller passes their own."""
    policy = Policy(max_input_bytes=30, max_output_bytes=20, timeout=0.5)
    gate = Gate(policy=policy)
    assert (gate.max_input_bytes, gate.max_output_bytes, gate.timeout) == (30, 20, 0.5)
    assert gate.handle(read(1)).code == "too-large"
    override = Gate(policy=policy, max_input_bytes=100)
    assert override.max_input_bytes == 100 and override.handle(read(1)).ok


def test_gate_refuses_a_policy_offering_tools_it_lacks() -> None:
    """A session's tool list must name the gate's tools; the error says which."""
    policy = Policy.from_dict({"sessions": {"x": {"tools": ["read_register", "erase_chip"]}}})
    with pytest.raises(PolicyError, match="session `x` the tool `erase_chip`"):
        Gate(policy=policy)


def test_unknown_session_is_a_policy_error() -> None:
    """Naming a session the policy does not declare fails at once."""
    with pytest.raises(PolicyError, match="declares no session `admin`; sessions: reader"):
        Gate(policy=POLICY).session("admin")
    with pytest.raises(PolicyError, match="needs a policy"):
        Gate().session("viewer")


def test_example_policy_file_loads() -> None:
    """examples/policy.toml is a valid policy with the sessions the docs use."""
    policy = Policy.from_file(EXAMPLES / "policy.toml")
    assert policy.registers == RegisterPolicy(read_only=frozenset({0}),
                                           protected=frozenset({15}))
    assert policy.session("reader").tools == ("read_register",)
    assert policy.session("viewer").scopes == frozenset({"read"})
    assert policy.sessions["reader"].rate_limit == RateLimit(rate=5.0, burst=5)
    assert policy.timeout == 2.0


def test_json_policy_file(tmp_path: Path) -> None:
    """A policy can be JSON too, with the same fields."""
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"registers": {"read_only": [1, 2]},
                                "rate_limit": {"rate": 10, "burst": 2}}))
    policy = Policy.from_file(path)
    assert policy.registers.read_only == frozenset({1, 2})
    assert policy.rate_limit == RateLimit(rate=10.0, burst=2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[registers]\nreadonly = [1]\n",
         "`registers.readonly`: unknown field; allowed here: read_only, protected"),
        ('[sessions.x]\nscope = ["read"]\n',
         "`sessions.x.scope`: unknown field; allowed here: scopes, tools, rate_limit"),
        ("rate = 5\n", "`rate`: unknown field; allowed here: timeout, max_input_bytes, "
                       "max_output_bytes, registers, rate_limit, sessions, "
                       "tool_call_ids_as_keys"),
        ("[rate_limit]\nrate = 5\nburst = 1\nper = 2\n",
         "`rate_limit.per`: unknown field; allowed here: rate, burst"),
        ("[registers]\nread_only = [65536]\n",
         "`registers.read_only[0]`: must be at most 65535, got 65536"),
        ("[registers]\nread_only = [1]\nprotected = [1]\n",
         "register 1 is both read_only and protected"),
        ('[sessions.x]\nscopes = ["admin"]\n',
         "`sessions.x.scopes[0]`: must be 'read' or 'write', got \"admin\""),
        ("[sessions.x]\nscopes = []\n", "`sessions.x.scopes`: needs at least 1 item(s), got []"),
        ("[rate_limit]\nrate = 0\nburst = 1\n", "`rate_limit.rate`: must be at least 1e-09, got 0"),
        ("[rate_limit]\nrate = nan\nburst = 1\n",
         "`rate_limit.rate`: must be a finite number, got NaN"),
        ('[rate_limit]\nrate = "5"\nburst = 1\n', "`rate_limit.rate`: must be a number, got \"5\""),
        ("[rate_limit]\nrate = 5\n", "`rate_limit.burst`: required"),
        ("timeout = -1\n", "`timeout`: must be a number of seconds in 0.001..86400, got -1"),
        ("timeout = inf\n",
         "`timeout`: must be a number of seconds in 0.001..86400, got Infinity"),
        ("timeout = nan\n", "`timeout`: must be a number of seconds in 0.001..86400, got NaN"),
        ("timeout = 1e300\n",
         "`timeout`: must be a number of seconds in 0.001..86400, got 1e+300"),
        ("timeout = 0.0000001\n",
         "`timeout`: must be a number of seconds in 0.001..86400, got 1e-07"),
        ("timeout = 86400.5\n",
         "`timeout`: must be a number of seconds in 0.001..86400, got 86400.5"),
        ("[approval]\ntimeout = 0\n",
         "`approval.timeout`: must be a number of seconds in 0.001..86400, got 0"),
        ("max_output_bytes = 1.5\n", "`max_output_bytes`: must be an integer, got 1.5"),
        ("tool_call_ids_as_keys = 1\n", "`tool_call_ids_as_keys`: must be true or false, got 1"),
        ("registers = 5\n", "`registers`: must be a table (a JSON object), got 5"),
        ("[registers]\nread_only = [1]\n[registers]\nprotected = [2]\n",
         "not valid TOML: a table is declared twice, at line 3, column 11"),
        ("timeout = 1\ntimeout = 2\n", "not valid TOML: a key is given a value twice, at "),
        ('approve = "yes"\n', "`approve` is a Python callable"),
        ("registers = [\n", "not valid TOML: the text ends where a value should be"),
        ("registers = [1\n", "not valid TOML: an array is not closed, at end of document"),
        ("timeout = 1 2\n",
         "not valid TOML: more text after a value on the same line, at line 1, column 13"),
    ],
)
def test_bad_policy_file_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    """A bad file names itself, the field, and the problem, on one line."""
    error = load_error(tmp_path / "policy.toml", text)
    assert message in error
    assert "Input should" not in error and "Field required" not in error


def test_a_register_the_map_does_not_have_is_refused_when_the_gate_is_made(
        tmp_path: Path) -> None:
    """Addresses are checked against the device's map (0..15 by default) by the gate: the
    policy loads, the gate refuses it in one line naming the register."""
    path = tmp_path / "policy.toml"
    path.write_text("[registers]\nread_only = [16]\n")
    policy = Policy.from_file(path)
    with pytest.raises(PolicyError) as info:
        Gate(policy=policy)
    assert str(info.value) == (
        "`registers.read_only`: register 16 is not a register of the device's map "
        "(its registers are at 0..15)")


def load_error(path: Path, text: str) -> str:
    """The PolicyError of loading ``text`` from ``path``: one line that names the file."""
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        Policy.from_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"registers": {"read_only": [0]}, "registers": {}}',
         'key "registers" appears twice in one object'),
        ('{"registers": {"read_only": [0], "read_only": []}}',
         'key "read_only" appears twice in one object'),
        ('{"timeout": NaN}', "not valid JSON: NaN, at byte 12, is not a JSON number (JSON "
                             "has no NaN or Infinity)"),
        ('{"timeout": Infinity}', "not valid JSON: Infinity, at byte 12, is not a JSON number"),
        ('{"timeout": 1,}', "not valid JSON: a comma with no member after it before `}`, at "
                            "byte 14"),
        ("[1]", "a policy must be an object"),
    ],
)
def test_bad_json_policy_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    """JSON policies are strict: a repeated key could drop a restriction silently."""
    assert message in load_error(tmp_path / "policy.json", text)


def test_toml_suffix_is_case_insensitive(tmp_path: Path) -> None:
    """policy.TOML is TOML, not JSON."""
    path = tmp_path / "policy.TOML"
    path.write_text("[registers]\nread_only = [2]\n")
    assert Policy.from_file(path).registers.read_only == frozenset({2})


@pytest.mark.parametrize("name", ["policy.Json", "policy.JSON", "policy.toml", "p.TOML"])
def test_toml_and_json_suffixes_in_any_case_are_read(tmp_path: Path, name: str) -> None:
    """.toml and .json, in any case, are read as what they name."""
    path = tmp_path / name
    path.write_text('{"registers": {"read_only": [2]}}' if name.lower().endswith(".json")
                    else "[registers]\nread_only = [2]\n")
    assert Policy.from_file(path).registers.read_only == frozenset({2})


@pytest.mark.parametrize(("name", "got"), [
    ("policy.py", "the suffix .py (a policy in Python is built in your own program as "
                  "regdev.Policy(...) and given to Gate(policy=...); a file is data only)"),
    ("policy.PY", "the suffix .PY (a policy in Python is built in your own program as "
                  "regdev.Policy(...) and given to Gate(policy=...); a file is data only)"),
    ("policy.yaml", "the suffix .yaml"),
    ("policy.toml.bak", "the suffix .bak"),
    ("policy.jsonl", "the suffix .jsonl"),
    ("policy", "no suffix"),
    (".toml", "no suffix"),
])
def test_a_policy_file_of_another_suffix_is_refused_in_words(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, got: str) -> None:
    """Any suffix but .toml and .json is refused before the file is read (a .py policy is
    never run, nor read as JSON), with one line naming the file and what is allowed; the
    command line exits 2 and runs nothing."""
    path = tmp_path / name
    path.write_text("{}")  # valid JSON: the refusal is the suffix's, not the content's
    expected = (f"{path}: a policy file is TOML (.toml) or JSON (.json), by its suffix; this "
                f"one has {got}")
    with pytest.raises(PolicyError) as info:
        Policy.from_file(path)
    assert str(info.value) == expected
    with pytest.raises(PolicyError) as info:
        Policy.from_file(tmp_path / "missing" / name)  # not read: the suffix decides first
    assert "a policy file is TOML (.toml) or JSON (.json)" in str(info.value)
    from regdev.cli._main import main  # noqa: PLC0415
    status = main(["call", '{"tool": "read_register", "arguments": {"addr": 1}}', "--policy",
                   str(path)])
    out, err = capsys.readouterr()
    assert (status, out, err) == (2, "", f"regdev call: error: {expected}\n")


def test_policy_file_that_cannot_be_read(tmp_path: Path) -> None:
    """A missing file, a directory or bytes that are not UTF-8: the path and the OS's reason
    in words (no errno, no Python class)."""
    cases = [(tmp_path / "nope.toml", "No such file or directory"),
             (tmp_path / "folder.json", "Is a directory"),
             (tmp_path / "latin1.toml", "not UTF-8 text (byte 2)")]
    cases[1][0].mkdir()
    cases[2][0].write_bytes(b"# \xe9\n")
    for path, reason in cases:
        with pytest.raises(PolicyError) as info:
            Policy.from_file(path)
        assert str(info.value) == f"cannot read {path}: {reason}"


def test_policy_in_python_validates_too() -> None:
    """Policy declared in Python gets the same checks (pydantic)."""
    with pytest.raises(ValueError, match="register 3 is both"):
        RegisterPolicy(read_only=frozenset({3}), protected=frozenset({3}))
    with pytest.raises(ValueError, match=r"greater than or equal to 0\.000000001"):
        RateLimit(rate=-1, burst=1)


class StuckDevice(RegisterFile):
    """A device whose writes block until released (a hung serial line)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, addr: int, data: int) -> int:
        self.entered.set()
        self.release.wait(10)
        return super().write(addr, data)


def test_timeout_reports_a_hung_write_as_a_timeout_never_a_success() -> None:
    """A hung write is device-timeout; a call queued behind it is device-busy and never runs."""
    device = StuckDevice()
    gate = Gate(device, timeout=1.0)
    threads_before = threading.active_count()
    got: list[Observation] = []
    hung = threading.Thread(target=lambda: got.append(gate.handle(write(1, 11))))
    hung.start()
    assert device.entered.wait(10)  # the first write is running on the device, and stuck
    queued = gate.handle(write(2, 22))
    hung.join(10)
    first = got[0]
    assert (first.ok, first.stage, first.code) == (False, "execute", "device-timeout")
    assert "may still be applied: read the register back" in (first.message or "")
    assert (queued.stage, queued.code, queued.message) == (
        "execute", "device-busy", "the device could not take the call now: the device was busy "
        "for 1 s with an earlier call; this call was cancelled and not applied")
    assert queued.refusal is not None and queued.refusal.retryable
    device.release.set()
    assert gate.handle(read(1)).result == {"addr": 1, "data": 11}  # the first one did finish
    assert device.snapshot()[2] == 0 and device.write_count == 1
    assert threading.active_count() <= threads_before  # the one worker was already running
    gate.close()


def test_timeout_device_passes_results_and_errors_through() -> None:
    """Within the timeout, the wrapped device answers as itself, errors included."""
    device = TimeoutDevice(RegisterFile(), 5.0)
    assert device.write(3, 9) == 9 and device.read(3) == 9 and device.snapshot()[3] == 9
    with pytest.raises(ValueError, match=r"outside 0\.\.15"):
        device.read(99)
    device.reset()
    assert device.read(3) == 0
    device.close()


@pytest.mark.parametrize("timeout", [0, -1, "1", True, float("inf"), float("nan"), 1e300,
                                     threading.TIMEOUT_MAX * 2, 5e-324, 1e-300, 1e-7, 0.0009,
                                     86400.5])
def test_timeout_must_be_a_millisecond_to_a_day(timeout: Any) -> None:
    """A timeout is a number of seconds in 0.001..86400: shorter, no device call can keep it
    (a refusal said "busy for 4.94066e-324 s"); longer, a hang (and past
    threading.TIMEOUT_MAX the lock wait overflows after the call is queued)."""
    message = "timeout must be a number of seconds in 0.001..86400, got "
    with pytest.raises(ValueError, match=message):
        Gate(timeout=timeout)
    with pytest.raises(ValueError, match=message):
        TimeoutDevice(RegisterFile(), timeout)
    assert Gate(timeout=0.001).timeout == 0.001 and Gate(timeout=86400).timeout == 86400


def test_scopes_and_tools_in_session_repr() -> None:
    """A session shows what it may do."""
    text = repr(POLICY.session("reader"))
    assert "scopes=['read']" in text and "tools=('read_register',)" in text


def test_scope_check_uses_the_tools_read_only_flag() -> None:
    """read_only tools need read; others need write."""
    both = Session()
    assert both.check_scope(READ_REGISTER) is None and both.check_scope(WRITE_REGISTER) is None
    refusal = Session("v", scopes={"read"}).check_scope(WRITE_REGISTER)
    assert refusal is not None and refusal.message == (
        "session v holds the read scope; write_register needs the write scope, so this "
        "session cannot call it")


@pytest.fixture(scope="module")
def shared_gate(tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[Gate, CountingDevice, AuditLog]]:
    """One guarded gate, its counting device and its audit log for every example of the
    property test below: the gate's validator is compiled once, not once an example. No
    verdict of the sessions it draws depends on earlier calls (no rate limit, no idempotency
    key, protected register 15 asks no approver: denied each time)."""
    with AuditLog(tmp_path_factory.mktemp("audit") / "audit.db") as audit:
        device = CountingDevice()
        yield Gate(device, policy=POLICY, audit=audit), device, audit


@given(canonical_calls(), st.sampled_from(["default", "viewer", "reader", "writer"]),
       st.sampled_from([None, "write_register", "read_register"]))
def test_guarded_gate_gives_one_observation_one_record_and_never_runs_a_refusal(
        shared_gate: tuple[Gate, CountingDevice, AuditLog], call: Any, session: str,
        tool_choice: str | None) -> None:
    """Any call, any session: one observation, one audit record with its verdict, and the
    device is touched once when accepted, never when refused."""
    gate, device, audit = shared_gate
    device.accesses = 0
    # (the records after the last one so far: not the whole shared log read twice an example)
    last = audit.records(last=1)
    obs = gate.handle(to_json(call), session=gate.session(session), tool_choice=tool_choice)
    records = audit.records(after=last[0].id if last else 0)
    assert len(records) == 1
    assert (records[-1].ok, records[-1].code, records[-1].session) == (obs.ok, obs.code, session)
    assert device.accesses == (1 if obs.ok else 0)
    if obs.ok:
        assert obs.stage is None and call["tool"] in {"read_register", "write_register"}


# --- huge and tiny numbers in a policy: regdev's words, never a traceback -----------------------

#: Numbers past what the policy's fields hold, as JSON text (TOML writes them the same, but
#: for the exponent forms, which TOML reads as floats).
HUGE_POLICY_NUMBERS = ["1" + "0" * 400, "-1" + "0" * 400, "1e400", "-1e400", "1e-400", "5e-324",
                       "1e2", "1" + "0" * 5000, "0.1000000000000000000000000000000000000001"]
#: Where a number goes in a policy: (path of tables, field).
NUMBER_FIELDS = [((), "timeout"), ((), "max_input_bytes"), ((), "max_output_bytes"),
                 (("rate_limit",), "rate"), (("rate_limit",), "burst"),
                 (("sessions", "s", "rate_limit"), "rate"),
                 (("sessions", "s", "rate_limit"), "burst"), (("registers",), "read_only")]


def policy_text(tables: tuple[str, ...], field: str, number: str, toml: bool) -> str:
    """A policy file with ``number`` (as text) at ``tables``.``field``; a rate limit is
    completed with valid values, a register list holds the number."""
    value = f"[{number}]" if field == "read_only" else number
    fields = {"rate": "1.0", "burst": "1"} if tables and tables[-1] == "rate_limit" else {}
    fields[field] = value
    session = tables[:1] != ("sessions",)  # the session s is declared (empty) unless set here
    if toml:
        text = (f"[{'.'.join(tables)}]\n" if tables else "") + "".join(
            f"{name} = {value}\n" for name, value in fields.items())
        return text + ("[sessions.s]\n" if session else "")
    inner = "{" + ", ".join(f'"{name}": {value}' for name, value in fields.items()) + "}"
    for name in reversed(tables):
        inner = f'{{"{name}": {inner}}}'
    return inner[:-1] + ', "sessions": {"s": {}}}' if session else inner


@pytest.mark.parametrize(("tables", "field"), NUMBER_FIELDS)
@pytest.mark.parametrize("toml", [False, True], ids=["json", "toml"])
def test_a_huge_or_tiny_number_in_a_policy_is_one_line_in_regdevs_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], tables: tuple[str, ...],
        field: str, toml: bool) -> None:
    """Every field, top level or in a session, in JSON and TOML, given a number past what
    it holds: `regdev call --policy` runs (the number fits) or exits 2 with one line naming
    the file and the field in regdev's words: no traceback, no Decimal('1E+2'), no advice
    from Python about its digit limit, never a wait of inf seconds."""
    numbers = HUGE_POLICY_NUMBERS + (["0x1" + "0" * 20000] if toml else [])
    for number in numbers:
        path = tmp_path / ("policy.toml" if toml else "policy.json")
        path.write_text(policy_text(tables, field, number, toml))
        status = main(["call", "--policy", str(path), "--session", "s", "--no-audit",
                       '{"tool": "read_register", "arguments": {"addr": 1}}'])
        out, err = capsys.readouterr()
        assert status in (0, 2), (number, err)  # docs/cli.md: 2 for a policy file refused
        if status == 0:
            assert json.loads(out)["ok"] is True
            assert field != "timeout" or 0.001 <= float(number) <= 86400, (number, out)
            continue
        assert err.startswith(f"regdev call: error: {path}") and err.count("\n") == 1, err
        if field == "timeout" and "not valid" not in err:
            assert "must be a number of seconds in 0.001..86400, got " in err, err
        for words in ("Traceback", "Decimal(", "sys.set_int_max_str_digits", "inf s",
                      "Input should", "int too large"):
            assert words not in err, (number, err)
        if not number.startswith("0x") and "not valid" not in err:
            assert f"`{'.'.join((*tables, field))}" in err


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSON policy file's path, rewritten by each example of a property."""
    return tmp_path_factory.mktemp("policy") / "policy.json"


@given(st.sampled_from(NUMBER_FIELDS), huge_numbers)
def test_any_number_in_any_policy_field_is_a_policy_or_one_policy_error(
        policy_file: Path, place: tuple[tuple[str, ...], str], number: Any) -> None:
    """A policy given as data or as a JSON file, with any number (huge, tiny, long, exact) in
    any numeric field: a valid policy whose rate limit words its waits in finite numbers,
    or one PolicyError line in regdev's words."""
    tables, field = place
    data: dict[str, Any] = {"sessions": {"s": {}}}
    holder = data
    for name in tables:
        holder = holder.setdefault(name, {})
    if tables and tables[-1] == "rate_limit":
        holder.update({"rate": 1.0, "burst": 1})
    holder[field] = [number] if field == "read_only" else number
    policy_file.write_text(to_json(data))
    for load in (lambda: Policy.from_dict(data), lambda: Policy.from_file(policy_file)):
        try:
            policy = load()
        except PolicyError as error:
            text = str(error)
            assert "\n" not in text and "Decimal(" not in text and "Input should" not in text
            continue
        session = policy.session("s")
        refusals = [session.take_token() for _ in range(3)]
        for refusal in refusals:
            if refusal is not None:
                assert refusal.code == "rate-limited"
                assert "inf" not in refusal.message and "nan" not in refusal.message


@pytest.mark.parametrize("rate", ["5e-324", "1e-400", "1e-10", "0", "-1"])
def test_a_rate_too_slow_to_wait_for_is_refused(tmp_path: Path, rate: str) -> None:
    """A rate under one call in about 32 years (1e-9 per second) is refused, in regdev's
    words, whatever its form: a wait of 1/rate seconds would be past any that can be stated
    (5e-324 gives inf)."""
    path = tmp_path / "policy.json"
    path.write_text(f'{{"rate_limit": {{"rate": {rate}, "burst": 1}}}}')
    with pytest.raises(PolicyError) as info:
        Policy.from_file(path)
    assert str(info.value) == (f"{path}: `rate_limit.rate`: must be at least 1e-09, got "
                               f"{Decimal(rate) if '.' in rate or 'e' in rate else rate}")


@pytest.mark.parametrize(("rate", "wait"), [(1e-9, "31.7 years"), (1e-6, "11.6 days"),
                                           (1e-4, "2.8 h"), (0.005, "3.3 min"),
                                           (0.02, "50.00 s"), (4.0, "0.25 s")])
def test_the_wait_for_a_token_is_worded_in_a_unit_that_fits(rate: float, wait: str) -> None:
    """The rate-limited message says how long to wait in seconds, minutes, hours, days or
    years, from the fastest rate to the slowest (one call in 1/rate seconds)."""
    session = Policy(rate_limit=RateLimit(rate=rate, burst=1)).session()
    assert session.take_token() is None
    refusal = session.take_token()
    assert refusal is not None and refusal.message.endswith(f"retry in {wait}")


class _HeldWrite(HeldFirstWrite):
    """The first write signals that it started and waits until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.release = threading.Event(), threading.Event()

    def first_write(self) -> None:
        self.writing.set()
        self.release.wait(30)


@pytest.mark.parametrize(("tool", "first", "second"), CALIB_WRITE_PAIRS)
def test_an_approval_holds_only_while_its_register_holds_what_was_shown(
        tool: str, first: dict[str, Any], second: dict[str, Any]) -> None:
    """Two approved writes of protected CALIB (0 shown to both approvers): the second, approved
    while the first is on its way to the device, re-reads CALIB under its lock once the first
    is done and is approval-denied, naming the value shown and the value now; nothing of it
    is sent."""
    device = _HeldWrite()

    def approve(request: ApprovalRequest) -> Approval:
        if request.arguments == second:  # answered while the first write is on its way
            assert device.writing.wait(30)
            device.release.set()
        return Approval(True, f"token:{request.arguments}", holds=((3, 0),))

    gate = Gate(device, policy=Policy(approve=approve))
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(
        gate.handle_call({"tool": tool, "arguments": first})))
    worker.start()
    assert device.writing.wait(30)
    denied = gate.handle_call({"tool": tool, "arguments": second})
    worker.join(30)
    assert results[0].ok and device.snapshot()[3] == 0x11  # the second never reached it
    assert (denied.code, denied.message) == ("approval-denied", (
        "register CALIB (0x03) is protected and this write was not run: the approval was "
        "given while it held 0 (0x00), and it holds 17 (0x11) now (another write ran "
        "meanwhile); ask again"))


# --- registers and fields by name, value ranges ------------------------------------------------


def _sensor_gate(protected: list[Any], asked: list[Any],
                 read_only: list[Any] | None = None) -> Gate:
    """A gate on examples/sensor.rdl under a policy protecting ``protected``, whose approval
    hook notes each request in ``asked`` and says no."""
    from regdev.cli._common import read_map  # noqa: PLC0415

    registers: dict[str, Any] = {"protected": protected}
    if read_only is not None:
        registers["read_only"] = read_only
    policy = Policy.from_dict({"registers": registers},
                              approve=lambda request: asked.append(request) or False)
    return Gate(RegisterFile(regmap=read_map(EXAMPLES / "sensor.rdl")), policy=policy)


def _code(gate: Gate, tool: str, **arguments: Any) -> str | None:
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).code


def test_registers_are_named_in_a_policy_with_a_map() -> None:
    """protected = ["CALIB"] and read_only = ["DATA[3]"] name the map's registers (they were
    refused as "must be an integer")."""
    asked: list[Any] = []
    with _sensor_gate(["CALIB"], asked, read_only=["DATA[3]"]) as gate:
        assert _code(gate, "write_register", addr=3, data=1) == "approval-denied"
        assert _code(gate, "write_register", addr=7, data=1) == "read-only-register"
        assert _code(gate, "write_register", addr=4, data=1) is None
        assert gate.protected_registers == frozenset({3})
    assert [(r.tool, r.addr) for r in asked] == [("write_register", 3)]


def test_a_protected_field_needs_approval_only_for_writes_that_set_it() -> None:
    """protected = ["CTRL.MODE"]: write_field of MODE and write_register of CTRL ask; a
    write_field of another field of CTRL does not; the refusal names the field."""
    asked: list[Any] = []
    with _sensor_gate(["CTRL.MODE"], asked) as gate:
        refused = gate.handle(json.dumps({"tool": "write_field", "arguments": {
            "field": "CTRL.MODE", "value": "ONESHOT"}}))
        assert refused.code == "approval-denied"
        assert refused.message == ("field CTRL.MODE is protected and the approver denied "
                                   "this write")
        assert _code(gate, "write_register", addr=1, data=0x01) == "approval-denied"
        assert _code(gate, "write_field", field="CTRL.EN", value=1) is None
        assert gate.device.snapshot()[1] == 0x01
    assert [r.addr for r in asked] == [1, 1]


def test_a_protected_range_of_values_asks_only_inside_it() -> None:
    """{field = "DATA[0].VALUE", min = 200} asks for 200..255 only; {register = "CALIB",
    max = 10} for 0..10; by name or number, a field's enum names counted by their values."""
    asked: list[Any] = []
    ranges = [{"field": "DATA[0].VALUE", "min": 200}, {"register": "CALIB", "max": 10},
              {"field": "CTRL.MODE", "min": 2, "max": 2}]
    with _sensor_gate(ranges, asked) as gate:
        assert _code(gate, "write_register", addr=4, data=199) is None
        assert _code(gate, "write_register", addr=4, data=200) == "approval-denied"
        assert _code(gate, "write_registers", addr=3, data=[11, 255]) == "approval-denied"
        assert _code(gate, "write_registers", addr=3, data=[11, 100]) is None
        assert _code(gate, "write_field", field="CTRL.MODE", value="ONESHOT") is None
        refused = gate.handle(json.dumps({"tool": "write_field", "arguments": {
            "field": "CTRL.MODE", "value": "CONTINUOUS"}}))
    assert refused.message.startswith("field CTRL.MODE (values 2..2) is protected")
    assert [r.addr for r in asked] == [4, 4, 1]


@pytest.mark.parametrize(("protected", "message"), [
    (["RegPaConfig"], "`registers.protected`: no register `RegPaConfig` in the device's map; "
                      "its registers: ID, CTRL, STATUS,"),
    (["ctrl"], "`registers.protected`: no register `ctrl` in the device's map; did you mean "
               "CTRL? (names are case-sensitive)"),
    (["CTRL.MOD"], "`registers.protected`: no field `CTRL.MOD` in the device's map; did you "
                   "mean CTRL.MODE"),
    ([{"field": "CTRL.MODE", "min": 4}], "`registers.protected`: field CTRL.MODE holds 0..3; "
                                         "the range from 4 goes past that"),
    ([{"field": "CTRL.MODE", "register": "CTRL"}], "`registers.protected[0]`: a protected "
     "range: a protected range names one `field`"),
    ([{"field": "CTRL.MODE", "above": 1}], "`registers.protected[0]`: a protected range takes "
                                           "field or register, min and max; not `above`"),
    ([1.5], "`registers.protected[0]`: an entry is a register's address 0..65535 or name, a "
            "field \"REG.FIELD\", or a table"),
])
def test_a_name_or_range_the_map_cannot_honour_is_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, protected: list[Any],
        message: str) -> None:
    """A misspelt or miscased name gets the closest names; a range past the field's values,
    or a table that is not a range, is one line; exit 2."""
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"registers": {"protected": protected}}))
    status = main(["call", "--no-audit", "--map", str(EXAMPLES / "sensor.rdl"), "--policy",
                   str(path), '{"tool": "read_register", "arguments": {"addr": 1}}'])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err.startswith(f"regdev call: error: {path}: {message}"), err
    assert err.count("\n") == 1
