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

The package: this module is the span and metric API the callers use; `sdk.py` loads OpenTelemetry's SDK on the first
span; `otlp_file.py` is the local file's exporters, its OTLP/JSON encoding and its reading back; `traces.py` reads a
run's traces for `agent-console trace`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from console.telemetry.otlp_file import (
    FILE_NAME,
    KEEP_FILES,
    LINE_BYTES,
    MAX_FILE_BYTES,
    JsonLinesFile,
    attributes_of,
    file_path,
    otlp_json_metrics,
    otlp_json_span_requests,
    otlp_json_spans,
    read_spans,
)
from console.telemetry.sdk import CAPTURE_CONTENT_ENV, INBOX_ATTRIBUTE, SCOPE, Config, Live, load
from console.telemetry.traces import ancestors, describe, runs_of_event, seconds

__all__ = ["CAPTURE_CONTENT_ENV", "FILE_NAME", "INBOX_ATTRIBUTE", "KEEP_FILES", "LINE_BYTES", "MAX_FILE_BYTES",
           "PROVIDER", "SCOPE", "JsonLinesFile", "RequestSpan", "Span", "ancestors", "attributes_of",
           "capture_content", "chat_reply", "chat_span", "configure", "context_to_keep", "count", "current",
           "describe", "enabled", "file_path", "flush", "gauge", "inject", "monotonic", "otlp_json_metrics",
           "otlp_json_span_requests", "otlp_json_spans", "parent_and_links", "preload", "read_spans", "record",
           "request_span", "run_span", "runs_of_event", "seconds", "service_span", "shutdown", "span_event",
           "tool_decided", "tool_span", "traceparent"]
PROVIDER = "anthropic"
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
_lock = threading.Lock()
_config: Config | None = None
_live: Live | None = None


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
        _config = (Config(folder, environment, max_bytes, name, inbox)
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


def _ensure() -> Live | None:
    global _live
    live = _live
    if live is not None or _config is None:
        return live
    with _lock:
        if _live is None and _config is not None:
            _live = load(_config)
        return _live


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


def _span_context(live: Live, traceparent_text: str) -> Any:
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
              server: str | None = None, provider: str = PROVIDER) -> contextlib.AbstractContextManager[Span]:
    """The `chat {model}` span of one model call (provider: "anthropic", "openai")."""
    return _span(f"chat {model}", {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens, "gen_ai.conversation.id": conversation, "server.address": server,
    }, kind="CLIENT")


def chat_reply(span: Span, *, response_id: str, model: str, finish_reason: str | None, input_tokens: int,
               output_tokens: int, cache_read_tokens: int, cache_creation_tokens: int, cost_usd: float | None,
               request_model: str, provider: str = PROVIDER) -> None:
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
    common = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
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
def _instrument(live: Live, kind: str, name: str, unit: str, description: str) -> Any:
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

