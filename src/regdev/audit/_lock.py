"""The audit writer's lock: one writer a database.

Each :class:`~regdev.audit._writer.AuditLog` indexes the idempotency keys in memory when it
opens the database, so a second writer would not see the first's keys nor its device resets,
and would replay a stale key. An AuditLog holds an exclusive advisory lock
(``flock(LOCK_EX | LOCK_NB)``) on the file ``<database>.lock`` beside it from its opening to
its close; a second AuditLog, in another process or in this one (the lock belongs to an open
file description, not to a process), gets :class:`~regdev.AuditInUse`. The operating system
releases the lock when the holder dies, however it dies. A path that cannot hold an audit log
is refused without a lock file of this writer's making left beside it
(:func:`check_database_file` before the lock; the lock file removed, still locked, after).
Readers (:mod:`regdev.audit._reader`) take no lock. Where ``fcntl`` does not exist (Windows),
there is no lock: one writer a database is then up to the user.
"""

from __future__ import annotations

import os
import stat
import sys
from contextlib import suppress
from pathlib import Path

from ..core._errors import AuditError, AuditInUse

if sys.platform != "win32":
    import fcntl


def lock_path(path: Path) -> Path:
    """The writer's lock file of the audit database at ``path``: ``<path>.lock``, beside the
    file ``path`` resolves to, so that two names of one database (a symlink) take one lock.
    (A hard link is not seen: give every writer the same name.)"""
    real = Path(os.path.realpath(path))
    return real.with_name(real.name + ".lock")


def take_lock(path: Path) -> tuple[int | None, bool]:
    """Take the writer's lock of the audit database at ``path`` (its folder exists).

    Returns:
        The lock file's descriptor (closing it releases the lock), or None where there is no
        ``fcntl`` (no lock); and whether this call created the lock file (then
        :func:`_unlock` removes it again for a database that is refused).

    Raises:
        AuditInUse: another writer holds it; the message names its pid and command line.
        OSError: the lock file cannot be opened or written.
    """
    if sys.platform == "win32":
        return None, False
    where = lock_path(path)
    while True:
        try:
            fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            created = True
        except FileExistsError:
            try:
                fd = os.open(where, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:  # removed meanwhile by a writer that was refused
                continue
            created = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            pid, _, command = holder.partition(" ")
            if pid == str(os.getpid()):
                who = f"another AuditLog in this process (pid {pid}: {command})"
            elif pid:
                who = f"another regdev process (pid {pid}: {command})"
            else:
                who = "another regdev process"
            raise AuditInUse(f"the audit database {path} is in use by {who}", holder) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, where):
            break
        # A writer that was refused removed the file while holding its lock, after this one
        # opened it: a lock on that file would lock nothing. Take the new one.
        os.close(fd)
    try:
        command = " ".join([os.path.basename(sys.argv[0] or sys.executable), *sys.argv[1:]])
        text = f"{os.getpid()} {command[:200]}\n".encode("utf-8", "replace")
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except BaseException:
        release_lock(fd, where if created else None)
        raise
    return fd, created


def _same_file(fd: int, where: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``where``."""
    try:
        now = os.stat(where)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def release_lock(fd: int | None, remove: Path | None = None) -> None:
    """Release the writer's lock taken by :func:`_lock` (its holder line is cleared first);
    with ``remove``, the lock file this writer created is removed first, while it still holds
    the lock (a writer that opened it meanwhile sees it gone and takes a new one)."""
    if fd is not None:
        if remove is not None:
            with suppress(OSError):
                os.unlink(remove)
        with suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)


#: The first 16 bytes of every SQLite 3 database file ("Database File Format", sqlite.org).
_SQLITE_HEADER = b"SQLite format 3\x00"


def check_database_file(path: Path) -> None:
    """AuditError, before any lock file is made beside it, when ``path`` exists and cannot
    be an audit database: not a regular file (a folder, ``/dev/null``, a pipe), or a file
    with content that is not a SQLite database. (An empty file becomes a new audit log.)"""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(status.st_mode):
        raise AuditError(f"{path} is a directory, not a database file")
    if not stat.S_ISREG(status.st_mode):
        raise AuditError(f"cannot open the audit database {path}: it is not a regular file "
                         "(a device, a pipe or a socket)")
    if status.st_size:
        with open(path, "rb") as file:
            header = file.read(len(_SQLITE_HEADER))
        if header != _SQLITE_HEADER:
            raise AuditError(f"cannot open the audit database {path}: it is not a SQLite "
                             "database, so not a regdev audit log")

