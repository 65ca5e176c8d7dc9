"""What telemetry costs the gate: off against the gate before telemetry, and on against off.

``Gate.handle`` on a gate without a policy or an audit log (an in-process ``RegisterFile``),
on the rows of ``gate_pipeline.py`` (a valid write and read, three common refusals). Run::

    .venv/bin/python benchmarks/telemetry_cost.py [--mode off|on] [--rounds N]
        [--batch-ms MS] [--wall] [--json]

``--mode off`` (the default): regdev is this tree's gate with telemetry off (no ``OTEL_*``
exporter named: ``regdev.core._telemetry.current`` is None); the anchor is the gate of the
commit before the one that added ``core/_telemetry.py`` (HEAD while that is not committed), its
``src/regdev`` taken from git into a temporary folder and imported as ``regdev_base``, so that
both run in this one process, batches interleaved. Goal: at most 1.02x. After the table, the
Python bytecodes one call runs on each side (``sys.settrace`` opcode events): a count that no
load on the machine changes, for when the timings' spread is wider than the goal.

``--mode on``: regdev is this tree's gate with telemetry on, into the OpenTelemetry SDK (a
``TracerProvider`` with a ``BatchSpanProcessor`` and a ``MeterProvider`` with a periodic reader,
each into an exporter that drops what it is given, so the figure is the SDK's and regdev's
work on the calling thread, not a network's); the anchor is the same gate with telemetry off.
The added cost per call (regdev less anchor, in ns) is printed after the table. No goal: it
is measured and stated (``docs/observability.md``). Needs the ``otel`` extra.

Not a test: nothing asserts a time.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

from _compare import Goal, compare, options
from _script import need
from gate_pipeline import CASES
from regdev import Gate
from regdev.bench._bench import Contender
from regdev.core import _telemetry

ROOT = Path(__file__).resolve().parents[1]
TELEMETRY = "src/regdev/core/_telemetry.py"


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                          check=True).stdout


def default_base() -> str:
    """The commit before the one that added the telemetry module."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", TELEMETRY).split()
    if not added:  # not committed yet: the tree's own HEAD is today's gate
        return "HEAD"
    return f"{added[-1].decode()}^"


def base_gate(rev: str, folder: Path) -> type[Any]:
    """The ``Gate`` class of ``rev``, imported as package ``regdev_base`` from ``folder``."""
    archive = _git("archive", "--format=tar", rev, "src/regdev")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "src" / "regdev").rename(folder / "regdev_base")
    sys.path.insert(0, str(folder))
    module = importlib.import_module("regdev_base.gate._gate")
    return module.Gate  # type: ignore[no-any-return]


def bytecodes(call: Callable[[], object]) -> int:
    """The Python bytecodes one ``call()`` runs (every frame's; C code is not counted)."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count - 1  # the trace's own return to this function


def telemetry_on() -> _telemetry.Telemetry:
    """Telemetry into the SDK, every span and metric dropped by its exporter."""
    # the otel extra, imported once need() found it
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import (  # noqa: PLC0415
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    class DropMetrics(MetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float = 10_000,
                   **kwargs: Any) -> MetricExportResult:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            pass

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(Drop()))
    meter = MeterProvider(metric_readers=[PeriodicExportingMetricReader(
        DropMetrics(), export_interval_millis=1000)])
    telemetry = _telemetry.install(tracer, meter)
    _telemetry.uninstall()
    return telemetry


def main() -> None:
    args = options(__doc__.splitlines()[0], choices={
        "--mode": (("off", "on"), "off: this gate, telemetry off, against the gate before "
                                  "telemetry; on: telemetry on against off")})
    if args.mode == "off":
        _off(args)
    else:
        need("otel", "opentelemetry.sdk")
        _on(args)


def _off(args: Any) -> None:
    base = default_base()
    with tempfile.TemporaryDirectory() as folder:
        old = base_gate(base, Path(folder))().handle
        _telemetry.uninstall()
        new = Gate().handle
        compare("Gate.handle, telemetry off, against the gate before telemetry",
                Contender("regdev", "Gate.handle of this tree, telemetry off", raw=True,
                          on_refusal="observation", run=new, valid=lambda raw: new(raw).ok),
                Contender("anchor", f"Gate.handle of {base}", raw=True,
                          on_refusal="observation", run=old, valid=lambda raw: old(raw).ok),
                CASES, goals={case.title: Goal(at_most=1.02) for case in CASES}, args=args)
        if not args.json:
            counted = [(case.title, bytecodes(lambda raw=case.raw: new(raw)),
                        bytecodes(lambda raw=case.raw: old(raw))) for case in CASES]
            print("  bytecodes per call, this tree / before: " + ", ".join(
                f"{title} {ours} / {theirs} ({ours / theirs:.3f}x)"
                for title, ours, theirs in counted))


def _on(args: Any) -> None:
    telemetry = telemetry_on()
    gate = Gate()
    handle = gate.handle

    def traced(raw: str) -> Any:
        _telemetry.current = telemetry
        return handle(raw)

    def plain(raw: str) -> Any:
        _telemetry.current = None
        return handle(raw)

    check: Callable[[str], bool] = lambda raw: handle(raw).ok  # noqa: E731
    result = compare("Gate.handle, telemetry on (the SDK, exporters dropping) against off",
                     Contender("regdev", "Gate.handle, telemetry on", raw=True,
                               on_refusal="observation", run=traced, valid=check),
                     Contender("anchor", "Gate.handle, telemetry off", raw=True,
                               on_refusal="observation", run=plain, valid=check),
                     CASES, goals={}, args=args)
    _telemetry.current = None
    ours, theirs = result.rows
    if not args.json:
        print("  added per call, ns: " + ", ".join(
            f"{case.title} {ours['ns'][case.title] - theirs['ns'][case.title]:.0f}"
            for case in CASES if case.title in ours["ns"]))


if __name__ == "__main__":
    main()
