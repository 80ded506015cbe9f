"""StoreOptions: the store's settings in one frozen value, built from the settings in one place, and
honoured by the store (a knob set in the config or the environment changes what the inbox does)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from console.config import load_settings
from console.core import Batch, SendError, Store, StoreOptions, StoreUnavailable
from console.core.options import STORE_OPTION_NAMES

NOW = 1_800_000_000


def test_open_takes_options_or_single_keywords_and_reopen_keeps_them(tmp_path: Path) -> None:
    options = StoreOptions(lease_ttl=30, max_send_attempts=2, backoff_jitter=0.0)
    with Store.open(tmp_path / "a.db", options=options) as store:
        assert store.options == options and store.options.lease_ttl == 30 and store.options.max_send_attempts == 2
        sibling = store.reopen()
        assert sibling.options == options
        sibling.close()
    with Store.open(tmp_path / "b.db", options=options, lease_ttl=45) as store:
        assert store.options == dataclasses.replace(options, lease_ttl=45)
    with Store.open(tmp_path / "c.db", batch_cap=7) as store:
        assert store.options == StoreOptions(batch_cap=7)


def test_an_unknown_or_bad_option_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="leese_ttl"):
        Store.open(tmp_path / "a.db", leese_ttl=3)
    with pytest.raises(ValueError, match="backoff_jitter must be in"):
        StoreOptions(backoff_jitter=1.0)
    with pytest.raises(ValueError, match="send_timeout must be at least 1"):
        StoreOptions(send_timeout=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        StoreOptions().lease_ttl = 5  # type: ignore[misc]


def test_every_store_option_is_a_setting_with_the_same_default() -> None:
    settings = load_settings(None, env={})
    assert settings.store_options() == StoreOptions()
    assert all(hasattr(settings, name) for name in STORE_OPTION_NAMES)


def test_the_three_knobs_that_could_not_be_set_now_come_from_the_environment() -> None:
    env = {"AGENT_CONSOLE_BACKOFF_JITTER": "0", "AGENT_CONSOLE_SEND_TIMEOUT": "5",
           "AGENT_CONSOLE_MAX_SEND_ATTEMPTS": "2"}
    options = load_settings(None, env=env).store_options()
    assert (options.backoff_jitter, options.send_timeout, options.max_send_attempts) == (0.0, 5, 2)


def test_settings_reach_the_store_max_send_attempts_and_jitter(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("max_send_attempts = 2\nbackoff_jitter = 0\nbackoff_base = 10\noutbox_gap = 0\n"
                      "send_timeout = 7\n", encoding="utf-8")
    settings = load_settings(config, env={})
    tries: list[str] = []

    def down(batch: Batch) -> None:
        tries.append(batch.key)
        raise SendError("connection refused", permanent=False)

    with Store.open(tmp_path / "inbox.db", options=settings.store_options()) as store:
        store.queue_message("hello", now=NOW)
        now = NOW
        for _ in range(10):  # far more passes than attempts: only max_send_attempts of them send
            store.dispatch(down, now=now)
            now += 3600
        assert len(tries) == 2 and len(set(tries)) == 1
        assert store.outbox_counts()["failed"] == 1
        # backoff_jitter = 0: a failed event's retry is due exactly backoff_base seconds later, every time.
        store.ingest("chat", "m1", {}, now=NOW)
        gen = store.acquire("w", now=NOW)
        assert gen is not None
        [event] = store.claim_batch("w", gen, now=NOW)
        assert store.finish("w", gen, [event.id], now=NOW, error="boom")
        assert store.next_retry_at() == NOW + 10


def test_busy_timeout_is_how_long_a_write_waits_for_another_writers_lock_and_a_sibling_keeps_it(tmp_path: Path) -> None:
    settings = load_settings(None, env={"AGENT_CONSOLE_BUSY_TIMEOUT": "0.2"})
    db = tmp_path / "inbox.db"
    Store.open(db).close()
    with Store.open(db) as holder, holder.storage.transaction(), \
            Store.open(db, options=settings.store_options()) as store:
        sibling = store.reopen()
        for waiting in (store, sibling):
            with pytest.raises(StoreUnavailable, match=r"the inbox is busy \(another writer held it for 200 ms\)"):
                waiting.ingest("chat", "m1", {}, now=NOW)
        sibling.close()
    with pytest.raises(ValueError, match="busy_timeout must be more than 0"):
        StoreOptions(busy_timeout=0)
