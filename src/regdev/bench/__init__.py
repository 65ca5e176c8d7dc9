"""The benchmark harness of ``regdev bench`` and the scripts in ``benchmarks/``: regdev's gate
against the peers (pydantic, msgspec, jsonschema, jsonschema-rs, fastjsonschema) on the same
calls, and the one judgement of when a run's figures mean nothing. It measures the gate from
outside, so the gate never imports it.

The package is callable: ``regdev.bench(tools, ...)`` is :func:`measure` (typed code may call
``regdev.bench.measure`` for the same), and :func:`compare` checks two runs for a regression.
Both import the peers only when called.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._api import Comparison, compare, measure
    from ._bench import BenchResult, Case

__all__ = ["BenchResult", "Case", "Comparison", "compare", "measure"]

_LAZY = {"measure": "_api", "compare": "_api", "Comparison": "_api", "BenchResult": "_bench",
         "Case": "_bench"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = __import__(f"{__name__}.{_LAZY[name]}", fromlist=[name])
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """``regdev.bench(...)`` calls :func:`measure`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ._api import measure  # noqa: PLC0415 - imports the peers

        return measure(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
