"""The gate: one raw tool call in, exactly one observation out.

Rules of this file:

* One pipeline, in :meth:`Gate.handle`, read top to bottom: parse, validate (the schema's
  checks, then the register map's rules), authorize (the audit log's health, the session's
  scopes, read-only registers, the idempotency key, the rate limit, approval), execute (the
  intent record, then the device), observe, record. Every call takes it:
  :meth:`Gate.handle`'s text, :meth:`Gate.handle_call`'s decoded call, any dialect, session
  or gate. Each stage runs only while nothing has ended the call: the first refusal (or, from
  authorize, the stored observation of a replayed idempotency key) decides the observation,
  and nothing reaches the device unless every earlier stage passed. What the stages learn
  about the call is kept in the pipeline's local variables.
* Steps a gate does not have cost one test each, not another copy of the pipeline: without
  an audit log no stage is timed, no intent is written and nothing is recorded; authorize's
  checks run only for what there is (an audit log, a limited session, read-only or protected
  registers, an idempotency key). Per tool and per session, what can be worked out once is
  worked out at construction: the compiled check of each session's tools, which results are
  measured against the output cap, the locks of the protected registers.
* Parse takes the usual canonical call (one object holding a string tool, object arguments
  and maybe an id) in one decode and one colon count (:func:`decode_canonical`); any other
  text goes through :func:`parse`, with its dialect and idempotency key.
* Validation runs the gate's compiled check (``_compile.py``, :func:`compile_refusals`) of the
  tools the caller's session is offered: it returns the first failure as the refusal the
  reference validator gives, worded in the generated code (the reference words the rest). So
  a tool the session is not offered is ``unknown-tool`` exactly where a tool that does not
  exist is, listing the session's tools.
* The record step (:meth:`Gate._record`) writes the call's audit record, committed before the
  call returns when it executed a write, and settles its idempotency key.
* ``executed`` is set immediately before the device call: from then on the device may
  have changed. A call that executed a tool changing the device is recorded durably (committed
  before its observation is returned) and keeps its idempotency key, whatever happens after
  (``device-timeout`` aside, see ``_idempotency.py``).
* Before a tool that changes the device is sent, its intent is committed to the audit log,
  when there is one (:meth:`AuditLog.record_intent`; the call's record names it after), so a
  process killed between the device's answer and the record still leaves a record of the
  write, saying its outcome is unknown. An intent that cannot be committed keeps the write
  from being sent (``audit-error``).
* An approved call that changes protected registers holds their locks (one per register, in
  address order) from the re-read of the values its approver was shown (:attr:`Approval.holds`,
  at authorize) to the device's answer: check and write are one step, so of two approved
  writes of one register sent at once only the first runs, and the second is
  ``approval-denied`` with nothing sent.
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
* Stage times are taken only when there is an audit log to keep them.
* Telemetry is one more step that costs a test or two when absent (the switch loaded and
  tested at the start, the span tested at the device and at the end): with it on
  (:data:`regdev.core._telemetry.current`, ``docs/observability.md``), each call is a server
  span from its arrival to its record, the device's part a child span, and the trace id goes
  into the call's audit record (and its intent's).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import msgspec
from msgspec.structs import replace

from ..audit._idempotency import PROVIDER_DIALECTS, Slot, fingerprint, key_scope
from ..audit._log import AuditLog, encode_json
from ..core import _telemetry
from ..core._errors import (
    AuditError,
    DeviceBusy,
    DeviceRefused,
    DeviceTimeout,
    LineElsewhere,
    PolicyError,
    RegdevError,
    ReplyLost,
    TransportError,
    ValueRefused,
)
from ..core._observation import Observation, Refusal, refuse
from ..core._text import display_text, escape_text, is_text
from ..devices._device import Device, DeviceIdentity, RegisterFile, TimeoutDevice
from ..devices._transaction import UNKNOWN
from ._compile import BIND, RefusalCheck, compile_refusals
from ._maptools import map_tools
from ._parse import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_ID_CHARS,
    check_dialect,
    check_idempotency_key,
    decode_canonical,
    encode_json_data,
    parse,
    parse_tool_call,
)
from ._policy import (
    Approval,
    ApprovalRequest,
    Approver,
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
#: Threads a gate runs its async callers' calls in (:meth:`Gate.ahandle`), at most, by default.
DEFAULT_ASYNC_THREADS = 8
#: The dialect an audit record of :meth:`Gate.handle_tool_call` names: its raw text is the
#: arguments text alone, the tool name beside it.
TOOL_CALL_DIALECT = "tool-call"
KEYS_IGNORED = ("an idempotency key was ignored: there is no audit log to keep keys in, so a "
                "call sent again with the same key runs again (said once)")



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
        async_threads: the most calls the async forms (:meth:`ahandle`,
            :meth:`ahandle_tool_call`) run at once, each in a worker thread of the gate's own,
            1..256 (default 8); more wait their turn, without blocking the event loop.

    Raises:
        ValueError: a cap is not a positive int, the timeout not a number of seconds in
            0.001..86400, or ``async_threads`` not an int in 1..256.
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
        async_threads: int = DEFAULT_ASYNC_THREADS,
    ) -> None:
        if type(async_threads) is not int or not 1 <= async_threads <= 256:
            raise ValueError(f"async_threads must be an int in 1..256, got {async_threads!r}")
        self.async_threads = async_threads
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._closed = False
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
        self._str_cap = max_input_bytes >> 2  # a str this long is within the cap in UTF-8
        #: The read-only and protected registers, of the policy and the device's map, when
        #: there are any (else the checks are skipped).
        registers = (policy.registers if policy is not None else RegisterPolicy()).for_map(
            regmap)
        self._registers = registers if (registers.read_only or registers.protected
                                        or registers.guards) else None
        #: One lock per protected register: an approved write holds the locks of the
        #: protected registers it changes from the re-read of the values its approver saw to
        #: the device's answer, so that check and write are one step.
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
        #: Authorize has something to check whatever the session: a policy, an audit log, or
        #: read-only or protected registers (else only a session with limits has).
        self._authorizes = policy is not None or audit is not None or self._registers is not None
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
        _telemetry.from_environment()  # on only when the OTEL_* variables ask (once a process)

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
        approve: Approver | None = None,
        incoming: _telemetry.Incoming | None = None,
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
                model endpoint, ``mcp:NAME VERSION`` for an MCP client, ``FRAMEWORK:MODEL``
                from an agent framework's adapter; None when unknown.
            approve: the approval hook asked about this call's protected writes, in place of
                the policy's (:attr:`Policy.approve`): how an agent framework's own
                human-in-the-loop answer reaches the gate (``regdev.integrations``). None: the
                policy's.
            incoming: what the transport knows of the request, for its span when telemetry
                is on: the caller's trace context (``params._meta`` or the HTTP headers), the
                JSON-RPC request id, the MCP session; None in process (the span is then the
                child of the current one, if any).

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
        # The one pipeline: parse -> validate -> authorize -> execute -> observe -> record,
        # top to bottom. Each stage runs only while nothing has ended the call (``end`` is
        # None): the first refusal, or a replayed observation, decides what the call gets. A
        # step the gate does not have costs one test: without an audit log no stage is timed
        # and nothing is recorded; authorize checks only what there is.
        session = session or self.default_session
        audit = self.audit
        # the call's span when telemetry is on; off (None), each telemetry step is one test
        traced = _telemetry.current and _telemetry.current.start_call(incoming)
        start = 0
        arrived = 0.0
        if audit is not None:  # stage times and the record are for the audit log
            arrived = time.time()
            start = _now_ns()
        parse_ns = validate_ns = authorize_ns = execute_ns = observe_ns = None
        end: Refusal | Observation | None = None  # what ends the call, once something does
        name: str | None = None  # the usual call's tool name, decoded in one step
        arguments: Any = None  # its arguments as sent
        document: object = None  # any other call's decoded document
        call_id: str | None = None  # the correlation id to echo
        sent: object = None  # the idempotency key as sent, not yet checked
        key: str | None = None  # the idempotency key in force (None: none, or no audit log)
        not_data = False  # handle_call's call holds Python data JSON cannot (nothing to record)
        tool: Tool | None = None  # the validated call's tool
        bound: dict[str, Any] | None = None  # its validated, bound arguments
        slot: Slot | None = None  # where its key is reserved (this call holds it)
        print_: bytes | None = None  # the key's fingerprint of tool and arguments
        approval: Approval | None = None  # the approval hook's answer, when an Approval
        locks: list[threading.Lock] | None = None  # an approved write's registers' locks
        intent: str | None = None  # the id of a write's intent record, once committed
        executed = False  # the device call started: from then on the device may have changed
        result: Any = None  # what the device answered
        text_raw: str | bytes | None = raw  # the raw text, for the record
        recorded_dialect = dialect  # the dialect the record names
        observation: Observation
        try:
            # parse: the usual call (one object: a string tool, object arguments, maybe an id)
            # in one decode and one colon count; any other text through parse(), with its
            # dialect and idempotency key; handle_call's call checked for JSON data
            usual = decode_canonical(raw, self.max_input_bytes) \
                if dialect == "canonical" else None
            if type(usual) is tuple:
                name, arguments, call_id = usual
            elif usual is not None:  # not-json
                end = usual  # type: ignore[assignment]
            elif type(given := cast(object, raw)) is _ToolCall:
                # handle_tool_call's: a name and the arguments text, as the model wrote it
                framework: _ToolCall = given
                call_id = framework.call_id
                text_raw = framework.arguments if isinstance(framework.arguments,
                                                             (str, bytes)) else None
                recorded_dialect = TOOL_CALL_DIALECT
                read = parse_tool_call(framework.name, framework.arguments,
                                       max_bytes=self.max_input_bytes)
                if isinstance(read, Refusal):
                    end, document = read, {"tool": framework.name}
                else:
                    document = read
            elif type(given) is _Decoded:
                document, call_id, sent = given.call, given.call_id, given.key
                text_raw = None  # (recorded as the call's JSON, when it is JSON data)
                text = encode_json_data(document, self.max_input_bytes)
                if isinstance(text, str):
                    not_data = True
                    end = refuse("not-json", f"the tool call is not JSON data: {text}")
                else:
                    sent = check_idempotency_key(sent, "idempotency_key")
            else:
                parsed = parse(raw, dialect, max_bytes=self.max_input_bytes)
                if isinstance(parsed, Refusal):  # too-large, not-json
                    end = parsed
                else:
                    document, call_id, end = parsed.call, parsed.id, parsed.refusal
                    sent = parsed.idempotency_key
            if end is None and sent is not None:
                if isinstance(sent, Refusal):
                    end = sent
                else:
                    assert type(sent) is str
                    taken = self._take_key(dialect, sent, loop_id)
                    if isinstance(taken, Refusal):
                        end = taken
                    else:
                        key = taken
            if audit is not None:
                now = _now_ns()
                parse_ns, start = now - start, now

            # validate: the compiled check of the session's tools (the first failure worded,
            # None, or BIND: valid, with values to make ints), then the register map's rules
            if end is None:
                check = self._validators.get(session.tools) or self._validators_for(
                    session.tools)
                if name is not None:
                    verdict = check.refusal(name, arguments, tool_choice)
                else:
                    verdict = check(document, tool_choice)
                if verdict is None or verdict is BIND:
                    if name is None:
                        canonical: dict[str, Any] = document  # type: ignore[assignment]
                        name, arguments = canonical["tool"], canonical["arguments"]
                    tool = self._tool_by_name[name]  # valid: the tool is offered
                    bound = tool.bind(arguments) if verdict is BIND else arguments
                    if tool.rules is not None:  # the map's rules, after the schema's ranges
                        end = tool.rules(bound)
                else:
                    end = verdict
                if audit is not None:
                    now = _now_ns()
                    validate_ns, start = now - start, now

            # authorize, in the order of _policy.py: nothing runs that cannot be recorded,
            # the session's scopes, read-only registers, the idempotency key, the rate limit,
            # approval of protected registers
            if end is None and (self._authorizes or session.limited):
                assert tool is not None and bound is not None
                registers = self._registers
                if audit is not None and (audit.failure is not None or audit.closed):
                    end = _check_audit(audit, tool)
                if end is None and session.limited:
                    end = session.check_scope(tool)
                changed: tuple[int, ...] = ()
                if end is None and registers is not None:
                    changed = changed_registers(tool, bound, self._every)
                    if changed:
                        end = check_read_only(registers, tool, changed, every=self._every,
                                              label=self._label, by_map=self._map_read_only)
                if end is None and key is not None and not tool.read_only:
                    print_ = fingerprint(tool.name, bound)
                    slot, end = self._reserve_key(session, key, print_)
                    if isinstance(end, Observation):  # a replay, with this call's id
                        end = replace(end, id=call_id)
                if end is None and session.limited:
                    end = session.take_token()
                if end is None and changed:
                    assert registers is not None
                    answers: list[Approval] = []
                    tripped = guarded(registers.guards, tool, bound, changed, self.regmap) \
                        if registers.guards else ()
                    if approve is None and self.policy is not None:
                        approve = self.policy.approve
                    if traced and approve is not None and _telemetry.current:
                        approve = _telemetry.current.counting_approvals(approve)
                    end = ask_approval(registers, tool, changed, approve,
                                       _request_of(session, tool, bound), every=self._every,
                                       label=self._label, answered=answers.append,
                                       guards=tripped)
                    approval = answers[-1] if answers else None
                    if end is None:  # approved, or nothing protected
                        # The locks of its protected registers, held from the re-read of what
                        # its approver was shown to the device's answer: check and write are
                        # one step (released when the call is over, before its record).
                        locks = [self._guards[addr] for addr in self._guards if addr in changed]
                        for lock in locks:
                            lock.acquire()
                        if approval is not None:
                            end = self._changed_since_approved(approval)
                if audit is not None:
                    now = _now_ns()
                    authorize_ns, start = now - start, now

            # execute: a write's intent committed before it leaves, then the device (through
            # the timeout worker when there is a timeout)
            if end is None:
                assert tool is not None and bound is not None
                handler = tool.handler
                if handler is None:
                    end = _no_handler(tool)
                else:
                    if audit is not None and not tool.read_only:
                        intended = self._intend(
                            tool, bound, arrived=arrived, session=session,
                            dialect=recorded_dialect,
                            loop_id=loop_id, step=step, key=key, call_id=call_id,
                            proposer=proposer, approval=approval,
                            trace_id=None if traced is None else traced.trace_id)
                        if isinstance(intended, Refusal):
                            end = intended
                        else:
                            intent = intended
                    if end is None:
                        executed = True
                        if traced:  # the device's time, for its child span
                            handler = traced.timed(handler)
                        try:
                            result = handler(self._runner, bound)
                        except RegdevError as error:
                            end = _execute_failure(error, tool, bound)
                if audit is not None:
                    now = _now_ns()
                    execute_ns, start = now - start, now

            # observe: the result against the output cap (unless its bound is within it)
            if end is None:
                assert tool is not None
                if tool.name in self._measured:
                    size = len(_encode(result))
                    if size > self.max_output_bytes:
                        end = _too_large(tool, size, self.max_output_bytes)
                if audit is not None:
                    observe_ns = _now_ns() - start
            if end is None:
                assert tool is not None
                observation = Observation(tool.name, result, None, call_id)
            elif isinstance(end, Observation):  # authorize's replay of a stored one
                observation = end
            else:
                observation = Observation(refusal=end, id=call_id)
        except Exception:  # the gate's promise: one observation, never an exception
            observation = _internal_error()
        except BaseException as error:  # Ctrl-C, exit: record the call, then let it go on
            observation = _internal_error(_interrupted(error), log=False)
            raise
        finally:
            if locks is not None:  # an approved write's: the device has answered
                for lock in reversed(locks):
                    lock.release()
            # record: the call's audit record, committed before the answer when it executed
            # a write; then its idempotency key settled
            if audit is not None:
                observation = self._record(
                    observation, arrived=arrived, session=session, dialect=recorded_dialect,
                    raw=text_raw,
                    document=document if name is None else {"tool": name,
                                                            "arguments": arguments},
                    not_data=not_data, tool=tool, bound=bound, loop_id=loop_id, step=step,
                    key=key, stage_ns=(parse_ns, validate_ns, authorize_ns, execute_ns,
                                       observe_ns),
                    proposer=proposer, approval=approval, slot=slot, print_=print_,
                    executed=executed, intent=intent,
                    trace_id=None if traced is None else traced.trace_id)
            if traced:
                self._end_span(traced, observation, session=session, dialect=dialect,
                               tool=tool, name=name if name is not None
                               else _tool_name(document), loop_id=loop_id, step=step,
                               proposer=proposer, approval=approval, reserved=slot is not None,
                               intent=intent)
        return observation

    def handle_tool_call(
        self,
        name: str,
        arguments_text: str | bytes,
        *,
        call_id: str | None = None,
        tool_choice: str | None = None,
        session: Session | None = None,
        loop_id: str | None = None,
        step: int | None = None,
        proposer: str | None = None,
        approve: Approver | None = None,
    ) -> Observation:
        """Run a framework's raw tool call: the tool name and the model's arguments text, as
        the OpenAI Agents SDK (``on_invoke_tool``), pydantic-ai (``ToolCallPart.args``) and
        the providers' messages hold them, with no envelope to build.

        The same pipeline as :meth:`handle`, and the same verdicts as the same text gets
        there: the arguments text is read by the rules of raw text (the byte cap, then one
        strict JSON document: a repeated key, truncated text or ``NaN`` is ``not-json``;
        ``3.0000000000000001`` stays the exact number it is, not the integer 3), then the name
        and the arguments are validated as a canonical call's (``unknown-tool`` lists the
        session's tools). The audit record keeps the arguments text as sent, the tool name
        beside it, in dialect ``tool-call``.

        Args:
            name: the tool name the model wrote, exactly (a namespaced ``functions.x`` or
                ``default_api:x`` is ``unknown-tool`` unless a tool has that name).
            arguments_text: the model's arguments, JSON text (``str`` or UTF-8 ``bytes``), at
                most ``max_input_bytes`` bytes (``too-large``).
            call_id: the framework's tool call id, echoed in the observation (a string of at
                most 256 characters of Unicode text; anything else is not echoed). It is never
                an idempotency key.
            tool_choice, session, loop_id, step, proposer, approve: as for :meth:`handle`.

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``tool_choice`` is not one of the gate's tools, or ``loop_id`` is not
                a string of Unicode text.
            KeyboardInterrupt, SystemExit: as for :meth:`handle`.
        """
        if type(call_id) is not str or len(call_id) > MAX_ID_CHARS or not is_text(call_id):
            call_id = None
        carried: Any = _ToolCall(name, arguments_text, call_id)  # in place of raw text
        return self.handle(carried, tool_choice=tool_choice, session=session, loop_id=loop_id,
                           step=step, proposer=proposer, approve=approve)

    async def ahandle(self, raw: str | bytes, **options: Any) -> Observation:
        """:meth:`handle` for an event loop: the call runs in one of the gate's worker
        threads (at most ``async_threads`` at once; more wait for a free one), so a wire
        device's exchange, an approval hook that waits for a person and the audit log's
        commit never block the loop. The caller's context variables go with the call.

        A cancelled await does not cancel the call: once it has started it runs to its end
        (a write sent to the device is answered and recorded), and its observation is
        dropped. Takes the same keyword arguments as :meth:`handle`.

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError, KeyboardInterrupt, SystemExit: as :meth:`handle` raises them.
            RuntimeError: the gate is closed.
        """
        return await self._in_thread(functools.partial(self.handle, raw, **options))

    async def ahandle_tool_call(self, name: str, arguments_text: str | bytes,
                                **options: Any) -> Observation:
        """:meth:`handle_tool_call` for an event loop, run as :meth:`ahandle` runs a call
        (a worker thread of the gate's; a cancelled await does not cancel the call). Takes
        the same keyword arguments as :meth:`handle_tool_call`.

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError, KeyboardInterrupt, SystemExit: as :meth:`handle_tool_call` raises
                them.
            RuntimeError: the gate is closed.
        """
        return await self._in_thread(
            functools.partial(self.handle_tool_call, name, arguments_text, **options))

    async def _in_thread(self, call: Callable[[], Observation]) -> Observation:
        """Run ``call`` in the gate's worker threads, with the caller's context."""
        executor = self._executor
        if executor is None:
            with self._executor_lock:
                if self._closed:
                    raise RuntimeError("the gate is closed")
                executor = self._executor
                if executor is None:
                    executor = self._executor = concurrent.futures.ThreadPoolExecutor(
                        self.async_threads, thread_name_prefix="regdev-gate")
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            executor, functools.partial(context.run, call))

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
        incoming: _telemetry.Incoming | None = None,
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
            incoming: the request's trace context and ids (see :meth:`handle`).

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``tool_choice`` is not one of the gate's tools, or ``loop_id`` is not
                a string of Unicode text (one holding a lone surrogate cannot be recorded).
            KeyboardInterrupt, SystemExit: as for :meth:`handle`.
        """
        self.check_options("canonical", tool_choice)
        if type(call_id) is not str or len(call_id) > MAX_ID_CHARS or not is_text(call_id):
            call_id = None
        decoded: Any = _Decoded(call, call_id, idempotency_key)  # in place of raw text
        return self.handle(decoded, tool_choice=tool_choice, session=session, loop_id=loop_id,
                           step=step, proposer=proposer, incoming=incoming)

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
        session = session or self.default_session
        traced = None if (telemetry := _telemetry.current) is None \
            else telemetry.start_call(None)
        if self.audit is not None:
            observation = self._record(
                observation, arrived=time.time(), session=session, dialect=dialect, raw=raw,
                document=None, not_data=False, tool=None, bound=None, loop_id=loop_id,
                step=step, key=None, stage_ns=(None,) * 5, proposer=proposer, approval=None,
                slot=None, print_=None, executed=False, intent=None,
                trace_id=None if traced is None else traced.trace_id)
        if traced is not None:
            self._end_span(traced, observation, session=session, dialect=dialect, tool=None,
                           name=None, loop_id=loop_id, step=step, proposer=proposer,
                           approval=None, reserved=False, intent=None)
        return observation

    @property
    def asks_approval(self) -> bool:
        """Whether any call can be put to the approval hook: the policy protects a register,
        a field or a range (else :meth:`needs_approval` is False for every call)."""
        registers = self._registers
        return registers is not None and bool(registers.protected or registers.guards)

    def needs_approval(self, name: str, arguments: object, *,
                       session: Session | None = None) -> bool:
        """Whether a call would be put to the approval hook: it is valid for the session
        (the same compiled check and map rules as the pipeline's), within its scopes, and
        changes a protected register or trips a protected field or range. Nothing runs and
        nothing is recorded: this is for an agent framework that asks a person before it runs
        a tool (``regdev.integrations``), which then hands the answer to the call's
        ``approve=``. A call this says False for is still authorized in full when it runs.

        Args:
            name: the tool name as the model wrote it.
            arguments: the model's arguments text (read strictly: text that is not one JSON
                document needs no approval, the gate refuses it), or decoded JSON data.
            session: the caller; :attr:`default_session` when None.

        Returns:
            True when the call, sent now, would ask for approval.
        """
        registers = self._registers
        if registers is None or not self.asks_approval:
            return False
        session = session or self.default_session
        if isinstance(arguments, (str, bytes)):
            read = parse_tool_call(name, arguments, max_bytes=self.max_input_bytes)
            if isinstance(read, Refusal):
                return False
            arguments = read["arguments"]
        verdict = self._validators_for(session.tools)({"tool": name, "arguments": arguments})
        if verdict is not None and verdict is not BIND:
            return False
        tool = self._tool_by_name[name]
        given = cast("dict[str, Any]", arguments)  # valid: an object
        bound = tool.bind(given) if verdict is BIND else given
        if (tool.rules is not None and tool.rules(bound) is not None) or (
                session.limited and session.check_scope(tool) is not None):
            return False
        changed = changed_registers(tool, bound, self._every)
        if not changed:
            return False
        if not cast("frozenset[int]", registers.protected).isdisjoint(changed):
            return True
        return bool(registers.guards) and bool(
            guarded(registers.guards, tool, bound, changed, self.regmap))

    def check_options(self, dialect: str, tool_choice: str | None) -> None:
        """Raise ValueError for a dialect or a forced tool this gate cannot honour."""
        if dialect != "canonical":
            check_dialect(dialect)
        if tool_choice is not None and (type(tool_choice) is not str
                                        or tool_choice not in self.tools):
            raise ValueError(f"tool_choice {tool_choice!r} is not one of the tools offered: "
                             f"{', '.join(self.tools)}")

    # --- the pipeline --------------------------------------------------------------------

    def _take_key(self, dialect: str, sent: str, loop_id: str | None) -> str | Refusal | None:
        """The idempotency key in force for a call that sent ``sent`` (see
        ``_idempotency.py`` for which count): a provider's tool call id only when the policy
        says so; an explicit key that takes a provider's prefix is refused; None without an
        audit log to keep keys in (the caller is told once)."""
        key: str | None = None
        if dialect in PROVIDER_DIALECTS:  # the provider's tool call id
            if self._tool_call_ids_as_keys:
                key = _derived_key(dialect, sent, loop_id)
        elif sent.startswith(_DERIVED_KEY_PREFIXES):
            return _prefixed_key(sent)
        else:
            key = sent
        if self.audit is None and key is not None:  # keys live in the audit log
            key = None
            if self._keys_ignored.acquire(blocking=False):
                self.warn(KEYS_IGNORED)
        return key

    def _reserve_key(self, session: Session, key: str, print_: bytes
                     ) -> tuple[Slot | None, Refusal | Observation | None]:
        """Reserve ``key`` in the scope of the device's identity and reset epoch: ``(slot,
        None)``; or ``(None, what ends the call)``: a replay, once the device, asked again,
        said the epoch the key was stored in, or a refusal. A device that cannot say its
        epoch gets no replay."""
        audit = self.audit
        assert audit is not None
        try:
            identity = self._runner.identity()  # what the device said last (or asked now)
            slot = key_scope(identity.device, identity.epoch), session.name, key
            found = audit.begin_key(slot, print_, replay=identity.epoch is not None)
            if type(found) is Observation:  # not before the device confirms its epoch
                fresh = self._runner.identity(refresh=True)
                if fresh != identity:  # reset since: the write runs again in the new epoch
                    slot = key_scope(fresh.device, fresh.epoch), session.name, key
                    found = audit.begin_key(slot, print_, replay=fresh.epoch is not None)
        except AuditError as error:  # a shared store (PostgreSQL) out of reach: nothing ran
            return None, _no_intent(error)
        except RegdevError as error:
            return None, _unidentified(error)
        return (slot, None) if found is None else (None, found)

    def _changed_since_approved(self, approval: Approval) -> Refusal | None:
        """With the locks of the protected registers held: ``approval-denied`` (nothing
        sent) when a register no longer holds the value the approver was shown (an approval
        is of one change), else None."""
        for addr, old in approval.holds:
            try:
                now: int | None = self._runner.read(addr)
            except RegdevError as error:
                logger.warning("register %d could not be read back before an approved "
                               "write: %s", addr, error)
                now = None
            if now != old:
                return _changed_since_asked(self._label(addr), old, now)
        return None

    def _intend(self, tool: Tool, bound: dict[str, Any], *, arrived: float,
                session: Session, dialect: str, loop_id: str | None, step: int | None,
                key: str | None, call_id: str | None, proposer: str | None,
                approval: Approval | None, trace_id: str | None) -> str | Refusal:
        """Record the intent of a write about to be sent, durably
        (``AuditLog.record_intent``): its id, or ``audit-error`` (nothing sent) when it
        cannot be."""
        assert self.audit is not None
        try:
            return self.audit.record_intent(
                time=arrived, session=session.name, dialect=dialect, tool=tool.name,
                arguments=encode_json(bound), loop_id=loop_id, step=step,
                idempotency_key=key, call_id=call_id, device=self._runner.known_identity(),
                proposer=proposer, caller=session.caller,
                approver=approval.approver if approval is not None else None,
                approval=approval.via if approval is not None else None, trace_id=trace_id)
        except AuditError as error:
            return _no_intent(error)

    def _record(self, observation: Observation, *, arrived: float, session: Session,
                dialect: str, raw: str | bytes | None, document: object, not_data: bool,
                tool: Tool | None, bound: dict[str, Any] | None, loop_id: str | None,
                step: int | None, key: str | None, stage_ns: tuple[int | None, ...],
                proposer: str | None, approval: Approval | None, slot: Slot | None,
                print_: bytes | None, executed: bool, intent: str | None,
                trace_id: str | None = None) -> Observation:
        """The record step: append the call's audit record, committed before returning when
        the call executed a tool that changes the device (``audit-error`` if that commit
        fails), then settle its reserved key: stored once the call executed
        (``device-timeout`` aside), so it never runs twice; else freed for the next call."""
        audit = self.audit
        assert audit is not None
        durable = executed and tool is not None and not tool.read_only
        stored: str | None = None  # the observation JSON stored under the key
        try:
            key_row = None
            if slot is not None and durable and _keeps_key(observation):
                assert print_ is not None
                stored = _stored(observation)
                key_row = audit.key_row(slot, print_, stored, arrived)
            try:
                audit.record_call(
                    time=arrived, session=session.name, dialect=dialect,
                    raw=raw if raw is not None else None if not_data else encode_json(document),
                    observation=observation,
                    tool=tool.name if tool is not None else _tool_name(document),
                    arguments=encode_json(bound) if bound is not None
                    else None if not_data else _arguments_text(document, audit.max_raw_bytes),
                    loop_id=loop_id, step=step, idempotency_key=key, stage_ns=stage_ns,
                    device=self._runner.known_identity(), proposer=proposer,
                    caller=session.caller,
                    approver=approval.approver if approval is not None else None,
                    approval=approval.via if approval is not None else None,
                    key_row=key_row, durable=durable, intent=intent,
                    map_name=self._map_name, trace_id=trace_id)
            except AuditError as error:
                if durable:
                    stored = None
                    observation = _unrecorded(error, observation.id)
                else:
                    logger.error("a call's audit record was not written: %s", error)
        except Exception:
            observation = _internal_error()
        if slot is not None:
            if executed and _keeps_key(observation):
                assert print_ is not None
                audit.complete_key(slot, print_, stored or _stored(observation), arrived)
            else:
                audit.release_key(slot)
        return observation

    def _end_span(self, traced: _telemetry.CallSpan, observation: Observation, *,
                  session: Session, dialect: str, tool: Tool | None, name: str | None,
                  loop_id: str | None, step: int | None, proposer: str | None,
                  approval: Approval | None, reserved: bool, intent: str | None) -> None:
        """End a call's span with regdev's attributes (``docs/observability.md``): the
        verdict, the refusal's stage and code, the device and its reset epoch, approval and
        approver, the idempotency outcome (``new``: the key was reserved for this call;
        ``replayed``: a stored observation was returned), the proposer. A tool name the gate
        does not have is the model's text: escaped. Never raises."""
        try:
            identity = self._runner.known_identity()
            refusal = observation.refusal
            traced.end({
                "gen_ai.tool.call.id": observation.id,
                "regdev.session": session.name, "regdev.caller": session.caller,
                "regdev.proposer": proposer, "regdev.dialect": dialect,
                "regdev.device.id": identity[0] if identity is not None else None,
                "regdev.device.epoch": identity[1] if identity is not None else None,
                "regdev.map": self._map_name,
                "regdev.approval": approval.via if approval is not None else None,
                "regdev.approver": approval.approver if approval is not None else None,
                "regdev.idempotency": "replayed" if observation.replay
                else "new" if reserved else None,
                "regdev.loop.id": loop_id, "regdev.loop.step": step, "regdev.intent": intent,
            }, device=refusal.code if refusal is not None and refusal.stage == "execute"
                else None, tool=tool.name if tool is not None else name if name is None
                or name in self._tool_by_name else escape_text(name, 200),
                known=tool is not None or name in self._tool_by_name,
                stage=refusal.stage if refusal is not None else None,
                code=refusal.code if refusal is not None else None,
                message=refusal.message if refusal is not None else None)
        except Exception:
            logger.exception("a tool call's span could not be ended")

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
        """Close the audit log (committing every record), the timeout worker and the async
        forms' worker threads (after the calls running in them end). Idempotent."""
        with self._executor_lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
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


def _check_audit(audit: AuditLog, tool: Tool) -> Refusal | None:
    """Authorize step 0: nothing runs that cannot be recorded."""
    if audit.closed:
        return refuse("audit-error",
                      "the audit log is closed, so no call can be recorded or run",
                      "authorize")
    failure = audit.failure
    if failure is None or tool.read_only:
        return None
    return refuse("audit-error",
                  f"the audit log failed to commit ({escape_text(failure, 80)}), so calls "
                  "that change the device are refused until a commit succeeds; reads still run",
                  "authorize")


class _ToolCall:
    """:meth:`Gate.handle_tool_call`'s call on its way through the pipeline in place of raw
    text: the tool name, the arguments text as the model wrote it, and the checked id."""

    __slots__ = ("arguments", "call_id", "name")

    def __init__(self, name: object, arguments: object, call_id: str | None) -> None:
        self.name, self.arguments, self.call_id = name, arguments, call_id


class _Decoded:
    """:meth:`Gate.handle_call`'s call, decoded already, on its way through the pipeline in
    place of raw text, with its correlation id (checked) and its idempotency key (as sent)."""

    __slots__ = ("call", "call_id", "key")

    def __init__(self, call: object, call_id: str | None, key: object) -> None:
        self.call, self.call_id, self.key = call, call_id, key


def _request_of(session: Session, tool: Tool,
                arguments: dict[str, Any]) -> Callable[[int | None], ApprovalRequest]:
    """What the approval hook is asked about a call's write to the protected register at an
    address."""
    return lambda addr: ApprovalRequest(session.name, tool.name, dict(arguments), addr,
                                        session.caller)


def _device_failure(error: RegdevError) -> Refusal:
    """The execute stage's refusal for what the device backend raised (see docs/errors.md).

    ``device-timeout`` (:class:`DeviceTimeout`): the request was sent, the outcome is unknown.
    ``device-unavailable`` (:class:`TransportError`): the request was not sent; nothing ran.
    ``device-busy`` (:class:`DeviceBusy`): not executed, and the same call may succeed later.
    ``device-error``: the device refused for good (:class:`DeviceRefused`), or ran the request
    and did not answer as it should (any other :class:`DeviceError`).
    """
    if isinstance(error, ValueRefused):  # nothing was written: the value does not convert
        return refuse(error.code, str(error), "execute")
    text = escape_text(str(error), _DEVICE_MESSAGE_CHARS)
    if isinstance(error, AuditError):  # a tool that records its effect, as a reset does
        return refuse("audit-error",
                      f"the call ran on the device but the audit log could not record it: "
                      f"{text}", "observe")
    if isinstance(error, ReplyLost):  # as unknown as a timeout, but no wait ran out
        return refuse("device-timeout",
                      f"the link failed before the device's answer came: {text}")
    if isinstance(error, DeviceTimeout):
        return refuse("device-timeout", f"the device did not answer in time: {text}")
    if isinstance(error, LineElsewhere):
        return refuse("line-elsewhere", escape_text(str(error), 400), "execute")
    if isinstance(error, TransportError):
        return refuse("device-unavailable", f"the device is unavailable: {text}", "execute")
    if isinstance(error, DeviceBusy):
        return refuse("device-busy", f"the device could not take the call now: {text}", "execute")
    if isinstance(error, DeviceRefused):
        return refuse("device-error", f"the device refused: {text}")
    return refuse("device-error", f"the device failed: {text}")


def _changed_since_asked(register: str, old: int, now: int | None) -> Refusal:
    """The refusal of an approved write whose register no longer holds the value its
    approver was shown (another write ran meanwhile): nothing was sent."""
    held = "a value that could not be read" if now is None else f"{now} (0x{now:02X})"
    return refuse("approval-denied",
                  f"register {register} is protected and this write was not run: the "
                  f"approval was given while it held {old} (0x{old:02X}), and it holds {held} "
                  "now (another write ran meanwhile); ask again", "authorize")


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
    said = refusal.message  # the timeout's words, without their own advice: said once below
    for advice in UNKNOWN.values():
        said = said.replace(f"; {advice}", "").replace(f"{advice}; ", "")
    return refuse("outcome-unknown",
                  f"{said}; the write may or may not have run, and it is not "
                  f"safe to send twice ({risk}): read the register back to learn whether "
                  "it ran; a retry with this idempotency key gets this answer again and "
                  "does not run (send the call with a new key if the read-back says it "
                  "must run)")


def _no_intent(error: AuditError) -> Refusal:
    """The refusal of a write whose intent could not be recorded: nothing was sent."""
    return refuse("audit-error",
                  "the write was not sent: the audit log could not record it first "
                  f"({escape_text(error.reason or 'audit log failure', 80)})",
                  "execute")


def _unrecorded(error: AuditError, call_id: str | None) -> Observation:
    """The observation of a call that ran on the device but whose durable record could not
    be committed: ``audit-error``, whatever the device answered."""
    return Observation.refused(
        refuse("audit-error",
               "the call ran on the device but its audit record could not be written "
               f"({escape_text(error.reason or 'audit log failure', 80)}); read the register "
               "back", "observe"), call_id)


def _prefixed_key(key: str) -> Refusal:
    """The refusal of an explicit idempotency key that takes a provider's prefix."""
    return refuse("bad-idempotency-key",
                  f"an idempotency key may not start with "
                  f"{' or '.join(_DERIVED_KEY_PREFIXES[:2])} (nor "
                  f"{', '.join(_DERIVED_KEY_PREFIXES[2:])}: those name provider tool "
                  f'call ids), got "{escape_text(key, 40)}"')


def _no_handler(tool: Tool) -> Refusal:
    """The execute stage's refusal of a tool that is only validated (no handler)."""
    return refuse("device-error", f"tool {tool.name} has no implementation here")


def _too_large(tool: Tool, size: int, cap: int) -> Refusal:
    """The observe stage's refusal of a result of ``size`` bytes, over the ``cap``."""
    ran = "ran" if tool.read_only else "ran and its effect stands"
    return refuse("output-too-large",
                  f"{tool.name} {ran}, but its result is {size} bytes, over the cap "
                  f"of {cap} bytes")


def _unidentified(error: RegdevError) -> Refusal:
    """The refusal of a keyed call whose device could not be asked who it is and its reset
    epoch (before the call was sent, so nothing ran): ``device-busy`` when it was busy, else
    ``device-unavailable``. The key stays free."""
    text = escape_text(str(error), _DEVICE_MESSAGE_CHARS)
    if isinstance(error, LineElsewhere):
        return refuse("line-elsewhere", escape_text(str(error), 400), "authorize")
    code = "device-busy" if isinstance(error, DeviceBusy) else "device-unavailable"
    return refuse(code,
                  "the call was not sent: the device did not say its reset epoch, which its "
                  f"idempotency key is checked against: {text}", "authorize")


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
        refuse("internal-error",
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
