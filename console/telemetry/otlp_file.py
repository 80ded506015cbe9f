"""The local OTLP JSON-lines file: the exporters that write it (one OTLP/JSON export request a line, owner-only,
rotated by size), the OTLP/JSON encoding of the SDK's spans and metrics (no protobuf), and reading it back."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

FILE_NAME = "telemetry.jsonl"  # the file every inbox in a folder shared before each had its own (Settings)
MAX_FILE_BYTES = 16 * 1024 * 1024  # then the file is rotated: telemetry.jsonl.1 .. .KEEP_FILES
KEEP_FILES = 3


def file_path(folder: Path, name: str = FILE_NAME) -> Path:
    return folder / name


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


def file_span_exporter(sink: JsonLinesFile) -> Any:
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


def file_metric_exporter(sink: JsonLinesFile) -> Any:
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

