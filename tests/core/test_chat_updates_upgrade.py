"""An inbox from before chat_updates.taken_at (SQLite 0027, PostgreSQL 0016): the Telegram listener read its kept
updates from its cursor on and forgot those below it afterwards, so a crash in between left taken updates kept. The
upgrade marks those below the cursor taken: they are not read (and so handled: a tap, /pair, a command) again."""

from __future__ import annotations

from pathlib import Path

import psycopg

from console.core import Store
from console.core.db import connect
from console.core.migrations import numbered_migrations
from console.core.pg_target import parse_target
from tests.pg_server import PostgresServer

SQLITE_BEFORE = 26  # schema/0027_chat_updates_taken.sql is the next
PG_BEFORE = 15  # pg_schema/0016_chat_updates_taken.sql is the next
OLD_ROWS = (
    # the Telegram listener's cursor: the next update id it wants (it took 10 and 11); an ntfy and a mail cursor beside
    "INSERT INTO phone_cursors (channel, cursor, updated_at) VALUES ('phone-tg', '12', 5)",
    "INSERT INTO phone_cursors (channel, cursor, updated_at) VALUES ('phone-ntfy', 'sPs3ZmPNq1', 5)",
    "INSERT INTO phone_cursors (channel, cursor, updated_at) VALUES ('mail', '7:42:1700000000', 5)",
    # 10 and 11 taken before the crash, not yet forgotten; 12 kept and not taken yet
    "INSERT INTO chat_updates (source, update_id, body, received_at) VALUES ('telegram', 10, '{\"update_id\": 10}', 3)",
    "INSERT INTO chat_updates (source, update_id, body, received_at) VALUES ('telegram', 11, '{\"update_id\": 11}', 4)",
    "INSERT INTO chat_updates (source, update_id, body, received_at) VALUES ('telegram', 12, '{\"update_id\": 12}', 6)",
)


def _only_the_untaken_one_is_read(store: Store) -> None:
    assert store.chat_updates("telegram") == [{"update_id": 12}]
    # a redelivery of a taken one is still refused (remembered as taken), and the untaken one stays kept once
    assert store.queue_chat_update("telegram", 11, {"update_id": 11}, now=7, channel="phone-tg") is False
    assert store.queue_chat_update("telegram", 12, {"update_id": 12}, now=7, channel="phone-tg") is False


def test_a_sqlite_inbox_from_before_the_taken_mark_does_not_replay_taken_updates(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    old = connect(path, schema_version=SQLITE_BEFORE)
    for statement in OLD_ROWS:
        old.execute(statement)
    old.close()
    with Store.open(path) as store:
        _only_the_untaken_one_is_read(store)


def test_a_postgresql_inbox_from_before_the_taken_mark_does_not_replay_taken_updates(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    schema = parse_target(postgres_url).schema
    with psycopg.connect(postgres_server.url, autocommit=True, options=f"-c search_path={schema}") as old:
        old.execute(f'CREATE SCHEMA "{schema}"')
        old.execute("CREATE TABLE schema_version (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL)")
        for number, _name, sql in numbered_migrations("pg_schema"):
            if number <= PG_BEFORE:
                old.execute(sql.encode())
        old.execute("INSERT INTO schema_version (one, version) VALUES (1, %s)", (PG_BEFORE,))
        for statement in OLD_ROWS:
            old.execute(statement.encode())
    with Store.open(postgres_url) as store:
        _only_the_untaken_one_is_read(store)
