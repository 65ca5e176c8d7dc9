"""Idempotency keys: a write sent again with the same key is answered, not run again.

Rules of this file:

* A key belongs to a session: the pair (session name, key). Keys apply to tools that change the
  device; a read-only tool runs every time and its key, if any, is ignored.
* Where a key travels in each dialect is in ``_parse.py`` and ``docs/safety.md``.
* The first call with a key reserves it. When the call ran on the device and ended with a
  definite outcome (success, ``device-error``, ``output-too-large``), its observation is stored
  under the key with the SHA-256 fingerprint of the tool name and the validated arguments. A
  call without a definite outcome (refused before the device, ``device-timeout``, an internal
  or audit error) releases the key, so the next call with it runs.
* A later call with the key: the same fingerprint gets the stored observation marked as a
  replay, and nothing runs; another fingerprint is ``idempotency-conflict``; while the first
  call is still running, ``idempotency-in-progress``.
* Stored keys live in the audit database (table ``idempotency_keys``), inserted in the same
  transaction as the write's audit record and committed before the observation is returned,
  so an acknowledged write's key survives a crash. The table is append-only; every key is
  loaded into memory (about 200 bytes each) when the database is opened.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ._observation import Observation, Refusal
from ._schema import escape_text

__all__ = ["KEYS_SCHEMA", "STORED_CODES", "IdempotencyStore", "fingerprint"]

#: The table of stored keys (created by the audit database).
KEYS_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
    session     TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint BLOB NOT NULL,  -- SHA-256 of [tool, arguments] as sorted-key JSON
    observation TEXT NOT NULL,  -- the first observation's JSON, without id and replay
    time        REAL NOT NULL,  -- Unix time, seconds
    PRIMARY KEY (session, key)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS idempotency_keys_append_only_update
    BEFORE UPDATE ON idempotency_keys
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
CREATE TRIGGER IF NOT EXISTS idempotency_keys_append_only_delete
    BEFORE DELETE ON idempotency_keys
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
"""
INSERT_KEY = ("INSERT OR IGNORE INTO idempotency_keys "
              "(session, key, fingerprint, observation, time) VALUES (?, ?, ?, ?, ?)")

#: Verdict codes of a definite outcome, stored under the key (None: success).
STORED_CODES = frozenset({None, "device-error", "output-too-large"})

_encode_sorted = msgspec.json.Encoder(order="sorted", decimal_format="number").encode


def fingerprint(tool: str, arguments: Mapping[str, Any]) -> bytes:
    """SHA-256 (32 bytes) of ``[tool, arguments]`` as JSON with sorted keys."""
    return hashlib.sha256(_encode_sorted([tool, arguments])).digest()


class IdempotencyStore:
    """The keys of one audit database, in memory, with the calls still running. Thread-safe.

    Args:
        entries: stored keys as ``(session, key, fingerprint, observation JSON)`` rows.
    """

    def __init__(self, entries: Iterable[tuple[str, str, bytes, str]] = ()) -> None:
        self._done: dict[tuple[str, str], tuple[bytes, str]] = {
            (session, key): (bytes(print_), observation)
            for session, key, print_, observation in entries
        }
        self._running: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def begin(self, session: str, key: str, print_: bytes) -> Observation | Refusal | None:
        """Look the key up for a call with fingerprint ``print_``, reserving it when new.

        Returns:
            None: the key is new and now reserved (call :meth:`complete` or :meth:`release`).
            An :class:`Observation`: the stored one, marked as a replay (``id`` unset).
            A :class:`Refusal`: ``idempotency-conflict`` or ``idempotency-in-progress``.
        """
        slot = (session, key)
        with self._lock:
            stored = self._done.get(slot)
            if stored is None:
                running = self._running.get(slot)
                if running is None:
                    self._running[slot] = print_
                    return None
                if running == print_:
                    return Refusal(
                        "authorize", "idempotency-in-progress",
                        f"a call with idempotency key {_show(key)} is still running; send it "
                        "again shortly to get its observation")
                return _conflict(key)
        if stored[0] != print_:
            return _conflict(key)
        observation = Observation.from_dict(msgspec.json.decode(stored[1]))
        return Observation(observation.ok, observation.tool, observation.result,
                           observation.refusal, replay=True)

    def complete(self, session: str, key: str, print_: bytes, observation: str) -> None:
        """Store the reserved key's observation JSON (after its audit record is committed)."""
        with self._lock:
            self._running.pop((session, key), None)
            self._done[(session, key)] = (print_, observation)

    def release(self, session: str, key: str) -> None:
        """Drop a reservation whose call had no definite outcome: the key can be used again."""
        with self._lock:
            self._running.pop((session, key), None)

    def get(self, session: str, key: str) -> str | None:
        """The stored observation JSON for ``key`` in ``session``, or None."""
        with self._lock:
            stored = self._done.get((session, key))
        return stored[1] if stored else None

    def __len__(self) -> int:
        """The number of stored keys."""
        return len(self._done)


def _show(key: str) -> str:
    return '"' + escape_text(key, 40) + '"'


def _conflict(key: str) -> Refusal:
    return Refusal("authorize", "idempotency-conflict",
                   f"idempotency key {_show(key)} was already used for a different call; "
                   "send each distinct call with a new key")
