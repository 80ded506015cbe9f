"""Channels against a local recording HTTP server, through the dispatcher's per-channel send."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from console.config import ConfigError, Settings
from console.core import Batch, SendError, Store
from console.edges.channels import AppriseChannel, Channel, ConsoleChannel, FileChannel, HttpChannel, build_channels
from tests.edges.recorder import Recorder
from tests.support import send_due

T0 = 10_000
LATER = T0 + 5_000  # past any retry backoff (backoff_max is 900 s)


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    server = Recorder()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class Counting:
    """A channel that counts its sends and fails as told."""

    def __init__(self, name: str, failures: list[SendError] | None = None, at_most_once: bool = False) -> None:
        self.name = name
        self.at_most_once = at_most_once
        self.keys: list[str] = []
        self._failures = list(failures or [])

    def send(self, batch: Batch) -> None:
        self.keys.append(batch.key)
        if self._failures:
            raise self._failures.pop(0)


async def dispatch(store: Store, channels: list[Channel], now: int) -> int:
    return await asyncio.to_thread(send_due, store, channels, now=now)


def batch_key(store: Store) -> str:
    keys = {m.batch_key for m in store.outbox_messages()}
    assert len(keys) == 1
    key = keys.pop()
    assert key is not None
    return key


async def test_http_retry_carries_the_same_idempotency_key(store: Store, recorder: Recorder) -> None:
    recorder.statuses = [503]
    channel = HttpChannel(recorder.url + "/notify", timeout=5)
    store.queue_message("deploy finished", now=T0)
    store.queue_message("2 PRs merged", now=T0)
    assert await dispatch(store, [channel], T0) == 0
    assert store.outbox_counts()["retrying"] == 1
    assert await dispatch(store, [channel], LATER) == 2
    assert [r.path for r in recorder.requests] == ["/notify", "/notify"]
    key = batch_key(store)
    assert [r.headers["Idempotency-Key"] for r in recorder.requests] == [key, key]
    assert recorder.requests[1].body == {"key": key, "messages": ["deploy finished", "2 PRs merged"], "urgent": False}
    assert {m.status for m in store.outbox_messages()} == {"sent"}


async def test_http_4xx_fails_the_batch_for_good(store: Store, recorder: Recorder) -> None:
    recorder.statuses = [400]
    store.queue_message("hello", now=T0)
    assert await dispatch(store, [HttpChannel(recorder.url, timeout=5)], T0) == 0
    [message] = store.outbox_messages()
    assert message.status == "failed"
    assert message.error is not None and "400 Bad Request" in message.error
    assert await dispatch(store, [HttpChannel(recorder.url, timeout=5)], LATER) == 0
    assert len(recorder.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 429, 408])
async def test_http_5xx_and_retry_later_statuses_are_retried_then_sent(store: Store, recorder: Recorder,
                                                                       status: int) -> None:
    recorder.statuses = [status, status]
    channel = HttpChannel(recorder.url, timeout=5)
    store.queue_message("hello", now=T0)
    assert await dispatch(store, [channel], T0) == 0
    assert await dispatch(store, [channel], LATER) == 0
    assert await dispatch(store, [channel], LATER * 2) == 1
    assert len({r.headers["Idempotency-Key"] for r in recorder.requests}) == 1 and len(recorder.requests) == 3


async def test_http_timeout_and_refused_connection_are_transient(recorder: Recorder) -> None:
    recorder.hang = True
    batch = Batch(key="ob-1", bodies=["x"])
    with pytest.raises(SendError) as timed_out:
        await asyncio.to_thread(HttpChannel(recorder.url, timeout=0.3).send, batch)
    assert timed_out.value.permanent is False
    closed = Recorder()
    await closed.start()
    await closed.stop()  # a port nobody listens on any more
    with pytest.raises(SendError) as refused:
        await asyncio.to_thread(HttpChannel(closed.url, timeout=5).send, batch)
    assert refused.value.permanent is False and "could not be reached" in str(refused.value)


async def test_http_error_names_no_credentials(recorder: Recorder) -> None:
    recorder.statuses = [403]
    url = recorder.url.replace("http://", "http://user:hunter2@") + "/hook?token=s3cret"
    with pytest.raises(SendError) as failed:
        await asyncio.to_thread(HttpChannel(url, timeout=5).send, Batch(key="k", bodies=["x"]))
    assert failed.value.permanent is True and "403" in str(failed.value)
    assert "hunter2" not in str(failed.value) and "s3cret" not in str(failed.value)
    assert recorder.requests[0].headers["Authorization"] == "Basic dXNlcjpodW50ZXIy"  # user:hunter2
    assert recorder.requests[0].path == "/hook"


async def test_apprise_json_url_is_retried_then_sent(store: Store, recorder: Recorder) -> None:
    recorder.statuses = [500]
    channel = AppriseChannel([recorder.url.replace("http://", "json://") + "/apprise"])
    store.queue_message("build is green", now=T0)
    assert await dispatch(store, [channel], T0) == 0
    [message] = store.outbox_messages()
    assert message.status == "sending" and message.error is not None and "apprise" in message.error
    assert await dispatch(store, [channel], LATER) == 1
    assert len(recorder.requests) == 2
    assert recorder.requests[-1].path == "/apprise" and recorder.requests[-1].body["message"] == "build is green"


async def test_apprise_retries_only_the_urls_that_failed(recorder: Recorder) -> None:
    other = Recorder(statuses=[500])
    await other.start()
    try:
        channel = AppriseChannel([recorder.url.replace("http://", "json://") + "/a",
                                  other.url.replace("http://", "json://") + "/b"])
        batch = Batch(key="ob-apprise", bodies=["once"])
        with pytest.raises(SendError, match=r"1 of 2 URL\(s\) \(urls\[1\]\)"):
            await asyncio.to_thread(channel.send, batch)
        await asyncio.to_thread(channel.send, batch)
        assert len(recorder.requests) == 1 and len(other.requests) == 2
    finally:
        await other.stop()


async def test_a_failing_channel_does_not_make_the_others_send_twice(store: Store, tmp_path: Path) -> None:
    flaky = Counting("flaky", [SendError("down"), SendError("still down")])
    steady = Counting("steady")
    log = FileChannel(tmp_path / "out.jsonl")
    channels: list[Channel] = [ConsoleChannel(), steady, log, flaky]
    store.queue_message("report", now=T0)
    assert await dispatch(store, channels, T0) == 0
    assert await dispatch(store, channels, LATER) == 0
    assert await dispatch(store, channels, LATER * 2) == 1
    key = batch_key(store)
    assert steady.keys == [key] and flaky.keys == [key, key, key]
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 1
    assert store.deliveries(key) == {"console": ("sent", None), "steady": ("sent", None), "file": ("sent", None),
                                     "flaky": ("sent", None)}
    [message] = store.outbox_messages()
    assert message.status == "sent" and message.channel == "console,steady,file,flaky"


async def test_one_channel_failing_for_good_fails_the_batch_after_the_others_sent(store: Store) -> None:
    steady, broken = Counting("steady"), Counting("broken", [SendError("410 Gone", permanent=True)])
    store.queue_message("report", now=T0)
    assert await dispatch(store, [steady, broken], T0) == 0
    key = batch_key(store)
    assert store.deliveries(key) == {"steady": ("sent", None), "broken": ("failed", "410 Gone")}
    [message] = store.outbox_messages()
    assert message.status == "failed" and message.error == "broken: 410 Gone"
    assert await dispatch(store, [steady, broken], LATER) == 0 and steady.keys == [key]


async def test_at_most_once_channel_is_never_retried(store: Store) -> None:
    once = Counting("pager", [SendError("timeout")], at_most_once=True)
    again = Counting("log", [SendError("disk busy")])
    store.queue_message("urgent thing", now=T0, urgent=True)
    assert await dispatch(store, [once, again], T0) == 0
    assert await dispatch(store, [once, again], LATER) == 0
    assert len(once.keys) == 1 and len(again.keys) == 2
    assert store.deliveries(batch_key(store))["pager"] == ("failed", "timeout")


async def test_unexpected_channel_exception_is_a_retry_not_a_crash(store: Store) -> None:
    class Broken:
        name, at_most_once = "broken", False

        def send(self, batch: Batch) -> None:
            raise RuntimeError("bug in a channel")

    store.queue_message("x", now=T0)
    assert await dispatch(store, [Broken()], T0) == 0
    [message] = store.outbox_messages()
    assert message.status == "sending" and message.error == "broken: RuntimeError: bug in a channel"


def test_file_channel_appends_each_key_once_across_instances_and_writers(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    first = FileChannel(path)
    first.send(Batch(key="a", bodies=["one"]))
    first.send(Batch(key="a", bodies=["one"]))
    with path.open("ab") as other_writer:  # another process appended meanwhile, then tore a line
        other_writer.write(b'{"key": "b", "bodies": ["two"]}\n{"key": "c", "bo')
    first.send(Batch(key="b", bodies=["two"]))
    first.send(Batch(key="c", bodies=["three"]))
    second = FileChannel(path)  # a restart indexes the file afresh
    second.send(Batch(key="a", bodies=["one"]))
    second.send(Batch(key="c", bodies=["three"]))
    lines = path.read_text().splitlines()
    keys = []
    for line in lines:
        try:
            keys.append(json.loads(line)["key"])
        except ValueError:
            assert line == '{"key": "c", "bo'
    assert keys == ["a", "b", "c"]
    assert second.has_sent("b") and not second.has_sent("d")


def test_file_channel_restarts_its_index_when_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    channel = FileChannel(path)
    channel.send(Batch(key="a", bodies=["one"]))
    path.rename(tmp_path / "rotated.jsonl")
    channel.send(Batch(key="a", bodies=["one"]))
    assert len(path.read_text().splitlines()) == 1


def test_build_channels_always_has_the_console_first(tmp_path: Path) -> None:
    channels = build_channels(Settings(channels=[
        {"type": "file", "path": str(tmp_path / "o.jsonl"), "at_most_once": True},
        {"type": "http", "url": "http://127.0.0.1:9/x", "name": "hook"},
        {"type": "apprise", "urls": ["json://127.0.0.1:9/y"]},
    ]))
    assert [c.name for c in channels] == ["console", "file", "hook", "apprise"]
    assert [c.at_most_once for c in channels] == [False, True, False, False]


@pytest.mark.parametrize(("raw", "message"), [
    ({"type": "pigeon"}, r"channels\[0\]\.type: expected one of"),
    ({"type": "file"}, r"channels\[0\]\.path"),
    ({"type": "file", "path": "/no/such/folder/x.jsonl"}, r"channels\[0\]\.path: the folder"),
    ({"type": "http", "url": "ftp://x"}, r"channels\[0\]\.url"),
    ({"type": "http", "url": "http://x", "timeout": 0}, r"channels\[0\]\.timeout"),
    ({"type": "http", "url": "http://x", "at_most_once": "yes"}, r"channels\[0\]\.at_most_once"),
    ({"type": "http", "url": "http://x", "headers": {}}, r"channels\[0\]\.headers: unknown setting"),
    ({"type": "apprise", "urls": []}, r"channels\[0\]\.urls"),
    ({"type": "apprise", "urls": ["nosuch://token-123"]}, r"channels\[0\]\.urls\[0\]: apprise does not recognise"),
    ({"type": "http", "url": "http://x", "name": "Bad Name"}, r"channels\[0\]\.name"),
    ({"type": "http", "url": "http://x", "name": "console"}, r"channels\[0\]\.name: 'console' is the name"),
])
def test_bad_channel_settings_name_the_setting(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        build_channels(Settings(channels=[raw]))
    assert "token-123" not in str(error.value)


def test_duplicate_channel_names_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"channels\[1\]\.name: 'http' is already the name of channels\[0\]"):
        build_channels(Settings(channels=[{"type": "http", "url": "http://a"}, {"type": "http", "url": "http://b"}]))
