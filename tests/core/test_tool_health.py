"""Each MCP server's health (issue 21): written by the engine holding the lease only, read by anyone (status)."""

from __future__ import annotations

import pytest

from console.core import Store

NOW = 1_800_000_000


def test_the_holder_records_a_server_down_and_back_up(store: Store) -> None:
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    assert store.tool_health() == []
    assert store.set_tool_health("w1", gen, "shop", "down", "SHOP_TOKEN not set", now=NOW)
    assert store.set_tool_health("w1", gen, "shop", "down", "SHOP_TOKEN not set", now=NOW + 5)  # no change
    assert store.tool_health() == [{"server": "shop", "state": "down", "reason": "SHOP_TOKEN not set", "since": NOW}]
    assert store.set_tool_health("w1", gen, "shop", "up", None, now=NOW + 9)
    assert store.tool_health() == [{"server": "shop", "state": "up", "reason": None, "since": NOW + 9}]
    assert store.status(now=NOW + 9)["tools"] == store.tool_health()


def test_a_stale_generation_cannot_write_tool_health(store: Store) -> None:
    old = store.acquire("w1", now=NOW)
    assert old is not None
    assert store.set_tool_health("w1", old, "shop", "up", None, now=NOW)
    store.release("w1", old, now=NOW)
    new = store.acquire("w2", now=NOW + 1)
    assert new is not None and new != old
    assert not store.set_tool_health("w1", old, "shop", "down", "stale", now=NOW + 2)
    assert not store.set_tool_health("w2", old, "shop", "down", "stale", now=NOW + 2)
    assert store.tool_health()[0]["state"] == "up"
    assert store.set_tool_health("w2", new, "shop", "down", "gone", now=NOW + 3)
    assert store.tool_health()[0]["reason"] == "gone"


def test_an_unknown_tool_state_is_refused(store: Store) -> None:
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    with pytest.raises(ValueError, match="tool state must be one of"):
        store.set_tool_health("w1", gen, "shop", "broken", None, now=NOW)
