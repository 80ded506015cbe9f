from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.edges.receiver import WebhookReceiver, build_receiver
from tests.edges.phone_standins import StandInBotApi
from tests.edges.signing import ENV_NAMES, SECRETS
from tests.edges.telegram_harness import TOKEN
from tests.mail_servers import Dovecot, start_dovecot

NOW = 1_700_000_000
SOURCES = {"github": "github", "stripe": "stripe", "std": "standard", "slack": "slack", "home": "hmac"}
MAX_BODY = 64 * 1024


def webhook_settings(db: Path, **extra: Any) -> Settings:
    sources = {name: {"verifier": kind, "secret_env": ENV_NAMES[kind]} for name, kind in SOURCES.items()}
    return Settings(db=db, webhooks={"host": "127.0.0.1", "port": 0, "max_body_bytes": MAX_BODY,
                                     "sources": sources, **extra})


def secrets_env() -> dict[str, str]:
    return {ENV_NAMES[kind]: secret for kind, secret in SECRETS.items()}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
async def receiver(db_path: Path, clock: ManualClock) -> AsyncIterator[WebhookReceiver]:
    server = build_receiver(webhook_settings(db_path), clock=clock, environ=secrets_env())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        yield session


def rows(db_path: Path) -> list[tuple[str, str]]:
    with Store.open(db_path) as store:
        return [(e.source, e.source_id) for e in store.events(limit=10_000)]


@pytest.fixture
def bot_token() -> str:
    """The token the stand-in Bot API takes: the shared one (a test module may override this fixture)."""
    return TOKEN


@pytest.fixture
async def bot(bot_token: str) -> AsyncIterator[StandInBotApi]:
    """The stand-in Telegram Bot API on 127.0.0.1, taking `bot_token`."""
    server = StandInBotApi(token=bot_token)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def dovecot() -> Iterator[Dovecot]:
    """A real Dovecot (IMAP) on 127.0.0.1 for one test, removed after it."""
    server = start_dovecot()
    try:
        yield server
    finally:
        server.remove()
