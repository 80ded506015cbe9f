"""Real processes (issue 20): `agent-console run` with a Telegram channel against the stand-in Bot API. SIGKILL
between getUpdates and the commit loses nothing and stores nothing twice; of two engines only the lease holder
polls, and a takeover continues from the stored offset."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.core import Store
from tests.edges.phone_standins import StandInBotApi
from tests.edges.test_phone_processes import ROOT, inbox, kill, phone

OWNER = 424242
TOKEN = "123456:process-token-XYZ"


@pytest.fixture
def bot_token() -> str:
    return TOKEN  # this module's own: the stand-in Bot API in tests/edges/conftest.py takes it


def start(tmp_path: Path, bot: StandInBotApi, *, batch_window: float, name: str, lease_ttl: int = 2
          ) -> subprocess.Popen[bytes]:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[webhooks]\nsecrets_file = "{tmp_path / "secrets.env"}"\n\n'
        f'[[channels]]\ntype = "telegram"\ntoken_env = "TG_TEST_TOKEN"\nchat_id = {OWNER}\napi_base = "{bot.url}"\n'
        f'batch_window = {batch_window}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env.update(PYTHONPATH=str(ROOT), TG_TEST_TOKEN=TOKEN, AGENT_CONSOLE_LEASE_TTL=str(lease_ttl),
               AGENT_CONSOLE_BACKOFF_BASE="0", XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    with (tmp_path / f"{name}.log").open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "console", "--db", str(tmp_path / "inbox.db"), "--config",
                                 str(config), "run"], cwd=ROOT, env=env, stdout=sink, stderr=sink)


def stored(db: Path) -> list[tuple[str, int]]:
    with Store.open(db, check=False) as store:
        return [(e.source_id, e.duplicates) for e in store.events(source="telegram")]


@pytest.mark.parametrize("kill_when", ["read, not committed", "committed"])
async def test_sigkill_around_the_commit_loses_nothing_and_stores_nothing_twice(
        tmp_path: Path, bot: StandInBotApi, kill_when: str) -> None:
    db = tmp_path / "inbox.db"
    # The owner's pause lets the first engine store the message but never run it: the kill then lands between
    # the commit and the run (otherwise it could run and claim the reply's send before dying, and the reply
    # would wait out the send timeout, a path of its own).
    with Store.open(db) as store:
        assert store.pause_by_owner(now=int(time.time()), via="test")
    # A long batch window holds the read updates uncommitted for 3 s: the kill lands between read and commit.
    first = start(tmp_path, bot, batch_window=3, name="first")
    second: subprocess.Popen[bytes] | None = None
    try:
        await inbox(db, lambda s: s.lease() is not None, "the first engine's lease")
        update_id, message_id = await bot.write(OWNER, "buy milk")
        await phone(lambda: update_id in bot.delivered, "the update read by the first engine")
        if kill_when == "committed":
            await inbox(db, lambda s: s.find_event("telegram", f"{OWNER}:{message_id}"), "the event stored")
        else:
            assert stored(db) == []  # read, held in the batch window, not stored yet
        kill(first)
        assert stored(db) in ([], [(f"{OWNER}:{message_id}", 0)])
        with Store.open(db) as store:
            assert store.counts()["done"] == 0 and store.resume_by_owner(now=int(time.time()))
        delivered_before = bot.delivered.count(update_id)
        second = start(tmp_path, bot, batch_window=0, name="second")
        await inbox(db, lambda s: s.counts()["done"] == 1, "the message's run")
        await inbox(db, lambda s: s.phone_cursor("telegram") == str(update_id + 1), "the offset past it")
        assert stored(db) == [(f"{OWNER}:{message_id}", 0)]  # once, and no copy even offered to the inbox
        if kill_when == "committed":
            assert bot.delivered.count(update_id) == delivered_before  # the stored offset moved past it
        else:
            assert bot.delivered.count(update_id) > delivered_before  # read again from the stored offset
        await phone(lambda: [m for m in bot.sent_to(OWNER) if m["text"] == "Noted: buy milk"], "one reply")
        assert len([m for m in bot.sent_to(OWNER) if m["text"].startswith("Noted")]) == 1
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                kill(process)


async def test_only_the_holder_polls_and_a_takeover_continues_from_the_stored_offset(
        tmp_path: Path, bot: StandInBotApi) -> None:
    db = tmp_path / "inbox.db"
    first = start(tmp_path, bot, batch_window=0, name="first")
    second: subprocess.Popen[bytes] | None = None
    try:
        await inbox(db, lambda s: s.lease() is not None, "the first engine's lease")
        second = start(tmp_path, bot, batch_window=0, name="second")
        _, one = await bot.write(OWNER, "first message")
        await inbox(db, lambda s: s.find_event("telegram", f"{OWNER}:{one}"), "stored by the holder")
        await phone(lambda: (tmp_path / "second.log").exists() and b"standby" in (tmp_path / "second.log").read_bytes(),
                    "the second engine on standby")
        _, two = await bot.write(OWNER, "second message")
        await inbox(db, lambda s: s.find_event("telegram", f"{OWNER}:{two}"), "stored by the holder")
        assert bot.conflicts == 0  # a standby never polled beside the holder
        kill(first)
        _, three = await bot.write(OWNER, "while nobody holds the lease")
        await inbox(db, lambda s: s.find_event("telegram", f"{OWNER}:{three}"), "stored after the takeover")
        await inbox(db, lambda s: s.counts()["done"] == 3, "every message run")
        assert sorted(stored(db)) == sorted([(f"{OWNER}:{m}", 0) for m in (one, two, three)])
        assert bot.conflicts == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                kill(process)


async def test_a_frozen_holders_long_poll_ends_before_its_lease_and_the_new_holder_meets_no_conflict(
        tmp_path: Path, bot: StandInBotApi) -> None:
    """Issue 36, item 3: the lease holder is frozen (SIGSTOP) while its getUpdates waits; a frozen process cannot
    close its socket, so the poll stays open on the Bot API until its timeout. It was asked for 30 s whatever the
    lease had left: the engine that took the lapsed lease over polled into it (a 409 conflict; on Telegram both
    sides then see 409s and a message waits). Each poll now asks for no longer than the lease it was opened under
    has left (less a margin), so the Bot API has let go of it before anyone can take the lease over."""
    db = tmp_path / "inbox.db"
    first = start(tmp_path, bot, batch_window=0, name="first", lease_ttl=6)
    second: subprocess.Popen[bytes] | None = None
    try:
        await inbox(db, lambda s: s.lease() is not None, "the first engine's lease")
        first_holder = await inbox(db, lambda s: s.lease().holder, "the first holder's name")
        second = start(tmp_path, bot, batch_window=0, name="second", lease_ttl=6)
        await phone(lambda: b"standby" in (tmp_path / "second.log").read_bytes(), "the second engine on standby")
        polls = len([r for r in bot.requests if r.path.endswith("/getUpdates")])
        await phone(lambda: bot._waiting == 1 and len([r for r in bot.requests if r.path.endswith("/getUpdates")])
                    > polls, "a fresh long poll of the first engine waiting")
        first.send_signal(signal.SIGSTOP)

        await inbox(db, lambda s: s.lease().holder != first_holder, "the lease taken over", limit=60)
        _, one = await bot.write(OWNER, "written after the takeover")
        await inbox(db, lambda s: s.find_event("telegram", f"{OWNER}:{one}"), "stored by the new holder")
        assert bot.conflicts == 0  # the frozen engine's poll had ended before the lease lapsed
        first.send_signal(signal.SIGCONT)  # it wakes with its lease gone: it polls no more
        await phone(lambda: b"lost the lease" in (tmp_path / "first.log").read_bytes(), "the first engine told")
        _, two = await bot.write(OWNER, "written after the first engine woke")
        await inbox(db, lambda s: s.find_event("telegram", f"{OWNER}:{two}"), "stored by the holder")
        with Store.open(db, check=False) as store:
            assert store.chat_health("telegram")[0] == "ok"
        assert bot.conflicts == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)
                kill(process)


async def test_a_strangers_messages_never_run_and_a_burst_is_one_run_with_one_reply(
        tmp_path: Path, bot: StandInBotApi) -> None:
    db = tmp_path / "inbox.db"
    engine = start(tmp_path, bot, batch_window=1, name="engine")
    try:
        await inbox(db, lambda s: s.lease() is not None, "the engine's lease")
        await bot.write(777, "run my errands", from_id=777)
        await phone(lambda: bot.sent_to(777), "the stranger told the bot is private")
        ids = [(await bot.write(OWNER, text))[1] for text in ("one", "two", "three")]
        await inbox(db, lambda s: s.counts()["done"] == 3, "the burst run")
        [reply] = await phone(lambda: [m for m in bot.sent_to(OWNER) if m["text"].startswith("Noted")], "one reply")
        assert reply["text"] == "Noted your 3 messages: one; two; three"
        assert reply["reply_to_message_id"] == ids[-1]
        with Store.open(db, check=False) as store:
            assert [e.source_id for e in store.events(source="telegram")] == [f"{OWNER}:{m}" for m in reversed(ids)]
            assert store.chat_status("telegram")["refused_messages"] == 1
        # One run saw all three (its one reply names them); three runs would have sent three replies.
        assert len([m for m in bot.sent_to(OWNER) if m["text"].startswith("Noted")]) == 1
    finally:
        if engine.poll() is None:
            kill(engine)
