"""Telemetry: each tool call a span under the MCP and GenAI conventions, joined to its audit
record by trace id; the metrics; OTLP/HTTP export to a receiver on 127.0.0.1; off by
default without importing opentelemetry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from regdev import (
    Approval,
    ApprovalRequest,
    AuditLog,
    Gate,
    Policy,
    RegisterFile,
    RegisterPolicy,
    open_audit,
    read_audit,
)
from regdev.agents._models import Endpoint, ToolCall, Turn, run_agent
from regdev.core import _telemetry
from regdev.core._errors import DeviceRefused
from regdev.core._observation import Observation
from regdev.server._mcp import incoming_of

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[1]
WRITE = '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}'
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


class Recorded:
    """The spans and metrics recorded while telemetry was installed."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer = TracerProvider()
        self.tracer.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter = MeterProvider(metric_readers=[self.reader])

    @property
    def spans(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans if span.name == name]

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` collected now."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for each in scope.metrics:
                    if each.name == metric:
                        found.extend(each.data.data_points)
        return found


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    """Telemetry on, into the SDK's in-memory exporter and metric reader."""
    held = Recorded()
    _telemetry.install(held.tracer, held.meter)
    try:
        yield held
    finally:
        _telemetry.uninstall()
        held.tracer.shutdown()
        held.meter.shutdown()


def trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def test_a_refused_call_is_a_span_named_by_the_conventions_and_joined_to_its_record(
        recorded: Recorded, tmp_path: Path) -> None:
    """A range refusal: span `tools/call write_register`, error.type the code, the stage, and
    the audit record's trace_id is the span's."""
    with Gate(audit=AuditLog(tmp_path / "a.db")) as gate:
        observation = gate.handle('{"tool": "write_register", "arguments": {"addr": 16, '
                                  '"data": 1}}', proposer="test:model")
    assert observation.code == "range-addr"
    (span,) = recorded.spans
    assert span.name == "tools/call write_register"
    assert span.kind is SpanKind.SERVER
    attributes = dict(span.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "write_register"
    assert attributes["error.type"] == "range-addr"
    assert attributes["regdev.stage"] == "validate"
    assert attributes["regdev.verdict"] == "refused"
    assert attributes["regdev.proposer"] == "test:model"
    assert attributes["regdev.session"] == "default"
    assert "regdev.idempotency" not in attributes
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "addr 16 is outside 0..15"
    (record,) = read_audit(tmp_path / "a.db")
    assert record.trace_id == trace_id(span)
    assert record.code == "range-addr"


def test_an_approved_protected_write_names_approval_approver_device_and_epoch(
        recorded: Recorded, tmp_path: Path) -> None:
    """An approved write of a protected register: approval and approver on the span, the
    device and its epoch, a child span for the device, and its call and intent records carry
    the trace id; the pending approvals gauge went up and down again."""
    seen: list[int] = []

    def approve(request: ApprovalRequest) -> Approval:
        seen.append(len(recorded.points("regdev.approvals.pending")))
        return Approval(True, approver="token:bob")

    device = RegisterFile()
    policy = Policy(registers=RegisterPolicy(protected=frozenset({3})), approve=approve)
    with Gate(device, policy=policy, audit=AuditLog(tmp_path / "a.db")) as gate:
        observation = gate.handle(WRITE)
        identity = device.identity()
    assert observation.ok
    (span,) = recorded.named("tools/call write_register")
    attributes = dict(span.attributes or {})
    assert attributes["regdev.verdict"] == "ok"
    assert "error.type" not in attributes
    assert attributes["regdev.approval"] == "hook"
    assert attributes["regdev.approver"] == "token:bob"
    assert attributes["regdev.device.id"] == identity.device
    assert attributes["regdev.device.epoch"] == identity.epoch
    assert span.status.status_code is StatusCode.UNSET
    (device_span,) = recorded.named("device write_register")
    assert device_span.parent is not None and span.context is not None
    assert device_span.parent.span_id == span.context.span_id
    assert device_span.context is not None and device_span.context.trace_id == \
        span.context.trace_id
    records = read_audit(tmp_path / "a.db")
    assert [r.event for r in records] == ["call"]  # the intent is shown only when unsettled
    assert records[0].trace_id == trace_id(span)
    assert records[0].approver == "token:bob"
    (pending,) = recorded.points("regdev.approvals.pending")
    assert pending.value == 0  # asked once, answered once
    assert seen == [1]  # while the hook ran, one question was pending


def test_a_replayed_keyed_write_says_replayed_and_each_call_has_its_own_trace(
        recorded: Recorded, tmp_path: Path) -> None:
    """The same keyed write twice: the first span says idempotency `new`, the second
    `replayed`; each audit record carries its own span's trace id."""
    keyed = '{"tool": "write_register", "arguments": {"addr": 3, "data": 7}, ' \
            '"idempotency_key": "k-1"}'
    with Gate(audit=AuditLog(tmp_path / "a.db")) as gate:
        first, second = gate.handle(keyed), gate.handle(keyed)
    assert (first.ok, first.replay, second.ok, second.replay) == (True, False, True, True)
    spans = recorded.named("tools/call write_register")
    assert [dict(s.attributes or {})["regdev.idempotency"] for s in spans] == ["new",
                                                                                "replayed"]
    records = [r for r in read_audit(tmp_path / "a.db") if r.event == "call"]
    assert [r.replay for r in records] == [False, True]
    assert [r.trace_id for r in records] == [trace_id(s) for s in spans]
    assert trace_id(spans[0]) != trace_id(spans[1])


def test_the_callers_trace_context_is_continued() -> None:
    """A traceparent from the request (`params._meta` before the HTTP header) makes the
    gate's span a child of the caller's span, with the request and session ids."""
    held = Recorded()
    _telemetry.install(held.tracer, held.meter)
    try:
        meta = {"traceparent": f"00-{TRACE}-{PARENT}-01", "idempotency_key": "x"}
        headers = {"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}
        incoming = _telemetry.Incoming(carrier=_telemetry.carrier_of(meta, headers),
                                       request_id="7", session_id="s-1", transport="tcp",
                                       protocol_version="2025-11-25")
        Gate().handle(WRITE, incoming=incoming)
    finally:
        _telemetry.uninstall()
    (span,) = held.named("tools/call write_register")
    assert span.parent is not None and span.parent.is_remote
    assert (format(span.parent.trace_id, "032x"), format(span.parent.span_id, "016x")) == (
        TRACE, PARENT)
    attributes = dict(span.attributes or {})
    assert (attributes["jsonrpc.request.id"], attributes["mcp.session.id"],
            attributes["network.transport"], attributes["mcp.protocol.version"]) == (
        "7", "s-1", "tcp", "2025-11-25")
    (point,) = [p for p in held.points("mcp.server.operation.duration")]
    assert dict(point.attributes) == {
        "mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "write_register", "network.transport": "tcp",
        "mcp.protocol.version": "2025-11-25"}
    assert point.count == 1


def test_an_unknown_tool_name_stays_out_of_span_names_and_metrics(recorded: Recorded) -> None:
    """A tool the gate does not have: the span is named `tools/call` and the metrics carry
    no tool name (low cardinality); the name, escaped, is an attribute only."""
    Gate().handle('{"tool": "erase_chip\\u001b[2J", "arguments": {}}')
    (span,) = recorded.spans
    assert span.name == "tools/call"
    assert dict(span.attributes or {})["gen_ai.tool.name"] == "erase_chip\\x1b[2J"  # escaped
    (point,) = recorded.points("regdev.calls")
    assert dict(point.attributes) == {"regdev.verdict": "refused",
                                      "error.type": "unknown-tool", "regdev.stage": "validate"}


def test_metrics_count_calls_by_verdict_and_code_and_time_device_and_commits(
        recorded: Recorded, tmp_path: Path) -> None:
    """regdev.calls by verdict and code, the device's time, the audit store's commits."""
    with Gate(audit=AuditLog(tmp_path / "a.db")) as gate:
        gate.handle(WRITE)
        gate.handle(WRITE)
        gate.handle('{"tool": "write_register", "arguments": {"addr": "3", "data": 1}}')
    counted = {tuple(sorted(p.attributes.items())): p.value
               for p in recorded.points("regdev.calls")}
    assert counted == {
        (("gen_ai.tool.name", "write_register"), ("regdev.verdict", "ok")): 2,
        (("error.type", "type-addr"), ("gen_ai.tool.name", "write_register"),
         ("regdev.stage", "validate"), ("regdev.verdict", "refused")): 1}
    (device,) = recorded.points("regdev.device.transaction.duration")
    assert device.count == 2 and dict(device.attributes) == {"gen_ai.tool.name":
                                                             "write_register"}
    commits = recorded.points("regdev.audit.commit.duration")
    assert sum(p.count for p in commits) >= 2  # each write's record, committed before it returns
    assert all(dict(p.attributes) == {"regdev.store": "sqlite"} for p in commits)


def test_the_postgresql_stores_commits_are_timed_under_its_name(
        recorded: Recorded, postgres: Any) -> None:
    """A write on the PostgreSQL store: its two commits (intent, record) and a device's
    reset are timed into regdev.audit.commit.duration as `postgresql`."""
    with Gate(audit=open_audit(postgres.fresh_dsn())) as gate:
        assert gate.handle(WRITE).ok
        gate.reset_device()
    (point,) = recorded.points("regdev.audit.commit.duration")
    assert dict(point.attributes) == {"regdev.store": "postgresql"}
    assert point.count == 3  # the intent, the record, the reset


class Scripted(Endpoint):
    """A model that makes the calls it is given, one turn each, then is done."""

    provider = "openai"
    model = "scripted"
    dialect = "openai"

    def __init__(self, calls: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.calls = calls

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        pass

    def next_turn(self) -> Turn:
        if not self.calls:
            return Turn([], "done", "end", {})
        call_id, name, arguments = self.calls.pop(0)
        raw = json.dumps({"type": "function", "id": call_id, "function": {
            "name": name, "arguments": json.dumps(arguments)}}).encode()
        return Turn([ToolCall(call_id, name, raw)], "", "tool-calls", {})

    def answer(self, turn: Turn, observations: list[Observation]) -> None:
        pass


def test_an_agent_run_is_one_trace_model_client_and_gate(recorded: Recorded) -> None:
    """regdev agent's side: invoke_agent, then per turn a `chat MODEL` client span and a
    `tools/call TOOL` client span whose child is the gate's server span."""
    endpoint = Scripted([("c1", "write_register", {"addr": 3, "data": 9}),
                         ("c2", "write_register", {"addr": 3, "data": 900})])
    with Gate() as gate:
        result = run_agent(endpoint, gate, "task", retries=2)
    assert result.stop == "done"
    (run,) = recorded.named("invoke_agent regdev")
    assert run.context is not None
    assert all(s.context is not None and s.context.trace_id == run.context.trace_id
               for s in recorded.spans)
    chats = recorded.named("chat scripted")
    assert len(chats) == 3 and all(c.kind is SpanKind.CLIENT for c in chats)
    assert all(c.parent is not None and c.parent.span_id == run.context.span_id
               for c in chats)
    calls = recorded.named("tools/call write_register")
    clients = [s for s in calls if s.kind is SpanKind.CLIENT]
    servers = [s for s in calls if s.kind is SpanKind.SERVER]
    assert len(clients) == len(servers) == 2
    for client, server in zip(clients, servers, strict=True):
        assert client.context is not None and server.parent is not None
        assert server.parent.span_id == client.context.span_id
    assert [dict(c.attributes or {}).get("error.type") for c in clients] == [None,
                                                                            "range-data"]
    assert [dict(c.attributes or {})["gen_ai.tool.call.id"] for c in clients] == ["c1", "c2"]
    assert dict(run.attributes or {})["gen_ai.conversation.id"] == result.loop_id
    assert {p.attributes["gen_ai.request.model"] for p in recorded.points(
        "gen_ai.client.operation.duration")} == {"scripted"}
    assert sum(p.count for p in recorded.points("mcp.client.operation.duration")) == 2


# --- export over OTLP/HTTP, and off by default, in a process of its own -------------------------


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: decodes each export request's protobuf."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.paths.append(self.path)
                if self.path == "/v1/traces":
                    received.traces.append(ExportTraceServiceRequest.FromString(body))
                    answer = ExportTraceServiceResponse().SerializeToString()
                else:
                    received.metrics.append(ExportMetricsServiceRequest.FromString(body))
                    answer = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(changes)
    return env


def test_regdev_call_exports_its_span_and_metrics_over_otlp_http(tmp_path: Path) -> None:
    """`regdev call` with OTEL_TRACES_EXPORTER=otlp and OTEL_METRICS_EXPORTER=otlp sends its
    span and metrics to the receiver at OTEL_EXPORTER_OTLP_ENDPOINT; the audit record
    names the same trace."""
    with Receiver() as receiver:
        done = subprocess.run(
            [PYTHON, "-m", "regdev", "call", '{"tool": "write_register", "arguments": '
             '{"addr": 3, "data": 300}}'],
            env=_env(OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="otlp",
                     OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
                     REGDEV_AUDIT=str(tmp_path / "a.db")),
            capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert sorted(set(receiver.paths)) == ["/v1/metrics", "/v1/traces"], done.stderr
    spans = [(resource, span) for request in receiver.traces
             for resource in request.resource_spans
             for scope in resource.scope_spans for span in scope.spans]
    (resource, span), = spans
    service = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert service["service.name"] == "regdev"
    assert span.name == "tools/call write_register"
    attributes = {a.key: a.value.string_value for a in span.attributes}
    assert attributes["error.type"] == "range-data"
    assert attributes["mcp.method.name"] == "tools/call"
    (record,) = read_audit(tmp_path / "a.db")
    assert record.trace_id == span.trace_id.hex()
    names = {metric.name for request in receiver.metrics for resource in request.resource_metrics
             for scope in resource.scope_metrics for metric in scope.metrics}
    assert {"mcp.server.operation.duration", "regdev.calls",
            "regdev.audit.commit.duration"} <= names


MODERN_META = ('"io.modelcontextprotocol/protocolVersion": "2026-07-28", '
               '"io.modelcontextprotocol/clientCapabilities": {}')


def test_regdev_serve_continues_the_trace_of_params_meta(tmp_path: Path) -> None:
    """`regdev serve` (stdio): a tools/call whose params._meta holds a traceparent is one
    span, the child of the caller's, naming the JSON-RPC id, the transport (pipe) and the
    protocol version; its audit record is in the caller's trace."""
    lines = [
        f'{{"jsonrpc": "2.0", "id": 0, "method": "server/discover", '
        f'"params": {{"_meta": {{{MODERN_META}}}}}}}',
        f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": '
        f'"write_register", "arguments": {{"addr": 3, "data": 7}}, "_meta": {{'
        f'"traceparent": "00-{TRACE}-{PARENT}-01", {MODERN_META}}}}}}}']
    regdev = str(Path(PYTHON).with_name("regdev"))
    with Receiver() as receiver:
        done = subprocess.run(
            [regdev, "serve", "--log-level", "warning", "--audit", str(tmp_path / "a.db")],
            input="".join(f"{line}\n" for line in lines).encode(), capture_output=True,
            timeout=120, check=False,
            env=_env(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
                     HOME=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [0, 1]
    spans = [span for request in receiver.traces for resource in request.resource_spans
             for scope in resource.scope_spans for span in scope.spans]
    (span,) = [span for span in spans if span.name.startswith("tools/call")]
    assert span.name == "tools/call write_register"
    assert (span.trace_id.hex(), span.parent_span_id.hex()) == (TRACE, PARENT)
    attributes = {a.key: a.value.string_value for a in span.attributes}
    assert (attributes["jsonrpc.request.id"], attributes["network.transport"],
            attributes["mcp.protocol.version"], attributes["regdev.verdict"]) == (
        "1", "pipe", "2026-07-28", "ok")
    (record,) = read_audit(tmp_path / "a.db")
    assert record.trace_id == TRACE


@pytest.mark.parametrize("env", [
    {},
    {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
    {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
], ids=["unset", "none", "disabled"])
def test_off_the_gate_never_imports_opentelemetry(env: dict[str, str],
                                                  tmp_path: Path) -> None:
    """Off (no exporter named, `none`, or OTEL_SDK_DISABLED=true): calls run, are recorded
    without a trace id, and no opentelemetry module is imported."""
    script = (
        "import sys\n"
        "from regdev import AuditLog, Gate, read_audit\n"
        f"gate = Gate(audit=AuditLog({str(tmp_path / 'a.db')!r}))\n"
        f"assert gate.handle({WRITE!r}).ok\n"
        "gate.close()\n"
        f"print([r.trace_id for r in read_audit({str(tmp_path / 'a.db')!r})])\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    done = subprocess.run([PYTHON, "-c", script], env=_env(**env), capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.splitlines() == ["[None]", "[]"]


class Refusing(RegisterFile):
    """A device that refuses every write."""

    def write(self, addr: int, data: int) -> int:
        raise DeviceRefused("write refused: the device is locked")


def test_a_device_failure_is_the_device_spans_error_too(recorded: Recorded) -> None:
    """A write the device refuses: the call's span and its device child span both say
    error.type device-error, and the device's time is measured with that code."""
    observation = Gate(Refusing()).handle(WRITE)
    assert observation.code == "device-error"
    (call,) = recorded.named("tools/call write_register")
    (device,) = recorded.named("device write_register")
    assert dict(call.attributes or {})["regdev.stage"] == "execute"
    assert dict(device.attributes or {})["error.type"] == "device-error"
    assert device.status.status_code is StatusCode.ERROR
    (point,) = recorded.points("regdev.device.transaction.duration")
    assert dict(point.attributes) == {"gen_ai.tool.name": "write_register",
                                      "error.type": "device-error"}


def test_the_http_traceparent_is_taken_when_params_meta_has_none() -> None:
    """Over HTTP, a request whose _meta holds no traceparent continues the trace of its
    traceparent header; the MCP session id and protocol version come from the headers."""
    held = Recorded()
    _telemetry.install(held.tracer, held.meter)
    try:
        params = SimpleNamespace(meta={"idempotency_key": "k"})
        ctx = SimpleNamespace(request_id=12, protocol_version=None)
        incoming = incoming_of(ctx, params, "tcp", {
            "traceparent": f"00-{TRACE}-{PARENT}-01", "mcp-session-id": "abc",
            "mcp-protocol-version": "2025-11-25"})
    finally:
        _telemetry.uninstall()
    assert incoming == _telemetry.Incoming(
        carrier={"traceparent": f"00-{TRACE}-{PARENT}-01"}, request_id="12",
        session_id="abc", transport="tcp", protocol_version="2025-11-25")
    assert incoming_of(ctx, params, "tcp", {}) is None  # off: nothing is read


@pytest.mark.parametrize(("env", "on"), [
    ({}, False),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_METRICS_EXPORTER": " Console "}, True),
    ({"OTEL_TRACES_EXPORTER": "none,otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
])
def test_what_switches_telemetry_on(env: dict[str, str], on: bool) -> None:
    """On only when an exporter is named for traces or metrics and the SDK is not disabled;
    an endpoint alone switches nothing on."""
    assert _telemetry.enabled(env) is on


def test_without_the_extra_an_exporter_named_is_one_warning_and_calls_run() -> None:
    """OTEL_TRACES_EXPORTER=otlp without the SDK installed (its import made to fail): one
    warning line naming the install command, the call runs, no traceback."""
    script = (
        "import logging, sys\n"
        "sys.modules['opentelemetry'] = None  # as if the otel extra were not installed\n"
        "logging.basicConfig(format='%(message)s')\n"
        "from regdev import Gate\n"
        f"print(Gate().handle({WRITE!r}).ok, Gate().handle({WRITE!r}).ok)\n")
    done = subprocess.run([PYTHON, "-c", script], env=_env(OTEL_TRACES_EXPORTER="otlp"),
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout == "True True\n"
    assert done.stderr.splitlines() == [
        "OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER is set but the OpenTelemetry SDK is not "
        "installed, so regdev exports no telemetry: pip install 'regdev[otel]'"]
