"""Approval by a person: a write to a protected register asks, and runs only on a yes.

Rules of this file:

* :class:`Approvals` is the gate's approval hook for an MCP server (``Policy.approve``). The
  gate asks it at the last authorize step, in the worker thread that runs the call, holding
  no lock: the device is free for other calls while a person thinks. The question is asked
  through the MCP request being handled, which the server's ``tools/call`` handler names in
  :data:`ASKING` for the duration of the call.
* The question names the caller, the register, its value now (read from the device when the
  question is asked) and the value to be written. A yes runs the write only if the register
  still holds that value when the write is sent: an approval is of one change, never of a
  register someone else changed meanwhile. The yes says so (:attr:`Approval.holds`), and the
  gate re-reads the register and sends the write in one atomic step for that register (its
  lock held from the re-read to the device's answer), so of two approved writes sent at once
  only the first runs. A register already changed when the answer comes is denied here at
  once.
* Two ways to ask (the policy's ``approval.via``):
  ``elicitation``, MCP elicitation in form mode through the caller's own client, which asks
  its user (the SDK warns that an agent client may answer by itself: the approver recorded is
  the caller); ``url``, a page this server serves (:meth:`Approvals.page`), where an approver
  signs the answer with their own bearer token, which must hold ``approval.approver_scope``
  and must not be the caller's.
* Two protocol eras: before 2026-07-28 the server asks the client with a request of its own
  (``elicitation/create``) and waits for the answer; from 2026-07-28 there is no such request,
  so the call returns an ``InputRequiredResult`` holding the question and a sealed
  ``requestState``, and the client calls again with the answer. The state is sealed with
  HMAC-SHA256 under the server's key (:class:`StateSeal`) and binds the question to the
  caller, the call (tool and arguments) and the register's value; it expires with the
  question, and each question is answered once in a process.
* Only a yes approves. Decline, cancel, no answer within ``approval.timeout`` seconds, an
  answer that does not fit the question, a state that fails its seal, an approver who may not
  approve, a client that cannot be asked, too many questions open at once
  (``approval.max_pending``), the server stopping (:meth:`Approvals.stop`: an open question
  is withdrawn at once, whether a page or the client was to answer it), the caller's request
  gone before the answer (:meth:`Approvals.withdraw`: ``the caller went away``): each is a
  denial (``approval-denied``) saying which, and the audit record names who answered and how
  (:class:`~regdev.Approval`).
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import hashlib
import hmac
import html
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs

import anyio
import anyio.from_thread
import anyio.lowlevel
import msgspec
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..audit._idempotency import fingerprint
from ..core._errors import RegdevError
from ..core._text import escape_text
from ..devices._device import Device
from ..devices._regmap import Field, Register, RegisterMap
from ..gate._maptools import read_codec
from ..gate._policy import Approval, ApprovalRequest
from ._access import ApprovalPolicy, Policy

__all__ = [
    "ANSWER_KEY",
    "ASKING",
    "Approvals",
    "Asking",
    "Question",
    "StateSeal",
    "approvals_for",
]

logger = logging.getLogger("regdev")

_T = TypeVar("_T")

#: The denial of a question whose caller's request is gone before the answer came.
GONE = "the caller went away"

#: The key of the approval question in ``inputRequests`` and of its answer in
#: ``inputResponses`` (2026-07-28).
ANSWER_KEY = "regdev_approval"
#: The form a question asks the user to fill (MCP elicitation, form mode).
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve this write",
                    "description": "true runs the write; false refuses it"},
    },
    "required": ["approve"],
}


@dataclass
class Asking:
    """The MCP request a call arrived in: who sent it and how to ask them.

    Attributes:
        ctx: the SDK's request context (its session asks the client).
        caller: the authenticated caller's name, or None.
        input_responses: the answers the request carries (2026-07-28), else None.
        request_state: the sealed state it echoes back (2026-07-28), else None.
        ask_back: set by the hook when the answer to a question must come in a second
            request (2026-07-28): the ``InputRequiredResult`` the handler returns instead of
            the call's result.
        question: the question asked in this request, once it is open.
        gone: set when the caller's request is gone (:meth:`Approvals.withdraw`).
    """

    ctx: ServerRequestContext[Any, Any]
    caller: str | None
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None
    ask_back: types.InputRequiredResult | None = None
    question: Question | None = None
    gone: threading.Event = field(default_factory=threading.Event)


#: The request being handled, set by the ``tools/call`` handler around the gate's call (the
#: worker thread that runs it gets a copy of the context).
ASKING: contextvars.ContextVar[Asking | None] = contextvars.ContextVar("regdev_asking",
                                                                     default=None)


@dataclass
class Question:
    """One open approval question.

    Attributes:
        id: its unguessable id (the page's path, the elicitation id).
        request: what the gate asked about.
        old: the register's value when asked (0..255), or None when it could not be read or
            the tool changes every register.
        text: the question, in words, for a person.
        via: how it is asked.
        deadline: ``time.time()`` by which it must be answered.
        answer: the answer once there is one (a page's, or the denial of a stop).
        answered: set once ``answer`` is.
        wake: while the question is asked through the client (elicitation), ends that
            wait early; :meth:`Approvals.stop` calls it (from any thread).
    """

    id: str
    request: ApprovalRequest
    old: int | None
    text: str
    via: Literal["elicitation", "url"]
    deadline: float
    answer: Approval | None = None
    answered: threading.Event = field(default_factory=threading.Event)
    wake: Callable[[], None] | None = None


class StateSeal:
    """HMAC-SHA256 seals for the ``requestState`` of an approval question (2026-07-28).

    A sealed state is ``base64url(JSON payload) "." base64url(tag)``; :meth:`open` gives the
    payload back only when the tag is the key's (compared in constant time).

    Args:
        key: the secret, at least 32 bytes; every server process behind one load balancer
            needs the same one (``regdev serve --state-key-file``). A new random key by
            default: states then survive only in this process.

    Raises:
        ValueError: the key is shorter than 32 bytes.
    """

    def __init__(self, key: bytes | None = None) -> None:
        key = secrets.token_bytes(32) if key is None else key
        if len(key) < 32:
            raise ValueError(f"a state key needs at least 32 bytes, got {len(key)}")
        self._key = key

    def seal(self, payload: dict[str, Any]) -> str:
        body = msgspec.json.encode(payload)
        tag = hmac.new(self._key, body, hashlib.sha256).digest()
        return f"{_b64(body)}.{_b64(tag)}"

    def open(self, state: object) -> dict[str, Any] | None:
        """The payload of a state this key sealed, else None (tampered, cut, not a state)."""
        if type(state) is not str or len(state) > 4096 or state.count(".") != 1:
            return None
        body_text, tag_text = state.split(".")
        try:
            body, tag = _unb64(body_text), _unb64(tag_text)
        except ValueError:
            return None
        if not hmac.compare_digest(tag, hmac.new(self._key, body, hashlib.sha256).digest()):
            return None
        try:
            payload = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return None
        return payload if type(payload) is dict else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:  # only the exact text seal() made
        raise ValueError("not canonical base64url")
    return data


def can_elicit(ctx: ServerRequestContext[Any, Any], mode: Literal["form", "url"]) -> bool:
    """Whether the client declared elicitation in ``mode`` (an empty ``elicitation`` object
    means form mode, as clients before the 2025-11-25 modes declared it)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    if mode == "url":
        return elicitation.url is not None
    return elicitation.form is not None or elicitation.url is None


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request is of the 2026-07-28 era (no server-to-client requests)."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


class Approvals:
    """The approval hook of an MCP server, and the questions it has open.

    Args:
        policy: the policy's ``[approval]`` table.
        device: the device, to read a register's value for the question.
        seal: seals the 2026-07-28 ``requestState``.
        page_url: the URL of the approval pages without the question id (``http://HOST:PORT
            /approve/``), for ``via = "url"``.
        verify_approver: for ``via = "url"``, checks a token given on the page: the caller
            name and scopes it stands for, or None when it is not valid.
    """

    def __init__(self, policy: ApprovalPolicy, device: Device, seal: StateSeal, *,
                 page_url: str | None = None,
                 verify_approver: Callable[[str], Awaitable[tuple[str, frozenset[str]] | None]]
                 | None = None) -> None:
        self.policy = policy
        self.device = device
        self.seal = seal
        self.page_url = page_url
        self.verify_approver = verify_approver
        self._open: dict[str, Question] = {}
        self._used: dict[str, float] = {}  # answered 2026-07-28 question ids -> deadline
        self._lock = threading.Lock()
        self._stopping = False

    # --- the gate's hook (in the worker thread of the call) --------------------------------

    def __call__(self, request: ApprovalRequest) -> Approval:
        """Ask a person about ``request`` through the MCP request in :data:`ASKING`."""
        asking = ASKING.get()
        via = self.policy.via
        if asking is None:
            return Approval(False, via=via, reason="no MCP request to ask through")
        if self._stopping:
            return Approval(False, via=via, reason="the server is stopping")
        if via == "url" and self.page_url is None:
            return Approval(False, via=via, reason="approval by URL needs the pages of "
                            "regdev serve --http")
        ctx = asking.ctx
        if is_modern(ctx) and (asking.request_state is not None
                               or asking.input_responses is not None):
            return self._unless_gone(asking, self._second_leg(asking, request))
        if asking.gone.is_set():  # gone before the question: none is asked
            return Approval(False, via=via, reason=GONE)
        question = self._open_question(request, via)
        if question is None:
            return Approval(False, via=via, reason=f"{self.policy.max_pending} approval "
                            "questions are open already, the most the policy allows")
        asking.question = question
        if asking.gone.is_set():  # gone while it was being opened: withdrawn at once
            self.withdraw(asking)
        try:
            answer = (self._ask_form(asking, question) if via == "elicitation"
                      else self._ask_page(asking, question))
        finally:
            if asking.ask_back is None or via == "elicitation":
                self._close(question)
        return self._unless_gone(asking, answer)

    @staticmethod
    def _unless_gone(asking: Asking, answer: Approval) -> Approval:
        """A yes stands only while the caller's request is there to hear of the write."""
        if answer.approved and asking.gone.is_set():
            return Approval(False, answer.approver, answer.via, GONE)
        return answer

    def withdraw(self, asking: Asking) -> None:
        """The caller's request is gone (the client went away, or the call was cancelled):
        its open question is answered no (``the caller went away``), whether a page or the
        client was to answer it, and a yes that comes after now is not used. Any thread."""
        asking.gone.set()
        question = asking.question
        if question is None:
            return
        with self._lock:
            withdrawn = question.answer is None
            if withdrawn:
                question.answer = Approval(False, via=question.via, reason=GONE)
                question.answered.set()
            wake = question.wake
        if withdrawn:
            logger.info("approval question %s withdrawn: %s", question.id, GONE)
        if wake is not None:  # outside the lock: the event loop may be waiting for it
            wake()

    def _ask_form(self, asking: Asking, question: Question) -> Approval:
        ctx = asking.ctx
        if not can_elicit(ctx, "form"):
            return Approval(False, via="elicitation", reason="the MCP client cannot ask its "
                            "user (it did not declare elicitation)")
        if is_modern(ctx):
            asking.ask_back = types.InputRequiredResult(
                input_requests={ANSWER_KEY: _form_request(question.text)},
                request_state=self._state(question))
            return Approval(False, via="elicitation", reason="asked the caller's MCP client; "
                            "the call comes back with the answer")
        if not ctx.session.can_send_request:
            return Approval(False, via="elicitation", reason="this connection cannot carry a "
                            "question to the client (stateless or JSON responses); use the "
                            "2026-07-28 protocol or approval by URL")
        try:
            result = anyio.from_thread.run(self._until_answered, question, partial(
                ctx.session.elicit_form, question.text, ANSWER_SCHEMA,
                related_request_id=ctx.request_id))
        except Exception as error:  # the client failed to answer: a denial
            if (stopped := self._stopped(question)) is not None:
                return stopped
            logger.warning("an approval question failed: %s", escape_text(str(error), 200))
            return Approval(False, via="elicitation", reason="the MCP client did not answer "
                            "the question")
        if result is None:
            return self._stopped(question) or Approval(
                False, via="elicitation", reason=f"no answer within {self.policy.timeout:g} s")
        return self._judge_form(question, result, asking.caller)

    async def _until_answered(self, question: Question,
                              ask: Callable[[], Awaitable[_T]]) -> _T | None:
        """``ask()``'s answer, or None when the question's deadline passes first or
        :meth:`stop` denies the question meanwhile (``question.answer`` then says so).

        Runs in the event loop; :meth:`stop` ends the wait from any thread through
        ``question.wake``.
        """
        stopped = anyio.Event()
        token = anyio.lowlevel.current_token()
        loop_thread = threading.get_ident()

        def wake() -> None:
            if threading.get_ident() == loop_thread:
                stopped.set()
                return
            with contextlib.suppress(RuntimeError, concurrent.futures.CancelledError):
                anyio.from_thread.run_sync(stopped.set, token=token)  # the loop may be gone

        with self._lock:
            if question.answer is not None:  # stopped before it was asked
                return None
            question.wake = wake
        answer: list[_T] = []
        try:
            with anyio.move_on_after(max(0.0, question.deadline - time.time())):
                async with anyio.create_task_group() as group:
                    async def asking() -> None:
                        answer.append(await ask())
                        group.cancel_scope.cancel()

                    group.start_soon(asking)
                    await stopped.wait()
                    group.cancel_scope.cancel()
        finally:
            with self._lock:
                question.wake = None
        return answer[0] if answer else None

    def _stopped(self, question: Question) -> Approval | None:
        """The denial :meth:`stop` or :meth:`withdraw` gave ``question``, if either did."""
        with self._lock:
            answer = question.answer
        return answer if answer is not None and not answer.approved else None

    def _judge_form(self, question: Question, result: object,
                    approver: str | None) -> Approval:
        """An elicitation's answer: only ``accept`` with ``{"approve": true}`` approves."""
        if not isinstance(result, types.ElicitResult):
            return Approval(False, approver, "elicitation", "the answer is not one to this "
                            "question")
        if result.action == "decline":
            return Approval(False, approver, "elicitation", "declined")
        if result.action == "cancel":
            return Approval(False, approver, "elicitation", "dismissed without an answer")
        content = result.content
        if type(content) is not dict or set(content) != {"approve"} \
                or type(content["approve"]) is not bool:
            return Approval(False, approver, "elicitation", "the answer does not fit the "
                            "question's form")
        if content["approve"] is not True:
            return Approval(False, approver, "elicitation", "answered no")
        return self._unchanged(question, Approval(True, approver, "elicitation"))

    def _ask_page(self, asking: Asking, question: Question) -> Approval:
        ctx = asking.ctx
        url = f"{self.page_url}{question.id}"
        logger.warning("approval needed: %s; answer at %s within %g s",
                       question.text, url, self.policy.timeout)
        message = (f"{question.text} A person must answer on this page, with an approver "
                   f"token: {url}")
        if is_modern(ctx) and can_elicit(ctx, "url"):
            asking.ask_back = types.InputRequiredResult(
                input_requests={ANSWER_KEY: _url_request(message, url, question.id)},
                request_state=self._state(question))
            return Approval(False, via="url", reason="asked for approval on the page "
                            f"{url}; the call comes back when it is answered")
        if not is_modern(ctx) and ctx.session.can_send_request and can_elicit(ctx, "url"):
            try:
                shown = anyio.from_thread.run(self._until_answered, question, partial(
                    ctx.session.elicit_url, message, url, question.id,
                    related_request_id=ctx.request_id))
            except Exception as error:
                logger.warning("showing an approval page failed: %s",
                               escape_text(str(error), 200))
                shown = None
            if shown is not None and shown.action != "accept":
                return Approval(False, asking.caller, "url", "the user would not open the "
                                "approval page" if shown.action == "decline" else
                                "the user dismissed the approval page")
        return self._wait_page(question)

    def _wait_page(self, question: Question) -> Approval:
        """Wait in this worker thread for the page's answer, until the deadline."""
        question.answered.wait(max(0.0, question.deadline - time.time()))
        with self._lock:
            answer = question.answer
            if answer is None:  # too late now: the page refuses an answer from here on
                question.answer = answer = Approval(
                    False, via="url", reason=f"no answer within {self.policy.timeout:g} s")
                question.answered.set()
        if not answer.approved:
            return answer
        return self._unchanged(question, answer)

    # --- 2026-07-28: the second request, carrying the answer -------------------------------

    def _state(self, question: Question) -> str:
        request = question.request
        return self.seal.seal({
            "q": question.id, "via": question.via, "caller": request.caller,
            "session": request.session, "tool": request.tool, "addr": request.addr,
            "call": fingerprint(request.tool, dict(request.arguments)).hex(),
            "old": question.old, "until": question.deadline, "text": question.text})

    def _second_leg(self, asking: Asking, request: ApprovalRequest) -> Approval:
        via = self.policy.via
        state = self.seal.open(asking.request_state)
        if state is None or state.get("via") != via:
            return Approval(False, via=via, reason="the answer's requestState is not one this "
                            "server sealed (tampered, or from another server)")
        if (state.get("caller"), state.get("session"), state.get("tool"), state.get("addr"),
                state.get("call")) != (
                request.caller, request.session, request.tool, request.addr,
                fingerprint(request.tool, dict(request.arguments)).hex()):
            return Approval(False, via=via, reason="the answer is to a question about another "
                            "call or caller")
        until = state.get("until")
        if type(until) is not float or time.time() > until:
            return Approval(False, via=via,
                            reason=f"no answer within {self.policy.timeout:g} s")
        question_id = state.get("q")
        old = state.get("old")
        text = state.get("text")
        if type(question_id) is not str or type(text) is not str or (
                old is not None and type(old) is not int):
            return Approval(False, via=via, reason="the answer's requestState is malformed")
        if via == "url":
            with self._lock:
                question = self._open.get(question_id)
            if question is None:
                return Approval(False, via="url", reason="the approval question is not open "
                                "in this server process (answered, expired, or asked by "
                                "another process)")
            asking.question = question  # withdrawn if this request goes too
            if asking.gone.is_set():
                self.withdraw(asking)
            try:
                return self._wait_page(question)
            finally:
                self._close(question)
        if not self._use(question_id, until):
            return Approval(False, asking.caller, "elicitation",
                            "this question was answered already")
        question = Question(question_id, request, old, text, "elicitation", until)
        answer = (asking.input_responses or {}).get(ANSWER_KEY)
        if answer is None:
            return Approval(False, asking.caller, "elicitation", "the call came back without "
                            "an answer")
        return self._judge_form(question, answer, asking.caller)

    def _use(self, question_id: str, until: float) -> bool:
        """Mark a 2026-07-28 question answered; False when it was already."""
        now = time.time()
        with self._lock:
            if question_id in self._used:
                return False
            for stale in [q for q, end in self._used.items() if end < now]:
                del self._used[stale]
            self._used[question_id] = until
        return True

    # --- the questions -------------------------------------------------------------------

    def _open_question(self, request: ApprovalRequest,
                       via: Literal["elicitation", "url"]) -> Question | None:
        old = self._read(request.addr)
        now = time.time()
        question = Question(secrets.token_urlsafe(16), request, old,
                            describe(request, old, self.device.regmap,
                                     self._value_now(request)), via,
                            now + self.policy.timeout)
        with self._lock:
            for stale in [q for q in self._open.values() if q.deadline < now]:
                del self._open[stale.id]  # a 2026-07-28 page question never asked again
            if len(self._open) >= self.policy.max_pending:
                return None
            self._open[question.id] = question
        return question

    def _close(self, question: Question) -> None:
        with self._lock:
            self._open.pop(question.id, None)

    def _value_now(self, request: ApprovalRequest) -> str | None:
        """What the typed value a ``write_value`` names holds now, in its unit (``20.0
        degC``); None for another tool, or when it could not be read."""
        regmap = self.device.regmap
        codec = regmap.value(str(request.arguments.get("name"))) if (
            request.tool == "write_value") else None
        if codec is None:
            return None
        try:
            registers, sf = read_codec(self.device, regmap, codec)
        except RegdevError as error:
            logger.warning("value %s could not be read for an approval question: %s",
                           codec.value.name, escape_text(str(error), 200))
            return None
        return _unit_text(codec.unit_text(codec.engineering(codec.from_registers(registers),
                                                            sf)))

    def _read(self, addr: int | None) -> int | None:
        if addr is None:
            return None
        try:
            return self.device.read(addr)
        except RegdevError as error:
            logger.warning("register %d could not be read for an approval question: %s",
                           addr, error)
            return None

    def _unchanged(self, question: Question, approval: Approval) -> Approval:
        """A yes stands only if the register still holds the value the question showed: now
        (else denied at once), and when the write is sent (the gate checks
        :attr:`Approval.holds` again in one atomic step with the write)."""
        addr = question.request.addr
        if addr is None or question.old is None:
            return approval
        now = self._read(addr)
        if now == question.old:
            return dataclasses.replace(approval, holds=((addr, question.old),))
        return Approval(False, approval.approver, approval.via,
                        f"register {addr} changed from {question.old} to "
                        f"{'an unreadable value' if now is None else now} while the question "
                        "was open; ask again")

    def stop(self) -> None:
        """Deny every open question at once, and every later one (the server is stopping):
        a call waiting for its answer, on a page or from the client, is denied with
        ``the server is stopping`` and goes on. Any thread; idempotent."""
        with self._lock:
            self._stopping = True
            wakes = []
            for question in self._open.values():
                if question.answer is None:
                    question.answer = Approval(False, via=question.via,
                                               reason="the server is stopping")
                    question.answered.set()
                if question.wake is not None:
                    wakes.append(question.wake)
        for wake in wakes:  # outside the lock: the event loop may be waiting for it
            wake()

    # --- the approval page (via = "url") ---------------------------------------------------

    def page(self, question_id: str) -> tuple[int, str]:
        """The page of an open question (HTTP status, HTML)."""
        with self._lock:
            question = self._open.get(question_id)
        if question is None or question.answer is not None:
            return 404, _html("No such question", "<p>This approval question is not open: "
                              "it was answered, it expired, or it never was.</p>")
        left = max(0, int(question.deadline - time.time()))
        return 200, _html("Approve a register write", (
            f"<p>{html.escape(question.text)}</p>"
            f"<p>Answer within {left} s. Sign your answer with your own approver token "
            "(not the caller's).</p>"
            '<form method="post"><label>Approver token <input type="password" name="token" '
            'autocomplete="off" required></label> '
            '<button name="decision" value="approve">Approve</button> '
            '<button name="decision" value="deny">Deny</button></form>'))

    async def answer_page(self, question_id: str, body: bytes) -> tuple[int, str]:
        """Take a page's answer (a form: ``token``, ``decision``): HTTP status, HTML."""
        with self._lock:
            question = self._open.get(question_id)
        if question is None or question.answer is not None or time.time() > question.deadline:
            return 404, _html("No such question", "<p>This approval question is not open: "
                              "it was answered, it expired, or it never was.</p>")
        try:
            form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=4)
        except (UnicodeDecodeError, ValueError):
            form = {}
        tokens, decisions = form.get("token", []), form.get("decision", [])
        if len(tokens) != 1 or decisions not in (["approve"], ["deny"]):
            return 400, _html("Not an answer", "<p>Give one approver token and press Approve "
                              "or Deny.</p>")
        approver = await self.verify_approver(tokens[0]) if self.verify_approver else None
        if approver is None:
            logger.warning("an approval page answer was refused: the token is not valid")
            return 403, _html("Not an approver", "<p>That token is not valid here.</p>")
        name, scopes = approver
        if self.policy.approver_scope not in scopes:
            logger.warning("an approval page answer by %s was refused: it lacks the scope %s",
                           name, self.policy.approver_scope)
            scope = html.escape(self.policy.approver_scope)
            return 403, _html("Not an approver", "<p>That token may not approve writes "
                              f"(it lacks the scope {scope}).</p>")
        if name == question.request.caller:
            logger.warning("an approval page answer by %s was refused: it is the caller", name)
            return 403, _html("Not an approver", "<p>The caller cannot approve its own "
                              "write.</p>")
        approved = decisions == ["approve"]
        with self._lock:
            if question.answer is not None:
                return 409, _html("Answered already", "<p>This question has its answer.</p>")
            question.answer = Approval(approved, name, "url",
                                       None if approved else "denied on the approval page")
            question.answered.set()
        logger.info("approval question %s answered by %s: %s", question.id, name,
                    "approve" if approved else "deny")
        return 200, _html("Answer recorded", f"<p>{html.escape(_outcome(question, approved))}"
                          "</p>")


def approvals_for(policy: Policy, device: Device, state_key: bytes | None = None) -> Approvals:
    """The approval hook of an MCP server on ``device`` under ``policy`` (pass it as the
    policy's ``approve`` to the gate, and, over HTTP, to :func:`~regdev.server._http.serve_http`).

    Args:
        policy: the policy (its ``[approval]`` table).
        device: the device, read for the questions.
        state_key: the secret sealing approval questions' ``requestState`` (32 bytes or
            more), the same in every process behind one load balancer; random by default.

    Raises:
        ValueError: the state key is shorter than 32 bytes.
    """
    return Approvals(policy.approval, device, StateSeal(state_key))


def _unit_text(text: str) -> str:
    """A value with its unit, for a person: escaped (the unit is the map file's text)."""
    return escape_text(text, 120)


def describe(request: ApprovalRequest, old: int | None,
             regmap: RegisterMap | None = None, value_now: str | None = None) -> str:
    """The question for a person: who asks to write what, where, over which value. With a
    register map that names the register, the register and its fields are named and their
    values decoded by the map (``set RegPaConfig.PaSelect to PA_BOOST (1), which is RFO
    (0)``); ``write_field``'s question shows the field's value now.

    Args:
        request: what the approval hook was asked.
        old: the register's value now (read when the question is asked), None when it could
            not be read (or the call changes every register).
        regmap: the device's register map; None for the default map (registers by address).
        value_now: for ``write_value``, what the value holds now in its unit (``20.0
            degC``), None when it could not be read: the question is in units (``write 21.5
            degC to SETPOINT, which holds 20.0 degC``).
    """
    who = request.caller or f"a caller in session {request.session}"
    codec = regmap.value(str(request.arguments.get("name"))) if (
        regmap is not None and request.tool == "write_value") else None
    if codec is not None:
        given = request.arguments.get("value")
        shown = (f'"{escape_text(given, 80)}"' if type(given) is str
                 else _unit_text(codec.unit_text(given)))
        first, last = codec.addresses[0], codec.addresses[-1]
        where = (f"register 0x{first:02X}" if first == last
                 else f"registers 0x{first:02X}..0x{last:02X}")
        return (f"{who} asks to write {shown} to {codec.value.name}, which holds "
                f"{value_now or 'a value that could not be read'} (protected {where}). "
                "Approve this write?")
    register = regmap.at(request.addr) if regmap is not None and request.addr is not None \
        else None
    named = register is not None and register.name
    data = request.arguments.get("data")
    if named and register is not None and request.tool == "write_field":
        found = regmap.find_field(str(request.arguments.get("field"))) if regmap else None
        if found is not None and found[0] is register:
            target = found[1]
            value = request.arguments.get("value")
            number = target.values.get(value) if type(value) is str else value
            if type(number) is int:
                now = (_field_value(target, (old & target.mask) >> target.lsb)
                       if old is not None else "a value that could not be read")
                return (f"{who} asks to set {register.name}.{target.name} to "
                        f"{_field_value(target, number)}, which is {now}, in protected register "
                        f"{register.label}. Approve this write?")
    if request.addr is not None and type(data) is int:
        if named and register is not None:
            now = f"0x{old:02X}" if old is not None else "a value that could not be read"
            changes = _field_changes(register, old, data)
            return (f"{who} asks to write 0x{data:02X} to protected register {register.label}, "
                    f"which holds {now}{': ' + changes if changes else ''}. Approve this write?")
        now = f"{old} (0x{old:02X})" if old is not None else "a value that could not be read"
        return (f"{who} asks to write {data} (0x{data:02X}) to protected register "
                f"{request.addr}, which holds {now}. Approve this write?")
    arguments = escape_text(msgspec.json.encode(dict(request.arguments)).decode(), 200)
    label = register.label if named and register is not None else str(request.addr)
    where = f"protected register {label}" if request.addr is not None else \
        "every register, protected ones included"
    return f"{who} asks to run {request.tool} {arguments}, which changes {where}. Approve?"


def _field_value(target: Field, number: int) -> str:
    """A field's value for a person: ``PA_BOOST (1)`` for an enumerated one, else the number
    (and its hex above 9)."""
    name = target.name_of(number)
    if name is not None:
        return f"{name} ({number})"
    return f"{number} (0x{number:X})" if number > 9 else str(number)


def _field_changes(register: Register, old: int | None, data: int) -> str:
    """What writing ``data`` over ``old`` does to ``register``'s writable fields, in words:
    ``set CTRL.MODE to ONESHOT (1), which is SLEEP (0)``; each field when ``old`` is not known;
    "no field changes" when none does."""
    changes = []
    for each in register.fields:
        if not each.writable:
            continue
        new = (data & each.mask) >> each.lsb
        before = None if old is None else (old & each.mask) >> each.lsb
        if before == new:
            continue
        was = "" if before is None else f", which is {_field_value(each, before)}"
        changes.append(f"set {register.name}.{each.name} to {_field_value(each, new)}{was}")
    if not register.fields:
        return ""
    return "; ".join(changes) if changes else "no field changes"


def _outcome(question: Question, approved: bool) -> str:
    """What an answer on the page makes happen, in words for the approver."""
    if not approved:
        return "Denied: the write will not run; the caller is told it was denied."
    addr, old = question.request.addr, question.old
    unless = "the caller has gone"
    if addr is not None and old is not None:
        unless = f"register {addr} no longer holds {old} (0x{old:02X}) or {unless}"
    return f"Approved: the write runs now, unless {unless}; the caller is told the result."


def _form_request(text: str) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(
        message=text, requested_schema=ANSWER_SCHEMA))


def _url_request(message: str, url: str, question_id: str) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestURLParams(
        message=message, url=url, elicitation_id=question_id))


def _html(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>regdev: {title}"
            f"</title></head><body><h1>{title}</h1>{body}</body></html>")
