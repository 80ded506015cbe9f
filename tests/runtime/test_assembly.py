"""The composition root and the narrow host: settings become a running system in one place, the engine runs
what it is given, and the services share one loop that survives a failing pass."""

from __future__ import annotations

import asyncio
import socket
import typing
from pathlib import Path
from typing import Any

import pytest

from console.agents.offline import DIGEST_TIMER_ID, OfflineAgent
from console.agents.registry import AGENTS
from console.assembly import assemble, assemble_console, assemble_serve, build_engine
from console.clock import ManualClock
from console.config import AGENT_NAMES, ConfigError, Settings, load_settings
from console.core import Store, StoreError
from console.edges.channels import ConsoleChannel
from console.runtime.engine import Engine
from console.runtime.host import THREAD_ROLES, ThreadRole, service_loop
from tests.support import until

START = 1_800_000_000


def test_the_settings_know_exactly_the_agents_the_registry_builds() -> None:
    assert set(AGENT_NAMES) == set(AGENTS)


def test_the_engine_runs_the_agent_and_channels_it_is_given(tmp_path: Path) -> None:
    class Quiet:
        name = "quiet"

        def run(self, ctx: Any) -> None:
            return None

    agent = Quiet()
    channels = [ConsoleChannel("mine")]
    engine = Engine(Settings(db=tmp_path / "inbox.db"), agent=agent, channels=channels)
    assert engine.agent is agent and engine.agent_name == "quiet" and engine.channel_names == ["mine"]
    with pytest.raises(ValueError, match="at least one outbox channel"):
        Engine(Settings(db=tmp_path / "inbox.db"), agent=agent, channels=[])


def test_the_assembly_builds_the_configured_agent_and_channels(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'db = "{tmp_path / "inbox.db"}"\n[[channels]]\ntype = "file"\nname = "log"\n'
                      f'path = "{tmp_path / "out.jsonl"}"\n', encoding="utf-8")
    system = assemble(load_settings(config, env={}))
    assert system.engine.agent_name == "offline"
    assert system.engine.channel_names == ["console", "log"]
    assert system.receiver is None


def test_a_role_that_does_not_exist_opens_no_thread(tmp_path: Path) -> None:
    engine = build_engine(Settings(db=tmp_path / "inbox.db"), install_defaults=False)
    assert set(typing.get_args(ThreadRole)) == set(THREAD_ROLES)
    assert typing.get_type_hints(Engine.on)["role"] == ThreadRole
    with pytest.raises(ValueError, match="no database thread has the role 'writr'"):
        engine._thread("writr")  # type: ignore[arg-type]
    assert engine._threads == {}


async def test_the_default_timers_are_installed_once_and_only_when_asked(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "inbox.db", digest_cron="0 9 * * *", timezone="UTC")
    clock = ManualClock(START)
    plain = build_engine(settings, clock=clock, holder="a", install_defaults=False, idle_cap=0.1)
    await plain.start()
    await plain.stop()
    with Store.open(settings.db) as store:
        assert store.timers() == []
    engine = build_engine(settings, clock=clock, holder="b", idle_cap=0.1)
    await engine.start()
    await engine.stop()
    with Store.open(settings.db) as store:
        [digest] = store.timers()
        assert (digest.id, digest.cron, digest.tz) == (DIGEST_TIMER_ID, "0 9 * * *", "UTC")
        store.pause_timer(DIGEST_TIMER_ID, True)  # the owner's change to it stands across restarts
    again = build_engine(settings, clock=clock, holder="c", idle_cap=0.1)
    await again.start()
    await again.stop()
    with Store.open(settings.db) as store:
        [digest] = store.timers()
        assert digest.paused


async def test_the_shared_service_loop_survives_a_failing_pass(tmp_path: Path) -> None:
    """A pass that raises is noted, and the loop idles and passes again."""
    engine = build_engine(Settings(db=tmp_path / "inbox.db"), clock=ManualClock(START), holder="w",
                          install_defaults=False, idle_cap=0.01)
    noted: list[str] = []
    engine.subscribe(lambda notice: noted.append(notice.detail) if notice.kind == "log" else None)
    passes = 0

    async def flaky() -> float | None:
        nonlocal passes
        passes += 1
        if passes <= 2:
            raise OSError("disk hiccup")
        return None if passes < 5 else 1.0

    loop = asyncio.create_task(service_loop(engine, "probe", flaky))
    try:
        await until(lambda: passes >= 5, "five passes of the probe service")
    finally:
        loop.cancel()
    assert noted == ["probe: OSError: disk hiccup"] * 2
    assert engine.last_error == "probe: OSError: disk hiccup"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def webhooks_on(db: Path, port: int = 0) -> Settings:
    return Settings(db=db, webhooks={"enabled": True, "host": "127.0.0.1", "port": port, "sources": {
        "github": {"verifier": "github", "secret_env": "ASSEMBLY_TEST_GITHUB_SECRET"}}})


async def test_a_receiver_that_cannot_start_stops_the_start_unless_a_hook_hears_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run` (no hook): the missing secret is the error, before the engine took the lease. The console (a hook):
    the error is told there and the engine works without a receiver."""
    monkeypatch.delenv("ASSEMBLY_TEST_GITHUB_SECRET", raising=False)
    settings = webhooks_on(tmp_path / "inbox.db")
    refused = assemble(settings, clock=ManualClock(START), holder="run")
    with pytest.raises(ConfigError, match="ASSEMBLY_TEST_GITHUB_SECRET"):
        await refused.start()
    assert refused.receiver is None
    with Store.open(settings.db) as store:
        assert store.lease() is None  # nothing was taken

    heard: list[Exception] = []
    system = assemble(settings, clock=ManualClock(START), holder="console")
    await system.start(on_receiver_error=heard.append)
    try:
        assert [type(exc) for exc in heard] == [ConfigError] and "ASSEMBLY_TEST_GITHUB_SECRET" in str(heard[0])
        assert system.receiver is None
        assert system.engine is not None
        await until(lambda: system.engine is not None and system.engine.mode == "active", "the engine to work")
    finally:
        await system.stop()
    with Store.open(settings.db) as store:
        assert store.lease_log(1)[0][1] == "release"


async def test_an_engine_that_cannot_start_stops_the_receiver_started_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSEMBLY_TEST_GITHUB_SECRET", "not-a-real-secret")
    port = free_port()
    settings = webhooks_on(tmp_path / "inbox.db", port)
    listening: list[str] = []

    def refuse(store: Store) -> None:  # the engine's start-up write fails, after the receiver listens
        listening.append(system.receiver.url if system.receiver is not None else "nothing")
        raise StoreError("the start-up write failed")

    engine = Engine(settings, agent=OfflineAgent(), channels=[ConsoleChannel("console")], set_up=[refuse],
                    clock=ManualClock(START), holder="w", idle_cap=0.1)
    system = assemble(settings, engine=engine)
    with pytest.raises(StoreError, match="the start-up write failed"):
        await system.start()
    assert listening == [f"http://127.0.0.1:{port}"]  # the receiver was up when the engine started
    assert system.receiver is None
    with pytest.raises(OSError):  # and is down again: nothing takes deliveries nothing would run
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()


async def test_the_serve_shape_is_a_receiver_alone_that_checks_the_inbox_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSEMBLY_TEST_GITHUB_SECRET", "not-a-real-secret")
    settings = webhooks_on(tmp_path / "inbox.db")
    system = assemble_serve(settings, clock=ManualClock(START))
    assert system.engine is None and system.receiver is None
    await system.start()
    try:
        assert system.receiver is not None and system.receiver.writer.check_first
        with Store.open(settings.db) as store:
            assert store.lease() is None  # no engine: another process runs what it stores
    finally:
        await system.stop()
    assert system.receiver is None


async def test_a_read_only_console_runs_no_receiver_where_a_console_runs_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--read-only changes nothing, so nothing listens for deliveries to store, whatever [webhooks] says."""
    monkeypatch.setenv("ASSEMBLY_TEST_GITHUB_SECRET", "not-a-real-secret")
    settings = webhooks_on(tmp_path / "inbox.db")
    Store.open(settings.db).close()  # a read-only console opens only an inbox that exists
    for read_only in (True, False):
        system = assemble_console(settings, clock=ManualClock(START), holder=f"console-{read_only}",
                                  install_defaults=False, read_only=read_only)
        await system.start(on_receiver_error=lambda exc: pytest.fail(f"the receiver did not start: {exc}"))
        try:
            assert system.engine is not None
            assert (system.receiver is None) == read_only, read_only
            assert (system.engine.mode == "watching") == read_only
        finally:
            await system.stop()
