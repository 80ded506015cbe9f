"""Replays of a captured delivery to a source whose signature covers only the body (github, hmac).

The real receiver on a loopback port, a real client, a real inbox file; the clock is injected.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import aiohttp
import pytest

from console.clock import ManualClock
from console.config import ConfigError, Settings
from console.core import ReplayGuard, Store
from console.edges.config import DEFAULT_REPLAY_WINDOW, parse_webhooks
from console.edges.receiver import WebhookReceiver, build_receiver
from tests.edges.conftest import NOW, SOURCES, rows, secrets_env, webhook_settings
from tests.edges.signing import body_for, sign


async def post(http: aiohttp.ClientSession, receiver: WebhookReceiver, source: str, body: bytes,
               headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    async with http.post(f"{receiver.url}/hooks/{source}", data=body, headers=headers) as response:
        return response.status, await response.json()


def captured(kind: str, key: str = "d-1") -> tuple[bytes, dict[str, str]]:
    body = body_for(kind, key, "pay the invoice")
    return body, sign(kind, body, now=NOW, delivery_id=key)


def with_new_id(kind: str, headers: dict[str, str], new_id: str) -> dict[str, str]:
    """The attacker's edit: the id header is not signed, so any value passes."""
    name = "X-GitHub-Delivery" if kind == "github" else "X-Delivery-Id"
    return {**headers, name: new_id}


@pytest.mark.parametrize("source", ["github", "home"])
async def test_a_captured_body_resent_under_new_ids_is_stored_once(
    receiver: WebhookReceiver, http: aiohttp.ClientSession, db_path: Path, source: str
) -> None:
    kind = SOURCES[source]
    body, headers = captured(kind)
    assert await post(http, receiver, source, body, headers) == (200, {"stored": True})
    for n in range(3):
        answer = await post(http, receiver, source, body, with_new_id(kind, headers, f"forged-{n}"))
        assert answer == (200, {"stored": False})  # answered like a duplicate: a replayer learns nothing
    assert rows(db_path) == [(source, "d-1")]
    with Store.open(db_path) as store:
        original = store.find_event(source, "d-1")
        assert original is not None and original.duplicates == 3  # each replay is counted on the event it repeats
    assert receiver.counts["replay"] == 3 and receiver.counts["stored"] == 1


async def test_a_replay_after_the_window_is_stored(receiver: WebhookReceiver, http: aiohttp.ClientSession,
                                                   clock: ManualClock, db_path: Path) -> None:
    body, headers = captured("github")
    assert await post(http, receiver, "github", body, headers) == (200, {"stored": True})
    clock.advance(DEFAULT_REPLAY_WINDOW - 1)
    assert await post(http, receiver, "github", body, with_new_id("github", headers, "x-1")) == (
        200, {"stored": False})
    # Each sighting restarts the window: a replayer who keeps trying inside it never gets through.
    clock.advance(DEFAULT_REPLAY_WINDOW - 1)
    assert await post(http, receiver, "github", body, with_new_id("github", headers, "x-2")) == (
        200, {"stored": False})
    clock.advance(DEFAULT_REPLAY_WINDOW + 1)
    assert await post(http, receiver, "github", body, with_new_id("github", headers, "x-3")) == (
        200, {"stored": True})
    assert rows(db_path) == [("github", "x-3"), ("github", "d-1")]


async def test_different_bodies_and_other_sources_are_not_replays(
    receiver: WebhookReceiver, http: aiohttp.ClientSession, db_path: Path
) -> None:
    for n in range(3):
        body = body_for("github", text=f"push {n}")
        assert await post(http, receiver, "github", body, sign("github", body, now=NOW, delivery_id=f"g-{n}")) == (
            200, {"stored": True})
    # The same bytes to another source (another secret, another ledger) are that source's business.
    body = body_for("hmac", text="push 0")
    assert await post(http, receiver, "home", body, sign("hmac", body, now=NOW, delivery_id="g-0")) == (
        200, {"stored": True})
    # Standard Webhooks signs its id: the same body under two signed ids is two messages from the sender.
    body = body_for("standard", text="same bytes")
    for key in ("m-1", "m-2"):
        assert await post(http, receiver, "std", body, sign("standard", body, now=NOW, delivery_id=key)) == (
            200, {"stored": True})
    assert len(rows(db_path)) == 6 and receiver.counts["replay"] == 0


async def test_a_zero_window_turns_the_ledger_off(db_path: Path, clock: ManualClock,
                                                  http: aiohttp.ClientSession) -> None:
    settings = webhook_settings(db_path)
    settings.webhooks["sources"]["home"]["replay_window"] = 0
    server = build_receiver(settings, clock=clock, environ=secrets_env())
    await server.start()
    try:
        body, headers = captured("hmac")
        assert await post(http, server, "home", body, headers) == (200, {"stored": True})
        assert await post(http, server, "home", body, with_new_id("hmac", headers, "d-2")) == (
            200, {"stored": True})
    finally:
        await server.stop()
    with Store.open(db_path) as store:
        assert store.replay_ledger_size() == 0


def test_replay_window_is_checked_and_named(tmp_path: Path) -> None:
    def parse(source: dict[str, object]) -> None:
        parse_webhooks(Settings(db=tmp_path / "x.db", webhooks={"sources": {"s": source}}).webhooks)

    with pytest.raises(ConfigError, match=r"webhooks\.sources\.s\.replay_window: expected a whole number"):
        parse({"verifier": "github", "secret_env": "X", "replay_window": -1})
    with pytest.raises(ConfigError, match=r"webhooks\.sources\.s\.replay_window: .*github and hmac"):
        parse({"verifier": "stripe", "secret_env": "X", "replay_window": 60})


# --- the ledger in the core ---------------------------------------------------------------------

def guard(body: bytes, window: int = 100) -> ReplayGuard:
    return ReplayGuard(hashlib.sha256(body).digest(), window)


def test_the_ledger_refuses_a_body_seen_within_its_window(store: Store) -> None:
    assert store.ingest_deliveries([("hook", "a", {"n": 1}, guard(b"one"))], now=1000) == ["stored"]
    assert store.ingest_deliveries([("hook", "b", {"n": 1}, guard(b"one"))], now=1050) == ["replay"]
    assert store.ingest_deliveries([("hook", "a", {"n": 1}, guard(b"one"))], now=1060) == ["duplicate"]
    # Inside one group the second copy is refused too: the ledger row is written before the next item.
    assert store.ingest_deliveries([("hook", "c", {}, guard(b"two")), ("hook", "d", {}, guard(b"two"))],
                                   now=1070) == ["stored", "replay"]
    assert store.ingest_deliveries([("hook", "e", {"n": 1}, None)], now=1080) == ["stored"]
    assert [e.source_id for e in store.events()] == ["e", "c", "a"]
    event = store.find_event("hook", "a")
    assert event is not None and event.duplicates == 2


def test_the_ledger_stays_bounded(store: Store) -> None:
    store.ingest_deliveries([("hook", f"k-{n}", {}, guard(f"body {n}".encode())) for n in range(500)], now=1000)
    assert store.replay_ledger_size() == 500
    # A window later, each new delivery sweeps expired rows as it goes: the ledger holds only its window.
    for n in range(3):
        store.ingest_deliveries([("hook", f"late-{n}", {}, guard(f"late {n}".encode()))], now=1101 + n)
    assert store.replay_ledger_size() == 3
    assert store.ingest_deliveries([("hook", "again", {}, guard(b"body 7"))], now=1200) == ["stored"]


def test_a_new_body_reads_the_ledger_but_not_the_inbox_key_and_keeps_its_trace_in_its_insert(store: Store) -> None:
    # The writer's statements a delivery (issue 22): a body the ledger has not seen is new whatever its key says,
    # so its key is not read first; the INSERT tells a redelivery. A known body still reads the key (replay or copy).
    seen: list[str] = []

    def trace(_cursor: object, sql: str, _bindings: object) -> bool:
        seen.append(" ".join(sql.split()))
        return True

    store.connection.exec_trace = trace
    try:
        assert store.ingest_deliveries([("hook", f"n-{n}", {"n": n}, guard(f"new {n}".encode())) for n in range(3)],
                                       now=1000, traces={("hook", "n-1"): "link 00-ab-cd-01"}) == ["stored"] * 3
        new = [sql for sql in seen if sql.startswith("SELECT 1 FROM inbox") or sql.startswith("UPDATE inbox")]
        seen.clear()
        assert store.ingest_deliveries([("hook", "n-0", {"n": 0}, guard(b"new 0")),
                                        ("hook", "other", {"n": 0}, guard(b"new 1"))], now=1010) == ["duplicate",
                                                                                                     "replay"]
        known = [sql for sql in seen if sql.startswith("SELECT 1 FROM inbox")]
    finally:
        store.connection.exec_trace = None
    assert new == [] and len(known) == 2  # nor is a kept trace a statement of its own: the INSERT writes it
    traced = store.find_event("hook", "n-1")
    assert traced is not None and traced.trace == "link 00-ab-cd-01"
