"""Python tools found through the `agent_console.tools` entry points of an installed distribution (a real
dist-info on sys.path), described to the model from their type hints and docstring, and run under the policy."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.agents.base import RunContext
from console.agents.gateway import ToolGateway
from console.agents.tools import ToolCall, load_python_tools
from console.core import Store
from console.trust.policy import Policy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tools"
NOW = 1_790_000_000


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fixture distribution on sys.path, as `pip install` would leave it; its calls go to a log file."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("TEST_SHOP_LOG", str(log))
    monkeypatch.syspath_prepend(str(FIXTURES))
    yield log
    sys.modules.pop("fixture_shop_tools", None)


def test_entry_point_functions_become_tools_with_schemas_from_their_hints(
    installed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = load_python_tools()
    assert sorted(tools) == ["delete_branch", "lookup_order", "refund"]
    assert "python tool 'broken'" in caplog.text and "left out" in caplog.text  # one broken entry point only
    refund = tools["refund"].spec
    assert refund.description == "Refund an order, in full unless an amount is given."
    assert refund.input_schema["required"] == ["order"]
    assert refund.input_schema["properties"]["order"]["type"] == "string"
    assert {"type": "number"} in refund.input_schema["properties"]["amount"]["anyOf"]


def test_a_python_tool_runs_once_under_the_policy(installed: Path, store: Store) -> None:
    gateway = ToolGateway(Policy(allow=("lookup_order",), ask=("refund",), deny=("delete_branch",)),
                          python_tools=load_python_tools())
    store.ingest("chat", "m1", {"text": "orders"}, now=NOW)
    gen = store.acquire("w", now=NOW)
    assert gen is not None
    ctx = RunContext(store, store.claim_batch("w", gen, now=NOW), NOW, "w", gen, approval_expiry=600)
    (event,) = ctx.events
    sources = ctx.sources()
    looked = gateway.call(ctx, ToolCall("u1", "lookup_order", {"order": "7"}), event=event, sources=sources)
    # The same call in a later run of the event (a retry) is found done: its journalled result comes back.
    retry = RunContext(store, [event], NOW, "w", gen, approval_expiry=600)
    again = gateway.call(retry, ToolCall("u9", "lookup_order", {"order": "7"}), event=event, sources=sources)
    denied = gateway.call(ctx, ToolCall("u2", "delete_branch", {"branch": "main"}), event=event, sources=sources)
    bad = gateway.call(ctx, ToolCall("u3", "lookup_order", {"order": 7}), event=event, sources=sources)
    asked = gateway.call(ctx, ToolCall("u4", "refund", {"order": "7", "amount": 5}), event=event, sources=sources)
    assert (looked.outcome, looked.result) == ("done", {"order": "7", "status": "paid"})
    assert again.result == looked.result  # the same call replays its journalled result, whatever its use id
    assert (denied.outcome, denied.decision) == ("error", "denied")
    assert bad.outcome == "error" and "is not of type 'string'" in bad.text
    assert asked.outcome == "deferred"
    assert ctx.finish()
    assert installed.read_text().splitlines() == ["lookup_order 7"]
    (approval,) = store.pending_approvals()
    assert (approval.tool, approval.arguments) == ("refund", {"amount": 5, "order": "7"})
