"""What the framework adapters share: the run's loop id and steps, the proposer's label, the
import of an extra, the approval handed on."""

from __future__ import annotations

import importlib
import threading
import uuid
import weakref
from collections import OrderedDict
from types import ModuleType
from typing import Any

from ..core._text import escape_text
from ..gate._policy import Approval, ApprovalRequest, Approver

__all__ = ["Runs", "approver", "label", "require"]

#: The most runs whose step counts an adapter keeps (the oldest are forgotten first).
MAX_RUNS = 4096


def require(module: str, extra: str) -> ModuleType:
    """Import a framework, or raise ImportError naming the extra that installs it.

    Raises:
        ImportError: the framework is not installed, with the install command.
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"regdev.integrations needs `{module}` for this adapter: "
                          f"pip install 'regdev[{extra}]'") from error


def label(framework: str, model: object) -> str:
    """The proposer of a framework's call, ``FRAMEWORK:MODEL`` (``unknown`` when the model
    cannot be told), escaped and at most 200 characters."""
    name = model if isinstance(model, str) else (
        getattr(model, "model_name", None) or getattr(model, "model", None)
        or (type(model).__name__ if model is not None else None))
    if not isinstance(name, str) or not name:
        name = "unknown"
    return escape_text(f"{framework}:{name}", 200)


class Runs:
    """The loop id of each framework run (held by an object the run keeps for its life, or by
    the framework's own run id) and the step of each call in it, 1, 2, ... in the order the
    calls reach the gate. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: OrderedDict[str, int] = OrderedDict()
        #: The proposer last named in each run (for a call whose context names no model).
        self.named: dict[str, str] = {}
        self._ids: dict[int, tuple[weakref.ref[Any], str]] = {}

    def loop_of(self, holder: object) -> str:
        """A loop id for the run ``holder`` belongs to: made once per holder object (held
        weakly, by identity: a holder need not be hashable)."""
        with self._lock:
            key = id(holder)
            found = self._ids.get(key)
            if found is not None and found[0]() is holder:
                return found[1]
            loop_id = uuid.uuid4().hex
            self._ids[key] = (weakref.ref(holder), loop_id)
            weakref.finalize(holder, self._forget, key, loop_id)
            return loop_id

    def _forget(self, key: int, loop_id: str) -> None:
        with self._lock:
            if self._ids.get(key, (None, ""))[1] == loop_id:
                del self._ids[key]

    def next_step(self, loop_id: str) -> int:
        """The step of the next call in ``loop_id``, from 1."""
        with self._lock:
            step = self._steps.pop(loop_id, 0) + 1
            self._steps[loop_id] = step
            while len(self._steps) > MAX_RUNS:
                self.named.pop(self._steps.popitem(last=False)[0], None)
            return step


def approver(framework: str, approved: bool | None) -> Approver:
    """The approval hook of one call whose write the framework put to a person: their answer
    (None: not asked, or not answered, which denies)."""

    def answer(request: ApprovalRequest) -> Approval:
        if approved is True:
            return Approval(True, approver=f"{framework}:person", via=framework)
        return Approval(False, via=framework,
                        reason=f"not approved through {framework}'s human-in-the-loop step")

    return answer
