"""The gate: one raw tool call in, exactly one observation out.

Rules of this file:

* One pipeline: parse, validate, authorize, execute, observe, written out in :meth:`Gate.handle`
  for the plain path (below), and as a loop over the stage methods in :meth:`Gate._run`. Each
  stage is a small method that returns None to let the call go on, or what ends it: a
  :class:`Refusal` (or, from authorize, the stored observation of a replayed idempotency key).
  Nothing after the first refusal runs, and nothing reaches the device unless every earlier
  stage passed. Then :meth:`Gate._finish` records the call in the audit log, when there is one,
  and settles its idempotency key. What the stages learn about the call is kept in one
  :class:`_Call`.
* Validation runs the gate's compiled check (``_compile.py``, :func:`compile_refusals`) of the
  tools the caller's session is offered: it returns the first failure as the refusal the
  reference validator gives, worded in the generated code (the reference words the rest). So
  a tool the session is not offered is ``unknown-tool`` exactly where a tool that does not
  exist is, listing the session's tools.
* Three ways through, one pipeline. :meth:`Gate.handle` runs the pipeline itself, written out
  top to bottom (the plain path), for a canonical call of the default session on a gate with
  nothing to authorize (no policy, no audit log, no read-only or protected register): parse
  (the usual call in one decode and one colon count, :func:`decode_canonical`; any other text
  through :func:`parse`), validate, (authorize: nothing), execute, observe.
  :meth:`Gate._audited` writes the same stages out again for a gate whose only authorize step
  is its audit log (an audit log, no policy, no read-only or protected register), for the
  usual canonical call of the default session (the audited path): each stage timed, the audit
  log's check at authorize, then the call's record (:meth:`AuditLog.record_call`), committed
  before the call returns when it executed a write. Every other call, and every call of any
  other gate, goes through :meth:`Gate._run`, the same stages as methods over one
  :class:`_Call`, where the authorize checks, the idempotency keys, the stage times and the
  audit record join (:meth:`Gate._finish`).
  All three give the same observation for the same call, and the audited path the record the
  general one writes (``tests/test_gate.py`` compares them on generated raw calls).
* ``_Call.executed`` is set immediately before the device call: from then on the device may
  have changed. A call that executed a tool changing the device is recorded durably (committed
  before its observation is returned) and keeps its idempotency key, whatever happens after
  (``device-timeout`` aside, see ``_idempotency.py``).
* Before a tool that changes the device is sent, its intent is committed to the audit log,
  when there is one (:meth:`AuditLog.record_intent`; the call's record names it after), so a
  process killed between the device's answer and the record still leaves a record of the
  write, saying its outcome is unknown. An intent that cannot be committed keeps the write
  from being sent (``audit-error``).
* An approved call that changes protected registers holds their locks (one per register, in
  address order) from the re-read of the values its approver was shown
  (:attr:`Approval.holds`) to the device's answer (:meth:`Gate._execute_approved`): check and
  write are one step, so of two approved writes of one register sent at once only the first
  runs, and the second is ``approval-denied`` with nothing sent.
* A lost reply (``device-timeout``) of a write that is not safe to send twice
  (:attr:`Tool.repeat_risk`: a 1 written to a write-1-to-clear bit) is ``outcome-unknown``,
  which keeps its idempotency key: a retry with it is answered, not run.
* A key is scoped to the device's identity and reset epoch (:meth:`Device.identity`), taken
  before the call runs; a stored observation is replayed only after the device, asked again,
  says the same epoch: a reset by any path since the write means the write runs again.
* A device failure is reported as a failure (``device-timeout``, ``device-error``), never as a
  success; when the durable record of a write cannot be committed the caller gets
  ``audit-error``, and calls that would change the device are refused until a commit succeeds.
* :meth:`Gate.handle` never raises for a call: an unexpected exception becomes an
  ``internal-error`` observation (and is logged), so no stack trace reaches a model. A
  ``KeyboardInterrupt`` or ``SystemExit`` from inside (the approval hook, a device) is recorded
  as ``internal-error`` in the audit log and then raised again: the program is being stopped.
* Stage times are taken only when there is an audit log to keep them, and the plain and
  audited paths build no :class:`_Call`: the plain gate pays for neither.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import msgspec
from msgspec.structs import replace

from ..audit._idempotency import PROVIDER_DIALECTS, Slot, fingerprint, key_scope
from ..audit._log import AuditLog, encode_json
from ..core._errors import (
    AuditError,
    DeviceBusy,
    DeviceRefused,
    DeviceTimeout,
    PolicyError,
    RegdevError,
    ReplyLost,
    TransportError,
)
from ..core._observation import PIPELINE, Observation, Refusal
from ..core._text import display_text, escape_text, is_text
from ..devices._device import Device, DeviceIdentity, RegisterFile, TimeoutDevice
from ._compile import BIND, RefusalCheck, compile_refusals
from ._maptools import map_tools
from ._parse import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_ID_CHARS,
    NOT_JSON,
    check_dialect,
    check_idempotency_key,
    decode_canonical,
    decode_json,
    encode_json_data,
    not_json,
    parse,
)
from ._policy import (
    Approval,
    ApprovalRequest,
    Policy,
    RegisterPolicy,
    Session,
    ask_approval,
    changed_registers,
    check_read_only,
    guarded,
)
from ._tools import Tool, ToolSet
from ._validate import ReferenceValidator

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "Gate"]

#: Default cap on one observation's JSON text, in bytes (8 KiB).
DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024

logger = logging.getLogger("regdev")

_now_ns = time.perf_counter_ns
#: A Decimal of a result as the exact JSON number it is (the output cap measures, and an
#: idempotency key stores, what goes to the model), never as a string.
_encode = msgspec.json.Encoder(decimal_format="number").encode
#: Prefixes of the keys made from provider tool call ids: ``openai:ID``, and ``openai@...``
#: for one scoped to a loop (:meth:`Gate._take_key`); an explicit key may not take them.
_DERIVED_KEY_PREFIXES = tuple(f"{dialect}{mark}" for mark in ":@" for dialect in PROVIDER_DIALECTS)
#: What :attr:`Gate.warn` is told, once, when a gate without an audit log drops a key.
KEYS_IGNORED = ("an idempotency key was ignored: there is no audit log to keep keys in, so a "
                "call sent again with the same key runs again (said once)")

#: The stage times of a call that reached no stage (none taken: no audit log to keep them).
_NOT_TIMED = (None,) * len(PIPELINE)
#: What a stage returns: None (go on), a refusal, or (authorize) a replayed observation.
_End = Refusal | Observation | None


class Gate:
    """Parse, validate, authorize and execute model tool calls against one device.

    Args:
        device: the device calls run on; a fresh in-process :class:`RegisterFile` by default.
            Its register map (:attr:`Device.regmap`) gives the default tools, the
            read-only and protected registers, and how messages name registers.
        tools: the tools offered to callers; None (the default) offers the tools of the
            device's register map (:func:`regdev.map_tools`: for the default map, the two
            register tools). A tool without a handler is validated but refused at execution
            as ``device-error``.
        policy: sessions, read-only and protected registers, rate limits, approval and limits
            (see :class:`~regdev.Policy`); None allows every call that validates and that the
            register map allows.
        audit: the audit log every call is recorded in (see :class:`~regdev.AuditLog`); it
            also holds the idempotency keys, which are ignored without one. The gate owns it:
            :meth:`close` closes it.
        max_input_bytes: cap on a raw call, in bytes (``too-large`` above it); None takes the
            policy's, else 65536.
        max_output_bytes: cap on a tool result's JSON text, in bytes (``output-too-large``);
            None takes the policy's, else 8192.
        timeout: seconds a call waits for the device before ``device-timeout`` (queueing
            included), 0.001..86400 (one millisecond to one day); None takes the policy's,
            else no limit beyond the device backend's own. See :class:`~regdev.TimeoutDevice`
            for what a timed-out write means.

    Raises:
        ValueError: a cap is not a positive int, or the timeout not a number of seconds in
            0.001..86400.
        PolicyError: the policy offers a session a tool this gate does not have, or marks a
            register the device's map does not have.
    """

    def __init__(
        self,
        device: Device | None = None,
        tools: ToolSet | None = None,
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
        regmap = self.regmap = self.device.regmap
        if tools is None:
            tools = map_tools(regmap)
        self.tools = tools
        self.max_input_bytes = max_input_bytes
        self.max_output_bytes = max_output_bytes
        self.policy = policy
        self.audit = audit
        self.timeout = timeout
        self._runner = TimeoutDevice(self.device, timeout) if timeout is not None else self.device
        self._tool_by_name: dict[str, Tool] = dict(tools.items())
        #: The tools whose results are measured against the output cap: those whose result
        #: has no declared bound within it (Tool.result_bytes).
        self._measured = frozenset(
            name for name, tool in tools.items()
            if tool.result_bytes is None or tool.result_bytes > max_output_bytes)
        #: The compiled check of each offered tool list (None: every tool), its refusals
        #: worded as the reference validator of the same tools words them.
        self._validators: dict[tuple[str, ...] | None, RefusalCheck] = {
            None: compile_refusals(tools, ReferenceValidator(tools))}
        self._check = self._validators[None].refusal  # every tool's, bound once
        self._str_cap = max_input_bytes >> 2  # a str this long is within the cap in UTF-8
        #: The read-only and protected registers, of the policy and the device's map, when
        #: there are any (else the checks are skipped).
        registers = (policy.registers if policy is not None else RegisterPolicy()).for_map(
            regmap)
        self._registers = registers if (registers.read_only or registers.protected
                                        or registers.guards) else None
        #: One lock per protected register (and per register with a protected field or
        #: range): an approved write holds the locks of those it changes from the re-read of
        #: the values its approver saw to the device's answer (:meth:`_execute`), so that
        #: check and write are one step.
        self._guards = {addr: threading.Lock() for addr in sorted(
            {addr for addr in registers.protected if isinstance(addr, int)}
            | {guard.addr for guard in registers.guards})}
        #: The registers the device's map makes read-only (refusals name the map for these,
        #: the policy for the others).
        self._map_read_only = regmap.read_only()
        #: Every register's address (what a reset changes), and how messages name them.
        self._every = regmap.addresses
        #: The map's name in each audit record (None for the default map).
        self._map_name = None if regmap.is_default else (regmap.name or None)
        self._label = regmap.label
        #: The plain path (in :meth:`handle`) is taken by a gate with nothing to authorize: no
        #: policy, no audit log, no read-only or protected register.
        self._plain_path = policy is None and audit is None and self._registers is None
        #: The audited path (:meth:`_audited`) is taken by a gate whose only authorize step is
        #: its audit log: an audit log, no policy, no read-only or protected register.
        self._audited_path = policy is None and audit is not None and self._registers is None
        self._tool_call_ids_as_keys = policy is not None and policy.tool_call_ids_as_keys
        #: Told once, in words, when a call's idempotency key is ignored because the gate has
        #: no audit log (the command line prints it on stderr); the ``regdev`` logger's
        #: warning by default.
        self.warn: Callable[[str], None] = logger.warning
        self._keys_ignored = threading.Lock()  # held for good once the warning was given
        self._sessions: dict[str, Session] = {}
        if policy is not None:
            for name, spec in policy.sessions.items():
                missing = [tool for tool in spec.tools or () if tool not in tools]
                if missing:
                    raise PolicyError(f"the policy offers session `{escape_text(name)}` the tool "
                                      f"`{escape_text(missing[0])}`, which this gate does not "
                                      f"have; tools: {', '.join(tools)}")
                self._validators_for(spec.tools)
        #: The session of calls that name none.
        self.default_session = self.session()

    def session(self, name: str = "default") -> Session:
        """The live session declared by the policy as ``name``: the same object for every
        call with one name, so that its rate limit holds across them.

        Raises:
            PolicyError: the policy declares no such session (without a policy, only
                ``"default"`` exists, allowing everything).
        """
        session = self._sessions.get(name)
        if session is None:
            if self.policy is not None:
                session = self.policy.session(name)
            elif name == "default":
                session = Session()
            else:
                raise PolicyError(f"session `{escape_text(name)}` needs a policy that "
                                  "declares it; this gate has no policy")
            session = self._sessions.setdefault(name, session)  # one per name, even in a race
        return session

    def handle(
        self,
        raw: str | bytes,
        *,
        dialect: str = "canonical",
        tool_choice: str | None = None,
        session: Session | None = None,
        loop_id: str | None = None,
        step: int | None = None,
        proposer: str | None = None,
    ) -> Observation:
        """Run one raw tool call through every stage.

        Args:
            raw: the model's output, JSON text (``str`` or UTF-8 ``bytes``).
            dialect: how the call is shaped, one of :data:`regdev.DIALECTS`.
            tool_choice: when set, this step forces that tool (others are ``wrong-tool``).
            session: the caller; :attr:`default_session` when None.
            loop_id: the loop this call belongs to, for the audit log (``run_loop`` sets it).
            step: the step number in that loop, from 1.
            proposer: who proposed the call, for the audit log: ``provider:model`` for a
                model endpoint, ``mcp:NAME VERSION`` for an MCP client; None when unknown.

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``dialect`` is not one of :data:`regdev.DIALECTS`, ``tool_choice``
                is not one of the gate's tools, or ``loop_id`` is not a string of Unicode text
                (checked before anything else; a programming error, not a model's).
            KeyboardInterrupt, SystemExit: raised inside the call (by the approval hook, or
                while waiting for the device); the call is recorded first.
        """
        if dialect != "canonical" or tool_choice is not None:
            self.check_options(dialect, tool_choice)
        if loop_id is not None:
            check_loop_id(loop_id)
        if not self._plain_path or dialect != "canonical" or (
                session is not None and session is not self.default_session):
            if self._audited_path and dialect == "canonical" and (
                    session is None or session is self.default_session):
                return self._audited(raw, tool_choice, loop_id, step, proposer)
            # A policy, protected registers, another dialect or session: the stages as
            # methods over one _Call (_run), then the audit record (_finish).
            call = _Call(session or self.default_session, dialect, tool_choice, raw,
                         loop_id=loop_id, step=step, proposer=proposer)
            if self.audit is None:
                return self._run(call)
            call.time, call.timings = time.time(), {}
            return self._finish(call, self._run(call))
        # The plain path: the stages of _run, in its order, written out.
        try:
            # parse and validate: the usual call, one object holding a string tool, object
            # arguments and maybe an id, is decoded, its repeated keys ruled out by one colon
            # count (decode_canonical's steps, inline for a str), and its arguments checked by
            # the compiled check: the first failure worded, None, or BIND (valid, with a
            # number to make an int, or an array or object that may hold one). Any other text
            # goes through the general parse, and its document through the shape step first.
            name: str | None = None  # the usual call's tool, once it is known to be one
            arguments: Any
            if type(raw) is str and len(raw) <= self._str_cap:
                doc: Any
                try:
                    doc = decode_json(raw)
                except NOT_JSON as error:
                    refused = not_json(error, raw)  # None: a lone surrogate, parse() decides
                    if refused is not None:
                        return Observation(refusal=refused)
                    doc = None
                if (type(doc) is dict and type(tool_name := doc.get("tool")) is str
                        and type(arguments := doc.get("arguments")) is dict
                        and ((kept := len(doc)) == 2 or (kept == 3 and "id" in doc))
                        and raw.count(":") == kept + len(arguments)):
                    name, call_id = tool_name, None
                    if kept == 3:
                        call_id = doc["id"]
                        if type(call_id) is not str or len(call_id) > MAX_ID_CHARS:
                            call_id = None
            else:  # bytes, or a long str
                decoded = decode_canonical(raw, self.max_input_bytes)
                if type(decoded) is tuple:
                    name, arguments, call_id = decoded
                elif decoded is not None:  # not-json
                    return Observation(refusal=decoded)  # type: ignore[arg-type]
            if name is not None:
                verdict = self._check(name, arguments, tool_choice)
            else:
                parsed = parse(raw, max_bytes=self.max_input_bytes)
                if isinstance(parsed, Refusal):  # too-large, not-json
                    return Observation(refusal=parsed)
                call_id, key = parsed.id, parsed.idempotency_key
                refusal = parsed.refusal or (_prefixed_key(key) if key is not None and
                                             key.startswith(_DERIVED_KEY_PREFIXES) else None)
                if refusal is not None:  # a bad idempotency key
                    return Observation(refusal=refusal, id=call_id)
                if key is not None and self._keys_ignored.acquire(blocking=False):
                    self.warn(KEYS_IGNORED)  # kept nowhere without an audit log (said once)
                verdict = self._validators[None](parsed.call, tool_choice)
                if isinstance(verdict, Refusal):
                    return Observation(refusal=verdict, id=call_id)
                document: dict[str, Any] = parsed.call  # type: ignore[assignment]
                name, arguments = document["tool"], document["arguments"]
            if verdict is None:
                tool = self._tool_by_name[name]  # valid: the tool is offered
            elif verdict is BIND:
                tool = self._tool_by_name[name]
                arguments = tool.bind(arguments)
            else:
                return Observation(refusal=verdict, id=call_id)
            if tool.rules is not None:  # the register map's rules, after the schema's ranges
                refusal = tool.rules(arguments)
                if refusal is not None:
                    return Observation(refusal=refusal, id=call_id)
            # authorize: nothing to check (no policy, no audit log, no protected register)
            # execute
            handler = tool.handler
            if handler is None:
                return Observation(refusal=_no_handler(tool), id=call_id)
            try:
                result = handler(self._runner, arguments)
            except RegdevError as error:
                return Observation(refusal=_execute_failure(error, tool, arguments), id=call_id)
            # observe: the result against the output cap (unless its bound is within it)
            if name in self._measured:
                size = len(_encode(result))
                if size > self.max_output_bytes:
                    return Observation(refusal=_too_large(tool, size, self.max_output_bytes),
                                       id=call_id)
            return Observation(name, result, None, call_id)
        except Exception:  # the gate's promise: one observation, never an exception
            return _internal_error()

    def _audited(self, raw: str | bytes, tool_choice: str | None, loop_id: str | None,
                 step: int | None, proposer: str | None) -> Observation:
        """:meth:`handle` on a gate whose only authorize step is its audit log, for the
        default session: the plain path's stages written out again, each one timed, then the
        call's record (committed before returning when the call executed a write). The usual
        call takes it; any other text (an idempotency key, another shape, not JSON) takes the
        general way, :meth:`_run` and :meth:`_finish`, which give the same observation and
        record."""
        audit = self.audit
        assert audit is not None
        arrived = time.time()
        start = _now_ns()
        # parse: the usual call in one decode and one colon count
        decoded = decode_canonical(raw, self.max_input_bytes)
        if type(decoded) is not tuple:
            call = _Call(self.default_session, "canonical", tool_choice, raw,
                         loop_id=loop_id, step=step, proposer=proposer)
            call.time, call.timings = arrived, {}
            return self._finish(call, self._run(call, start))
        name, arguments, call_id = decoded
        now = _now_ns()
        parse_ns, start = now - start, now
        validate_ns = authorize_ns = execute_ns = observe_ns = None
        tool: Tool | None = None  # the validated call's tool
        bound: Any = None  # its bound arguments
        result: Any = None
        executed = False  # from the device call on, the device may have changed
        intent: str | None = None  # the id of a write's intent record, once committed
        refusal: Refusal | None
        try:
            # validate: the compiled check (the first failure worded, None, or BIND), then the
            # register map's rules, after the schema's ranges
            verdict = self._check(name, arguments, tool_choice)
            if verdict is None or verdict is BIND:
                tool = self._tool_by_name[name]  # valid: the tool is offered
                bound = tool.bind(arguments) if verdict is BIND else arguments
                refusal = tool.rules(bound) if tool.rules is not None else None
            else:
                refusal = verdict
            now = _now_ns()
            validate_ns, start = now - start, now
            # authorize: nothing runs that cannot be recorded (no policy, no protected register)
            if refusal is None:
                assert tool is not None
                if audit.failure is not None or audit.closed:
                    refusal = _check_audit(audit, tool)
                now = _now_ns()
                authorize_ns, start = now - start, now
            # execute
            if refusal is None:
                assert tool is not None
                handler = tool.handler
                if handler is None:
                    refusal = _no_handler(tool)
                else:
                    if not tool.read_only:  # the intent, committed before the write leaves
                        try:
                            intent = audit.record_intent(
                                time=arrived, session=self.default_session.name,
                                dialect="canonical", tool=name, arguments=encode_json(bound),
                                loop_id=loop_id, step=step, call_id=call_id,
                                device=self._runner.known_identity(), proposer=proposer,
                                caller=self.default_session.caller)
                        except AuditError as error:
                            refusal = _no_intent(error)
                    if refusal is None:
                        executed = True
                        try:
                            result = handler(self._runner, bound)
                        except RegdevError as error:
                            refusal = _execute_failure(error, tool, bound)
                now = _now_ns()
                execute_ns, start = now - start, now
            # observe: the result against the output cap (unless its bound is within it)
            if refusal is None:
                assert tool is not None
                if name in self._measured:
                    size = len(_encode(result))
                    if size > self.max_output_bytes:
                        refusal = _too_large(tool, size, self.max_output_bytes)
                observe_ns = _now_ns() - start
            observation = Observation(name, result, None, call_id) if refusal is None \
                else Observation(refusal=refusal, id=call_id)
        except Exception:  # the gate's promise: one observation, never an exception
            observation = _internal_error()
        except BaseException as error:  # Ctrl-C, exit: record the call, then let it go on
            observation = _internal_error(_interrupted(error), log=False)
            raise
        finally:
            # The record: what the general path's _record writes for the same call.
            durable = executed and tool is not None and not tool.read_only
            try:
                audit.record_call(
                    time=arrived, session=self.default_session.name, dialect="canonical",
                    raw=raw, observation=observation,
                    tool=tool.name if tool is not None else name[:200],
                    arguments=encode_json(bound) if bound is not None
                    else _arguments_text({"arguments": arguments}, audit.max_raw_bytes),
                    loop_id=loop_id, step=step,
                    stage_ns=(parse_ns, validate_ns, authorize_ns, execute_ns, observe_ns),
                    device=self._runner.known_identity(), proposer=proposer,
                    caller=self.default_session.caller, durable=durable, intent=intent,
                    map_name=self._map_name)
            except AuditError as error:
                if durable:
                    observation = _unrecorded(error, observation.id)
                else:
                    logger.error("a call's audit record was not written: %s", error)
            except Exception:
                observation = _internal_error()
        return observation

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
        proposer: str | None = None,
    ) -> Observation:
        """Run an already-decoded canonical call (for callers that decoded JSON themselves).

        The same pipeline as :meth:`handle`, with no text to parse. The call must be JSON
        data, as the provider helpers (:func:`openai_tool_results`,
        :func:`anthropic_tool_results`) require too, by the same check: dicts with string
        keys, lists (or tuples), strings, integers, finite floats and decimals, booleans and
        None. Anything else (a key that is not a string, NaN or an infinity, bytes, a set, a
        container that holds itself) is refused as ``not-json``, naming the place, and
        recorded in the audit log without its text. Unlike :meth:`handle`, there is no byte
        cap: a call whose JSON text is over ``max_input_bytes`` is checked by the validator
        only (which never raises, whatever it is given).

        Args:
            call: ``{"tool": NAME, "arguments": {...}}`` as decoded JSON values.
            call_id: correlation id to echo in the observation (a string of at most 256
                characters of Unicode text; anything else is not echoed).
            tool_choice: when set, this step forces that tool.
            session: the caller; :attr:`default_session` when None.
            idempotency_key: the call's idempotency key, a string of 1..256 characters of
                Unicode text, or None; anything else is refused as ``bad-idempotency-key``.
            loop_id: the loop this call belongs to, for the audit log (a string).
            step: the step number in that loop.
            proposer: who proposed the call, for the audit log (see :meth:`handle`).

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``tool_choice`` is not one of the gate's tools, or ``loop_id`` is not
                a string of Unicode text (one holding a lone surrogate cannot be recorded).
            KeyboardInterrupt, SystemExit: as for :meth:`handle`.
        """
        self.check_options("canonical", tool_choice)
        if loop_id is not None:
            check_loop_id(loop_id)
        state = _Call(session or self.default_session, "canonical", tool_choice, None,
                      loop_id=loop_id, step=step, proposer=proposer)
        if self.audit is not None:
            state.time, state.timings = time.time(), {}
        state.call = call
        if type(call_id) is str and len(call_id) <= MAX_ID_CHARS and is_text(call_id):
            state.id = call_id
        state.sent_key = idempotency_key
        return self._finish(state, self._run(state))

    def refuse(
        self,
        raw: str | bytes,
        refusal: Refusal,
        *,
        dialect: str = "canonical",
        session: Session | None = None,
        loop_id: str | None = None,
        step: int | None = None,
        proposer: str | None = None,
    ) -> Observation:
        """Refuse a proposal that never became a call for the pipeline (a tool call a model
        wrote into its reply's text instead of making it), and record it in the audit log as
        any refused call is: its raw text, stage and code, loop, step and proposer. Nothing
        reaches the device.

        Args:
            raw: what the model sent (the reply's text), recorded as the call's raw text.
            refusal: the verdict (e.g. parse ``call-in-text``).
            dialect, session, loop_id, step, proposer: as for :meth:`handle`.

        Returns:
            The refusal's :class:`Observation` (``audit-error``'s never: nothing ran).

        Raises:
            ValueError: ``loop_id`` is not a string of Unicode text.
        """
        if loop_id is not None:
            check_loop_id(loop_id)
        observation = Observation.refused(refusal)
        if self.audit is None:
            return observation
        call = _Call(session or self.default_session, dialect, None, raw, loop_id=loop_id,
                     step=step, proposer=proposer)
        call.time, call.timings = time.time(), {}
        return self._finish(call, observation)

    def check_options(self, dialect: str, tool_choice: str | None) -> None:
        """Raise ValueError for a dialect or a forced tool this gate cannot honour."""
        if dialect != "canonical":
            check_dialect(dialect)
        if tool_choice is not None and (type(tool_choice) is not str
                                        or tool_choice not in self.tools):
            raise ValueError(f"tool_choice {tool_choice!r} is not one of the tools offered: "
                             f"{', '.join(self.tools)}")

    # --- the pipeline --------------------------------------------------------------------

    def _run(self, call: _Call, start: int | None = None) -> Observation:
        """parse -> validate -> authorize -> execute -> observe: the first stage that ends
        the call decides its observation; if none does, the call succeeded. ``start``: when
        the parse stage started (``perf_counter_ns``), if before this call."""
        timings = call.timings  # None without an audit log: nothing to time
        if start is None:
            start = _now_ns() if timings is not None else 0
        try:
            for name, stage in _STAGES:
                end = stage(self, call)
                if timings is not None:
                    now = _now_ns()
                    timings[name] = now - start
                    start = now
                if end is not None:
                    if isinstance(end, Observation):  # authorize's replay of a stored one
                        return end
                    return Observation(refusal=end, id=call.id)
        except Exception:  # the gate's promise: one observation, never an exception
            return _internal_error()
        except BaseException as error:  # Ctrl-C, exit: record the call, then let it go on
            self._finish(call, _internal_error(_interrupted(error), log=False))
            raise
        assert call.tool is not None and call.result is not None
        return Observation(call.tool.name, call.result, id=call.id)

    def _parse(self, call: _Call) -> Refusal | None:
        """Raw text to the canonical call, its correlation id and its idempotency key."""
        if call.raw is None:  # handle_call: decoded already, but maybe not JSON data
            text = encode_json_data(call.call, self.max_input_bytes)
            if isinstance(text, str):
                call.not_json = True
                return Refusal("parse", "not-json", f"the tool call is not JSON data: {text}")
            key = check_idempotency_key(call.sent_key, "idempotency_key")
        else:
            decoded = decode_canonical(call.raw, self.max_input_bytes) \
                if call.dialect == "canonical" else None
            if type(decoded) is tuple:  # the usual call: no key, nothing else to adapt
                name, arguments, call.id = decoded
                call.call = {"tool": name, "arguments": arguments}
                return None
            if decoded is not None:  # not-json
                return decoded  # type: ignore[return-value]
            parsed = parse(call.raw, call.dialect, max_bytes=self.max_input_bytes)
            if isinstance(parsed, Refusal):
                return parsed
            call.call, call.id = parsed.call, parsed.id
            if parsed.refusal is not None:
                return parsed.refusal
            key = parsed.idempotency_key
        if key is None:
            return None
        if isinstance(key, Refusal):
            return key
        return self._take_key(call, key)

    def _take_key(self, call: _Call, key: str) -> Refusal | None:
        """Keep the call's idempotency key (see ``_idempotency.py`` for which count)."""
        if call.dialect in PROVIDER_DIALECTS:  # the provider's tool call id
            if self._tool_call_ids_as_keys:
                call.key = _derived_key(call.dialect, key, call.loop_id)
        elif key.startswith(_DERIVED_KEY_PREFIXES):
            return _prefixed_key(key)
        else:
            call.key = key
        if self.audit is None and call.key is not None:  # keys live in the audit log:
            call.key = None  # without one they are ignored, and the caller is told once
            if self._keys_ignored.acquire(blocking=False):
                self.warn(KEYS_IGNORED)
        return None

    def _validate(self, call: _Call) -> Refusal | None:
        """The call against the schemas of the tools its session is offered; a valid call's
        tool and bound arguments."""
        tools = call.session.tools
        check = self._validators.get(tools) or self._validators_for(tools)
        verdict = check(call.call, call.tool_choice)
        if isinstance(verdict, Refusal):
            return verdict
        canonical: dict[str, Any] = call.call  # type: ignore[assignment]
        tool = call.tool = self._tool_by_name[canonical["tool"]]
        arguments = canonical["arguments"]
        arguments = call.arguments = tool.bind(arguments) if verdict is BIND else arguments
        if tool.rules is not None:  # the register map's rules, after the schema's ranges
            return tool.rules(arguments)
        return None

    def _authorize(self, call: _Call) -> _End:
        """The authorize stage, in the order of ``_policy.py``; None lets the call run."""
        session, tool, audit, registers = call.session, call.tool, self.audit, self._registers
        assert tool is not None and call.arguments is not None
        if audit is None and registers is None and not session.limited:
            return None  # nothing to check
        if audit is not None:
            refusal = _check_audit(audit, tool)
            if refusal is not None:
                return refusal
        refusal = session.check_scope(tool)
        if refusal is not None:
            return refusal
        every = self._every
        changed = changed_registers(tool, call.arguments, every) if registers is not None else ()
        if changed:
            assert registers is not None
            refusal = check_read_only(registers, tool, changed, every=every,
                                      label=self._label, by_map=self._map_read_only)
            if refusal is not None:
                return refusal
        if call.key is not None and not tool.read_only:
            end = self._begin_key(call)
            if end is not None:
                return end
        refusal = session.take_token()
        if refusal is not None or not changed:
            return refusal
        assert registers is not None
        arguments = call.arguments
        tripped = guarded(registers.guards, tool, arguments, changed, self.regmap) \
            if registers.guards else ()
        refusal = ask_approval(registers, tool, changed,
                               self.policy.approve if self.policy is not None else None,
                               lambda addr: ApprovalRequest(session.name, tool.name,
                                                            dict(arguments), addr,
                                                            session.caller),
                               every=every, label=self._label, answered=call.answered,
                               guards=tripped)
        if refusal is None:  # approved (or nothing protected): its registers' locks at execute
            call.guarded = tuple(addr for addr in self._guards if addr in changed)
        return refusal

    def _begin_key(self, call: _Call) -> _End:
        """Reserve the call's idempotency key in the scope of the device's identity and reset
        epoch, or end the call: a replay, once the device, asked again, said the epoch the
        key was stored in; or a refusal. A device that cannot say its epoch gets no replay."""
        audit = self.audit
        assert audit is not None and call.tool is not None and call.key is not None
        call.fingerprint = print_ = fingerprint(call.tool.name, call.arguments or {})
        try:
            identity = self._runner.identity()  # what the device said last (or asked now)
            slot = self._slot(identity, call)
            found = audit.begin_key(slot, print_, replay=identity.epoch is not None)
            if type(found) is Observation:  # not before the device confirms its epoch
                fresh = self._runner.identity(refresh=True)
                if fresh != identity:  # reset since: the write runs again in the new epoch
                    slot = self._slot(fresh, call)
                    found = audit.begin_key(slot, print_, replay=fresh.epoch is not None)
        except RegdevError as error:
            return _unidentified(error)
        if found is None:
            call.slot, call.reserved = slot, True
            return None
        return replace(found, id=call.id) if type(found) is Observation else found

    @staticmethod
    def _slot(identity: DeviceIdentity, call: _Call) -> Slot:
        assert call.key is not None
        return key_scope(identity.device, identity.epoch), call.session.name, call.key

    def _execute(self, call: _Call) -> Refusal | None:
        """Run the tool on the device (through the timeout worker when there is a timeout)."""
        tool = call.tool
        assert tool is not None and call.arguments is not None
        if tool.handler is None:
            return _no_handler(tool)
        if call.guarded:
            return self._execute_approved(call, tool)
        if self.audit is not None and not tool.read_only:
            refusal = self._intend(call, tool)
            if refusal is not None:
                return refusal
        call.executed = True  # from here on the device may have changed
        try:
            call.result = tool.handler(self._runner, call.arguments)
        except RegdevError as error:
            return _execute_failure(error, tool, call.arguments)
        return None

    def _execute_approved(self, call: _Call, tool: Tool) -> Refusal | None:
        """Execute an approved call that changes protected registers, holding their locks
        (in address order) from the re-read of the values its approver was shown to the
        device's answer: an approval is of one change, so a register that no longer holds
        what the question showed is ``approval-denied`` and nothing is sent."""
        handler, arguments = tool.handler, call.arguments
        assert handler is not None and arguments is not None
        locks = [self._guards[addr] for addr in call.guarded]
        for lock in locks:
            lock.acquire()
        try:
            holds = call.approval.holds if call.approval is not None else ()
            for addr, old in holds:
                try:
                    now: int | None = self._runner.read(addr)
                except RegdevError as error:
                    logger.warning("register %d could not be read back before an approved "
                                   "write: %s", addr, error)
                    now = None
                if now != old:
                    return _changed_since_asked(self._label(addr), old, now)
            if self.audit is not None and not tool.read_only:
                refusal = self._intend(call, tool)
                if refusal is not None:
                    return refusal
            call.executed = True  # from here on the device may have changed
            try:
                call.result = handler(self._runner, arguments)
            except RegdevError as error:
                return _execute_failure(error, tool, arguments)
            return None
        finally:
            for lock in reversed(locks):
                lock.release()

    def _intend(self, call: _Call, tool: Tool) -> Refusal | None:
        """Record the intent of a write about to be sent, durably (``AuditLog.record_intent``);
        ``audit-error`` (nothing sent) when it cannot be."""
        assert self.audit is not None
        approval = call.approval
        try:
            call.intent = self.audit.record_intent(
                time=call.time, session=call.session.name, dialect=call.dialect,
                tool=tool.name, arguments=encode_json(call.arguments),
                loop_id=call.loop_id, step=call.step, idempotency_key=call.key,
                call_id=call.id, device=self._runner.known_identity(),
                proposer=call.proposer, caller=call.session.caller,
                approver=approval.approver if approval is not None else None,
                approval=approval.via if approval is not None else None)
        except AuditError as error:
            return _no_intent(error)
        return None

    def _observe(self, call: _Call) -> Refusal | None:
        """The result's size against the output cap (unless its bound is within it)."""
        assert call.tool is not None
        if call.tool.name not in self._measured:
            return None
        size = len(_encode(call.result))
        if size <= self.max_output_bytes:
            return None
        assert call.tool is not None
        return _too_large(call.tool, size, self.max_output_bytes)

    # --- after the pipeline: the audit record and the idempotency key --------------------

    def _finish(self, call: _Call, observation: Observation) -> Observation:
        """Record the call (durably when it executed a write) and settle its key."""
        if self.audit is None:
            return observation
        try:
            observation = self._record(call, observation)
        except Exception:
            observation = _internal_error()
        if call.reserved:
            self._settle_key(call, observation)
        return observation

    def _record(self, call: _Call, observation: Observation) -> Observation:
        """Append the call's audit record: committed before returning when the call executed
        a tool that changes the device (``audit-error`` if that commit fails)."""
        audit, tool = self.audit, call.tool
        assert audit is not None
        durable = call.executed and tool is not None and not tool.read_only
        key_row = None
        if call.reserved and durable and _keeps_key(observation):
            assert call.slot is not None and call.fingerprint is not None
            call.stored = _stored(observation)
            key_row = audit.key_row(call.slot, call.fingerprint, call.stored, call.time)
        timings = call.timings
        try:
            audit.record_call(
                time=call.time, session=call.session.name, dialect=call.dialect,
                raw=call.raw if call.raw is not None
                else None if call.not_json else encode_json(call.call),
                observation=observation,
                tool=tool.name if tool is not None else _tool_name(call.call),
                arguments=encode_json(call.arguments) if call.arguments is not None
                else None if call.not_json else _arguments_text(call.call, audit.max_raw_bytes),
                loop_id=call.loop_id, step=call.step, idempotency_key=call.key,
                stage_ns=tuple(map(timings.get, PIPELINE)) if timings else _NOT_TIMED,
                device=self._runner.known_identity(), proposer=call.proposer,
                map_name=self._map_name,
                caller=call.session.caller,
                approver=call.approval.approver if call.approval is not None else None,
                approval=call.approval.via if call.approval is not None else None,
                key_row=key_row, durable=durable, intent=call.intent)
        except AuditError as error:
            if not durable:
                logger.error("a call's audit record was not written: %s", error)
                return observation
            call.stored = None
            return _unrecorded(error, observation.id)
        return observation

    def _settle_key(self, call: _Call, observation: Observation) -> None:
        """Store the reserved key's outcome once the call executed (``device-timeout``
        aside), so it never runs twice; else free the key for the next call."""
        assert self.audit is not None and call.slot is not None
        slot = call.slot
        if call.executed and _keeps_key(observation):
            assert call.fingerprint is not None
            self.audit.complete_key(slot, call.fingerprint, call.stored or _stored(observation))
        else:
            self.audit.release_key(slot)

    def _validators_for(self, tools: tuple[str, ...] | None) -> RefusalCheck:
        """The compiled check of the tools in ``tools`` (None: every tool), compiled once."""
        found = self._validators.get(tools)
        if found is None:
            offered = ToolSet(self.tools[name] for name in dict.fromkeys(tools or ())
                              if name in self.tools)
            found = self._validators.setdefault(
                tools, compile_refusals(offered, ReferenceValidator(offered)))
        return found

    # --- outside the pipeline ------------------------------------------------------------

    @property
    def protected_registers(self) -> frozenset[int]:
        """The addresses (0..255) written only on the approval hook's yes: the policy's
        ``protected`` merged with the device map's, and the registers of its protected fields
        and value ranges (empty when none)."""
        registers = self._registers
        if registers is None:
            return frozenset()
        return frozenset(cast("frozenset[int]", registers.protected)) | {
            guard.addr for guard in registers.guards}

    def record_loop_stop(self, loop_id: str, stop: str, detail: str, steps: int,
                         session: Session | None = None, *,
                         proposer: str | None = None) -> None:
        """Record a loop's stop reason in the audit log (nothing without one). Never raises."""
        if self.audit is None:
            return
        row = self.audit.stop_row(time=time.time(),
                                  session=(session or self.default_session).name,
                                  loop_id=loop_id, stop=stop, detail=detail, steps=steps,
                                  proposer=proposer)
        try:
            self.audit.append(row)
        except AuditError as error:
            logger.error("a loop's stop was not recorded: %s", error)

    def reset_device(self, device: Device | None = None) -> None:
        """Set every register of the device to its reset value, and record the reset in the
        audit log (:meth:`record_reset`): no idempotency key stored before it is replayed
        after it. Without an audit log, only the reset.

        Args:
            device: what to call ``reset()`` on: by default the gate's device (behind the
                gate's timeout); a tool handler passes the device it was given.

        Raises:
            DeviceError, TransportError: the reset failed, as :meth:`Device.reset` raises.
                It is recorded all the same unless the error says it was not executed
                (:class:`TransportError`, :class:`DeviceBusy`, :class:`DeviceRefused`).
            AuditError: the reset ran but its record could not be committed (this process
                replays none of the device's earlier keys; see
                :meth:`AuditLog.record_reset`).
        """
        before = self._runner.known_identity()  # the epoch the reset ends
        try:
            (self._runner if device is None else device).reset()
        except (TransportError, DeviceBusy, DeviceRefused):
            raise  # not executed: the registers, and so the keys, are as they were
        except BaseException:
            # Sent, with an unknown outcome (DeviceTimeout, a garbled reply, an interrupt):
            # the registers may hold their reset values. Ending the keys costs at most a write
            # that runs again when its key is sent again; keeping them could replay "done" for
            # a write the reset wiped: a failure reported as a success.
            try:
                self._record_reset(before)
            except AuditError as error:
                logger.error("a reset that may have run was not recorded: %s", error)
            raise
        self._record_reset(before)

    def record_reset(self) -> None:
        """Record in the audit log that the device was (or may have been) reset by other
        means than :meth:`reset_device`: the keys of its current epoch (as last known) end.
        Nothing without an audit log, or before the device was first heard from. A device
        that says its reset epoch needs none of this: a reset by any path changes its epoch,
        which the gate checks before every replay (``docs/safety.md``).

        Raises:
            AuditError: the record could not be committed.
        """
        self._record_reset(None)

    def _record_reset(self, identity: DeviceIdentity | None) -> None:
        """Record a reset of the device in epoch ``identity`` (None: as known now)."""
        if self.audit is not None:
            identity = identity or self._runner.known_identity()
            if identity is not None:
                self.audit.record_reset(key_scope(identity.device, identity.epoch))

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
        return f"Gate(device={type(self.device).__name__}, tools={list(self.tools)!r})"


#: The stages in order, each ``stage(gate, call) -> None, or what ends the call``: the method
#: ``Gate._<name>`` of each name in :data:`PIPELINE`.
_STAGES: tuple[tuple[str, Callable[[Gate, _Call], _End]], ...] = tuple(
    (name, getattr(Gate, f"_{name}")) for name in PIPELINE)


class _Call:
    """What the pipeline learns about one call on its way, for the later stages and the audit
    record. Attributes not set in ``__init__`` keep the class defaults until a stage sets them.
    """

    call: object = None  #: the decoded canonical call (or whatever document was sent)
    id: str | None = None  #: the correlation id to echo
    sent_key: object = None  #: handle_call's idempotency key, not yet checked
    key: str | None = None  #: the idempotency key in force (None: none, or no audit log)
    tool: Tool | None = None  #: the validated call's tool
    arguments: dict[str, Any] | None = None  #: its validated, bound arguments
    result: dict[str, Any] | None = None  #: what the device answered
    executed = False  #: the device call started: the device may have changed
    fingerprint: bytes | None = None  #: the key's fingerprint of tool and arguments
    slot: Slot | None = None  #: where its key is reserved: the device's scope, session, key
    reserved = False  #: this call holds the reservation of its key
    not_json = False  #: handle_call's call holds Python data JSON cannot (nothing to record)
    stored: str | None = None  #: the observation JSON stored under the key
    approval: Approval | None = None  #: the approval hook's answer, when it gave an Approval
    #: The protected registers an approved call changes: their locks are held at execute.
    guarded: tuple[int, ...] = ()
    intent: str | None = None  #: the id of the write's intent record, once committed
    #: For the audit log only: when the call arrived (Unix seconds), and the nanoseconds
    #: spent in each stage it reached, by name.
    time = 0.0
    timings: dict[str, int] | None = None

    def __init__(self, session: Session, dialect: str, tool_choice: str | None,
                 raw: str | bytes | None, *, loop_id: str | None, step: int | None,
                 proposer: str | None = None) -> None:
        self.session = session
        self.dialect = dialect
        self.tool_choice = tool_choice
        self.raw = raw  #: the raw text to parse; None for a decoded call (handle_call)
        self.loop_id = loop_id
        self.step = step
        self.proposer = proposer  #: who proposed the call (for the audit log)

    def answered(self, approval: Approval) -> None:
        """Keep the approval hook's answer for the audit record."""
        self.approval = approval


def _check_audit(audit: AuditLog, tool: Tool) -> Refusal | None:
    """Authorize step 0: nothing runs that cannot be recorded."""
    if audit.closed:
        return Refusal("authorize", "audit-error",
                       "the audit log is closed, so no call can be recorded or run")
    failure = audit.failure
    if failure is None or tool.read_only:
        return None
    return Refusal("authorize", "audit-error",
                   f"the audit log failed to commit ({escape_text(failure, 80)}), so calls "
                   "that change the device are refused until a commit succeeds; reads still run")


def _device_failure(error: RegdevError) -> Refusal:
    """The execute stage's refusal for what the device backend raised (see docs/errors.md).

    ``device-timeout`` (:class:`DeviceTimeout`): the request was sent, the outcome is unknown.
    ``device-unavailable`` (:class:`TransportError`): the request was not sent; nothing ran.
    ``device-busy`` (:class:`DeviceBusy`): not executed, and the same call may succeed later.
    ``device-error``: the device refused for good (:class:`DeviceRefused`), or ran the request
    and did not answer as it should (any other :class:`DeviceError`).
    """
    text = escape_text(str(error), _DEVICE_MESSAGE_CHARS)
    if isinstance(error, AuditError):  # a tool that records its effect, as a reset does
        return Refusal("observe", "audit-error",
                       f"the call ran on the device but the audit log could not record it: "
                       f"{text}")
    if isinstance(error, ReplyLost):  # as unknown as a timeout, but no wait ran out
        return Refusal("execute", "device-timeout",
                       f"the link failed before the device's answer came: {text}")
    if isinstance(error, DeviceTimeout):
        return Refusal("execute", "device-timeout", f"the device did not answer in time: {text}")
    if isinstance(error, TransportError):
        return Refusal("execute", "device-unavailable", f"the device is unavailable: {text}")
    if isinstance(error, DeviceBusy):
        return Refusal("execute", "device-busy", f"the device could not take the call now: {text}")
    if isinstance(error, DeviceRefused):
        return Refusal("execute", "device-error", f"the device refused: {text}")
    return Refusal("execute", "device-error", f"the device failed: {text}")


def _changed_since_asked(register: str, old: int, now: int | None) -> Refusal:
    """The refusal of an approved write whose register no longer holds the value its
    approver was shown (another write ran meanwhile): nothing was sent."""
    held = "a value that could not be read" if now is None else f"{now} (0x{now:02X})"
    return Refusal("authorize", "approval-denied",
                   f"register {register} is protected and this write was not run: the "
                   f"approval was given while it held {old} (0x{old:02X}), and it holds {held} "
                   "now (another write ran meanwhile); ask again")


def _execute_failure(error: RegdevError, tool: Tool, arguments: dict[str, Any]) -> Refusal:
    """The execute stage's refusal for what the device backend raised running ``tool``:
    :func:`_device_failure`'s, but ``outcome-unknown`` for a lost reply (``device-timeout``)
    of a write that is not safe to send twice (:attr:`Tool.repeat_risk`): its idempotency key
    stays taken, so a retry with the key is answered with this observation, not run."""
    refusal = _device_failure(error)
    if refusal.code != "device-timeout" or tool.repeat_risk is None:
        return refusal
    risk = tool.repeat_risk(arguments)
    if risk is None:
        return refusal
    return Refusal("execute", "outcome-unknown",
                   f"{refusal.message}; the write may or may not have run, and it is not "
                   f"safe to send twice ({risk}): read the register back to learn whether "
                   "it ran; a retry with this idempotency key gets this answer again and "
                   "does not run (send the call with a new key if the read-back says it "
                   "must run)")


def _no_intent(error: AuditError) -> Refusal:
    """The refusal of a write whose intent could not be recorded: nothing was sent."""
    return Refusal("execute", "audit-error",
                   "the write was not sent: the audit log could not record it first "
                   f"({escape_text(error.reason or 'audit log failure', 80)})")


def _unrecorded(error: AuditError, call_id: str | None) -> Observation:
    """The observation of a call that ran on the device but whose durable record could not
    be committed: ``audit-error``, whatever the device answered."""
    return Observation.refused(
        Refusal("observe", "audit-error",
                "the call ran on the device but its audit record could not be written "
                f"({escape_text(error.reason or 'audit log failure', 80)}); read the register "
                "back"), call_id)


def _prefixed_key(key: str) -> Refusal:
    """The refusal of an explicit idempotency key that takes a provider's prefix."""
    return Refusal("validate", "bad-idempotency-key",
                   f"an idempotency key may not start with "
                   f"{' or '.join(_DERIVED_KEY_PREFIXES[:2])} (nor "
                   f"{', '.join(_DERIVED_KEY_PREFIXES[2:])}: those name provider tool "
                   f'call ids), got "{escape_text(key, 40)}"')


def _no_handler(tool: Tool) -> Refusal:
    """The execute stage's refusal of a tool that is only validated (no handler)."""
    return Refusal("execute", "device-error", f"tool {tool.name} has no implementation here")


def _too_large(tool: Tool, size: int, cap: int) -> Refusal:
    """The observe stage's refusal of a result of ``size`` bytes, over the ``cap``."""
    ran = "ran" if tool.read_only else "ran and its effect stands"
    return Refusal("observe", "output-too-large",
                   f"{tool.name} {ran}, but its result is {size} bytes, over the cap "
                   f"of {cap} bytes")


def _unidentified(error: RegdevError) -> Refusal:
    """The refusal of a keyed call whose device could not be asked who it is and its reset
    epoch (before the call was sent, so nothing ran): ``device-busy`` when it was busy, else
    ``device-unavailable``. The key stays free."""
    text = escape_text(str(error), _DEVICE_MESSAGE_CHARS)
    code = "device-busy" if isinstance(error, DeviceBusy) else "device-unavailable"
    return Refusal("authorize", code,
                   "the call was not sent: the device did not say its reset epoch, which its "
                   f"idempotency key is checked against: {text}")


#: Longest device message shown to the model, in characters (the cause comes last in it).
_DEVICE_MESSAGE_CHARS = 200
#: Outcomes after which the same call may run again through its idempotency key: the write
#: may not have happened (timeout), or surely did not (not sent, busy).
_RETRY_KEY_CODES = frozenset({"device-timeout", "device-unavailable", "device-busy"})


def _keeps_key(observation: Observation) -> bool:
    """An executed call keeps its key unless its outcome lets the retry run."""
    return observation.code not in _RETRY_KEY_CODES


def _stored(observation: Observation) -> str:
    """The observation as stored under an idempotency key: JSON without id and replay."""
    return _encode(replace(observation, id=None, replay=False).to_dict()).decode()


def _derived_key(dialect: str, call_id: str, loop_id: str | None) -> str:
    """The idempotency key made from a provider's tool call id: ``"openai:ID"``; in a loop,
    ``"openai@N:LOOP:ID"`` (N the length of the loop id, so that no two (loop, id) pairs give
    one key), so that the ids of two conversations never meet (open-weight stacks repeat them:
    docs/safety.md)."""
    if loop_id is None:
        return f"{dialect}:{call_id}"
    return f"{dialect}@{len(loop_id)}:{loop_id}:{call_id}"


def check_loop_id(loop_id: object) -> None:
    """Raise ValueError unless ``loop_id`` is a string of Unicode text (the audit log's
    ``loop_id`` column is UTF-8 text: a lone surrogate cannot be recorded)."""
    if type(loop_id) is not str or not is_text(loop_id):
        raise ValueError(f"loop_id must be a string of Unicode text, got "
                         f"{display_text(repr(loop_id), 40)}")


def _interrupted(error: BaseException) -> str:
    """Why a call stopped when the program is being stopped, in words for the audit log."""
    if isinstance(error, KeyboardInterrupt):
        return "it was interrupted (Ctrl-C)"
    if isinstance(error, SystemExit):
        return "it was interrupted (the program is exiting)"
    return "it was interrupted (the program is being stopped)"


def _internal_error(why: str = "an internal error, logged", *, log: bool = True) -> Observation:
    if log:
        logger.exception("unexpected error while handling a tool call")
    return Observation.refused(
        Refusal("internal", "internal-error",
                f"regdev failed while handling this call ({why}); read the register back "
                "before retrying"))


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
