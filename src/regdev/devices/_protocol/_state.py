"""The state machine of one end of the serial line: who it is, where it is, what may happen.

Rules of this file:

* Every state change of a :class:`~regdev.devices._protocol.Connection` is one entry of
  :data:`TRANSITIONS`, looked up by :meth:`Connection._move`, and nowhere else (a test reads
  the connection's source for any other assignment of its state).
* Anything not in the table is refused: a local action with :class:`LocalProtocolError`, a
  peer's with :class:`RemoteProtocolError`. Replies that change nothing are dropped by the
  connection without an error (a stale reply at a host, any reply at a device).
* Values only: no frames, no bytes, no I/O.
"""

from __future__ import annotations

import enum
from typing import Final


class Role(enum.Enum):
    """Which end of the line a :class:`Connection` is."""

    __hash__ = object.__hash__  # see _move

    HOST = "host"
    DEVICE = "device"


HOST: Final = Role.HOST
DEVICE: Final = Role.DEVICE


class State(enum.Enum):
    """Where a :class:`Connection` is in the request/reply exchange."""

    __hash__ = object.__hash__  # see _move

    IDLE = "idle"
    AWAITING_REPLY = "awaiting-reply"  # host: a request is out, its reply not yet in
    MUST_REPLY = "must-reply"  # device: a request is in, its reply not yet out


class Action(enum.Enum):
    """What happens to a :class:`Connection`: a frame sent or received, or a give-up."""

    __hash__ = object.__hash__  # see _move

    SEND_REQUEST = "send a request"
    SEND_REPLY = "send a reply"
    SEND_ERROR = "send an error reply"
    RECEIVE_REQUEST = "receive a request"
    RECEIVE_REPLY = "receive the awaited reply"
    ABANDON = "abandon the awaited reply"


_S = State
#: Every allowed (role, state, action) and the state it leads to. Anything not here is
#: refused: a local action with LocalProtocolError; a request reaching a host with
#: RemoteProtocolError. Replies that change nothing are dropped without an error: a reply the
#: host is not awaiting (stale), and any reply reaching a device (its own echo).
TRANSITIONS: Final[dict[tuple[Role, State, Action], State]] = {
    (HOST, _S.IDLE, Action.SEND_REQUEST): _S.AWAITING_REPLY,
    (HOST, _S.AWAITING_REPLY, Action.RECEIVE_REPLY): _S.IDLE,
    (HOST, _S.AWAITING_REPLY, Action.ABANDON): _S.IDLE,
    (DEVICE, _S.IDLE, Action.RECEIVE_REQUEST): _S.MUST_REPLY,
    (DEVICE, _S.MUST_REPLY, Action.SEND_REPLY): _S.IDLE,
    (DEVICE, _S.MUST_REPLY, Action.SEND_ERROR): _S.IDLE,
    # A device answers a frame it could not read (RemoteProtocolError) while idle.
    (DEVICE, _S.IDLE, Action.SEND_ERROR): _S.IDLE,
}
