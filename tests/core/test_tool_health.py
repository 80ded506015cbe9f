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
    assert store.tool_health() == [{"server": "shop", "state": "down", "reason": "SHOP_TOKEN not set", "since": NOW,
                                    "sandbox": None, "refused_hosts": []}]
    assert store.set_tool_health("w1", gen, "shop", "up", None, now=NOW + 9)
    assert store.tool_health() == [{"server": "shop", "state": "up", "reason": None, "since": NOW + 9,
                                    "sandbox": None, "refused_hosts": []}]
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


def test_a_servers_sandbox_and_refused_hosts_are_kept_and_each_refusal_is_in_the_audit_trail(store: Store) -> None:
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    assert store.set_tool_health("w1", gen, "gh", "up", None, now=NOW, sandbox="on")
    assert store.set_tool_health("w1", gen, "bare", "up", None, now=NOW, sandbox="off")
    assert store.set_tool_health("w1", gen, "gh", "up", None, now=NOW + 1,
                                 refused={"evil.example:443": 2, "pastebin.com:443": 1})
    assert store.set_tool_health("w1", gen, "gh", "up", None, now=NOW + 2, refused={"evil.example:443": 1})

    gh = next(tool for tool in store.tool_health() if tool["server"] == "gh")
    assert gh == {"server": "gh", "state": "up", "reason": None, "since": NOW, "sandbox": "on",
                  "refused_hosts": [{"host": "evil.example:443", "count": 3}, {"host": "pastebin.com:443", "count": 1}]}
    assert next(tool for tool in store.tool_health() if tool["server"] == "bare")["sandbox"] == "off"
    egress = [(row.at, row.body["server"], row.body["host"], row.body["refused"]) for row in store.audit_rows()
              if row.kind == "egress"]
    assert egress == [(NOW + 1, "gh", "evil.example:443", 2), (NOW + 1, "gh", "pastebin.com:443", 1),
                      (NOW + 2, "gh", "evil.example:443", 1)]
    assert store.verify_audit().intact


def test_a_stale_generation_cannot_add_refusals(store: Store) -> None:
    old = store.acquire("w1", now=NOW)
    assert old is not None
    store.release("w1", old, now=NOW)
    assert store.acquire("w2", now=NOW + 1) is not None
    assert not store.set_tool_health("w1", old, "gh", "up", None, now=NOW + 2, refused={"evil.example:443": 1})
    assert store.tool_health() == [] and not [row for row in store.audit_rows() if row.kind == "egress"]


def test_an_unknown_sandbox_state_is_refused(store: Store) -> None:
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    with pytest.raises(ValueError, match="sandbox must be one of"):
        store.set_tool_health("w1", gen, "shop", "up", None, now=NOW, sandbox="maybe")
