"""Real processes: `agent-console run` with a Telegram channel, killed with SIGKILL around a tap, and a second
`run` that takes over. The tap settles the approval exactly once, the action runs once, the card ends true."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from console.core import Store, StoreUnavailable
from tests.edges.phone_standins import StandInBotApi

ROOT = Path(__file__).resolve().parents[2]
OWNER = 424242
TOKEN = "123456:process-token-XYZ"


@pytest.fixture
def bot_token() -> str:
    return TOKEN  # this module's own: the stand-in Bot API in tests/edges/conftest.py takes it


def start(tmp_path: Path, bot: StandInBotApi) -> subprocess.Popen[bytes]:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[webhooks]\nsecrets_file = "{tmp_path / "secrets.env"}"\n\n'
        f'[[channels]]\ntype = "telegram"\ntoken_env = "TG_TEST_TOKEN"\nchat_id = {OWNER}\napi_base = "{bot.url}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env.update(PYTHONPATH=str(ROOT), TG_TEST_TOKEN=TOKEN, AGENT_CONSOLE_LEASE_TTL="2",
               AGENT_CONSOLE_BACKOFF_BASE="0", XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    with (tmp_path / "run.log").open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "console", "--db", str(tmp_path / "inbox.db"), "--config",
                                 str(config), "run"], cwd=ROOT, env=env, stdout=sink, stderr=sink)


async def inbox(db: Path, check: Callable[[Store], Any], what: str, limit: float = 40.0) -> Any:
    deadline = asyncio.get_running_loop().time() + limit
    while True:
        result = None
        if db.exists():
            # CI once saw this open wait out the 5 s busy timeout while the engine made the fresh file (both
            # processes opening a new inbox at once): the condition is not met yet, and it is asked again.
            with contextlib.suppress(StoreUnavailable), Store.open(db, check=False) as store:
                result = check(store)
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, f"not seen within {limit} s: {what}"
        await asyncio.sleep(0.02)


async def phone(check: Callable[[], Any], what: str, limit: float = 40.0) -> Any:
    deadline = asyncio.get_running_loop().time() + limit
    while not (result := check()):
        assert asyncio.get_running_loop().time() < deadline, f"not seen within {limit} s: {what}"
        await asyncio.sleep(0.02)
    return result


def kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


@pytest.mark.parametrize("kill_after", ["the tap reached the service", "the answer was stored"])
async def test_a_tap_around_a_crash_settles_exactly_once(tmp_path: Path, bot: StandInBotApi, kill_after: str) -> None:
    db = tmp_path / "inbox.db"
    first = start(tmp_path, bot)
    second: subprocess.Popen[bytes] | None = None
    try:
        await inbox(db, lambda s: (lease := s.lease()) is not None and lease.until > 0, "the first engine's lease")
        with Store.open(db) as store:
            store.ingest("chat", "c1", {"text": "refund order 881"}, now=int(time.time()))
        [card] = await phone(lambda: bot.cards(OWNER), "the card")
        request_id = card["text"].split("[", 1)[1].split("]", 1)[0]
        await bot.tap(OWNER, card, "Yes")
        if kill_after == "the answer was stored":
            await inbox(db, lambda s: s.approval(request_id).outcome == "yes", "the answer")
        kill(first)
        second = start(tmp_path, bot)
        await inbox(db, lambda s: s.counts()["done"] == 2, "the answer's run")
        await phone(lambda: bot.message(OWNER, card["message_id"])["text"].endswith("Approved (from Telegram)"),  # type: ignore[index]
                    "the card edited")
        with Store.open(db, check=False) as store:
            assert [(a["verdict"], a["repeats"]) for a in store.phone_answers()] == [("settled", 0)]
            step = store.journal_step(f"tool:{request_id}")
            # Committed once. A kill inside the step itself would run it again under the next generation (the
            # journal's at-least-once for a step that ran but did not commit, docs/reliability.md): that is the
            # run's window, not the tap's, so it is allowed here and counted.
            assert step is not None and step.state == "committed" and step.executions <= 2, step
            approval = store.approval(request_id)
            assert approval is not None and (approval.outcome, approval.answered_via) == ("yes", "telegram")
            event = store.find_event("approval", request_id)
            assert event is not None and event.duplicates == 0
        assert len(bot.cards(OWNER)) == 1
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                kill(process)
