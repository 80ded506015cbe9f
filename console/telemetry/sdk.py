"""Loading OpenTelemetry's SDK, on the first span or metric (never at import): our own tracer and meter providers,
the local file's exporters, and OTLP/HTTP when the standard OTEL_EXPORTER_OTLP_* variables name an endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.telemetry.otlp_file import (
    FILE_NAME,
    MAX_FILE_BYTES,
    JsonLinesFile,
    file_metric_exporter,
    file_path,
    file_span_exporter,
)

INBOX_ATTRIBUTE = "agent_console.inbox"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SCOPE = "agent-console"
# Either names an OTLP endpoint: traces (and metrics) then also go there over OTLP/HTTP.
_TRACE_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_METRIC_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")


@dataclass
class Config:
    folder: Path
    env: Mapping[str, str]
    max_bytes: int = MAX_FILE_BYTES
    name: str = FILE_NAME
    inbox: str | None = None


@dataclass
class Live:
    """The SDK's parts once loaded: a tracer provider and a meter provider of our own (never the global ones:
    a host application's telemetry is its own business)."""

    tracer: Any
    tracer_provider: Any
    meter_provider: Any
    trace_api: Any
    propagator: Any
    capture: bool
    instruments: dict[str, Any] = field(default_factory=dict)


def load(config: Config) -> Live:
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
    tracer_provider.add_span_processor(BatchSpanProcessor(file_span_exporter(sink)))
    readers = [PeriodicExportingMetricReader(file_metric_exporter(sink), export_interval_millis=60_000)]
    if any(env.get(name) for name in _TRACE_ENDPOINTS):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if any(env.get(name) for name in _METRIC_ENDPOINTS):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=60_000))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    capture = env.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
    return Live(tracer_provider.get_tracer(SCOPE, __version__), tracer_provider, meter_provider, trace_api,
                 TraceContextTextMapPropagator(), capture)
