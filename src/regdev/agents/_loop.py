"""The agent loop: a proposer's calls through the gate, one retry after a refusal.

Rules of this file:

* A proposer is any callable ``proposer(observations) -> raw | None``: it gets every
  observation so far (oldest first) and returns the model's next raw output, or None when it
  is done.
* Every proposal goes through :meth:`Gate.handle`, so a partial or invalid call is never
  dispatched. A refused proposal is answered with its observation; the proposer gets
  ``retries`` more attempts (default 1) before the loop stops with ``rejected``. A success
  resets the count. A refusal that is not retryable (a policy denial, a device error) stops
  the loop with ``rejected`` at once: sending the call again cannot help.
* The loop stops with exactly one reason: ``done`` (the proposer returned None), ``budget``
  (``max_steps`` proposals made), ``rejected`` (the retries after a refusal were refused too,
  or the refusal was final), ``error`` (the proposer raised or returned something that is not
  text; the detail says what in words, e.g. "the output was closed", never a class name).
* Every loop has a ``loop_id``. With an audit log on the gate, each step's record carries the
  loop id and the step number (its verdict is the record's stage and code), and the stop is one
  more record (``event = "stop"``, the reason in ``code``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..core._observation import Observation
from ..core._text import escape_text
from ..gate._gate import Gate, check_loop_id
from ..gate._policy import Session

__all__ = ["LoopResult", "Proposer", "Step", "StopReason", "call_with_retry", "run_loop"]

StopReason = Literal["done", "budget", "rejected", "error"]
#: ``proposer(observations so far) -> the model's next raw output, or None when done``.
Proposer = Callable[[Sequence[Observation]], "str | bytes | None"]


@dataclass(frozen=True, slots=True)
class Step:
    """One proposal and its observation.

    Attributes:
        raw: the model's raw output for this step.
        observation: what the gate answered.
        retry: True when this step was a retry after a refusal.
    """

    raw: str | bytes
    observation: Observation
    retry: bool


@dataclass(slots=True)
class LoopResult:
    """How a loop went.

    Attributes:
        stop: why it stopped: ``done``, ``budget``, ``rejected`` or ``error``.
        detail: one line saying why, for a person.
        steps: every step in order.
        loop_id: the loop's id, as in its audit records.
    """

    stop: StopReason
    detail: str
    steps: list[Step] = field(default_factory=list)
    loop_id: str = ""

    @property
    def observations(self) -> list[Observation]:
        """Every observation in order."""
        return [step.observation for step in self.steps]


def run_loop(
    proposer: Proposer,
    gate: Gate,
    *,
    dialect: str = "canonical",
    tool_choice: str | None = None,
    max_steps: int = 16,
    retries: int = 1,
    on_step: Callable[[Step], None] | None = None,
    session: Session | None = None,
    loop_id: str | None = None,
) -> LoopResult:
    """Drive ``gate`` with ``proposer`` until it is done or a stop rule fires.

    Args:
        proposer: see the module docstring.
        gate: the gate every proposal goes through.
        dialect: the dialect of the proposer's output.
        tool_choice: force this tool on every step (others are ``wrong-tool``).
        max_steps: the step budget (proposals, retries included), >= 1.
        retries: attempts allowed after a refusal before stopping with ``rejected``, >= 0.
        on_step: called with each step as it completes (progress output).
        session: the session every call is made in; the gate's default when None.
        loop_id: the id of this loop in the audit log; a random one when None.

    Returns:
        A :class:`LoopResult`; the proposer's own exceptions stop the loop with ``error``
        and are not re-raised.

    Raises:
        ValueError: ``max_steps`` < 1, ``retries`` < 0, a ``dialect`` or ``tool_choice``
            the gate cannot honour, or a ``loop_id`` that is not a string of Unicode text
            (checked before the first proposal). An exception raised
            by ``on_step`` propagates.
    """
    if max_steps < 1 or retries < 0:
        raise ValueError(f"need max_steps >= 1 and retries >= 0, got {max_steps}, {retries}")
    gate.check_options(dialect, tool_choice)
    if loop_id is not None:
        check_loop_id(loop_id)
    result = LoopResult(stop="budget", detail=f"the step budget of {max_steps} is spent",
                        loop_id=loop_id or uuid.uuid4().hex)
    try:
        _drive(result, proposer, gate, dialect=dialect, tool_choice=tool_choice,
               max_steps=max_steps, retries=retries, on_step=on_step, session=session)
    except BaseException as error:  # on_step raised, or an interrupt: recorded, re-raised
        result.stop, result.detail = "error", _interruption(error)
        raise
    finally:
        gate.record_loop_stop(result.loop_id, result.stop, result.detail, len(result.steps),
                              session)
    return result


def _interruption(error: BaseException) -> str:
    """The stop detail for an exception that ended the loop from outside the proposer (the
    ``on_step`` callback, an interrupt): words, never a Python class name."""
    if isinstance(error, BrokenPipeError):
        return "the output was closed"
    if isinstance(error, KeyboardInterrupt):
        return "the loop was interrupted (Ctrl-C)"
    if isinstance(error, OSError) and error.strerror:
        return f"the output could not be written: {error.strerror}"
    if isinstance(error, SystemExit):
        return "the program was asked to exit"
    text = str(error)
    return (f"the loop was stopped by an error: {escape_text(text, 200)}" if text
            else "the loop was stopped")


def _drive(result: LoopResult, proposer: Proposer, gate: Gate, *, dialect: str,
           tool_choice: str | None, max_steps: int, retries: int,
           on_step: Callable[[Step], None] | None, session: Session | None) -> None:
    """Run the loop's steps into ``result`` until a stop rule fires (the rules above)."""
    refused_in_a_row = 0
    while len(result.steps) < max_steps:
        try:
            raw = proposer(result.observations)
        except Exception as error:
            result.stop = "error"
            text = str(error)  # an endpoint's error may quote the model: escaped
            result.detail = (f"the proposer failed: {escape_text(text, 200)}" if text
                             else "the proposer failed")
            return
        if raw is None:
            result.stop, result.detail = "done", "the proposer is done"
            return
        if not isinstance(raw, (str, bytes)):
            result.stop = "error"
            result.detail = (f"the proposer returned a value of type {type(raw).__name__}, "
                             "not text or None")
            return
        observation = gate.handle(raw, dialect=dialect, tool_choice=tool_choice,
                                  session=session, loop_id=result.loop_id,
                                  step=len(result.steps) + 1)
        step = Step(raw=raw, observation=observation, retry=refused_in_a_row > 0)
        result.steps.append(step)
        if on_step is not None:
            on_step(step)
        if observation.ok:
            refused_in_a_row = 0
            continue
        refused_in_a_row += 1
        if observation.refusal is not None and not observation.refusal.retryable:
            result.stop = "rejected"
            result.detail = f"{observation.code}: the refusal is final (not retryable)"
            return
        if refused_in_a_row > retries:
            result.stop = "rejected"
            result.detail = (f"{observation.code}: the call was refused "
                             f"{refused_in_a_row} times in a row (retries allowed: {retries})")
            return


def call_with_retry(
    raw: str | bytes,
    ask_model: Callable[[str], str | bytes],
    gate: Gate,
    *,
    dialect: str = "canonical",
    tool_choice: str | None = None,
    retries: int = 1,
    session: Session | None = None,
) -> Observation:
    """Run one call; on a refusal, ask the model to correct it, at most ``retries`` times.

    Args:
        raw: the model's first output.
        ask_model: ``ask_model(error_text) -> corrected raw output``; ``error_text`` is the
            refusal's observation as one line of JSON.
        gate: the gate the calls go through.
        dialect: the dialect of ``raw`` and of the corrections.
        tool_choice: force this tool (others are ``wrong-tool``).
        retries: corrections allowed, >= 0 (default 1).
        session: the session the calls are made in; the gate's default when None.

    Returns:
        The last observation: the first success, the last refusal, or a refusal that is not
        retryable (the model is not asked again after one).

    Raises:
        ValueError: a ``dialect`` or ``tool_choice`` the gate cannot honour. An exception
            raised by ``ask_model`` propagates (it is the caller's own code).
    """
    observation = gate.handle(raw, dialect=dialect, tool_choice=tool_choice, session=session)
    for _ in range(retries):
        if observation.ok or (observation.refusal and not observation.refusal.retryable):
            break
        observation = gate.handle(ask_model(observation.to_json()), dialect=dialect,
                                  tool_choice=tool_choice, session=session)
    return observation
