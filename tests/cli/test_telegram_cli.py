"""`agent-console telegram pair|unpair|chats` and the channel in `status` (issue 20)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store
from console.core.chats import code_hash
from tests.cli.helpers import assert_user_error, invoke
from tests.edges.phone_standins import StandInBotApi, served_in_a_thread

TOKEN_ENV = "TELEGRAM_BOT_TOKEN"


@pytest.fixture(scope="module")
def bot() -> Iterator[StandInBotApi]:
    with served_in_a_thread(StandInBotApi) as server:
        yield server


def paired_config(tmp_path: Path, bot: StandInBotApi) -> list[str]:
    """--config and --db for an inbox with a Telegram channel on the stand-in Bot API."""
    config = tmp_path / "config.toml"
    config.write_text(f'[[channels]]\ntype = "telegram"\ntoken_env = "{TOKEN_ENV}"\napi_base = "{bot.url}"\n')
    return ["--config", str(config), "--db", str(tmp_path / "inbox.db")]


def engine_holds_the_lease(db: Path, holder: str) -> None:
    """What `telegram pair` reads of a running engine: its live lease on the inbox."""
    with Store.open(db) as store:
        assert store.acquire(holder, now=int(time.time())) is not None


def test_pair_prints_a_code_the_inbox_accepts_once(tmp_path: Path, bot: StandInBotApi) -> None:
    db = str(tmp_path / "inbox.db")
    engine_holds_the_lease(tmp_path / "inbox.db", f"{socket.gethostname()}:4321:ab12")
    result = invoke([*paired_config(tmp_path, bot), "telegram", "pair"], env={TOKEN_ENV: bot.token})
    assert result.exit_code == 0, result.output
    assert "the engine on this machine, process 4321, receives it" in result.output
    code = result.output.split("/pair ", 1)[1].split()[0]
    with Store.open(db) as store:
        assert store.pair_chat("telegram", code_hash(code), chat_id="42", owner_id="42", kind="private", title=None,
                               now=int(time.time()))
        assert not store.pair_chat("telegram", code_hash(code), chat_id="43", owner_id="43", kind="private",
                                   title=None, now=int(time.time()))
    assert "1 paired chat" in invoke(["--db", db, "status"]).output
    info = json.loads(invoke(["--db", db, "status", "--json"]).output)["telegram"]
    assert set(info) >= {"state", "reason", "paired_chats", "refused_messages"}
    assert [c["chat_id"] for c in info["paired_chats"]] == ["42"]
    assert "owner 42" in invoke(["--db", db, "telegram", "chats"]).output
    assert invoke(["--db", db, "telegram", "unpair", "42"]).output.strip() == "unpaired 1 chat"


def test_pair_says_when_another_machines_engine_receives_the_code(tmp_path: Path, bot: StandInBotApi) -> None:
    engine_holds_the_lease(tmp_path / "inbox.db", "far-away-host:77:cd34")
    result = invoke([*paired_config(tmp_path, bot), "telegram", "pair"], env={TOKEN_ENV: bot.token})
    assert result.exit_code == 0, result.output
    assert "the engine on another machine, far-away-host, receives it" in result.output and "/pair " in result.output


def test_pair_without_a_telegram_channel_says_what_to_add(tmp_path: Path) -> None:
    result = invoke(["--db", str(tmp_path / "inbox.db"), "telegram", "pair"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "no Telegram channel",
                      'type = "telegram"')
    assert "/pair" not in result.stdout


def test_pair_with_a_refused_token_says_so(tmp_path: Path, bot: StandInBotApi) -> None:
    engine_holds_the_lease(tmp_path / "inbox.db", "far-away-host:77:cd34")
    calls = len(bot.requests)
    result = invoke([*paired_config(tmp_path, bot), "telegram", "pair"], env={TOKEN_ENV: "999:not-the-token"})
    assert_user_error(result.exit_code, result.stdout, result.stderr, "Telegram did not accept the bot token",
                      "401", "token_env")
    assert "/pair" not in result.stdout
    assert [r.path.rsplit("/", 1)[-1] for r in bot.requests[calls:]] == ["getMe"]
    assert "not-the-token" not in result.stderr  # the token never in the line


def test_pair_with_no_engine_to_receive_it_says_to_start_one(tmp_path: Path, bot: StandInBotApi) -> None:
    args = [*paired_config(tmp_path, bot), "telegram", "pair"]
    result = invoke(args, env={TOKEN_ENV: bot.token})
    assert_user_error(result.exit_code, result.stdout, result.stderr, "no engine is running", "agent-console run")
    assert "/pair" not in result.stdout
    with Store.open(tmp_path / "inbox.db") as store:  # a lease an engine let go of (it stopped): still none
        now = int(time.time())
        gen = store.acquire("vm:1:ab", now=now - 1000)
        assert gen is not None and store.release("vm:1:ab", gen)
    result = invoke(args, env={TOKEN_ENV: bot.token})
    assert_user_error(result.exit_code, result.stdout, result.stderr, "no engine is running")


def test_unpairing_a_chat_not_paired_is_one_line(tmp_path: Path) -> None:
    result = invoke(["--db", str(tmp_path / "inbox.db"), "telegram", "unpair", "5"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "chat 5 is not paired")
