"""The gate: one raw tool call in, exactly one observation out.

Rules of this file:

* Stages run in order: parse, validate, authorize, execute, observe. The first refusal decides
  and nothing after it runs; nothing reaches the device unless every earlier stage passed.
* Validation runs the compiled validator (``_compile.py``); only when it refuses is the
  reference validator asked for the refusal's message (both give the same code).
* A device failure is reported as a failure (``device-timeout``, ``device-error``), never as a
  success.
* :meth:`Gate.handle` never raises: an unexpected exception becomes an ``internal-error``
  observation (and is logged), so no stack trace reaches a model.
* Without a policy, a session or an audit log, a call takes the plain path (parse, validate,
  execute, observe) and pays nothing for authorization or auditing. With any of them it takes
  the guarded path: the same stages plus authorize (``_policy.py``, in the order given there),
  the idempotency keys and the audit record (``_audit.py``), with the time of each stage.
* The audit record of a call that ran a tool changing the device is committed before the
  observation is returned; if that commit fails the caller gets ``audit-error``, never a
  success it cannot prove was recorded.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
from msgspec.structs import replace

from ._audit import AuditLog, encode_json
from ._compile import compile_validator
from ._device import Device, RegisterFile, TimeoutDevice
from ._errors import AuditError, DeviceTimeout, PolicyError, RegdevError
from ._idempotency import STORED_CODES, fingerprint
from ._observation import Observation, Refusal
from ._parse import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_ID_CHARS,
    check_dialect,
    check_idempotency_key,
    parse,
)
from ._policy import (
    ApprovalRequest,
    Policy,
    Session,
    ask_approval,
    check_read_only,
    register_address,
)
from ._schema import escape_text
from ._tools import REGISTER_TOOLS, Handler, Tool, ToolSet
from ._validate import ReferenceValidator, show_value

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "Gate"]

#: Default cap on one observation's JSON text, in bytes (8 KiB).
DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024

logger = logging.getLogger("regdev")

_now_ns = time.perf_counter_ns
#: Validate codes decided before the tool name is looked at: the offered-tools check waits.
_BEFORE_NAME = frozenset({"not-an-object", "missing-tool", "bad-arguments", "wrong-tool"})


class Gate:
    """Parse, validate, authorize and execute model tool calls against one device.

    Args:
        device: the device calls run on; a fresh in-process :class:`RegisterFile` by default.
        tools: the tools offered to callers; the register tools by default. A tool without a
            handler is validated but refused at execution as ``device-error``.
        policy: sessions, the register map, rate limits, approval and limits (see
            :class:`~regdev.Policy`); None allows every call that validates.
        audit: the audit log every call is recorded in (see :class:`~regdev.AuditLog`); it
            also holds the idempotency keys, which are ignored without one. The gate owns it:
            :meth:`close` closes it.
        max_input_bytes: cap on a raw call, in bytes (``too-large`` above it); None takes the
            policy's, else 65536.
        max_output_bytes: cap on a tool result's JSON text, in bytes (``output-too-large``);
            None takes the policy's, else 8192.
        timeout: seconds a call waits for the device before ``device-timeout`` (queueing
            included); None takes the policy's, else no limit beyond the device backend's own.
            See :class:`~regdev.TimeoutDevice` for what a timed-out write means.

    Raises:
        ValueError: a cap is not a positive int, or the timeout not a positive number.
        PolicyError: the policy offers a session a tool this gate does not have.
    """

    def __init__(
        self,
        device: Device | None = None,
        tools: ToolSet = REGISTER_TOOLS,
        *,
        policy: Policy | None = None,
        audit: AuditLog | None = None,
        max_input_bytes: int | None = None,
        max_output_bytes: int | None = None,
        timeout: float | None = None,
    ) -> None:
        if policy is not None:
            max_input_bytes = _first(max_input_bytes, policy.max_input_bytes)
            max_output_bytes = _first(max_output_bytes, policy.max_output_bytes)
            timeout = _first(timeout, policy.timeout)
        max_input_bytes = _first(max_input_bytes, DEFAULT_MAX_INPUT_BYTES)
        max_output_bytes = _first(max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES)
        for name, cap in (("max_input_bytes", max_input_bytes),
                          ("max_output_bytes", max_output_bytes)):
            if type(cap) is not int or cap <= 0:
                raise ValueError(f"{name} must be a positive int (bytes), got {cap!r}")
        self.device: Device = device if device is not None else RegisterFile()
        self.tools = tools
        self.max_input_bytes = max_input_bytes
        self.max_output_bytes = max_output_bytes
        self.policy = policy
        self.audit = audit
        self.timeout = timeout
        self._runner = TimeoutDevice(self.device, timeout) if timeout is not None else self.device
        self._check = compile_validator(tools)  # the hot path: returns a code or None
        self._validator = ReferenceValidator(tools)  # asked only to explain a refusal
        self._guarded = policy is not None or audit is not None
        #: The register map when it protects any register (else the check is skipped).
        self._registers = policy.registers if policy is not None and (
            policy.registers.read_only or policy.registers.protected) else None
        if policy is not None:
            for name, spec in policy.sessions.items():
                missing = [tool for tool in spec.tools or () if tool not in tools]
                if missing:
                    raise PolicyError(f"the policy offers session `{name}` the tool "
                                      f"`{escape_text(missing[0])}`, which this gate does not "
                                      f"have; tools: {', '.join(tools)}")
        #: The session of calls that name none.
        self.default_session = self.session()

    def session(self, name: str = "default") -> Session:
        """A new session declared by the policy as ``name``, with its own rate-limit bucket.

        Raises:
            PolicyError: the policy declares no such session (without a policy, only
                ``"default"`` exists, allowing everything).
        """
        if self.policy is not None:
            return self.policy.session(name)
        if name != "default":
            raise PolicyError(f"session `{name}` needs a policy that declares it; this gate "
                              "has no policy")
        return Session()

    def handle(
        self,
        raw: str | bytes,
        *,
        dialect: str = "canonical",
        tool_choice: str | None = None,
        session: Session | None = None,
        loop_id: str | None = None,
        step: int | None = None,
    ) -> Observation:
        """Run one raw tool call through every stage.

        Args:
            raw: the model's output, JSON text (``str`` or UTF-8 ``bytes``).
            dialect: how the call is shaped, one of :data:`regdev.DIALECTS`.
            tool_choice: when set, this step forces that tool (others are ``wrong-tool``).
            session: the caller; :attr:`default_session` when None.
            loop_id: the loop this call belongs to, for the audit log (``run_loop`` sets it).
            step: the step number in that loop, from 1.

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``dialect`` is not one of :data:`regdev.DIALECTS`, or ``tool_choice``
                is not one of the gate's tools (checked before anything else; a programming
                error, not a model's).
        """
        self.check_options(dialect, tool_choice)
        if self._guarded or session is not None:
            state = _CallState(session or self.default_session, dialect, raw, loop_id, step)
            return self._handle_guarded(state, raw, None, None, tool_choice)
        try:
            parsed = parse(raw, dialect, max_bytes=self.max_input_bytes)
            if isinstance(parsed, Refusal):
                return Observation.refused(parsed)
            if parsed.refusal is not None:
                return Observation.refused(parsed.refusal, parsed.id)
            return self._run(parsed.call, parsed.id, tool_choice)
        except Exception:  # the gate's promise: one observation, never an exception
            return self._internal_error()

    def handle_call(
        self,
        call: object,
        *,
        call_id: str | None = None,
        tool_choice: str | None = None,
        session: Session | None = None,
        idempotency_key: object = None,
        loop_id: str | None = None,
        step: int | None = None,
    ) -> Observation:
        """Run an already-decoded canonical call (for callers that decoded JSON themselves).

        Args:
            call: ``{"tool": NAME, "arguments": {...}}`` as decoded JSON values.
            call_id: correlation id to echo in the observation.
            tool_choice: when set, this step forces that tool.
            session: the caller; :attr:`default_session` when None.
            idempotency_key: the call's idempotency key, a string of 1..256 characters, or
                None; anything else is refused as ``bad-idempotency-key``.
            loop_id: the loop this call belongs to, for the audit log.
            step: the step number in that loop.

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``tool_choice`` is not one of the gate's tools.
        """
        self.check_options("canonical", tool_choice)
        if call_id is not None and (type(call_id) is not str or len(call_id) > MAX_ID_CHARS):
            call_id = None
        key = check_idempotency_key(idempotency_key, "idempotency_key")
        if self._guarded or session is not None:
            raw = encode_json(call) if self.audit is not None else None
            state = _CallState(session or self.default_session, "canonical", raw, loop_id, step)
            state.marks.append(state.marks[0])  # nothing to parse
            if isinstance(key, Refusal):
                state.call = call
                return self._handle_guarded(state, None, call, call_id, tool_choice, refusal=key)
            state.key = key
            return self._handle_guarded(state, None, call, call_id, tool_choice)
        if isinstance(key, Refusal):
            return Observation.refused(key, call_id)
        try:
            return self._run(call, call_id, tool_choice)
        except Exception:
            return self._internal_error()

    def check_options(self, dialect: str, tool_choice: str | None) -> None:
        """Raise ValueError for a dialect or a forced tool this gate cannot honour."""
        check_dialect(dialect)
        if tool_choice is not None and (type(tool_choice) is not str
                                        or tool_choice not in self.tools):
            raise ValueError(f"tool_choice {tool_choice!r} is not one of the tools offered: "
                             f"{', '.join(self.tools)}")

    def _run(self, call: object, call_id: str | None, tool_choice: str | None,
             state: _CallState | None = None) -> Observation:
        refusal = (None if self._check(call, tool_choice) is None
                   else self._validator.check(call, tool_choice))
        if state is not None:
            refusal = self._offered(call, refusal, state)
        if refusal is not None:
            return Observation.refused(refusal, call_id)
        assert isinstance(call, dict)
        tool = self.tools[call["tool"]]
        arguments = tool.bind(call["arguments"])
        if state is not None:
            answer = self._authorize(tool, arguments, call_id, state)
            if answer is not None:
                return answer
        result = self._execute(tool.name, tool.handler, arguments)
        if state is not None:
            state.marks.append(_now_ns())
        if isinstance(result, Refusal):
            return Observation.refused(result, call_id)
        size = len(msgspec.json.encode(result))
        if size > self.max_output_bytes:
            ran = "ran" if tool.read_only else "ran and its effect stands"
            return Observation.refused(
                Refusal("observe", "output-too-large",
                        f"{tool.name} {ran}, but its result is {size} bytes, over the cap of "
                        f"{self.max_output_bytes} bytes"),
                call_id,
            )
        return Observation.success(tool.name, result, call_id)

    def _execute(
        self, name: str, handler: Handler | None, arguments: dict[str, Any]
    ) -> dict[str, Any] | Refusal:
        if handler is None:
            return Refusal("execute", "device-error", f"tool {name} has no implementation here")
        try:
            result: dict[str, Any] = handler(self._runner, arguments)
        except DeviceTimeout as error:
            return Refusal("execute", "device-timeout",
                           f"the device did not answer in time: {escape_text(str(error), 120)}")
        except RegdevError as error:
            return Refusal("execute", "device-error",
                           f"the device refused: {escape_text(str(error), 120)}")
        return result

    @staticmethod
    def _internal_error() -> Observation:
        logger.exception("regdev: unexpected error while handling a tool call")
        return Observation.refused(
            Refusal("internal", "internal-error",
                    "regdev failed while handling this call (an internal error, logged); "
                    "read the register back before retrying")
        )

    # --- the guarded path: sessions, authorization, idempotency keys, audit ---------------

    def _handle_guarded(self, state: _CallState, raw: str | bytes | None, call: object,
                        call_id: str | None, tool_choice: str | None, *,
                        refusal: Refusal | None = None) -> Observation:
        """``raw`` to parse (from :meth:`handle`), or the decoded ``call`` when it is None;
        ``refusal`` refuses a decoded call before validation (its idempotency key)."""
        try:
            if raw is not None:
                if type(raw) is str and len(raw) <= self.max_input_bytes:
                    # encoded once, for the parser and for the audit record
                    raw = state.raw = raw.encode("utf-8", "surrogatepass")
                parsed = parse(raw, state.dialect, max_bytes=self.max_input_bytes)
                state.marks.append(_now_ns())
                if isinstance(parsed, Refusal):
                    observation = Observation.refused(parsed)
                elif parsed.refusal is not None:
                    state.call = parsed.call
                    observation = Observation.refused(parsed.refusal, parsed.id)
                else:
                    call, state.key = parsed.call, parsed.idempotency_key
                    state.call = call
                    observation = self._run(call, parsed.id, tool_choice, state)
            elif refusal is not None:
                observation = Observation.refused(refusal, call_id)
            else:
                state.call = call
                observation = self._run(call, call_id, tool_choice, state)
        except Exception:
            observation = self._internal_error()
        try:
            return self._finish(state, observation)
        except Exception:
            return self._internal_error()
        finally:
            if state.reserved and self.audit is not None:
                assert state.key is not None
                self.audit.idempotency.release(state.session.name, state.key)

    def _offered(self, call: object, refusal: Refusal | None,
                 state: _CallState) -> Refusal | None:
        """A tool not offered to the session is ``unknown-tool``, in the same position."""
        session = state.session
        if session.tools is not None and (refusal is None or refusal.code not in _BEFORE_NAME):
            assert isinstance(call, dict)
            name = call["tool"]
            if not session.offers(name):
                offered = ", ".join(t for t in session.tools if t in self.tools) or "none"
                refusal = Refusal("validate", "unknown-tool",
                                  f"unknown tool {show_value(name)}; available tools: {offered}")
        state.marks.append(_now_ns())
        return refusal

    def _authorize(self, tool: Tool, arguments: dict[str, Any], call_id: str | None,
                   state: _CallState) -> Observation | None:
        """The authorize stage, in the order of ``_policy.py``; None lets the call run."""
        state.tool, state.arguments = tool, arguments
        session, registers = state.session, self._registers
        if self.audit is not None and self.audit.closed:
            refusal: Refusal | None = Refusal(
                "authorize", "audit-error",
                "the audit log is closed, so no call can be recorded or run")
        else:
            refusal = session.check_scope(tool)
        addr = register_address(tool, arguments) if registers is not None else None
        if refusal is None and addr is not None:
            assert registers is not None
            refusal = check_read_only(registers, addr)
        if refusal is None and state.key is not None and self.audit is not None \
                and not tool.read_only:
            state.print = fingerprint(tool.name, arguments)
            found = self.audit.idempotency.begin(session.name, state.key, state.print)
            if isinstance(found, Observation):
                state.replay = True
                state.marks.append(_now_ns())
                return replace(found, id=call_id)
            refusal = found
            state.reserved = found is None
        if refusal is None:
            refusal = session.take_token()
        if refusal is None and addr is not None:
            assert registers is not None and self.policy is not None
            refusal = ask_approval(registers, addr, self.policy.approve,
                                   lambda: ApprovalRequest(session.name, tool.name,
                                                           dict(arguments), addr))
        state.marks.append(_now_ns())
        return None if refusal is None else Observation.refused(refusal, call_id)

    def _finish(self, state: _CallState, observation: Observation) -> Observation:
        """Record the call in the audit log (durably for a write that ran); store its key."""
        marks = state.marks
        if len(marks) == 5:  # execute ran: the rest was observe
            marks.append(_now_ns())
        audit = self.audit
        if audit is None:
            return observation
        tool = state.tool
        wrote = len(marks) == 6 and tool is not None and not tool.read_only
        key_row = None
        if state.reserved and wrote and observation.code in STORED_CODES:
            assert state.key is not None and state.print is not None
            stored = msgspec.json.encode(replace(observation, id=None).to_dict()).decode()
            key_row = (state.session.name, state.key, state.print, stored, state.time)
        row = audit.row(
            time=state.time, session=state.session.name, dialect=state.dialect, raw=state.raw,
            observation=observation,
            tool=tool.name if tool is not None else _tool_name(state.call),
            arguments=encode_json(state.arguments) if state.arguments is not None
            else _arguments_text(state.call, audit.max_raw_bytes),
            loop_id=state.loop_id, step=state.step, idempotency_key=state.key,
            marks=marks)
        try:
            audit.append(row, key_row, durable=wrote)
        except AuditError as error:
            if not wrote:
                logger.error("regdev: a call's audit record was not written: %s", error)
                return observation
            return Observation.refused(
                Refusal("observe", "audit-error",
                        "the call ran on the device but its audit record could not be "
                        f"written ({escape_text(error.reason or 'audit log failure', 80)}); "
                        "read the register back"),
                observation.id)
        if key_row is not None:
            assert state.key is not None and state.print is not None
            audit.idempotency.complete(state.session.name, state.key, state.print, key_row[3])
            state.reserved = False
        return observation

    def record_loop_stop(self, loop_id: str, stop: str, detail: str, steps: int,
                         session: Session | None = None) -> None:
        """Record a loop's stop reason in the audit log (nothing without one). Never raises."""
        if self.audit is None:
            return
        row = self.audit.stop_row(time=time.time(),
                                  session=(session or self.default_session).name,
                                  loop_id=loop_id, stop=stop, detail=detail, steps=steps)
        try:
            self.audit.append(row)
        except AuditError as error:
            logger.error("regdev: a loop's stop was not recorded: %s", error)

    def close(self) -> None:
        """Close the audit log (committing every record) and the timeout worker. Idempotent."""
        if self.audit is not None:
            self.audit.close()
        if isinstance(self._runner, TimeoutDevice):
            self._runner.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Gate(device={self.device.identify()!r}, tools={list(self.tools)!r})"


class _CallState:
    """What the guarded path learns about one call on its way, for the later stages and the
    audit record. ``marks`` holds the clock (ns) at the start and at the end of each stage."""

    __slots__ = ("arguments", "call", "dialect", "key", "loop_id", "marks", "print",
                 "raw", "replay", "reserved", "session", "step", "time", "tool")

    def __init__(self, session: Session, dialect: str, raw: str | bytes | None,
                 loop_id: str | None, step: int | None) -> None:
        self.session = session
        self.dialect = dialect
        self.raw = raw
        self.loop_id = loop_id
        self.step = step
        self.time = time.time()
        self.marks = [_now_ns()]
        self.call: object = None
        self.key: str | None = None
        self.tool: Tool | None = None
        self.arguments: dict[str, Any] | None = None
        self.print: bytes | None = None
        self.reserved = False
        self.replay = False


def _first(*values: Any) -> Any:
    """The first value that is not None."""
    return next((value for value in values if value is not None), None)


def _tool_name(call: object) -> str | None:
    if type(call) is dict:
        name = call.get("tool")
        if type(name) is str:
            return name[:200]
    return None


def _arguments_text(call: object, cap: int) -> str | None:
    """The arguments of a call refused before binding, as JSON text when at most ``cap``."""
    if type(call) is not dict or "arguments" not in call:
        return None
    text = encode_json(call["arguments"])
    return text if text is not None and len(text) <= cap else None
