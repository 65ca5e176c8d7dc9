"""Idempotency keys: a write sent again with the same key is answered, not run again.

Rules of this file:

* A key belongs to a device, in one of its reset epochs, and a session: the slot (scope,
  session name, key), where the scope is ``"ID@EPOCH"`` (:func:`key_scope`) of the device's
  :meth:`~regdev.Device.identity`: who the device says it is, and when it last started over.
  A device's epoch changes at every reset and restart, whatever the path (through regdev,
  another process, a power cycle), so a key stored before one is never found after it: a
  stored write is replayed only to the device it was applied to, not reset since. The gate
  takes the epoch before the write is sent (so a key is never stored in an epoch later than
  its write's), and asks the device again just before it answers a replay. A device that
  cannot say its epoch (scope ``"ID@"``) gets no replay: ``begin(..., replay=False)``; a key
  stored for it is refused ``idempotency-unconfirmed`` (:func:`unconfirmed`: neither run
  again, since the first attempt may have run, nor answered "done", since the device may have
  been reset since), with what the record says of the first attempt and when. Keys
  apply to tools that change the device; a read-only tool runs every time and its
  (well-formed) key is ignored.
* Where a key travels in each dialect is in ``_parse.py`` and ``docs/safety.md``. Explicit keys
  (canonical, MCP) are used as sent; a provider's tool call id is a key only when the policy
  says so (``tool_call_ids_as_keys``), prefixed with its dialect (``"openai:call_..."``, or
  ``"openai@<n>:<loop id>:call_..."`` for a call in a loop, so that two conversations' ids
  never meet), and an explicit key may not take those prefixes, so the two kinds never collide.
* The first call with a key reserves it. Once the call has *executed* (the device call started)
  its observation is stored under the key with the SHA-256 fingerprint of the tool name and the
  validated arguments, whatever the outcome, with three exceptions that release the key so the
  retry runs: ``device-timeout``, ``device-unavailable`` and ``device-busy``
  (``docs/safety.md`` says why). A call refused before it executed releases the key, so the
  next call with it runs.
* A later call with the key: the same fingerprint gets the stored observation marked as a
  replay, and nothing runs (without ``replay``, ``idempotency-unconfirmed``); another
  fingerprint is
  ``idempotency-conflict``; while the first call is still running, ``idempotency-in-progress``.
* Stored keys live in the audit database (table ``idempotency_keys``), inserted in the same
  transaction as the write's audit record and committed before the observation is returned,
  so an acknowledged write's key survives a crash. The table is append-only; the keys that can
  still match (of each device's last epoch, :data:`SELECT_CURRENT_KEYS`) are loaded into
  memory (about 250 bytes each) when the database is opened.
* A reset through regdev (``Gate.reset_device``, ``AuditLog.record_reset``) also ends the
  scope's keys on the host's side: they are never replayed again, and a call still running
  then is not stored under its key. The reset is a row of the append-only table
  ``device_resets``, so it outlives the process. This is what ends the keys of a device whose
  epoch does not change (one that breaks its promise); every other reset is seen by the
  device's own epoch.
"""

from __future__ import annotations

import hashlib
import threading
import time as _time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import msgspec

from ..core._json import decode_json
from ..core._observation import Observation, Refusal, refuse
from ..core._text import escape_text

__all__ = ["INSERT_KEY", "INSERT_RESET", "KEYS_SCHEMA", "PROVIDER_DIALECTS",
           "SELECT_CURRENT_KEYS", "SELECT_EPOCHS", "IdempotencyStore", "KeyRow", "Slot",
           "conflict", "fingerprint", "in_progress", "key_scope", "replayed", "unconfirmed"]

#: The table of stored keys and the table of device resets (created by the audit database).
KEYS_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
    device      TEXT NOT NULL,  -- the scope: 'ID@EPOCH', the device's id and reset epoch
    epoch       TEXT NOT NULL,  -- the scope's epoch on the host ('' before a reset by regdev)
    session     TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint BLOB NOT NULL,  -- SHA-256 of [tool, arguments] as sorted-key JSON
    observation TEXT NOT NULL,  -- the first observation's JSON, without id and replay
    time        REAL NOT NULL,  -- Unix time, seconds
    PRIMARY KEY (device, epoch, session, key)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS idempotency_keys_append_only_update
    BEFORE UPDATE ON idempotency_keys
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
CREATE TRIGGER IF NOT EXISTS idempotency_keys_append_only_delete
    BEFORE DELETE ON idempotency_keys
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
CREATE TABLE IF NOT EXISTS device_resets (
    id          INTEGER PRIMARY KEY,  -- append order
    device      TEXT NOT NULL,        -- the scope ('ID@EPOCH') of the device reset by regdev
    epoch       TEXT NOT NULL,        -- the epoch it began (random hex): keys of others are void
    time        REAL NOT NULL         -- Unix time, seconds
);
CREATE INDEX IF NOT EXISTS device_resets_by_device ON device_resets (device, id);
CREATE TRIGGER IF NOT EXISTS device_resets_append_only_update BEFORE UPDATE ON device_resets
    BEGIN SELECT RAISE(ABORT, 'device resets are append-only'); END;
CREATE TRIGGER IF NOT EXISTS device_resets_append_only_delete BEFORE DELETE ON device_resets
    BEGIN SELECT RAISE(ABORT, 'device resets are append-only'); END;
"""
#: The stored keys that can still match, the only ones loaded: those of each scope's current
#: host epoch (its last reset through regdev's, or '' when never reset), and of each device's
#: last reset epoch as the audit log saw it: the scope ``ID@EPOCH`` of the last record
#: (``calls``, append order, keyed or not: a read heard the epoch as surely as a keyed write)
#: from device ``ID`` that says an epoch. A device says a new epoch
#: at every reset and restart and never an old one again, so a key of an earlier epoch of the
#: same id can never match: loading it would only hold memory. The keys of a device that
#: cannot say its epoch (scope ``ID@``) are all loaded: they are never replayed, but a
#: different call with one is still ``idempotency-conflict``. Costs one pass over ``calls``
#: when the database is opened.
SELECT_CURRENT_KEYS = """
SELECT device, session, key, fingerprint, observation, time FROM idempotency_keys AS k
WHERE epoch = coalesce((SELECT epoch FROM device_resets AS r WHERE r.device = k.device
                        ORDER BY r.id DESC LIMIT 1), '')
  AND (substr(device, -1) = '@'
       OR device IN (SELECT c.device || '@' || c.device_epoch FROM calls AS c
                     WHERE c.id IN (SELECT max(id) FROM calls
                                    WHERE device IS NOT NULL AND device_epoch IS NOT NULL
                                    GROUP BY device)))
"""
#: Each device's current epoch: the epoch of its last reset.
SELECT_EPOCHS = """
SELECT device, epoch FROM device_resets
WHERE id IN (SELECT max(id) FROM device_resets GROUP BY device)
"""
INSERT_RESET = "INSERT INTO device_resets (device, epoch, time) VALUES (?, ?, ?)"


class KeyRow(NamedTuple):
    """One stored key as inserted: the columns of ``idempotency_keys``, in order."""

    device: str
    epoch: str
    session: str
    key: str
    fingerprint: bytes
    observation: str
    time: float


INSERT_KEY = (f"INSERT OR IGNORE INTO idempotency_keys ({', '.join(KeyRow._fields)}) "
              f"VALUES ({', '.join('?' * len(KeyRow._fields))})")

#: The dialects whose tool call id can be a key (``Policy.tool_call_ids_as_keys``); such a key
#: is ``"<dialect>:<id>"`` (or ``"<dialect>@..."`` in a loop), a form an explicit key may not
#: take.
PROVIDER_DIALECTS = ("openai", "anthropic")

#: Where a key lives: (scope, session name, key); the scope is :func:`key_scope`'s.
Slot = tuple[str, str, str]


def key_scope(device: str, epoch: str | None) -> str:
    """The scope of a device's keys in one of its reset epochs: ``"ID@EPOCH"``, or ``"ID@"``
    for a device that cannot say its epoch (whose keys are never replayed). An epoch holds no
    ``@``, so the last ``@`` splits the two."""
    return f"{device}@{epoch or ''}"

_encode_sorted = msgspec.json.Encoder(order="sorted", decimal_format="number").encode


def fingerprint(tool: str, arguments: Mapping[str, Any]) -> bytes:
    """SHA-256 (32 bytes) of ``[tool, arguments]`` as JSON with sorted keys."""
    return hashlib.sha256(_encode_sorted([tool, arguments])).digest()


class IdempotencyStore:
    """The keys of one audit database, in memory, with the calls still running. Thread-safe.

    Args:
        entries: stored keys that can match, as ``(device, session, key, fingerprint,
            observation JSON, time)`` rows (:data:`SELECT_CURRENT_KEYS`; time in Unix
            seconds).
        epochs: each device's current epoch (:data:`SELECT_EPOCHS`); a device not in it has
            never been reset through regdev (epoch ``""``).
    """

    def __init__(self, entries: Iterable[tuple[str, str, str, bytes, str, float]] = (),
                 epochs: Mapping[str, str] | None = None) -> None:
        self._epochs: dict[str, str] = dict(epochs or {})
        #: Stored keys: the call's fingerprint, its observation JSON, when it arrived.
        self._done: dict[Slot, tuple[bytes, str, float]] = {
            (device, session, key): (bytes(print_), observation, float(time))
            for device, session, key, print_, observation, time in entries
        }
        #: Reserved keys: the call's fingerprint, and its device's epoch when reserved.
        self._running: dict[Slot, tuple[bytes, str]] = {}
        self._lock = threading.Lock()

    def begin(self, slot: Slot, print_: bytes, *,
              replay: bool = True) -> Observation | Refusal | None:
        """Look the key up for a call with fingerprint ``print_``, reserving it when new.

        Args:
            slot: the key's slot.
            print_: the call's :func:`fingerprint`.
            replay: False when the stored observation may not be replayed (the device cannot
                say it was not reset since): a key stored for the same call is refused
                ``idempotency-unconfirmed`` (:func:`unconfirmed`).

        Returns:
            None: the key is new and now reserved (call :meth:`complete` or
            :meth:`release`).
            An :class:`Observation`: the stored one, marked as a replay (``id`` unset).
            A :class:`Refusal`: ``idempotency-conflict``, ``idempotency-in-progress`` or
            ``idempotency-unconfirmed``.
        """
        with self._lock:
            stored = self._done.get(slot)
            if stored is None:
                running = self._running.get(slot)
                if running is None:
                    self._running[slot] = (print_, self._epochs.get(slot[0], ""))
                    return None
                if running[0] == print_:
                    return in_progress(slot[2])
                return conflict(slot[2])
        if stored[0] != print_:
            return conflict(slot[2])
        if not replay:
            return unconfirmed(slot[2], stored[1], stored[2])
        return replayed(stored[1])

    def key_row(self, slot: Slot, print_: bytes, observation: str, time: float) -> KeyRow:
        """The row that stores the key reserved in ``slot``, in the epoch it was reserved in.

        Raises:
            KeyError: the key in ``slot`` is not reserved.
        """
        with self._lock:
            epoch = self._running[slot][1]
        device, session, key = slot
        return KeyRow(device, epoch, session, key, print_, observation, time)

    def complete(self, slot: Slot, print_: bytes, observation: str,
                 time: float | None = None) -> None:
        """Store the reserved key's observation JSON (after its audit record is committed),
        with the Unix time its call arrived (None: now); not when its device was reset since
        the key was reserved (its epoch ended)."""
        with self._lock:
            running = self._running.pop(slot, None)
            if running is not None and running[1] == self._epochs.get(slot[0], ""):
                self._done[slot] = (print_, observation,
                                    _time.time() if time is None else time)

    def release(self, slot: Slot) -> None:
        """Drop a reservation whose call did not run: the key can be used again."""
        with self._lock:
            self._running.pop(slot, None)

    def end_epoch(self, device: str) -> str:
        """Begin a new epoch of ``device``'s keys, after it was reset: no key stored for it so
        far is replayed again, nor stored when its call is still running. O(stored keys).

        Returns:
            The new epoch, 32 random hex digits.
        """
        epoch = uuid.uuid4().hex
        with self._lock:
            self._epochs[device] = epoch
            for slot in [slot for slot in self._done if slot[0] == device]:
                del self._done[slot]
        return epoch

    def get(self, slot: Slot) -> str | None:
        """The stored observation JSON for the key in ``slot``, or None."""
        with self._lock:
            stored = self._done.get(slot)
        return stored[1] if stored else None

    def __len__(self) -> int:
        """The number of stored keys (of the current epochs)."""
        return len(self._done)


def _show(key: str) -> str:
    return '"' + escape_text(key, 40) + '"'


def replayed(stored: str) -> Observation:
    """The observation stored under a key (its JSON), marked as a replay (``id`` unset);
    numbers exact, as the gate decoded the call: a replay gives back the first call's."""
    observation = Observation.from_dict(decode_json(stored))
    return Observation(observation.tool, observation.result, observation.refusal, replay=True)


def in_progress(key: str) -> Refusal:
    """The refusal of a call whose key a call still running holds."""
    return refuse("idempotency-in-progress",
                  f"a call with idempotency key {_show(key)} is still running; send it again "
                  "shortly to get its observation")


def unconfirmed(key: str, stored: str, time: float) -> Refusal:
    """The refusal of a call whose key was stored for the same call on a device that cannot
    say its reset epoch: it is not run again (its first attempt may have run) nor answered
    from the record (the device may have been reset since, undoing it). The message says
    what the record says of the first attempt (``stored``: its observation JSON), when it
    arrived (``time``, Unix seconds, shown in UTC), and what to do."""
    first = Observation.from_dict(decode_json(stored))
    if first.ok:
        said = "ran and the device acknowledged it"
    elif first.code == "outcome-unknown":
        said = "was sent and its outcome is unknown (outcome-unknown)"
    else:
        said = f"ended {first.code}"
    when = _time.strftime("%Y-%m-%d %H:%M:%S UTC", _time.gmtime(time))
    return refuse("idempotency-unconfirmed",
                  f"idempotency key {_show(key)} was used for this call at {when}, and the "
                  f"record says its first attempt {said}; this device cannot say whether it "
                  "was reset since, so the call is neither run again nor answered from the "
                  "record: read the register back, then send the call with a new key if it "
                  "must run")


def conflict(key: str) -> Refusal:
    """The refusal of a call whose key was used for a different call."""
    return refuse("idempotency-conflict",
                  f"idempotency key {_show(key)} was already used for a different call; "
                  "send each distinct call with a new key")
