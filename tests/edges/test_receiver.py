"""The real receiver on an ephemeral loopback port, driven by a real HTTP client."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from console.assembly import assemble_serve
from console.clock import ManualClock
from console.config import ConfigError, Settings
from console.core import MAX_PAYLOAD_DEPTH, Store, StoreError
from console.edges.receiver import WebhookReceiver, build_receiver
from tests.edges.conftest import MAX_BODY, NOW, SOURCES, rows, secrets_env, webhook_settings
from tests.edges.signing import SECRETS, WRONG, body_for, sign


async def post(http: aiohttp.ClientSession, receiver: WebhookReceiver, source: str, body: bytes,
               headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    async with http.post(f"{receiver.url}/hooks/{source}", data=body, headers=headers) as response:
        return response.status, await response.json()


async def deliver(http: aiohttp.ClientSession, receiver: WebhookReceiver, source: str, key: str,
                  now: int = NOW, text: str = "hi") -> tuple[int, dict[str, object]]:
    kind = SOURCES[source]
    body = body_for(kind, key, text)
    return await post(http, receiver, source, body, sign(kind, body, now=now, delivery_id=key))


@pytest.mark.parametrize("source", sorted(SOURCES))
async def test_new_then_redelivered(receiver: WebhookReceiver, http: aiohttp.ClientSession, db_path: Path,
                                    source: str) -> None:
    assert await deliver(http, receiver, source, "k-1") == (200, {"stored": True})
    # The sender's retry, re-signed a minute later: one row, the copy counted as a duplicate.
    assert await deliver(http, receiver, source, "k-1", now=NOW + 60) == (200, {"stored": False})
    assert rows(db_path) == [(source, "k-1")]
    with Store.open(db_path) as store:
        event = store.find_event(source, "k-1")
        assert event is not None and event.duplicates == 1
        assert event.payload["body"] == json.loads(body_for(SOURCES[source], "k-1", "hi"))
    assert receiver.counts["stored"] == 1 and receiver.counts["duplicate"] == 1


async def test_bad_signature_is_401_and_stores_nothing(receiver: WebhookReceiver, http: aiohttp.ClientSession,
                                                       db_path: Path) -> None:
    body = body_for("github", "k-2")
    headers = sign("github", body, now=NOW, delivery_id="k-2", secret="guess")
    assert await post(http, receiver, "github", body, headers) == (401, {"error": "unauthorized"})
    unsigned = {"X-GitHub-Delivery": "k-3"}
    assert (await post(http, receiver, "github", body, unsigned))[0] == 401
    assert rows(db_path) == []
    assert receiver.counts["unauthorized"] == 2


async def test_stale_timestamp_is_401(receiver: WebhookReceiver, http: aiohttp.ClientSession, clock: ManualClock,
                                      db_path: Path) -> None:
    body = body_for("standard", "k-4")
    headers = sign("standard", body, now=NOW, delivery_id="k-4")
    clock.advance(301)
    assert (await post(http, receiver, "std", body, headers))[0] == 401
    assert rows(db_path) == []


async def test_unknown_source_is_404(receiver: WebhookReceiver, http: aiohttp.ClientSession) -> None:
    body = body_for("github")
    status, _ = await post(http, receiver, "gitlab", body, sign("github", body, now=NOW))
    assert status == 404
    assert receiver.counts["not_found"] == 1


async def test_declared_oversize_body_is_413_before_the_signature(receiver: WebhookReceiver,
                                                                  http: aiohttp.ClientSession) -> None:
    # Unsigned: had the signature been checked first, this would be a 401.
    status, _ = await post(http, receiver, "github", b"x" * (MAX_BODY + 1), {"X-GitHub-Delivery": "big"})
    assert status == 413
    assert receiver.counts["too_large"] == 1 and receiver.counts["unauthorized"] == 0


async def test_streamed_body_over_the_cap_is_413(receiver: WebhookReceiver, http: aiohttp.ClientSession) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # chunked transfer: no Content-Length to check
        for _ in range(MAX_BODY // 4096 + 2):
            yield b"y" * 4096

    async with http.post(f"{receiver.url}/hooks/github", data=chunks()) as response:
        assert response.status == 413
    assert receiver.counts["too_large"] == 1 and receiver.counts["unauthorized"] == 0


async def test_body_at_the_limit_is_accepted(receiver: WebhookReceiver, http: aiohttp.ClientSession) -> None:
    prefix, suffix = b'{"type": "note", "text": "', b'"}'
    body = prefix + b"z" * (MAX_BODY - len(prefix) - len(suffix)) + suffix
    assert len(body) == MAX_BODY
    assert await post(http, receiver, "home", body, sign("hmac", body, now=NOW, delivery_id="edge")) == (
        200, {"stored": True})


async def test_signed_but_not_json_is_400(receiver: WebhookReceiver, http: aiohttp.ClientSession,
                                          db_path: Path) -> None:
    body = b"payload=%7B%7D"
    status, answer = await post(http, receiver, "github", body, sign("github", body, now=NOW))
    assert (status, answer) == (400, {"error": "the body is not JSON"})
    assert rows(db_path) == []


async def test_one_invalid_event_does_not_fail_its_group(receiver: WebhookReceiver, http: aiohttp.ClientSession,
                                                         db_path: Path) -> None:
    bad = b'{"id": "evt_nan", "value": NaN}'  # Python's json reads NaN; the inbox refuses to store it
    bad_request = post(http, receiver, "stripe", bad, sign("stripe", bad, now=NOW))
    good = [deliver(http, receiver, "stripe", f"evt_{n}") for n in range(20)]
    answers = await asyncio.gather(bad_request, *good)
    assert answers[0][0] == 400 and "JSON" in str(answers[0][1]["error"])
    assert all(answer == (200, {"stored": True}) for answer in answers[1:])
    assert len(rows(db_path)) == 20


async def test_slack_challenge_is_answered(receiver: WebhookReceiver, http: aiohttp.ClientSession,
                                           db_path: Path) -> None:
    body = b'{"type": "url_verification", "challenge": "abc123"}'
    assert await post(http, receiver, "slack", body, sign("slack", body, now=NOW)) == (200, {"challenge": "abc123"})
    assert rows(db_path) == []


async def test_200_concurrent_deliveries_are_stored_once_with_group_commit(
    receiver: WebhookReceiver, http: aiohttp.ClientSession, db_path: Path
) -> None:
    keys = [f"c-{n}" for n in range(200)]
    sources = sorted(SOURCES)
    first = await asyncio.gather(*(deliver(http, receiver, sources[n % 5], key) for n, key in enumerate(keys)))
    again = await asyncio.gather(*(deliver(http, receiver, sources[n % 5], key) for n, key in enumerate(keys[:50])))
    assert all(answer == (200, {"stored": True}) for answer in first)
    assert all(answer == (200, {"stored": False}) for answer in again)
    stored = rows(db_path)
    assert len(stored) == len(set(stored)) == 200
    stats = receiver.writer.stats
    assert stats.events == 250 and stats.failed == 0
    assert stats.commits < 250, f"no group commit: {stats.commits} transactions for 250 requests"
    assert stats.largest_group > 1


async def test_full_database_is_503_and_keeps_no_partial_rows(receiver: WebhookReceiver,
                                                              http: aiohttp.ClientSession, db_path: Path) -> None:
    assert await deliver(http, receiver, "home", "before") == (200, {"stored": True})
    await receiver.writer.call(lambda store: store.limit_pages(1))  # the file may not grow by one page
    big = "w" * 20_000
    answers = await asyncio.gather(*(deliver(http, receiver, "home", f"full-{n}", text=big) for n in range(10)))
    assert {status for status, _ in answers} == {503}
    assert rows(db_path) == [("home", "before")]
    assert receiver.counts["unavailable"] == 10 and receiver.writer.stats.failed >= 1
    await receiver.writer.call(lambda store: store.limit_pages(1 << 30))  # space again: the senders' retries land
    answers = await asyncio.gather(*(deliver(http, receiver, "home", f"full-{n}", text=big) for n in range(10)))
    assert all(answer == (200, {"stored": True}) for answer in answers)
    assert len(rows(db_path)) == 11


async def test_healthz_shows_address_and_counts(receiver: WebhookReceiver, http: aiohttp.ClientSession) -> None:
    await deliver(http, receiver, "github", "h-1")
    async with http.get(f"{receiver.url}/healthz") as response:
        assert response.status == 200
        health = await response.json()
    assert health["ok"] is True and health["url"] == receiver.url
    assert health["counts"]["stored"] == 1 and health["writer"]["commits"] == 1


async def test_no_secret_in_logs_answers_or_database(receiver: WebhookReceiver, http: aiohttp.ClientSession,
                                                     db_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for source in sorted(SOURCES):
        await deliver(http, receiver, source, f"s-{source}")
        body = body_for(SOURCES[source], "bad")
        await post(http, receiver, source, body, sign(SOURCES[source], body, now=NOW, secret=WRONG[SOURCES[source]]))
    await post(http, receiver, "nope", b"{}", {})
    lines = [r.getMessage() for r in caplog.records if r.name == "agent_console.webhooks"]
    assert sum("verdict=stored" in line for line in lines) == 5
    assert sum("verdict=unauthorized" in line for line in lines) == 5
    assert any("latency_ms=" in line and "source_id=s-github" in line for line in lines)
    stored = b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))
    for secret in SECRETS.values():
        assert secret not in caplog.text
        assert secret.encode() not in stored
    assert "s-github" in caplog.text and b"s-github" in stored  # the checks above could have failed


async def test_unopenable_inbox_fails_start(tmp_path: Path) -> None:
    server = build_receiver(webhook_settings(tmp_path / "missing" / "inbox.db"), environ=secrets_env())
    with pytest.raises(StoreError, match="does not exist"):
        await server.start()


async def test_missing_secret_names_the_setting_not_the_value(db_path: Path) -> None:
    env = secrets_env()
    del env["TEST_SLACK_SECRET"]
    with pytest.raises(ConfigError, match=r"webhooks\.sources\.slack\.secret_env: the secret TEST_SLACK_SECRET"):
        build_receiver(webhook_settings(db_path), environ=env)


async def test_no_sources_is_a_config_error(db_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"webhooks\.sources"):
        build_receiver(Settings(db=db_path), environ={})


async def test_port_in_use_is_a_config_error(receiver: WebhookReceiver, db_path: Path) -> None:
    second = build_receiver(webhook_settings(db_path), port=receiver.port, environ=secrets_env())
    with pytest.raises(ConfigError, match=f"webhooks.port: cannot listen on 127.0.0.1:{receiver.port}"):
        await second.start()


async def test_serve_runs_until_stopped(db_path: Path, http: aiohttp.ClientSession,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in secrets_env().items():
        monkeypatch.setenv(name, value)
    stop = asyncio.Event()
    ready: asyncio.Queue[WebhookReceiver | None] = asyncio.Queue()
    system = assemble_serve(webhook_settings(db_path), clock=ManualClock(NOW))
    task = asyncio.create_task(system.run_until_signalled(on_ready=lambda s: ready.put_nowait(s.receiver), stop=stop))
    server = await asyncio.wait_for(ready.get(), 10)
    assert server is not None
    assert await deliver(http, server, "github", "served") == (200, {"stored": True})
    stop.set()
    await asyncio.wait_for(task, 10)
    with pytest.raises(aiohttp.ClientConnectionError):
        await deliver(http, server, "github", "after-stop")
    assert rows(db_path) == [("github", "served")]


async def test_nesting_is_stored_up_to_the_limit_and_refused_past_it(
    receiver: WebhookReceiver, http: aiohttp.ClientSession, db_path: Path
) -> None:
    def nested(depth: int) -> bytes:  # an object `depth` deep; the inbox stores it one level down, in "body"
        return ('{"k": ' * depth + '"leaf"' + "}" * depth).encode()

    answers = {}
    for name, depth in (("fits", MAX_PAYLOAD_DEPTH - 1), ("over", MAX_PAYLOAD_DEPTH), ("far-over", 5000)):
        body = nested(depth)
        answers[name] = await post(http, receiver, "home", body, sign("hmac", body, now=NOW, delivery_id=name))
    assert answers["fits"] == (200, {"stored": True})
    assert answers["over"] == (400, {"error": f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels"})
    assert answers["far-over"] == (400, {"error": f"the body is nested deeper than {MAX_PAYLOAD_DEPTH} levels"})
    assert rows(db_path) == [("home", "fits")]
