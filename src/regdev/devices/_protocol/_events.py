"""The frames of the serial wire protocol (``docs/protocol.md``), as values: each request and
reply a frozen dataclass, the limits of their fields, and the identify text's extensions (who
the device is, which map it serves). No bytes here: :mod:`._writers` turns frames into bytes,
:mod:`._readers` bytes into frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from ...core._errors import LocalProtocolError

#: Largest frame on the wire, in bytes, from ``$`` to LF inclusive (a CR before LF counts).
MAX_FRAME: Final = 64
#: Longest identify text, in bytes (printable ASCII except ``$`` and ``*``).
MAX_TEXT: Final = 48
#: Longest device id and reset epoch in the identify text's extension, in characters (each
#: 1..16 of ``0-9`` and ``A-Z``; ``docs/protocol.md``, "Who the device is, and when it last
#: started over").
MAX_ID: Final = 16
MAX_EPOCH: Final = 16
#: Most registers a block read or block write moves in one frame.
MAX_BLOCK: Final = 16
#: The error codes a device sends in an ``e`` reply (``docs/protocol.md``, "Error codes").
#: A host treats any other upper-case word of 1..8 letters as a refusal too.
ERROR_CODES: Final = ("ADDR", "DATA", "CKSUM", "SYNTAX", "BUSY")
#: The bytes an identify text may hold: printable ASCII but ``$`` and ``*``.
_TEXT_BYTES: Final = frozenset(range(0x20, 0x7F)) - {ord("$"), ord("*")}
#: The letters of an error code.
_CODE_LETTERS: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")

# --- frames -----------------------------------------------------------------------------------
# Each frame knows its letter; requests are upper case, replies lower case. Fields are ints
# 0..255 on the wire (two upper-case hex digits); which addresses exist is the device's
# business (it answers ``e ADDR``), not the codec's.


@dataclass(frozen=True, slots=True)
class IdentifyRequest:
    """``I``: ask the device to identify itself; ``I 01`` (``page`` 1): ask which register map
    it serves (:data:`MAP_PAGE`, answered ``i map=DIGEST NAME``, :func:`map_text`). Answered
    by :class:`IdentifyReply`; a device without page 1 answers ``I 01`` with ``e SYNTAX``.
    ``I 00`` is spelt ``I``."""

    seq: int
    page: int = 0


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """``R AA``: read register ``addr``. Answered by :class:`ReadReply`."""

    seq: int
    addr: int


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """``W AA DD``: write ``data`` to register ``addr``. Answered by :class:`WriteReply`."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """``Z``: set every register to its reset value. Answered by :class:`ResetReply`."""

    seq: int


@dataclass(frozen=True, slots=True)
class DumpRequest:
    """``D``: the values of the 16 addresses 00..0F at once, without the side effects of a
    read; ``D AA``: of the 16 addresses from ``addr``. Answered by :class:`DumpReply`."""

    seq: int
    addr: int = 0


@dataclass(frozen=True, slots=True)
class ReadBlockRequest:
    """``G AA NN``: read ``count`` (1..16) registers from ``addr`` up, as reads. Answered by
    :class:`ReadBlockReply`."""

    seq: int
    addr: int
    count: int


@dataclass(frozen=True, slots=True)
class WriteBlockRequest:
    """``P AA DD...``: write ``values`` (1..16 bytes) to the registers from ``addr`` up, all
    or nothing. Answered by :class:`WriteBlockReply`."""

    seq: int
    addr: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MaskedWriteRequest:
    """``M AA MM DD``: one atomic read-modify-write of register ``addr``: the bits ``mask``
    take those of ``data``. Answered by :class:`MaskedWriteReply`."""

    seq: int
    addr: int
    mask: int
    data: int


@dataclass(frozen=True, slots=True)
class IdentifyReply:
    """``i TEXT``: the device's one-line identity (1..48 printable ASCII bytes).

    A device that says who it is and when it last started over ends the text with
    `` id=ID epoch=EPOCH`` (:func:`identify_text`); :attr:`device_id` and :attr:`epoch` read
    them, and are None for a text without that ending (a device that cannot say).
    """

    seq: int
    text: str

    @property
    def device_id(self) -> str | None:
        """The device's id (1..16 of ``0-9A-Z``), or None when the text does not say it."""
        return split_identify_text(self.text)[1]

    @property
    def epoch(self) -> str | None:
        """The device's reset epoch (1..16 of ``0-9A-Z``), or None when the text does not
        say it."""
        return split_identify_text(self.text)[2]


@dataclass(frozen=True, slots=True)
class ReadReply:
    """``r AA DD``: register ``addr`` holds ``data``."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class WriteReply:
    """``w AA DD``: register ``addr`` holds ``data`` after the write."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class ResetReply:
    """``z``: every register holds its reset value."""

    seq: int


@dataclass(frozen=True, slots=True)
class DumpReply:
    """``d`` and 32 hex digits: the 16 addresses from ``addr`` (``d AA`` and 32 hex digits
    when ``addr`` is not 0), lowest first; an address that is no register reads 00."""

    seq: int
    values: tuple[int, ...]
    addr: int = 0


@dataclass(frozen=True, slots=True)
class ReadBlockReply:
    """``g AA DD...``: the registers from ``addr`` up hold ``values``."""

    seq: int
    addr: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WriteBlockReply:
    """``p AA DD...``: the registers from ``addr`` up hold ``values`` after the write."""

    seq: int
    addr: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MaskedWriteReply:
    """``m AA DD``: register ``addr`` holds ``data`` after the masked write."""

    seq: int
    addr: int
    data: int


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """``e CODE``: the request was refused and not executed; ``code`` is in :data:`ERROR_CODES`.

    A device answers a frame it could not read with the frame's sequence number when that
    could be read, else with sequence number 0 (which no request uses).
    """

    seq: int
    code: str


Request: TypeAlias = (
    IdentifyRequest | ReadRequest | WriteRequest | ResetRequest | DumpRequest
    | ReadBlockRequest | WriteBlockRequest | MaskedWriteRequest
)
Reply: TypeAlias = (
    IdentifyReply | ReadReply | WriteReply | ResetReply | DumpReply | ErrorReply
    | ReadBlockReply | WriteBlockReply | MaskedWriteReply
)
Frame: TypeAlias = Request | Reply

_REQUESTS: Final = (IdentifyRequest, ReadRequest, WriteRequest, ResetRequest, DumpRequest,
                    ReadBlockRequest, WriteBlockRequest, MaskedWriteRequest)
#: The reply type that answers each request type (an ErrorReply answers any of them).
_ANSWER: Final[dict[type[Frame], type[Frame]]] = {
    IdentifyRequest: IdentifyReply,
    ReadRequest: ReadReply,
    WriteRequest: WriteReply,
    ResetRequest: ResetReply,
    DumpRequest: DumpReply,
    ReadBlockRequest: ReadBlockReply,
    WriteBlockRequest: WriteBlockReply,
    MaskedWriteRequest: MaskedWriteReply,
}

# --- the identify text's extension: who the device is, and when it last started over -----------

#: The characters of a device id and a reset epoch in the identify text's extension.
_ID_CHARACTERS: Final = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _is_id(text: str) -> bool:
    """Whether ``text`` is a device id or a reset epoch: 1..16 characters of 0-9 and A-Z."""
    return 1 <= len(text) <= MAX_ID and set(text) <= _ID_CHARACTERS


def split_identify_text(text: str) -> tuple[str, str | None, str | None]:
    """An identify text's description, device id and reset epoch.

    The text says the last two when it ends with `` id=ID epoch=EPOCH`` after a description
    of at least one character, ID and EPOCH each 1..16 characters of ``0-9`` and ``A-Z``
    (``docs/protocol.md``). Any other text is a description only: a device that cannot say.

    Returns:
        ``(description, device_id, epoch)``; ``(text, None, None)`` without the extension.
    """
    head, sep, epoch = text.rpartition(" epoch=")
    description, sep_id, device_id = head.rpartition(" id=")
    if not (sep and sep_id and description and _is_id(device_id) and _is_id(epoch)):
        return text, None, None
    return description, device_id, epoch


#: The identify page that says which register map the device serves (``I 01``).
MAP_PAGE: Final = 1
#: The characters a map's name keeps in the map page's text (a run of others becomes ``-``),
#: and those of a digest (16 of them).
_MAP_NAME_KEEPS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789_.-")
_DIGEST_CHARACTERS: Final = frozenset("0123456789ABCDEF")


def _is_digest(text: str) -> bool:
    return len(text) == 16 and set(text) <= _DIGEST_CHARACTERS


def map_text(digest: str, name: str) -> str:
    """The text a device answers to ``I 01``: ``map=DIGEST NAME``, DIGEST the map's
    :meth:`~regdev.devices._regmap.RegisterMap.digest` (16 upper-case hex digits), NAME its
    name for people (characters other than letters, digits, ``_``, ``.`` and ``-`` made
    ``-``, cut to fit the 48 bytes of a text: 27 characters), or nothing after the digest
    for a map without a name.

    Raises:
        LocalProtocolError: ``digest`` is not 16 upper-case hex digits.
    """
    if not isinstance(digest, str) or not _is_digest(digest):
        raise LocalProtocolError(f"a map digest is 16 upper-case hex digits, got {digest!r}")
    kept: list[str] = []
    for char in name:
        if char in _MAP_NAME_KEEPS:
            kept.append(char)
        elif not kept or kept[-1] != "\0":
            kept.append("\0")  # a run of others: one `-`
    shown = "".join(kept).replace("\0", "-").strip("-")[:MAX_TEXT - 21]
    return f"map={digest}" + (f" {shown}" if shown else "")


def split_map_text(text: str) -> tuple[str, str] | None:
    """The digest and name of a ``map=DIGEST NAME`` text (:func:`map_text`), or None when
    the text is not of that form."""
    head, _, name = text.partition(" ")
    digest = head.removeprefix("map=")
    if not head.startswith("map=") or not _is_digest(digest):
        return None
    return digest, name


def identify_text(description: str, device_id: str, epoch: str) -> str:
    """The identify text of a device that says who it is and when it last started over:
    ``f"{description} id={device_id} epoch={epoch}"``.

    Args:
        description: 1 or more printable ASCII characters other than ``$`` and ``*``.
        device_id: the device's id, 1..16 characters of ``0-9`` and ``A-Z``; the same for
            the device's whole life.
        epoch: its reset epoch, 1..16 characters of ``0-9`` and ``A-Z``; a new value at every
            reset and every start, never one it had before.

    Raises:
        LocalProtocolError: a part is not of that form, or the text is over :data:`MAX_TEXT`
            characters (the message says by how many).
    """
    for name, value in (("device id", device_id), ("epoch", epoch)):
        if not isinstance(value, str) or not _is_id(value):
            raise LocalProtocolError(f"the {name} must be 1..16 characters of 0-9 and A-Z, "
                                     f"got {value!r}")
    if not isinstance(description, str) or not description:
        raise LocalProtocolError(f"the description must be 1 or more characters, got "
                                 f"{description!r}")
    text = f"{description} id={device_id} epoch={epoch}"
    raw = text.encode("ascii") if text.isascii() else b""
    if not raw or not set(raw) <= _TEXT_BYTES:
        raise LocalProtocolError(f"identify text must be printable ASCII characters other "
                                 f"than `$` and `*`, got {text!r}")
    if len(raw) > MAX_TEXT:
        raise LocalProtocolError(
            f"identify text {text!r} is {len(raw)} characters, over {MAX_TEXT}: shorten the "
            f"description to at most {len(description) - (len(raw) - MAX_TEXT)} characters")
    return text
