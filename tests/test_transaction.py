"""The transaction engine of the wire devices (devices/_transaction.py), over a backend made of
nothing but a link, a codec and what its replies mean, all in memory here: what a new backend
writes."""

from __future__ import annotations

import time

import pytest

from regdev import DeviceBusy, DeviceError, DeviceRefused, DeviceTimeout, ReplyLost, TransportError
from regdev.devices._transaction import Transactions

NEED_DATA = object()


class LineCodec:
    """A codec of text lines: a request is a word, its reply the next line."""

    def __init__(self) -> None:
        self.pending: str | None = None
        self.buffer = b""

    def send(self, request: str) -> bytes:
        self.pending = request
        return request.encode() + b"\n"

    def receive_data(self, data: bytes) -> None:
        self.buffer += data

    def next_event(self) -> object:
        line, sep, rest = self.buffer.partition(b"\n")
        if not sep:
            return NEED_DATA
        self.buffer, self.pending = rest, None
        return line.decode()

    def abandon(self) -> None:
        self.pending = None

    def discard_buffer(self) -> None:
        self.buffer = b""


class ScriptedLink:
    """A link whose device answers each request written by the next step of ``steps``: a
    reply line, ``"silent"``, ``"fail-write"`` (the write fails) or ``"fail-after"`` (the link
    fails after the request was written)."""

    flush_before_request = False

    def __init__(self, steps: list[str], written: list[bytes]) -> None:
        self.steps = steps
        self.written = written
        self.waiting = b""
        self.failed = False

    def write(self, data: bytes) -> None:
        step = self.steps.pop(0)
        if step == "fail-write":
            raise TransportError("port mem:// failed: unplugged")
        self.written.append(data)
        if step == "fail-after":
            self.failed = True
        elif step != "silent":
            self.waiting = step.encode() + b"\n"

    def read(self, deadline: float) -> bytes:
        if self.failed:
            raise TransportError("port mem:// failed: unplugged")
        data, self.waiting = self.waiting, b""
        if not data:
            time.sleep(max(0.0, deadline - time.monotonic()))
        return data

    def flush_input(self) -> None:
        self.waiting = b""

    def close(self) -> None:
        pass


class LineWire:
    """What the line protocol's replies mean: ``BUSY`` and ``NO`` are refusals."""

    need_data = NEED_DATA
    sync_name = "hello that synchronises the line"
    bad_frame_ends_wait = False

    def sync_request(self, what: str) -> object | None:
        return "hello"

    def synced(self, reply: object | None) -> None:
        pass

    def refusal(self, request: object, reply: object) -> DeviceError | None:
        if reply == "BUSY":
            return DeviceBusy("the device is busy (BUSY)", "BUSY")
        if reply == "NO":
            return DeviceRefused("the device refused it (NO)", "NO")
        return None

    def abandoned(self, request: object) -> None:
        pass

    def lost_sync(self) -> str:
        return "flush"


def engine(steps: list[str]) -> tuple[Transactions[str], list[bytes], list[int]]:
    """An engine over a scripted link (its first step answers the synchronising hello), the
    requests written, and how many times the link was opened."""
    written: list[bytes] = []
    opened: list[int] = []

    def open_link() -> ScriptedLink:
        opened.append(1)
        return ScriptedLink(steps, written)

    return (Transactions("mem://", lambda: 0.05, open_link, LineCodec(), LineWire()), written,
            opened)


def test_a_backend_of_a_link_a_codec_and_its_replies_meanings_gets_its_answers() -> None:
    """The line is synchronised first (its hello), then the request's reply is returned."""
    tx, written, _ = engine(["hi", "42"])
    assert tx.transact("read", "read", 1) == "42"
    assert written == [b"hello\n", b"read\n"]


def test_a_write_the_link_refused_was_not_sent() -> None:
    """A write the link failed to send is TransportError "not sent", never sent again."""
    tx, written, _ = engine(["hi", "fail-write"])
    with pytest.raises(TransportError, match=r"^the write was not sent: port mem:// failed"):
        tx.transact("write", "write", 0)
    assert written == [b"hello\n"]


def test_once_sent_without_an_outcome_the_failure_is_the_unknown_outcome() -> None:
    """A read that timed out and whose retry met a busy device is a DeviceTimeout, not busy."""
    tx, _, _ = engine(["hi", "silent", "BUSY"])
    with pytest.raises(DeviceTimeout) as info:
        tx.transact("read", "read", 1)
    assert str(info.value).startswith("no valid reply within 0.05 s; the retry failed: the "
                                      "device is busy (BUSY) (2 attempts, ")
    assert tx.timeouts == 1


def test_a_write_without_a_reply_is_sent_once_and_says_to_read_back() -> None:
    """A write's timeout is never retried, and says the write may or may not have happened."""
    tx, written, _ = engine(["hi", "silent", "42"])
    with pytest.raises(DeviceTimeout, match="the write may or may not have happened"):
        tx.transact("write", "write", 0)
    assert written == [b"hello\n", b"write\n"]


def test_busy_is_retried_and_refused_is_not() -> None:
    """A busy answer is sent again (reads), a refusal is final after one attempt."""
    tx, written, _ = engine(["hi", "BUSY", "7", "NO"])
    assert tx.transact("read", "read", 1) == "7"
    with pytest.raises(DeviceRefused, match=r"^the device refused it \(NO\)$"):
        tx.transact("read", "read", 1)
    assert written == [b"hello\n", b"read\n", b"read\n", b"read\n"]


def test_a_link_that_failed_after_sending_is_reply_lost_and_reopened() -> None:
    """The link failing after a request was written is ReplyLost; the next transaction opens
    the link again and synchronises before its request."""
    tx, written, opened = engine(["hi", "fail-after", "hi", "5"])
    with pytest.raises(ReplyLost, match=r"^port mem:// failed after the read was sent"):
        tx.transact("read", "read", 0)
    assert tx.transact("read", "read", 0) == "5"
    assert len(opened) == 2 and written[2:] == [b"hello\n", b"read\n"]
