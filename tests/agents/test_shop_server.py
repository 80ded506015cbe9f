"""The shipped example MCP server, run the way the demo runs it (`python -m console.examples.shop_server` over
stdio), reached through the hub."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.agents.mcp import IDEMPOTENCY_META_KEY, McpHub
from console.agents.mcp_config import McpServerConfig
from console.examples import shop_server
from tests.agents.mcp_servers import REPO, sandbox_places


@pytest.fixture(scope="module")
def shop_state_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shop") / "shop.json"


@pytest.fixture(scope="module")
def shop_server_hub(shop_state_file: Path) -> Iterator[McpHub]:
    """One server process for the module (starting one is most of each test's time): the server reads its state
    file at every call and seeds a missing one, so each test still starts from the seeded shop (state_file)."""
    config = McpServerConfig("shop", command=sys.executable, args=("-m", "console.examples.shop_server"),
                             env={"SHOP_STATE": "${SHOP_STATE}"}, data_dir=shop_state_file.parent, read_paths=(REPO,))
    hub = McpHub({"shop": config}, env={"SHOP_STATE": str(shop_state_file), "PATH": os.environ["PATH"]},
                 places=sandbox_places(shop_state_file.parent.parent))
    hub.start()
    try:
        yield hub
    finally:
        hub.close()


@pytest.fixture
def state_file(shop_state_file: Path) -> Path:
    """The shop's state, gone before each test: the next call starts from the seeded orders and no calls."""
    shop_state_file.unlink(missing_ok=True)
    return shop_state_file


@pytest.fixture
def shop(shop_server_hub: McpHub, state_file: Path) -> McpHub:
    return shop_server_hub


def state(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def test_it_offers_the_four_tools_with_read_only_ones_marked(shop: McpHub) -> None:
    tools, unavailable = shop.tools()

    assert unavailable == {}
    assert sorted(tool.tool for tool in tools) == ["delete_order", "list_orders", "lookup_order", "refund"]
    refund = next(tool for tool in tools if tool.tool == "refund")
    assert refund.input_schema["required"] == ["order"]
    assert set(refund.input_schema["properties"]) == {"order", "amount"}


def test_lookup_and_list_read_the_seeded_orders(shop: McpHub, state_file: Path) -> None:
    found = shop.call("mcp__shop__lookup_order", {"order": "881"}, idempotency_key="k1")
    assert found["structured"] == {"order": "881", "status": "paid", "amount": 42.5, "refunded": 0.0,
                                   "customer": "Ada Lovelace"}
    listed = shop.call("mcp__shop__list_orders", {}, idempotency_key="k2")["structured"]["result"]
    assert [order["order"] for order in listed] == sorted(shop_server.SEED_ORDERS)
    missing = shop.call("mcp__shop__lookup_order", {"order": "999"}, idempotency_key="k3")
    assert missing["is_error"] and "there is no order 999" in missing["text"]
    assert state(state_file)["calls"] == {"lookup_order": 2, "list_orders": 1}
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600


def test_a_refund_repeated_with_its_key_happens_once(shop: McpHub, state_file: Path) -> None:
    first = shop.call("mcp__shop__refund", {"order": "881"}, idempotency_key="event-7/toolu_1")
    again = shop.call("mcp__shop__refund", {"order": "881"}, idempotency_key="event-7/toolu_1")

    assert first == again
    assert first["structured"]["refunded_now"] == 42.5 and first["structured"]["status"] == "refunded"
    after = state(state_file)
    assert after["orders"]["881"]["refunded"] == 42.5
    assert after["calls"] == {"refund": 1}
    assert after["replays"] == {"refund": 1}
    # Another key is another refund: refused, as there is nothing left to refund.
    other = shop.call("mcp__shop__refund", {"order": "881"}, idempotency_key="event-8/toolu_1")
    assert other["is_error"] and "order 881 is already refunded" in other["text"]
    assert state(state_file)["calls"] == {"refund": 2}


def test_a_partial_refund_and_its_limits(shop: McpHub, state_file: Path) -> None:
    part = shop.call("mcp__shop__refund", {"order": "883", "amount": 20}, idempotency_key="a")["structured"]
    assert (part["refunded_now"], part["refunded"], part["status"]) == (20.0, 20.0, "partially refunded")
    too_much = shop.call("mcp__shop__refund", {"order": "883", "amount": 500}, idempotency_key="b")
    assert too_much["is_error"] and "order 883 has only 100.00 left to refund" in too_much["text"]
    rest = shop.call("mcp__shop__refund", {"order": "883"}, idempotency_key="c")["structured"]
    assert (rest["refunded_now"], rest["status"]) == (100.0, "refunded")
    # A refused call left no record under its key: nothing happened that a repeat would have to skip.
    assert set(state(state_file)["idempotency"]) == {"a", "c"}


def test_a_deletion_repeated_with_its_key_happens_once(shop: McpHub, state_file: Path) -> None:
    first = shop.call("mcp__shop__delete_order", {"order": "882"}, idempotency_key="d1")
    again = shop.call("mcp__shop__delete_order", {"order": "882"}, idempotency_key="d1")

    assert first == again == {"is_error": False, "text": first["text"],
                              "structured": {"order": "882", "deleted": True}}
    assert "882" not in state(state_file)["orders"]
    assert (state(state_file)["calls"], state(state_file)["replays"]) == ({"delete_order": 1}, {"delete_order": 1})
    gone = shop.call("mcp__shop__delete_order", {"order": "882"}, idempotency_key="d2")
    assert gone["is_error"] and "there is no order 882" in gone["text"]


def test_a_key_used_for_one_tool_is_refused_for_another(shop: McpHub, state_file: Path) -> None:
    shop.call("mcp__shop__refund", {"order": "884"}, idempotency_key="same")

    reused = shop.call("mcp__shop__delete_order", {"order": "884"}, idempotency_key="same")

    assert reused["is_error"] and "already used for a refund call" in reused["text"]
    assert "884" in state(state_file)["orders"]


def test_the_state_defaults_to_the_user_data_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(shop_server.STATE_ENV, raising=False)
    monkeypatch.setattr(shop_server.platformdirs, "user_data_dir", lambda app: str(tmp_path / app))
    assert shop_server.state_path() == tmp_path / "agent-console" / "shop.json"
    assert shop_server.IDEMPOTENCY_META_KEY == IDEMPOTENCY_META_KEY
