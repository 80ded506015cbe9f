"""Reading the telemetry file back for `agent-console trace EVENT_ID`: the runs that took an event, their spans in
tree order, each described in a line."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from console.telemetry.otlp_file import attributes_of


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
