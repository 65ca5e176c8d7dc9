"""Telemetry: OpenTelemetry traces and metrics of every tool call, off unless asked for.

Rules of this file:

* The one place regdev speaks to OpenTelemetry. The gate, the audit log and the agents call
  it through :data:`current`: None when telemetry is off, a :class:`Telemetry` when it is on.
  Off, a caller pays one test of that module attribute per call, and nothing here imports
  ``opentelemetry``; only :func:`from_environment` (once a process) and :func:`install` do,
  and only when telemetry is asked for.
* Switched on by the standard environment variables only (the OpenTelemetry SDK's
  "Environment Variable Specification"): ``OTEL_TRACES_EXPORTER`` and
  ``OTEL_METRICS_EXPORTER`` name the exporters of each signal (``otlp``, ``console``;
  ``none`` or unset: that signal is off); ``OTEL_SDK_DISABLED=true`` turns both off whatever
  they say. Unlike the SDK, whose default exporter is ``otlp``, regdev exports nothing unless
  an exporter is named: an install with the ``otel`` extra does not start sending spans
  anywhere by itself. Everything else (``OTEL_EXPORTER_OTLP_ENDPOINT``,
  ``OTEL_EXPORTER_OTLP_PROTOCOL``, headers, ``OTEL_SERVICE_NAME``,
  ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, ``OTEL_PROPAGATORS``,
  ``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_BSP_*``) is read by the SDK and its exporters.
* Names are those of the OpenTelemetry semantic conventions for MCP and GenAI (the span
  ``tools/call {tool}``, ``mcp.method.name``, ``gen_ai.tool.name``, ``mcp.session.id``,
  ``jsonrpc.request.id``, ``error.type``, the metrics ``mcp.server.operation.duration`` and
  ``mcp.client.operation.duration``); regdev's own are under ``regdev.``
  (``docs/observability.md`` lists them all).
* A span's name carries a tool name only when it is one of the gate's tools (low
  cardinality, as the conventions ask); the model's own text goes in attributes only, and
  metrics name only tools the gate has.
* Nothing here raises into a call: a failure of the SDK or of an exporter is the SDK's to log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the SDK's types, for mypy only: nothing is imported when telemetry is off
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["CallSpan", "Incoming", "Telemetry", "current", "from_environment", "install",
           "uninstall"]

logger = logging.getLogger("regdev")

#: The telemetry in force: None while it is off (the default).
current: Telemetry | None = None
_configured = False
_lock = threading.Lock()

#: What the ``otel`` extra installs; named when the SDK is missing.
INSTALL = "pip install 'regdev[otel]'"
#: The instrumentation scope's name (the tracer's and the meter's).
SCOPE = "regdev"
#: Buckets of the duration histograms, in seconds, as the MCP conventions advise for
#: ``mcp.server.operation.duration``.
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0,
                    300.0)
#: Buckets of the device and commit histograms, in seconds: a register access or a commit
#: takes microseconds in process, milliseconds over a wire.
FAST_BUCKETS = (0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)


@dataclass(frozen=True, slots=True)
class Incoming:
    """What the transport knows of one ``tools/call`` request, for its span.

    Attributes:
        carrier: the W3C Trace Context the caller sent (``traceparent``, ``tracestate``,
            ``baggage``: the request's ``params._meta`` first, else the HTTP headers), by
            lowercase name; empty when none.
        request_id: the JSON-RPC request id, as text (``jsonrpc.request.id``), or None.
        session_id: the MCP session id (``Mcp-Session-Id``), or None.
        transport: ``pipe`` (stdio) or ``tcp`` (HTTP), for ``network.transport``.
        protocol_version: the MCP protocol version, when known.
    """

    carrier: Mapping[str, str]
    request_id: str | None = None
    session_id: str | None = None
    transport: str | None = None
    protocol_version: str | None = None


def carrier_of(*sources: object) -> dict[str, str]:
    """The trace context keys (``traceparent``, ``tracestate``, ``baggage``) of the first
    source that holds a ``traceparent``: each a mapping (``params._meta``, HTTP headers by
    lowercase name) or None. Values that are not strings are left out. Never raises."""
    for source in sources:
        if isinstance(source, Mapping) and type(source.get("traceparent")) is str:
            return {name: source[name] for name in ("traceparent", "tracestate", "baggage")
                    if type(source.get(name)) is str}
    return {}


def _exporters(env: Mapping[str, str], name: str) -> list[str]:
    """The exporters ``env[name]`` names (comma-separated, lowercase), without ``none``."""
    return [part for part in (p.strip().lower() for p in env.get(name, "").split(","))
            if part and part != "none"]


def enabled(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for telemetry: an exporter named in ``OTEL_TRACES_EXPORTER`` or
    ``OTEL_METRICS_EXPORTER``, and ``OTEL_SDK_DISABLED`` not ``true``."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(_exporters(env, "OTEL_TRACES_EXPORTER") or _exporters(env, "OTEL_METRICS_EXPORTER"))


def from_environment() -> Telemetry | None:
    """Set telemetry up from the environment, once a process (later calls return the same),
    and return it: None when the environment does not ask for it (nothing is imported), or
    when the ``otel`` extra is missing (logged once, naming the install command), or the SDK
    refused the variables (logged once). Never raises."""
    global current, _configured
    if _configured:
        return current
    with _lock:
        if not _configured:
            if current is None and enabled(os.environ):
                try:
                    current = _from(os.environ)
                except Exception as error:  # a value the SDK refuses: the calls run untraced
                    logger.warning("telemetry is off: the OpenTelemetry SDK could not be set "
                                   "up from the OTEL_* variables: %s", error)
            _configured = True
    return current


def _from(env: Mapping[str, str]) -> Telemetry | None:
    """The SDK's providers with the exporters ``env`` names (see the module docstring)."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            MetricExporter,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        logger.warning("OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER is set but the "
                       "OpenTelemetry SDK is not installed, so regdev exports no telemetry: "
                       "%s", INSTALL)
        return None
    resource = Resource.create()
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""):
        resource = resource.merge(Resource({SERVICE_NAME: "regdev"}))
    tracer_provider: Any = None
    span_exporters: list[SpanExporter] = []
    for name in _exporters(env, "OTEL_TRACES_EXPORTER"):
        if name == "console":
            span_exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            if _otlp_http(env, "TRACES"):
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
                span_exporters.append(OTLPSpanExporter())
        else:
            _unknown("OTEL_TRACES_EXPORTER", name)
    if span_exporters:
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            sdk_tracer = SdkTracerProvider(resource=resource)
            for exporter in span_exporters:
                sdk_tracer.add_span_processor(BatchSpanProcessor(exporter))
            trace.set_tracer_provider(sdk_tracer)
        tracer_provider = trace.get_tracer_provider()  # the host program's, when it set one
    meter_provider: Any = None
    metric_exporters: list[MetricExporter] = []
    for name in _exporters(env, "OTEL_METRICS_EXPORTER"):
        if name == "console":
            metric_exporters.append(ConsoleMetricExporter())
        elif name == "otlp":
            if _otlp_http(env, "METRICS"):
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                    OTLPMetricExporter,
                )
                metric_exporters.append(OTLPMetricExporter())
        else:
            _unknown("OTEL_METRICS_EXPORTER", name)
    if metric_exporters:
        if type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider":
            metrics.set_meter_provider(SdkMeterProvider(
                resource=resource,
                metric_readers=[PeriodicExportingMetricReader(e) for e in metric_exporters]))
        meter_provider = metrics.get_meter_provider()
    if tracer_provider is None and meter_provider is None:
        return None
    return Telemetry(tracer_provider, meter_provider)


def _otlp_http(env: Mapping[str, str], signal: str) -> bool:
    """Whether the OTLP protocol asked for the signal is HTTP (``http/protobuf``, the
    default); else logged (the ``otel`` extra carries the HTTP exporter only)."""
    protocol = (env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
    if protocol == "http/protobuf":
        return True
    logger.warning("regdev exports OTLP over http/protobuf only, not %s: its %s are not "
                   "exported (set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and the endpoint "
                   "of the collector's OTLP/HTTP receiver, port 4318)", protocol,
                   signal.lower())
    return False


def _unknown(variable: str, name: str) -> None:
    logger.warning("%s names exporter %r, which regdev does not know (otlp, console, none): "
                   "ignored", variable, name)


def install(tracer_provider: TracerProvider | None = None,
            meter_provider: MeterProvider | None = None) -> Telemetry:
    """Turn telemetry on with these providers (tests; a program that configures the SDK
    itself), whatever the environment says; None takes the global provider of that signal.

    Returns:
        The :class:`Telemetry` now in :data:`current`.

    Raises:
        ImportError: the OpenTelemetry API is not installed (``pip install 'regdev[otel]'``).
    """
    global current, _configured
    from opentelemetry import metrics, trace
    with _lock:
        current = Telemetry(tracer_provider or trace.get_tracer_provider(),
                            meter_provider or metrics.get_meter_provider())
        _configured = True
    return current


def uninstall() -> None:
    """Turn telemetry off (the providers are the caller's to shut down)."""
    global current, _configured
    with _lock:
        current, _configured = None, True


class CallSpan:
    """The server span of one tool call through the gate, from its arrival to its record.

    Attributes:
        trace_id: the span's trace id, 32 lowercase hex digits (the audit record's
            ``trace_id``), or None when the span is not recorded (not sampled).
    """

    __slots__ = ("_device", "_measured", "_start", "_telemetry", "span", "trace_id")

    def __bool__(self) -> Literal[True]:  # so that ``if traced:`` types well
        return True

    def __init__(self, telemetry: Telemetry, span: Span, start: int,
                 measured: dict[str, Any]) -> None:
        self._telemetry = telemetry
        self.span = span
        self._start = start
        self._measured = measured  # the duration's attributes known at the start
        self._device: tuple[int, int] | None = None  # its time on the device, Unix ns
        context = span.get_span_context()
        self.trace_id = format(context.trace_id, "032x") if context.is_valid else None

    def timed(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """``handler`` (a tool's handler), its time on the device kept for :meth:`end`'s
        child span ``device {tool}`` and the ``regdev.device.transaction.duration``
        histogram."""
        def timed(device: Any, arguments: Any) -> Any:
            start = time.time_ns()
            try:
                return handler(device, arguments)
            finally:
                self._device = (start, time.time_ns())
        return timed

    def end(self, facts: Mapping[str, Any], *, tool: str | None, known: bool,
            stage: str | None, code: str | None, message: str | None,
            device: str | None = None) -> None:
        """End the span with what the call came to, and count it; when the call reached the
        device (:meth:`timed`), a child span ``device {tool}`` first.

        Args:
            facts: regdev's attributes (``regdev.*``, ``gen_ai.tool.call.id``); None values
                are left out.
            tool: the tool name the call gave, if any (attribute ``gen_ai.tool.name``).
            known: the tool is one of the gate's (so it may name the span and the metrics).
            stage, code, message: the refusal's, or None for a success.
            device: the code of the execute stage's refusal, when the device failed.
        """
        if self._device is not None and tool is not None:
            start, end = self._device
            self._telemetry.device(self.span, tool, start, end, device)
        self._telemetry.end_call(self, facts, tool=tool, known=known, stage=stage, code=code,
                                 message=message)


class Telemetry:
    """The tracer, the meter and the instruments regdev records with (see
    ``docs/observability.md`` for every name).

    Args:
        tracer_provider: where spans go.
        meter_provider: where measurements go.
    """

    def __bool__(self) -> Literal[True]:  # so that ``current and current.x()`` types well
        return True

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        from .._version import __version__

        self._trace = trace
        self._context = context
        self._propagate = propagate
        self._kind = SpanKind
        self._error = Status(StatusCode.ERROR)
        self._status = Status
        self._status_code = StatusCode
        self.tracer = trace.get_tracer(SCOPE, __version__, tracer_provider) \
            if tracer_provider is not None else trace.NoOpTracer()
        if meter_provider is None:
            from opentelemetry.metrics import NoOpMeterProvider
            meter_provider = NoOpMeterProvider()
        meter = meter_provider.get_meter(SCOPE, __version__)
        self.meter = meter
        self.server_duration = meter.create_histogram(
            "mcp.server.operation.duration", unit="s",
            description="MCP request duration as observed on the receiver from the time it "
                        "was received until the result is sent",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.client_duration = meter.create_histogram(
            "mcp.client.operation.duration", unit="s",
            description="MCP request duration as observed on the sender from the time it was "
                        "sent until the response is received",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.model_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration (a model request)",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.calls = meter.create_counter(
            "regdev.calls", unit="{call}",
            description="Tool calls through the gate, by verdict and code")
        self.device_duration = meter.create_histogram(
            "regdev.device.transaction.duration", unit="s",
            description="Time a tool call spent on the device (the execute stage)",
            explicit_bucket_boundaries_advisory=list(FAST_BUCKETS))
        self.approvals_pending = meter.create_up_down_counter(
            "regdev.approvals.pending", unit="{approval}",
            description="Approval questions asked and not yet answered")
        self.commit_duration = meter.create_histogram(
            "regdev.audit.commit.duration", unit="s",
            description="Time of one commit of the audit store (records in one transaction)",
            explicit_bucket_boundaries_advisory=list(FAST_BUCKETS))

    # --- the server side: the gate ---------------------------------------------------------

    def start_call(self, incoming: Incoming | None) -> CallSpan | None:
        """Start the server span of a tool call (named ``tools/call`` until its tool is
        known): the child of the caller's trace context when ``incoming`` carries one, else
        of the current span (an in-process caller's, as ``regdev agent``'s client span).
        None (logged) if the SDK failed: the call runs untraced. Never raises."""
        try:
            return self._start_call(incoming)
        except Exception:
            logger.exception("a tool call's span could not be started")
            return None

    def _start_call(self, incoming: Incoming | None) -> CallSpan:
        parent = None
        attributes: dict[str, Any] = {"mcp.method.name": "tools/call",
                                      "gen_ai.operation.name": "execute_tool"}
        measured = dict(attributes)
        if incoming is not None:
            if incoming.carrier:
                parent = self._propagate.extract(incoming.carrier)
            for key, value in (("jsonrpc.request.id", incoming.request_id),
                               ("mcp.session.id", incoming.session_id),
                               ("network.transport", incoming.transport),
                               ("mcp.protocol.version", incoming.protocol_version)):
                if value is not None:
                    attributes[key] = value
            for key, value in (("network.transport", incoming.transport),
                               ("mcp.protocol.version", incoming.protocol_version)):
                if value is not None:
                    measured[key] = value
        start = time.time_ns()
        span = self.tracer.start_span("tools/call", context=parent,
                                      kind=self._kind.SERVER, attributes=attributes,
                                      start_time=start)
        return CallSpan(self, span, start, measured)

    def device(self, parent: Span, tool: str, start_ns: int, end_ns: int,
               code: str | None) -> None:
        """See :meth:`CallSpan.device`."""
        span = self.tracer.start_span(f"device {tool}",
                                      context=self._trace.set_span_in_context(parent),
                                      kind=self._kind.INTERNAL, start_time=start_ns,
                                      attributes={"gen_ai.tool.name": tool})
        attributes = {"gen_ai.tool.name": tool}
        if code is not None:
            span.set_attribute("error.type", code)
            span.set_status(self._error)
            attributes["error.type"] = code
        span.end(end_time=end_ns)
        self.device_duration.record((end_ns - start_ns) / 1e9, attributes)

    def end_call(self, call: CallSpan, facts: Mapping[str, Any], *, tool: str | None,
                 known: bool, stage: str | None, code: str | None,
                 message: str | None) -> None:
        """See :meth:`CallSpan.end`."""
        span = call.span
        end = time.time_ns()
        metric = call._measured
        attributes = {key: value for key, value in facts.items() if value is not None}
        attributes["regdev.verdict"] = "ok" if code is None else "refused"
        if tool is not None:
            attributes["gen_ai.tool.name"] = tool
            if known:
                span.update_name(f"tools/call {tool}")
                metric["gen_ai.tool.name"] = tool
        if code is not None:
            attributes["error.type"] = code
            attributes["regdev.stage"] = stage or ""
            span.set_status(self._status(self._status_code.ERROR, message))
            metric["error.type"] = code
        span.set_attributes(attributes)  # at once: the SDK takes its lock once
        span.end(end_time=end)
        self.server_duration.record((end - call._start) / 1e9, metric)
        counted = {"regdev.verdict": "ok" if code is None else "refused"}
        if code is not None:
            counted["error.type"] = code
            counted["regdev.stage"] = stage or ""
        if known and tool is not None:
            counted["gen_ai.tool.name"] = tool
        self.calls.add(1, counted)

    def counting_approvals(self, approve: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``approve`` (an approval hook) counted in ``regdev.approvals.pending`` while it
        waits for its answer."""
        pending = self.approvals_pending

        def counted(request: Any) -> Any:
            pending.add(1)
            try:
                return approve(request)
            finally:
                pending.add(-1)

        return counted

    def commit(self, seconds: float, store: str, ok: bool) -> None:
        """Record one commit of the audit store (``regdev.audit.commit.duration``)."""
        attributes = {"regdev.store": store}
        if not ok:
            attributes["error.type"] = "audit-error"
        self.commit_duration.record(seconds, attributes)

    # --- the client side: regdev agent, regdev eval ----------------------------------------

    @contextmanager
    def agent_run(self, *, provider: str, model: str, loop_id: str) -> Iterator[Span]:
        """The span of one agent run (``invoke_agent regdev``), current while it runs: the
        model requests and tool calls inside are its children."""
        with self.tracer.start_as_current_span(
                "invoke_agent regdev", kind=self._kind.INTERNAL,
                attributes={"gen_ai.operation.name": "invoke_agent",
                            "gen_ai.agent.name": "regdev",
                            "gen_ai.provider.name": provider, "gen_ai.request.model": model,
                            "gen_ai.conversation.id": loop_id}) as span:
            yield span

    @contextmanager
    def model_request(self, *, provider: str, model: str) -> Iterator[Span]:
        """The client span of one model request (``chat {model}``) and its duration
        (``gen_ai.client.operation.duration``). An exception escaping it sets
        ``error.type`` (a :class:`ModelError`'s kind, else the class name)."""
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                      "gen_ai.request.model": model}
        start = time.perf_counter()
        error_type = None
        with self.tracer.start_as_current_span(
                f"chat {model}", kind=self._kind.CLIENT, attributes=attributes,
                record_exception=False, set_status_on_exception=False) as span:
            try:
                yield span
            except BaseException as error:
                error_type = getattr(error, "kind", None) or type(error).__qualname__
                span.set_attribute("error.type", error_type)
                span.set_status(self._status(self._status_code.ERROR, str(error)[:200]))
                raise
            finally:
                measured: dict[str, Any] = dict(attributes)
                if error_type is not None:
                    measured["error.type"] = error_type
                self.model_duration.record(time.perf_counter() - start, measured)

    @contextmanager
    def tool_call(self, *, tool: str, known: bool, call_id: str | None) -> Iterator[
            Callable[[str | None, str | None], None]]:
        """The client span of one tool call sent to the gate (``tools/call {tool}``), current
        while it runs so that the gate's server span is its child, and its duration
        (``mcp.client.operation.duration``). Yields ``done(code, message)``, to be called with
        the observation's code (None: ok)."""
        name = f"tools/call {tool}" if known else "tools/call"
        attributes: dict[str, Any] = {"mcp.method.name": "tools/call",
                                      "gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": tool}
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        start = time.perf_counter()
        outcome: list[str] = []
        with self.tracer.start_as_current_span(name, kind=self._kind.CLIENT,
                                               attributes=attributes) as span:

            def done(code: str | None, message: str | None) -> None:
                if code is not None:
                    outcome.append(code)
                    span.set_attribute("error.type", code)
                    span.set_status(self._status(self._status_code.ERROR, message))

            yield done
        measured: dict[str, Any] = {"mcp.method.name": "tools/call",
                                    "gen_ai.operation.name": "execute_tool"}
        if known:
            measured["gen_ai.tool.name"] = tool
        if outcome:
            measured["error.type"] = outcome[0]
        self.client_duration.record(time.perf_counter() - start, measured)
