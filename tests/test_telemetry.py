"""console/telemetry.py on its own: the OTLP/HTTP path against a receiver on 127.0.0.1 that decodes the protobuf
it gets, the local file's rotation and mode, and off meaning nothing loaded and nothing written."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from console import telemetry
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[1]


class Receiver:
    """An OTLP/HTTP receiver: keeps each request's path and decoded body."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.content_types: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.content_types.append(self.headers["Content-Type"])
                if self.path == "/v1/traces":
                    received.traces.append(ExportTraceServiceRequest.FromString(body))
                elif self.path == "/v1/metrics":
                    received.metrics.append(ExportMetricsServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.fixture(autouse=True)
def reset() -> Iterator[None]:
    yield
    telemetry.configure(None, enabled=False)


def a_run() -> None:
    with telemetry.run_span("claude", event_ids=[7], sources=["github"], holder="w1", generation=3) as run:
        with telemetry.chat_span("claude-sonnet-5-5", conversation="claude:7") as chat:
            telemetry.chat_reply(chat, response_id="msg_1", model="claude-sonnet-5-5", finish_reason="tool_use",
                                 input_tokens=10, output_tokens=5, cache_read_tokens=0, cache_creation_tokens=100,
                                 cost_usd=0.001, request_model="claude-sonnet-5-5")
        with telemetry.tool_span("mcp__shop__refund", call_id="t1", tool_type="extension") as call:
            telemetry.tool_decided(call, decision="allowed", outcome="unknown", rule="allow", replayed=False)
        run.set("agent_console.tool.calls", 1)


def test_the_otlp_http_endpoint_gets_the_run_as_protobuf(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    telemetry.configure(tmp_path)
    a_run()
    telemetry.flush()
    wait_until(lambda: receiver.traces and receiver.metrics, "the receiver to get traces and metrics")
    spans = [span for request in receiver.traces for resource in request.resource_spans
             for scope in resource.scope_spans for span in scope.spans]
    by_name = {span.name: span for span in spans}
    assert set(by_name) == {"invoke_agent claude", "chat claude-sonnet-5-5", "execute_tool mcp__shop__refund"}
    root = by_name["invoke_agent claude"]
    assert by_name["chat claude-sonnet-5-5"].parent_span_id == root.span_id
    tool = {a.key: a.value for a in by_name["execute_tool mcp__shop__refund"].attributes}
    assert tool["agent_console.tool.outcome"].string_value == "unknown"
    assert tool["error.type"].string_value == "outcome_unknown"
    metric_names = {metric.name for request in receiver.metrics for resource in request.resource_metrics
                    for scope in resource.scope_metrics for metric in scope.metrics}
    assert {"gen_ai.client.token.usage", "agent_console.cost", "agent_console.tool.calls"} <= metric_names
    assert set(receiver.content_types) == {"application/x-protobuf"}
    # ... and the local file has the same spans.
    assert {span["name"] for span in telemetry.read_spans(tmp_path)} == set(by_name)


def test_the_file_is_owner_only_and_rotated_by_size(tmp_path: Path) -> None:
    path = telemetry.file_path(tmp_path)
    path.write_text("")
    path.chmod(0o644)  # made by hand under a loose umask: narrowed on the next write
    telemetry.configure(tmp_path, max_bytes=4000)
    for _ in range(12):
        a_run()
        telemetry.flush()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    rotated = sorted(tmp_path.glob("telemetry.jsonl.*"))
    assert [p.name for p in rotated] == [f"telemetry.jsonl.{n}" for n in range(1, telemetry.KEEP_FILES + 1)]
    assert all(p.stat().st_size <= 4000 for p in [path, *rotated])
    assert telemetry.read_spans(tmp_path)  # the kept files still read


def test_off_loads_no_sdk_and_writes_nothing(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from console import telemetry\n"
        f"telemetry.configure(Path({str(tmp_path)!r}), enabled=False)\n"
        "with telemetry.run_span('a', event_ids=[1], sources=['x'], holder='h', generation=1) as s:\n"
        "    s.set('k', 1); telemetry.span_event('e'); assert telemetry.traceparent() is None\n"
        "telemetry.count('c', '1', 'd', {})\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'the SDK was loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert not list(tmp_path.iterdir())


def test_on_writes_the_file_without_protobuf_or_the_otlp_exporters(tmp_path: Path) -> None:
    """The local file is written from the SDK's own span and metric data: protobuf and the OTLP exporter's
    modules (about 3 MB of the console's peak) load only for an OTLP endpoint."""
    code = (
        "import sys; from pathlib import Path; from console import telemetry\n"
        f"telemetry.configure(Path({str(tmp_path)!r}), env={{}})\n"
        "with telemetry.run_span('a', event_ids=[1], sources=['x'], holder='h', generation=1) as run:\n"
        "    telemetry.count('c', '1', 'd', {}); telemetry.record('r', 's', 'd', 0.5, {})\n"
        "telemetry.flush()\n"
        "assert telemetry.read_spans(Path(sys.argv[1])), 'nothing was written'\n"
        "print(sorted(m for m in sys.modules if m.startswith(('google', 'opentelemetry.proto', "
        "'opentelemetry.exporter'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def hex_ids(value: Any) -> Any:
    """The protobuf JSON mapping's ids (base64) as OTLP/JSON writes them (hex)."""
    if isinstance(value, dict):
        return {key: (base64.b64decode(item).hex() if key in ("traceId", "spanId", "parentSpanId") else hex_ids(item))
                for key, item in value.items()}
    if isinstance(value, list):
        return [hex_ids(item) for item in value]
    return value


def test_the_file_encoding_is_the_otlp_exporters_json_field_for_field() -> None:
    """The file's own OTLP/JSON encoder against the OTLP exporter's protobuf messages in protobuf's JSON mapping
    (what the file held before): every kind of attribute value, events, links, a remote parent with a tracestate,
    an error status; counters, an up-down counter, a gauge and a histogram with exemplars."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry import trace as trace_api
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    resource = Resource.create({"service.name": "agent-console", "service.version": "1.2.3"})
    spans_out = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans_out))
    reader = InMemoryMetricReader()
    meter = MeterProvider(resource=resource, metric_readers=[reader]).get_meter("agent-console", "1.2.3")
    tracer = tracer_provider.get_tracer("agent-console", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.26.0")
    remote = TraceContextTextMapPropagator().extract({
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=opaque,b=2"})
    linked = trace_api.get_current_span(remote).get_span_context()
    runs, spend = meter.create_counter("agent_console.runs", "{run}"), meter.create_counter("agent_console.cost", "USD")
    backlog = meter.create_up_down_counter("agent_console.backlog", "{event}", "Events waiting")
    lag, wait = meter.create_gauge("agent_console.outbox.lag", "s"), meter.create_histogram("approval.wait", "s")
    with tracer.start_as_current_span("ingest github", context=remote, kind=trace_api.SpanKind.SERVER, attributes={
            "s": "text", "empty": "", "t": True, "f": False, "i": 7, "zero": 0, "negative": -3, "d": 0.25,
            "whole": 2.0, "infinite": float("inf"), "ids": [1, 2, 3], "names": ["a", "b"], "flags": [True, False],
            "ratios": [0.5, 1.5]}) as outer:
        outer.add_event("approval.asked", {"agent_console.approval.waited_s": 3, "who": "owner"})
        outer.add_event("bare")
        runs.add(1, {"agent_console.run.outcome": "done"})
        spend.add(0.0025, {"gen_ai.request.model": "m"})
        wait.record(42.5, {"agent_console.approval.channel": "console"})
        wait.record(0)
        with tracer.start_as_current_span("invoke_agent claude", links=[trace_api.Link(linked, {"why": "timer"}),
                                                                         trace_api.Link(linked)]) as inner:
            inner.set_status(trace_api.Status(trace_api.StatusCode.ERROR, "the model said no"))
            backlog.add(5)
            backlog.add(-2)
        with tracer.start_as_current_span("chat m", kind=trace_api.SpanKind.CLIENT) as failed:
            failed.set_status(trace_api.Status(trace_api.StatusCode.ERROR))
    with tracer.start_as_current_span("send telegram", kind=trace_api.SpanKind.PRODUCER):
        lag.set(1.5, {"channel": "telegram"})
        lag.set(3, {"channel": "mail"})
    with tracer_provider.get_tracer("").start_as_current_span("consume", kind=trace_api.SpanKind.CONSUMER):
        pass
    spans = spans_out.get_finished_spans()
    assert len(spans) == 5
    assert json.loads(telemetry.otlp_json_spans(spans)) == hex_ids(
        MessageToDict(encode_spans(spans), use_integers_for_enums=True))
    metrics = reader.get_metrics_data()
    assert metrics is not None
    assert json.loads(telemetry.otlp_json_metrics(metrics)) == hex_ids(
        MessageToDict(encode_metrics(metrics), use_integers_for_enums=True))
    # The comparison is not vacuous: exemplars with their span's ids came along, and both kinds of number.
    encoded = telemetry.otlp_json_metrics(metrics)
    assert '"exemplars"' in encoded and '"asInt":"3"' in encoded and '"asDouble":0.0025' in encoded
    tracer_provider.shutdown()


def test_a_batch_is_written_in_lines_of_bounded_size(tmp_path: Path) -> None:
    """Forty runs of a hundred events each, exported as one batch: the file gets them in several lines of about
    LINE_BYTES each (not one line of the whole batch, which the export thread built and copied at once), and every
    span reads back once, in order."""
    telemetry.configure(tmp_path, env={})
    for run in range(40):
        with telemetry.run_span("offline", event_ids=range(run * 100, run * 100 + 100), sources=["chat"], holder="w",
                                generation=1):
            pass
    telemetry.flush()
    lines = [line for line in telemetry.file_path(tmp_path).read_text().splitlines() if "resourceSpans" in line]
    span_text = max(len(json.dumps(span, separators=(",", ":"))) for span in telemetry.read_spans(tmp_path))
    assert len(lines) >= 40 * span_text // telemetry.LINE_BYTES > 2
    assert all(len(line) < telemetry.LINE_BYTES + 2 * span_text for line in lines)
    firsts = [telemetry.attributes_of(span)["agent_console.event.ids"][0] for span in telemetry.read_spans(tmp_path)]
    assert firsts == [run * 100 for run in range(40)]


def test_otel_sdk_disabled_turns_it_off(tmp_path: Path) -> None:
    telemetry.configure(tmp_path, env={"OTEL_SDK_DISABLED": "true"})
    assert not telemetry.enabled()
    a_run()
    assert not list(tmp_path.iterdir())


def test_the_console_draws_its_first_frame_before_any_opentelemetry_module_is_imported() -> None:
    """The console's start, in a fresh interpreter under python -X importtime: nothing of OpenTelemetry is in
    sys.modules at the first frame (the SDK loads with the engine's first span, a run)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tests.tui.start_probe"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "console.tui.app" in seen["first_frame"]  # the listing is real
    assert [name for name in seen["first_frame"] if name.startswith("opentelemetry")] == []
    assert "import time:" in done.stderr


def test_an_http_mcp_call_carries_its_traceparent_to_the_server(
    tmp_path: Path
) -> None:
    from console.agents.gateway import ToolGateway
    from console.agents.mcp import McpHub, McpServerConfig
    from console.agents.tools import ToolCall
    from console.trust.policy import Policy
    from tests.agents.mcp_servers import serve_http

    telemetry.configure(tmp_path)
    with serve_http("remote") as server:
        hub = McpHub({"remote": McpServerConfig("remote", url=server.url, call_timeout=10.0)}, backoff_base=0.05,
                     backoff_max=0.2)
        try:
            hub.start()
            wait_until(lambda: hub.status()["remote"] == "up", "the server to be up")
            # The server's Mcp-Session-Id when it gives one (this SDK's server, on the current protocol, gives none).
            session = hub.session_id("mcp__remote__echo")
            with ToolGateway(Policy(), mcp=hub)._span(ToolCall("t1", "mcp__remote__echo", {"text": "hi"})):
                hub.call("mcp__remote__echo", {"text": "hi"}, idempotency_key="k-1")
        finally:
            hub.close()
        [recorded] = server.recorded()
    telemetry.flush()
    [span] = [s for s in telemetry.read_spans(tmp_path) if s["name"] == "execute_tool mcp__remote__echo"]
    assert telemetry.attributes_of(span).get("mcp.session.id") == session
    assert telemetry.attributes_of(span)["mcp.method.name"] == "tools/call"
    assert recorded["traceparent"].startswith(f"00-{span['traceId']}-{span['spanId']}-")
