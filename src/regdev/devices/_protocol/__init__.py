"""The serial wire protocol codec, sans-IO: bytes in, frames out, for both ends of the line.

The protocol is specified in ``docs/protocol.md``; in short, one frame is one ASCII line::

    $05 W 03 FF*05\\n        request: seq 0x05, write 0xFF to register 3
    $05 w 03 FF*A4\\n        reply:   register 3 holds 0xFF after the write

``$`` starts a frame, two hex digits give its sequence number, one letter its kind
(upper case: a request; lower case: a reply), then its fields, ``*`` and the CRC-8 of the
bytes between ``$`` and ``*`` as two hex digits, and LF ends it.

Rules of this package (one file per idea, as h11 splits its codec: ``_events`` the
frames, ``_writers`` frames to bytes, ``_readers`` bytes to frames, ``_checksum``, ``_state``
the transition table, ``_connection`` one end of the line):

* No I/O. It imports no serial, socket, time or threading module (a test and an
  import-linter contract check it): the caller moves bytes, this package only turns bytes
  into frames and frames into bytes.
* :class:`Connection` is used by both ends: ``Connection(HOST)`` in the serial backend,
  ``Connection(DEVICE)`` in the firmware simulator. Every state change is one of
  :data:`TRANSITIONS` (``_state.py``), and nowhere else: :meth:`Connection._move` looks it
  up (a test checks it).
* Peer input never raises anything but :class:`RemoteProtocolError`, and the codec has
  dropped the bad bytes when it does: the next :meth:`Connection.next_event` goes on with the
  bytes after them (resynchronisation). This side's misuse raises :class:`LocalProtocolError`.
* A device drops reply frames silently (it may be hearing its own echo on a half-duplex or
  echoing line, and must not answer it); a host drops replies it is not awaiting (stale).
* The receive buffer is bounded (``max_buffer_size`` bytes); a frame is at most
  :data:`MAX_FRAME` bytes.
"""

from __future__ import annotations

from ...core._errors import LocalProtocolError, RemoteProtocolError
from ._checksum import crc8
from ._connection import NEED_DATA, Connection
from ._events import (
    ERROR_CODES,
    MAP_PAGE,
    MAX_BLOCK,
    MAX_EPOCH,
    MAX_FRAME,
    MAX_ID,
    MAX_TEXT,
    DumpReply,
    DumpRequest,
    ErrorReply,
    Frame,
    IdentifyReply,
    IdentifyRequest,
    MaskedWriteReply,
    MaskedWriteRequest,
    ReadBlockReply,
    ReadBlockRequest,
    ReadReply,
    ReadRequest,
    Reply,
    Request,
    ResetReply,
    ResetRequest,
    WriteBlockReply,
    WriteBlockRequest,
    WriteReply,
    WriteRequest,
    identify_text,
    map_text,
    split_identify_text,
    split_map_text,
)
from ._readers import decode
from ._state import DEVICE, HOST, TRANSITIONS, Action, Role, State
from ._writers import encode

__all__ = [
    "DEVICE",
    "ERROR_CODES",
    "HOST",
    "MAP_PAGE",
    "MAX_BLOCK",
    "MAX_EPOCH",
    "MAX_FRAME",
    "MAX_ID",
    "MAX_TEXT",
    "NEED_DATA",
    "TRANSITIONS",
    "Action",
    "Connection",
    "DumpReply",
    "DumpRequest",
    "ErrorReply",
    "Frame",
    "IdentifyReply",
    "IdentifyRequest",
    "LocalProtocolError",
    "MaskedWriteReply",
    "MaskedWriteRequest",
    "ReadBlockReply",
    "ReadBlockRequest",
    "ReadReply",
    "ReadRequest",
    "RemoteProtocolError",
    "Reply",
    "Request",
    "ResetReply",
    "ResetRequest",
    "Role",
    "State",
    "WriteBlockReply",
    "WriteBlockRequest",
    "WriteReply",
    "WriteRequest",
    "crc8",
    "decode",
    "encode",
    "identify_text",
    "map_text",
    "split_identify_text",
    "split_map_text",
]
