"""Traces and metrics of every run in the OpenTelemetry GenAI conventions, behind a few functions (a leaf).

The runtime and the agents call `run_span`, `chat_span`, `tool_span`, `span_event`, `traceparent` and the
`count_*` / `record_*` functions; nothing else in the code touches OpenTelemetry. Until `configure` is called, or
with `telemetry = "off"` (or OTEL_SDK_DISABLED=true), every one of them is a no-op that costs a global read. The
SDK itself is imported on the first span or metric, never at import time: the console's first frame never waits
for it (a test checks with python -X importtime).

Where it goes: always an OTLP JSON-lines file of the inbox's own beside it (Settings.telemetry_file, owner-only,
rotated by size; every span names its inbox, the resource's agent_console.inbox; one ExportTraceServiceRequest or
ExportMetricsServiceRequest a line in OTLP/JSON, written from the SDK's spans and metrics without protobuf); and
OTLP/HTTP as well when the standard OTEL_EXPORTER_OTLP_* variables name an endpoint (the SDK's exporter reads them;
protobuf loads only then). Message contents, tool arguments and results
are recorded only with the standard opt-in OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, and only as the
caller scrubbed them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE_NAME = "telemetry.jsonl"  # the file every inbox in a folder shared before each had its own (Settings)
INBOX_ATTRIBUTE = "agent_console.inbox"
MAX_FILE_BYTES = 16 * 1024 * 1024  # then the file is rotated: telemetry.jsonl.1 .. .KEEP_FILES
KEEP_FILES = 3
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
PROVIDER = "anthropic"
SCOPE = "agent-console"
# Either names an OTLP endpoint: traces (and metrics) then also go there over OTLP/HTTP.
_TRACE_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_METRIC_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")

Attributes = Mapping[str, Any]


# --- the handle callers hold -----------------------------------------------------------------------------
class Span:
    """One span as the callers see it: set attributes, add events, mark a failure. This base is the no-op."""

    def set(self, key: str, value: Any) -> None:
        """One attribute (None is left out)."""

    def set_many(self, attributes: Attributes) -> None:
        """Several attributes (None values left out)."""

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """An event on this span, now."""

    def fail(self, error_type: str) -> None:
        """The operation failed: error.type and an error status."""

    def content(self, key: str, value: Any) -> None:
        """A content attribute (messages, arguments, results): recorded only on the standard opt-in."""


OFF = Span()


class _LiveSpan(Span):
    def __init__(self, span: Any, capture: bool) -> None:
        self._span = span
        self._capture = capture

    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self._span.set_attribute(key, _attribute(value))

    def set_many(self, attributes: Attributes) -> None:
        self._span.set_attributes({key: _attribute(value) for key, value in attributes.items() if value is not None})

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, {key: _attribute(value) for key, value in (attributes or {}).items()
                                    if value is not None})

    def fail(self, error_type: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR))

    def content(self, key: str, value: Any) -> None:
        if self._capture and value is not None:
            self._span.set_attribute(key, value if isinstance(value, str) else json.dumps(value, default=str))


def _attribute(value: Any) -> Any:
    """A value OpenTelemetry takes as an attribute: str, bool, int, float or a homogeneous list of them."""
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        items = list(value)
        if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
            return items
        return [str(item) for item in items]
    return str(value)


# --- configuration -------------------------------------------------------------------------------------
@dataclass
class _Config:
    folder: Path
    env: Mapping[str, str]
    max_bytes: int = MAX_FILE_BYTES
    name: str = FILE_NAME
    inbox: str | None = None


@dataclass
class _Live:
    """The SDK's parts once loaded: a tracer provider and a meter provider of our own (never the global ones:
    a host application's telemetry is its own business)."""

    tracer: Any
    tracer_provider: Any
    meter_provider: Any
    trace_api: Any
    propagator: Any
    capture: bool
    instruments: dict[str, Any] = field(default_factory=dict)


_lock = threading.Lock()
_config: _Config | None = None
_live: _Live | None = None


def configure(folder: Path | None, *, enabled: bool = True, env: Mapping[str, str] | None = None,
              max_bytes: int = MAX_FILE_BYTES, name: str = FILE_NAME, inbox: str | None = None) -> None:
    """Telemetry for this process: to `folder`/`name` (and OTLP/HTTP when the environment names an endpoint), or
    off. inbox: the inbox this process serves, named on every span (the resource's agent_console.inbox), so that
    spans of several inboxes in one place (a collector) are told apart. Loads nothing yet; a reconfiguration
    flushes and closes what was there."""
    global _config
    environment = dict(os.environ if env is None else env)
    shutdown()
    disabled = environment.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    with _lock:
        _config = (_Config(folder, environment, max_bytes, name, inbox)
                   if enabled and folder is not None and not disabled else None)


def enabled() -> bool:
    return _config is not None


def capture_content() -> bool:
    live = _ensure()
    return live is not None and live.capture


def flush() -> None:
    """Everything recorded so far written out (the engine calls it when it stops)."""
    live = _live
    if live is not None:
        live.tracer_provider.force_flush()
        live.meter_provider.force_flush()


def shutdown() -> None:
    """Flush and close the exporters; telemetry stays configured and loads again on the next span."""
    global _live
    with _lock:
        live, _live = _live, None
    if live is not None:
        live.tracer_provider.shutdown()
        live.meter_provider.shutdown()


def preload() -> None:
    """Load the SDK now, if telemetry is on: for a caller that knows a span is coming and can wait for the import
    off its event loop (the webhook receiver alone, before it listens), instead of its first span waiting for it."""
    _ensure()


def file_path(folder: Path, name: str = FILE_NAME) -> Path:
    return folder / name


def _ensure() -> _Live | None:
    global _live
    live = _live
    if live is not None or _config is None:
        return live
    with _lock:
        if _live is None and _config is not None:
            _live = _load(_config)
        return _live


def _load(config: _Config) -> _Live:
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from console import __version__

    env = config.env
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SCOPE,
                                "service.version": __version__,
                                **({INBOX_ATTRIBUTE: config.inbox} if config.inbox else {})})
    sink = JsonLinesFile(file_path(config.folder, config.name), max_bytes=config.max_bytes)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(_file_span_exporter(sink)))
    readers = [PeriodicExportingMetricReader(_file_metric_exporter(sink), export_interval_millis=60_000)]
    if any(env.get(name) for name in _TRACE_ENDPOINTS):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if any(env.get(name) for name in _METRIC_ENDPOINTS):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=60_000))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    capture = env.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
    return _Live(tracer_provider.get_tracer(SCOPE, __version__), tracer_provider, meter_provider, trace_api,
                 TraceContextTextMapPropagator(), capture)


# --- the OTLP JSON-lines file ----------------------------------------------------------------------------
class JsonLinesFile:
    """The local file: one OTLP export request a line in the OTLP/JSON encoding (see otlp_json_spans). Created
    owner-only (0600); past max_bytes it is rotated to .1 (.1 to .2, ...), KEEP_FILES kept."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_FILE_BYTES, keep: int = KEEP_FILES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()

    def write(self, request: str) -> None:
        """One request's JSON text, as a line."""
        line = (request + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # beside private payloads
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_size + len(line) > self.max_bytes:
                    self._rotate()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.fchmod(fd, 0o600)  # an existing file made by hand, or under another umask, is narrowed too
                os.write(fd, line)
            finally:
                os.close(fd)

    def _rotate(self) -> None:
        for number in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{number}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{number + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))


def _file_span_exporter(sink: JsonLinesFile) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class FileSpanExporter(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            try:
                for request in otlp_json_span_requests(spans):
                    sink.write(request)
            except OSError:
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

    return FileSpanExporter()


def _file_metric_exporter(sink: JsonLinesFile) -> Any:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class FileMetricExporter(MetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
            try:
                sink.write(otlp_json_metrics(metrics_data))
            except OSError:
                return MetricExportResult.FAILURE
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            return None

    return FileMetricExporter()


# --- OTLP/JSON from the SDK's data -----------------------------------------------------------------------
# The file is in the OTLP/JSON encoding (the protobuf JSON mapping: lowerCamelCase names, 64-bit integers as
# strings, enums as integers, fields at their default left out; trace and span ids in hex), written here from the
# SDK's spans and metrics rather than through the OTLP exporter's protobuf messages: protobuf and the OTLP proto
# modules cost the console about 3 MB, and a whole batch as messages, then as a dict, then as text was the
# console's highest peak (tests/test_telemetry.py holds this encoding equal to the exporter's, field for field).
# A batch is encoded span by span (one span's dict lives at a time) and written in lines of about LINE_BYTES: a
# batch of runs of a hundred events each as one line was a few 100 KB string built and copied four times over in
# the export thread, whose heap kept the high-water mark (about 1.5 MB of the console's peak at 1,000,000 events).
LINE_BYTES = 16 * 1024
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_SPAN_HAS_IS_REMOTE = 0x100  # SpanFlags: the span says whether its parent is remote
_SPAN_IS_REMOTE = 0x200


def otlp_json_spans(spans: Sequence[Any]) -> str:
    """An ExportTraceServiceRequest in OTLP/JSON for the SDK's ReadableSpans: per resource, per scope."""
    return _spans_request([(span, _dumps(_span_json(span))) for span in spans])


def otlp_json_span_requests(spans: Sequence[Any], *, line_bytes: int = LINE_BYTES) -> Iterator[str]:
    """The spans as ExportTraceServiceRequests in OTLP/JSON, each holding spans until their text reaches
    line_bytes (a span larger than that is a request of its own)."""
    chunk: list[tuple[Any, str]] = []
    size = 0
    for span in spans:
        text = _dumps(_span_json(span))
        chunk.append((span, text))
        size += len(text)
        if size >= line_bytes:
            yield _spans_request(chunk)
            chunk, size = [], 0
    if chunk:
        yield _spans_request(chunk)


def _spans_request(encoded: Sequence[tuple[Any, str]]) -> str:
    """The request for spans already encoded one by one, grouped per resource, per scope, in their order."""
    grouped: dict[Any, dict[Any, list[str]]] = {}
    for span, text in encoded:
        grouped.setdefault(span.resource, {}).setdefault(span.instrumentation_scope or None, []).append(text)
    resources = []
    for resource, scopes in grouped.items():
        scope_texts = [_object_text({"scope": _scope(scope)}, "spans", texts,
                                    scope.schema_url if scope is not None else None)
                       for scope, texts in scopes.items()]
        resources.append(_object_text({"resource": _resource(resource)}, "scopeSpans", scope_texts,
                                      resource.schema_url))
    return _object_text({}, "resourceSpans", resources, None)


def otlp_json_metrics(data: Any) -> str:
    """An ExportMetricsServiceRequest in OTLP/JSON for the SDK's MetricsData (small: one point per instrument and
    attribute set, so built whole)."""
    by_resource: dict[Any, list[dict[str, Any]]] = {}
    for resource_metrics in data.resource_metrics:
        by_resource[resource_metrics.resource] = [_scope_metrics(scope) for scope in resource_metrics.scope_metrics]
    resources = []
    for resource, scopes in by_resource.items():
        item: dict[str, Any] = {"resource": _resource(resource)}
        if scopes:
            item["scopeMetrics"] = scopes
        if resource.schema_url:
            item["schemaUrl"] = resource.schema_url
        resources.append(item)
    return _dumps({"resourceMetrics": resources} if resources else {})


def _object_text(head: dict[str, Any], key: str, item_texts: list[str], schema_url: str | None) -> str:
    """An object's JSON: head's fields, then key's list of already-encoded items (left out when empty), then the
    schema URL (when there is one)."""
    parts = [_dumps(head)[1:-1]] if head else []
    if item_texts:
        parts.append(f"{_dumps(key)}:[{','.join(item_texts)}]")
    if schema_url:
        parts.append(f'"schemaUrl":{_dumps(schema_url)}')
    return "{" + ",".join(parts) + "}"


def _resource(resource: Any) -> dict[str, Any]:
    return _with_attributes({}, "attributes", resource.attributes)


def _scope(scope: Any) -> dict[str, Any]:
    if scope is None:
        return {}
    encoded: dict[str, Any] = {}
    if scope.name:
        encoded["name"] = scope.name
    if scope.version:
        encoded["version"] = scope.version
    return _with_attributes(encoded, "attributes", scope.attributes)


def _span_json(span: Any) -> dict[str, Any]:
    context = span.get_span_context()
    encoded: dict[str, Any] = {"traceId": f"{context.trace_id:032x}", "spanId": f"{context.span_id:016x}"}
    if context.trace_state:
        encoded["traceState"] = ",".join(f"{key}={value}" for key, value in context.trace_state.items())
    if span.parent is not None:
        encoded["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.name:
        encoded["name"] = span.name
    encoded["kind"] = span.kind.value + 1  # the SDK's SpanKind counts from INTERNAL = 0, OTLP's from UNSPECIFIED
    _set_nanos(encoded, "startTimeUnixNano", span.start_time)
    _set_nanos(encoded, "endTimeUnixNano", span.end_time)
    _with_attributes(encoded, "attributes", span.attributes)
    _set_count(encoded, "droppedAttributesCount", span.dropped_attributes)
    if span.events:
        events = []
        for event in span.events:
            item: dict[str, Any] = {}
            _set_nanos(item, "timeUnixNano", event.timestamp)
            if event.name:
                item["name"] = event.name
            _with_attributes(item, "attributes", event.attributes)
            _set_count(item, "droppedAttributesCount", event.dropped_attributes)
            events.append(item)
        encoded["events"] = events
    _set_count(encoded, "droppedEventsCount", span.dropped_events)
    if span.links:
        links = []
        for link in span.links:
            item = {"traceId": f"{link.context.trace_id:032x}", "spanId": f"{link.context.span_id:016x}"}
            _with_attributes(item, "attributes", link.attributes)
            _set_count(item, "droppedAttributesCount", link.dropped_attributes)
            item["flags"] = _span_flags(link.context)
            links.append(item)
        encoded["links"] = links
    _set_count(encoded, "droppedLinksCount", span.dropped_links)
    if span.status is not None:
        status: dict[str, Any] = {}
        if span.status.description:
            status["message"] = span.status.description
        if span.status.status_code.value:
            status["code"] = span.status.status_code.value
        encoded["status"] = status
    encoded["flags"] = _span_flags(span.parent)
    return encoded


def _span_flags(parent: Any) -> int:
    return _SPAN_HAS_IS_REMOTE | (_SPAN_IS_REMOTE if parent is not None and parent.is_remote else 0)


def _scope_metrics(scope_metrics: Any) -> dict[str, Any]:
    scope = scope_metrics.scope
    encoded: dict[str, Any] = {"scope": _scope(scope)}
    metrics = [_metric(metric) for metric in scope_metrics.metrics]
    if metrics:
        encoded["metrics"] = metrics
    if scope.schema_url:
        encoded["schemaUrl"] = scope.schema_url
    return encoded


def _metric(metric: Any) -> dict[str, Any]:
    from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum

    encoded: dict[str, Any] = {}
    for key, value in (("name", metric.name), ("description", metric.description), ("unit", metric.unit)):
        if value:
            encoded[key] = value
    data = metric.data
    points = data.data_points
    if not points:
        return encoded  # no data: the metric's kind is left out, as the OTLP exporter leaves it
    if isinstance(data, Gauge):
        encoded["gauge"] = {"dataPoints": [_number_point(point, start=False) for point in points]}
    elif isinstance(data, Sum):
        encoded["sum"] = {"dataPoints": [_number_point(point, start=True) for point in points],
                          "aggregationTemporality": int(data.aggregation_temporality)}
        if data.is_monotonic:
            encoded["sum"]["isMonotonic"] = True
    elif isinstance(data, Histogram):
        encoded["histogram"] = {"dataPoints": [_histogram_point(point) for point in points],
                                "aggregationTemporality": int(data.aggregation_temporality)}
    # An exponential histogram never reaches the file: its reader asks for the MetricExporter's default
    # aggregation, explicit buckets.
    return encoded


def _number_point(point: Any, *, start: bool) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    if start:
        _set_nanos(encoded, "startTimeUnixNano", point.start_time_unix_nano)
    _set_nanos(encoded, "timeUnixNano", point.time_unix_nano)
    value = point.value
    if not isinstance(value, int):
        encoded["asDouble"] = _double(value)
    _set_exemplars(encoded, point.exemplars)
    if isinstance(value, int):
        encoded["asInt"] = str(value)
    return _with_attributes(encoded, "attributes", point.attributes)


def _histogram_point(point: Any) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    _set_nanos(encoded, "startTimeUnixNano", point.start_time_unix_nano)
    _set_nanos(encoded, "timeUnixNano", point.time_unix_nano)
    _set_nanos(encoded, "count", point.count)
    if point.sum is not None:
        encoded["sum"] = _double(point.sum)
    if point.bucket_counts:
        encoded["bucketCounts"] = [str(count) for count in point.bucket_counts]
    if point.explicit_bounds:
        encoded["explicitBounds"] = [_double(bound) for bound in point.explicit_bounds]
    _set_exemplars(encoded, point.exemplars)
    _with_attributes(encoded, "attributes", point.attributes)
    for key in ("min", "max"):
        if getattr(point, key) is not None:
            encoded[key] = _double(getattr(point, key))
    return encoded


def _set_exemplars(encoded: dict[str, Any], exemplars: Sequence[Any]) -> None:
    items = []
    for exemplar in exemplars:
        item: dict[str, Any] = {}
        _set_nanos(item, "timeUnixNano", exemplar.time_unix_nano)
        if isinstance(exemplar.value, float):
            item["asDouble"] = _double(exemplar.value)
        if exemplar.span_id is not None and exemplar.trace_id is not None:
            item["spanId"] = f"{exemplar.span_id:016x}"
            item["traceId"] = f"{exemplar.trace_id:032x}"
        if not isinstance(exemplar.value, float):
            item["asInt"] = str(exemplar.value)
        items.append(_with_attributes(item, "filteredAttributes", exemplar.filtered_attributes))
    if items:
        encoded["exemplars"] = items


def _with_attributes(encoded: dict[str, Any], key: str, attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    items = [{"key": name, "value": _any_value(value)} for name, value in (attributes or {}).items()]
    if items:
        encoded[key] = items
    return encoded


def _any_value(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": _double(value)}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        pairs = [{"key": str(key), "value": _any_value(item)} for key, item in value.items()]
        return {"kvlistValue": {"values": pairs} if pairs else {}}
    values = [_any_value(item) for item in value]  # a sequence: the SDK lets through no other kind
    return {"arrayValue": {"values": values} if values else {}}


def _double(value: float) -> float | str:
    """A double as the JSON mapping writes it: NaN and the infinities as strings."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _set_nanos(encoded: dict[str, Any], key: str, value: int | None) -> None:
    """A fixed64 (a time in nanoseconds, a count): a string, left out at zero."""
    if value:
        encoded[key] = str(value)


def _set_count(encoded: dict[str, Any], key: str, value: int | None) -> None:
    if value:
        encoded[key] = value


def read_spans(folder: Path, name: str = FILE_NAME) -> list[dict[str, Any]]:
    """Every span in the local file (and its rotated copies, oldest first), each a dict in the OTLP/JSON form
    with its resource's and scope's names left out: {"traceId", "spanId", "parentSpanId", "name", ...}."""
    path = file_path(folder, name)
    spans: list[dict[str, Any]] = []
    for part in [path.with_name(f"{path.name}.{n}") for n in range(KEEP_FILES, 0, -1)] + [path]:
        if not part.exists():
            continue
        for line in part.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                request = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash mid-write: the rest of the file still reads
            for resource in request.get("resourceSpans", []) if isinstance(request, dict) else []:
                for scope in resource.get("scopeSpans", []):
                    spans.extend(scope.get("spans", []))
    return spans


def attributes_of(span: Mapping[str, Any]) -> dict[str, Any]:
    """A span's (or event's) attributes from the OTLP/JSON form as plain values."""
    return {item["key"]: _plain(item.get("value", {})) for item in span.get("attributes", [])}


def _plain(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_plain(item) for item in value["arrayValue"].get("values", [])]
    return None


# --- spans -----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _span(name: str, attributes: Attributes, *, kind: str = "INTERNAL", parent: str | None = None,
          links: Sequence[str] = (), new_trace: bool = False) -> Iterator[Span]:
    live = _ensure()
    if live is None:
        yield OFF
        return
    trace_api = live.trace_api
    context = None
    if parent:
        context = live.propagator.extract({"traceparent": parent})
    elif new_trace:
        context = trace_api.set_span_in_context(trace_api.INVALID_SPAN)
    linked = [trace_api.Link(_span_context(live, text)) for text in links if text]
    with live.tracer.start_as_current_span(
        name, context=context, kind=getattr(trace_api.SpanKind, kind),
        attributes={key: _attribute(value) for key, value in attributes.items() if value is not None},
        links=[link for link in linked if link.context.is_valid], record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = _LiveSpan(span, live.capture)
        try:
            yield handle
        except BaseException as exc:
            handle.fail(type(exc).__name__)
            raise


def _span_context(live: _Live, traceparent_text: str) -> Any:
    context = live.propagator.extract({"traceparent": traceparent_text})
    return live.trace_api.get_current_span(context).get_span_context()


def run_span(agent: str, *, event_ids: Sequence[int], sources: Sequence[str], holder: str, generation: int,
             trusted: bool | None = None, parent: str | None = None, links: Sequence[str] = ()
             ) -> contextlib.AbstractContextManager[Span]:
    """The `invoke_agent {agent}` span of one run: a trace of its own (or under `parent`, a traceparent a
    webhook delivery brought), linked to the spans that fed it (`links`)."""
    return _span(f"invoke_agent {agent}", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
        "agent_console.event.ids": list(event_ids), "agent_console.event.sources": sorted(set(sources)),
        "agent_console.trusted": trusted, "agent_console.lease.holder": holder,
        "agent_console.lease.generation": generation,
    }, parent=parent, links=links, new_trace=parent is None)


def chat_span(model: str, *, conversation: str | None = None, max_tokens: int | None = None,
              server: str | None = None) -> contextlib.AbstractContextManager[Span]:
    """The `chat {model}` span of one Messages API call."""
    return _span(f"chat {model}", {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER, "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens, "gen_ai.conversation.id": conversation, "server.address": server,
    }, kind="CLIENT")


def chat_reply(span: Span, *, response_id: str, model: str, finish_reason: str | None, input_tokens: int,
               output_tokens: int, cache_read_tokens: int, cache_creation_tokens: int, cost_usd: float | None,
               request_model: str) -> None:
    """What a model call answered, on its span and in the token and cost metrics."""
    span.set_many({
        "gen_ai.response.id": response_id, "gen_ai.response.model": model,
        "gen_ai.response.finish_reasons": [finish_reason] if finish_reason else None,
        "gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.usage.cache_read.input_tokens": cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": cache_creation_tokens,
        "agent_console.cost.usd": cost_usd,
    })
    live = _ensure()
    if live is None:
        return
    common = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER,
              "gen_ai.request.model": request_model, "gen_ai.response.model": model}
    tokens = _instrument(live, "histogram", "gen_ai.client.token.usage", "{token}",
                         "Tokens of each model call, by type")
    tokens.record(input_tokens + cache_read_tokens + cache_creation_tokens, {**common, "gen_ai.token.type": "input"})
    tokens.record(output_tokens, {**common, "gen_ai.token.type": "output"})
    if cost_usd is not None:
        _instrument(live, "counter", "agent_console.cost", "USD", "Spend on model calls").add(cost_usd, common)


def tool_span(name: str, *, call_id: str, tool_type: str, mcp_session: str | None = None
              ) -> contextlib.AbstractContextManager[Span]:
    """The `execute_tool {name}` span of one tool call, whatever the policy decided."""
    mcp = name.startswith("mcp__")
    return _span(f"execute_tool {name}", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": tool_type, "mcp.method.name": "tools/call" if mcp else None,
        "mcp.session.id": mcp_session,
    })


def tool_decided(span: Span, *, decision: str, outcome: str, rule: str | None, replayed: bool) -> None:
    """The policy's decision and the call's outcome (done, error, deferred, refused, unknown)."""
    span.set_many({"agent_console.tool.decision": decision, "agent_console.tool.outcome": outcome,
                   "agent_console.policy.rule": rule, "agent_console.journal.replayed": replayed or None})
    if outcome in ("error", "unknown"):
        span.fail("tool_error" if outcome == "error" else "outcome_unknown")
    count("agent_console.tool.calls", "{call}", "Tool calls by decision and outcome",
          {"agent_console.tool.decision": decision, "agent_console.tool.outcome": outcome})


def service_span(name: str, attributes: Attributes, *, parent: str | None = None, links: Sequence[str] = (),
                 kind: str = "INTERNAL") -> contextlib.AbstractContextManager[Span]:
    """A span of the engine's own work: a webhook delivery stored, a timer fired, an outbox send."""
    return _span(name, attributes, kind=kind, parent=parent, links=links, new_trace=parent is None)


class RequestSpan(Span):
    """request_span's handle: set and fail as any span's, `keep` (context_to_keep's text for this span, None when
    telemetry is off), and a context manager that ends the span, failed with the type of an exception leaving it."""

    def __init__(self, span: Any = None, keep: str | None = None) -> None:
        self._span = span
        self.keep = keep

    def set(self, key: str, value: Any) -> None:
        if self._span is not None and value is not None:
            self._span.set_attribute(key, _attribute(value))

    def set_many(self, attributes: Attributes) -> None:
        for key, value in attributes.items():
            self.set(key, value)

    def fail(self, error_type: str) -> None:
        if self._span is not None:
            _LiveSpan(self._span, False).fail(error_type)

    def __enter__(self) -> RequestSpan:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if self._span is not None:
            if kind is not None:
                self.fail(kind.__name__)
            self._span.end()


_NO_REQUEST_SPAN = RequestSpan()


def request_span(name: str, attributes: Attributes, *, sender: str | None) -> RequestSpan:
    """service_span(name, attributes, parent=sender, kind="SERVER") for a request the receiver takes (a webhook
    delivery), with its context to keep (context_to_keep(parent=bool(sender))) as `keep`. The span is not made the
    current one, since nothing is traced under it in the handler: that context switch in and out, and
    service_span's wrappers, were a third of its cost on the receiver's path, where it runs once a request."""
    live = _ensure()
    if live is None:
        return _NO_REQUEST_SPAN
    trace_api = live.trace_api
    context = (live.propagator.extract({"traceparent": sender}) if sender
               else trace_api.set_span_in_context(trace_api.INVALID_SPAN))
    span = live.tracer.start_span(
        name, context=context, kind=trace_api.SpanKind.SERVER,
        attributes={key: _attribute(value) for key, value in attributes.items() if value is not None},
        record_exception=False, set_status_on_exception=False,
    )
    carrier: dict[str, str] = {}
    live.propagator.inject(carrier, context=trace_api.set_span_in_context(span))
    kept = carrier.get("traceparent")
    return RequestSpan(span, None if kept is None else kept if sender else _LINK_ONLY + kept)


def span_event(name: str, attributes: Attributes | None = None) -> None:
    """An event on the current span (the run's, a tool call's), if any."""
    live = _ensure()
    if live is None:
        return
    span = live.trace_api.get_current_span()
    if span.is_recording():
        _LiveSpan(span, live.capture).event(name, attributes)


def current() -> Span:
    """The current span's handle (the no-op one when there is none)."""
    live = _ensure()
    if live is None:
        return OFF
    span = live.trace_api.get_current_span()
    return _LiveSpan(span, live.capture) if span.is_recording() else OFF


def traceparent() -> str | None:
    """The current span's W3C traceparent, for MCP calls' _meta and outgoing HTTP requests; None when off."""
    live = _ensure()
    if live is None:
        return None
    carrier: dict[str, str] = {}
    live.propagator.inject(carrier)
    return carrier.get("traceparent")


# A span context kept with an event (inbox.trace) is the run's parent when a sender's trace came with the
# delivery, and only a link otherwise (a delivery whose sender does not trace, a timer's firing): the latter
# are kept with this prefix. Rows kept before it are all parents, as they read.
_LINK_ONLY = "link "


def context_to_keep(*, parent: bool) -> str | None:
    """The current span's context to keep with the events it stores: the run that takes them is traced under
    it (`parent`) or links to it. None when off."""
    current_context = traceparent()
    if current_context is None:
        return None
    return current_context if parent else _LINK_ONLY + current_context


def parent_and_links(kept: Sequence[str | None]) -> tuple[str | None, list[str]]:
    """A run's parent (the first event that keeps a sender's trace) and its links (every other kept context),
    from its events' kept contexts (context_to_keep)."""
    parents = [text for text in kept if text and not text.startswith(_LINK_ONLY)]
    links = [text.removeprefix(_LINK_ONLY) for text in kept if text and text.startswith(_LINK_ONLY)]
    return (parents[0] if parents else None), parents[1:] + links


def inject(headers: dict[str, str]) -> dict[str, str]:
    """headers with the current traceparent (and tracestate) added, when there is one."""
    live = _ensure()
    if live is not None:
        live.propagator.inject(headers)
    return headers


# --- metrics ---------------------------------------------------------------------------------------------
def _instrument(live: _Live, kind: str, name: str, unit: str, description: str) -> Any:
    instrument = live.instruments.get(name)
    if instrument is None:
        meter = live.meter_provider.get_meter(SCOPE)
        make = {"histogram": meter.create_histogram, "gauge": meter.create_gauge}.get(kind, meter.create_counter)
        instrument = live.instruments.setdefault(name, make(name, unit=unit, description=description))
    return instrument


def count(name: str, unit: str, description: str, attributes: Attributes, amount: float = 1) -> None:
    """Add to a counter (created on first use)."""
    live = _ensure()
    if live is not None:
        _instrument(live, "counter", name, unit, description).add(amount, dict(attributes))


def gauge(name: str, unit: str, description: str, value: float, attributes: Attributes) -> None:
    """Set a gauge's current value (created on first use)."""
    live = _ensure()
    if live is not None:
        _instrument(live, "gauge", name, unit, description).set(value, dict(attributes))


def record(name: str, unit: str, description: str, value: float, attributes: Attributes) -> None:
    """Record one value in a histogram (created on first use)."""
    live = _ensure()
    if live is not None:
        _instrument(live, "histogram", name, unit, description).record(value, dict(attributes))


def monotonic() -> float:
    return time.monotonic()


# --- reading the file back: `agent-console trace EVENT_ID` ---------------------------------------------
def runs_of_event(spans: Sequence[Mapping[str, Any]], event_id: int, *,
                  claimed: Callable[[int, str, int], bool] | None = None) -> list[list[tuple[int, Mapping[str, Any]]]]:
    """The traces of the runs that took `event_id`, oldest first: each its spans in tree order as (depth, span),
    its invoke_agent span first. claimed(event id, holder, generation): whether the inbox asked about saw that
    holder claim that event under that generation; a run none of whose events it claimed so is another inbox's
    (event ids repeat across inboxes, a lease holder's id does not), and left out."""
    by_trace: dict[str, list[Mapping[str, Any]]] = {}
    for span in spans:
        by_trace.setdefault(str(span.get("traceId")), []).append(span)
    roots = [span for span in spans if str(span.get("name", "")).startswith("invoke_agent")
             and event_id in _run_events(attributes_of(span))
             and (claimed is None or _claimed_by_run(attributes_of(span), claimed))]
    roots.sort(key=lambda span: int(span.get("startTimeUnixNano", 0)))
    runs: list[list[tuple[int, Mapping[str, Any]]]] = []
    for root in roots:
        children: dict[str, list[Mapping[str, Any]]] = {}
        for span in by_trace.get(str(root.get("traceId")), []):
            children.setdefault(str(span.get("parentSpanId", "")), []).append(span)
        runs.append(_walk(root, children))
    return runs


def ancestors(spans: Sequence[Mapping[str, Any]], span: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The spans in the file above `span`, nearest first: for a run traced under a delivery, its `ingest` span
    (and the sender's spans, when they are in the file too)."""
    by_id = {(str(s.get("traceId")), str(s.get("spanId"))): s for s in spans}
    found: list[Mapping[str, Any]] = []
    parent = by_id.get((str(span.get("traceId")), str(span.get("parentSpanId", ""))))
    while parent is not None and len(found) < 16:
        found.append(parent)
        parent = by_id.get((str(parent.get("traceId")), str(parent.get("parentSpanId", ""))))
    return found


def _claimed_by_run(attrs: Mapping[str, Any], claimed: Callable[[int, str, int], bool]) -> bool:
    holder, generation = attrs.get("agent_console.lease.holder"), attrs.get("agent_console.lease.generation")
    if not isinstance(holder, str) or not isinstance(generation, int):
        return False
    return any(claimed(int(event), holder, generation) for event in attrs.get("agent_console.event.ids") or [])


def _run_events(attrs: Mapping[str, Any]) -> list[int]:
    """The events a run took, and the events whose conversation it resumed (an approval's answer)."""
    return [*(attrs.get("agent_console.event.ids") or []), *(attrs.get("agent_console.event.resumes") or [])]


def _walk(root: Mapping[str, Any], children: Mapping[str, list[Mapping[str, Any]]]
          ) -> list[tuple[int, Mapping[str, Any]]]:
    tree: list[tuple[int, Mapping[str, Any]]] = []
    stack: list[tuple[int, Mapping[str, Any]]] = [(0, root)]
    while stack:
        depth, span = stack.pop()
        tree.append((depth, span))
        kids = sorted(children.get(str(span.get("spanId")), []), key=lambda s: int(s.get("startTimeUnixNano", 0)))
        stack.extend((depth + 1, kid) for kid in reversed(kids))
    return tree


def describe(span: Mapping[str, Any]) -> str:
    """The few attributes worth a glance, in words: tokens and cost of a model call, decision and outcome of a
    tool call, the events and lease of a run; error.type when it failed."""
    attrs = attributes_of(span)
    parts: list[str] = []
    if "agent_console.event.ids" in attrs:
        parts.append(f"events {', '.join(str(i) for i in attrs['agent_console.event.ids'])}, generation "
                     f"{attrs.get('agent_console.lease.generation')} ({attrs.get('agent_console.lease.holder')})")
    if "gen_ai.usage.output_tokens" in attrs:
        read = attrs.get("gen_ai.usage.cache_read.input_tokens", 0)
        written = attrs.get("gen_ai.usage.cache_creation.input_tokens", 0)
        parts.append(f"{attrs.get('gen_ai.usage.input_tokens', 0)} in (+{read} cache read, {written} cache write) / "
                     f"{attrs['gen_ai.usage.output_tokens']} out tokens")
        if attrs.get("agent_console.cost.usd") is not None:
            parts.append(f"${attrs['agent_console.cost.usd']:.4f}")
        if attrs.get("gen_ai.response.finish_reasons"):
            parts.append("stop " + ", ".join(attrs["gen_ai.response.finish_reasons"]))
    if "agent_console.tool.outcome" in attrs:
        parts.append(f"{attrs.get('agent_console.tool.decision')} → {attrs['agent_console.tool.outcome']}")
    if attrs.get("agent_console.journal.replayed"):
        parts.append("replayed from the journal (no new call, no cost)")
    if "agent_console.ingest.verdict" in attrs:
        parts.append(f"delivery {attrs.get('agent_console.event.source_id')}, {attrs['agent_console.ingest.verdict']}")
    if "error.type" in attrs:
        parts.append(f"error {attrs['error.type']}")
    return "; ".join(parts)


def seconds(span: Mapping[str, Any]) -> float:
    return (int(span.get("endTimeUnixNano", 0)) - int(span.get("startTimeUnixNano", 0))) / 1e9
