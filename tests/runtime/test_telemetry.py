"""Traces of real runs (issue 24): the engine on a real inbox file runs the Claude agent against the Messages API
stand-in, with a recording MCP server over stdio; the local OTLP JSON-lines file then holds one trace per run
in the GenAI conventions, no content unless opted in, and no secret in any byte."""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from console import telemetry
from console.agents.claude import ClaudeAgent
from console.agents.gateway import ToolGateway
from console.agents.mcp import McpHub, McpServerConfig
from console.assembly import build_engine
from console.cli import main
from console.runtime.engine import Engine
from console.trust.policy import DEFAULT_ALLOW, Policy
from tests.agents.mcp_servers import read_calls, stdio_command
from tests.agents.stand_in import FakeClaude, serve_stand_in, text, tool
from tests.agents.test_claude_agent import FAKE_KEY
from tests.runtime.test_engine import make_settings
from tests.support import read_until

REFUND = "mcp__rec__refund"
LOOKUP = "mcp__rec__lookup_order"
OWN_FILE = "inbox.db.telemetry.jsonl"  # the inbox's own file (Settings.telemetry_file) beside inbox.db
SERVER_SECRET = "tok-" + "9f3b" * 6  # substituted into the MCP server's env: never in any telemetry byte


@pytest.fixture
def claude() -> AsyncIterator[FakeClaude]:
    with serve_stand_in() as fake:
        yield fake


class Rig:
    def __init__(self, tmp_path: Path, claude: FakeClaude) -> None:
        self.folder = tmp_path
        self.calls_log = tmp_path / "rec.calls"
        command = stdio_command("rec", self.calls_log)
        config = McpServerConfig(**{**command, "env": {**command["env"], "SHOP_TOKEN": "${SHOP_TOKEN}"}},
                                 call_timeout=10.0, trusted=True)
        hub = McpHub({"rec": config}, env={"SHOP_TOKEN": SERVER_SECRET}, backoff_base=0.05, backoff_max=0.2)
        gateway = ToolGateway(Policy(allow=(*DEFAULT_ALLOW, LOOKUP), ask=(REFUND,)), mcp=hub)
        self.agent = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=512, base_url=claude.url,
                                 tools=gateway)

    def engine(self, **settings: Any) -> Engine:
        return build_engine(make_settings(self.folder, **settings), agent=self.agent, holder="test-worker",
                            idle_cap=0.1, install_defaults=False)


def spans_by_trace() -> Callable[[Path], dict[str, list[dict[str, Any]]]]:
    def read(folder: Path) -> dict[str, list[dict[str, Any]]]:
        traces: dict[str, list[dict[str, Any]]] = {}
        for span in telemetry.read_spans(folder, OWN_FILE):
            traces.setdefault(span["traceId"], []).append(span)
        return traces
    return read


def metric_points(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each metric in the file, by name: its data points' attributes."""
    found: dict[str, list[dict[str, Any]]] = {}
    for line in telemetry.file_path(folder, OWN_FILE).read_text().splitlines():
        for resource in json.loads(line).get("resourceMetrics", []):
            for scope in resource.get("scopeMetrics", []):
                for metric in scope.get("metrics", []):
                    data = next(v for k, v in metric.items() if k in ("sum", "gauge", "histogram"))
                    found.setdefault(metric["name"], []).extend(
                        telemetry.attributes_of(point) for point in data.get("dataPoints", []))
    return found


def named(spans: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return sorted((s for s in spans if s["name"].startswith(prefix)), key=lambda s: int(s["startTimeUnixNano"]))


async def approve_and_finish(rig: Rig, claude: FakeClaude, engine: Engine) -> None:
    """Run 1 looks the order up (allowed) and asks for the refund; the owner says yes from the console; run 2
    makes the refund and tells the owner."""
    claude.reply(text("Checking."), tool("t1", LOOKUP, order="QZX881"))
    claude.reply(tool("t2", REFUND, order="QZX881"))
    await engine.ingest("chat", "c1", {"text": "refund order QZX881 please"})
    [pending] = await read_until(engine, lambda s: s.pending_approvals(), limit=30)
    claude.reply(tool("t3", "send_message", text="Refunded order QZX881."))
    claude.reply(text("Done."))
    assert await engine.answer(pending.request_id, "yes") == "yes"
    await read_until(engine, lambda s: [m for m in s.outbox_messages() if "Refunded" in m.body], limit=30)
    await read_until(engine, lambda s: s.counts().get("running", 0) == 0 and s.counts().get("pending", 0) == 0,
                     limit=30)


async def test_each_run_is_one_trace_with_chat_and_tool_spans_and_the_approval_as_events(
    tmp_path: Path, claude: FakeClaude
) -> None:
    rig = Rig(tmp_path, claude)
    engine = rig.engine()
    await engine.start()
    try:
        await approve_and_finish(rig, claude, engine)
    finally:
        await engine.stop()
        rig.agent.close()

    traces = spans_by_trace()(tmp_path)
    runs = [spans for spans in traces.values() if named(spans, "invoke_agent")]
    assert len(runs) == 2  # the run that asked, and the run the answer started
    asking, answered = sorted(runs, key=lambda spans: int(named(spans, "invoke_agent")[0]["startTimeUnixNano"]))

    [root] = named(asking, "invoke_agent claude")
    attrs = telemetry.attributes_of(root)
    assert "parentSpanId" not in root or not root["parentSpanId"]
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["agent_console.event.sources"] == ["chat"]
    # The owner's own chat message: the run stayed trusted (a webhook's is not: tests/edges/test_telemetry_edges.py).
    assert attrs["agent_console.trusted"] is True and "agent_console.tainted_by" not in attrs
    assert attrs["agent_console.lease.holder"] == "test-worker" and attrs["agent_console.lease.generation"] >= 1
    chats = named(asking, "chat claude-sonnet-5-5")
    assert len(chats) == 2 and all(c["parentSpanId"] == root["spanId"] for c in chats)
    chat = telemetry.attributes_of(chats[0])
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.provider.name"] == "anthropic"
    assert chat["gen_ai.request.model"] == "claude-sonnet-5-5" and chat["gen_ai.response.model"]
    assert chat["gen_ai.response.id"] and chat["gen_ai.response.finish_reasons"] == ["tool_use"]
    billed = claude.usages[0]  # what the stand-in billed for the first call
    assert (chat["gen_ai.usage.input_tokens"], chat["gen_ai.usage.output_tokens"],
            chat["gen_ai.usage.cache_read.input_tokens"], chat["gen_ai.usage.cache_creation.input_tokens"]) == (
        billed["input_tokens"], billed["output_tokens"], billed["cache_read_input_tokens"],
        billed["cache_creation_input_tokens"])
    assert billed["output_tokens"] > 0
    assert chat["gen_ai.conversation.id"].startswith("claude:")
    assert chat["agent_console.cost.usd"] > 0
    assert chats[0]["kind"] == 3  # SPAN_KIND_CLIENT

    [lookup] = named(asking, f"execute_tool {LOOKUP}")
    looked = telemetry.attributes_of(lookup)
    assert lookup["parentSpanId"] == root["spanId"]
    assert (looked["gen_ai.tool.name"], looked["gen_ai.tool.call.id"], looked["gen_ai.tool.type"]) == (
        LOOKUP, "t1", "extension")
    assert looked["mcp.method.name"] == "tools/call"
    assert (looked["agent_console.tool.decision"], looked["agent_console.tool.outcome"]) == ("allowed", "done")
    [ask] = named(asking, f"execute_tool {REFUND}")
    assert telemetry.attributes_of(ask)["agent_console.tool.decision"] == "asked"
    assert telemetry.attributes_of(ask)["agent_console.tool.outcome"] == "deferred"
    assert [e["name"] for e in ask.get("events", [])] == ["approval.asked"]

    # The MCP server got the lookup's span as its parent (_meta.traceparent).
    [recorded] = [c for c in read_calls(rig.calls_log) if c["tool"] == "lookup_order"]
    assert recorded["traceparent"].startswith(f"00-{lookup['traceId']}-{lookup['spanId']}-")

    [second] = named(answered, "invoke_agent claude")
    assert second["traceId"] != root["traceId"]
    assert telemetry.attributes_of(second)["agent_console.trusted"] is True  # the resumed conversation's trust
    [refund] = named(answered, f"execute_tool {REFUND}")
    refunded = telemetry.attributes_of(refund)
    assert (refunded["agent_console.tool.decision"], refunded["agent_console.tool.outcome"]) == ("approved", "done")
    [answer] = [e for e in second.get("events", []) if e["name"] == "approval.answered"]
    answer_attrs = telemetry.attributes_of(answer)
    assert answer_attrs["agent_console.approval.outcome"] == "yes"
    assert answer_attrs["agent_console.approval.channel"] == "console"
    assert answer_attrs["agent_console.approval.waited_s"] >= 0

    # The metrics went to the same file: each instrument with its data points' attributes.
    metrics = metric_points(tmp_path)
    assert {"agent_console.runs", "agent_console.run.duration", "gen_ai.client.token.usage", "agent_console.cost",
            "agent_console.tool.calls", "agent_console.approvals", "agent_console.approval.wait",
            "agent_console.events", "agent_console.outbox.lag", "agent_console.lease.takeovers",
            "agent_console.refused_finishes"} <= set(metrics)
    assert {"done"} <= {p.get("agent_console.run.outcome") for p in metrics["agent_console.runs"]}
    assert {("allowed", "done"), ("asked", "deferred"), ("approved", "done")} <= {
        (p.get("agent_console.tool.decision"), p.get("agent_console.tool.outcome"))
        for p in metrics["agent_console.tool.calls"]}
    assert {("yes", "console")} == {(p.get("agent_console.approval.outcome"), p.get("agent_console.approval.channel"))
                                    for p in metrics["agent_console.approvals"]}
    assert {"input", "output"} == {p.get("gen_ai.token.type") for p in metrics["gen_ai.client.token.usage"]}

    # `agent-console trace EVENT_ID`: both runs of the chat event (the second resumed its conversation), as trees.
    asker = telemetry.attributes_of(root)["agent_console.event.ids"][0]
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "inbox.db"), "trace", str(asker)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split("  ")[0] for line in lines if line.startswith("run ")] == ["run 1", "run 2"]
    assert any(line.startswith("    chat claude-sonnet-5-5  +") and "out tokens" in line for line in lines)
    assert any(line.startswith(f"    execute_tool {REFUND}") and "asked → deferred" in line for line in lines)
    assert any(line.startswith(f"    execute_tool {REFUND}") and "approved → done" in line for line in lines)
    assert any("· approval.answered" in line and "channel console" in line for line in lines)
    missing = CliRunner().invoke(main, ["--db", str(tmp_path / "inbox.db"), "trace", "999"])
    assert missing.exit_code == 2 and "no run of event 999" in missing.output

    raw = b"".join(p.read_bytes() for p in tmp_path.glob("*telemetry.jsonl*"))
    assert b"QZX881" not in raw and b"refund order" not in raw and b"Refunded" not in raw  # no content by default
    assert FAKE_KEY.encode() not in raw and SERVER_SECRET.encode() not in raw
    assert stat.S_IMODE(telemetry.file_path(tmp_path, OWN_FILE).stat().st_mode) == 0o600


async def test_content_is_recorded_only_on_the_standard_opt_in_and_still_without_secrets(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    rig = Rig(tmp_path, claude)
    engine = rig.engine()
    await engine.start()
    try:
        await approve_and_finish(rig, claude, engine)
    finally:
        await engine.stop()
        rig.agent.close()
    spans = telemetry.read_spans(tmp_path, OWN_FILE)
    [lookup] = [s for s in spans if s["name"] == f"execute_tool {LOOKUP}"]
    assert '"QZX881"' in telemetry.attributes_of(lookup)["gen_ai.tool.call.arguments"]
    chat = telemetry.attributes_of(named(spans, "chat")[0])
    assert "refund order QZX881 please" in chat["gen_ai.input.messages"]
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("*telemetry.jsonl*"))
    assert FAKE_KEY.encode() not in raw and SERVER_SECRET.encode() not in raw


async def test_telemetry_off_writes_nothing(tmp_path: Path, claude: FakeClaude) -> None:
    rig = Rig(tmp_path, claude)
    engine = rig.engine(telemetry=False)
    await engine.start()
    try:
        await approve_and_finish(rig, claude, engine)
    finally:
        await engine.stop()
        rig.agent.close()
    assert not list(tmp_path.glob("*telemetry.jsonl*"))
    [recorded] = [c for c in read_calls(rig.calls_log) if c["tool"] == "lookup_order"]
    assert recorded["traceparent"] is None
