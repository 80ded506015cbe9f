"""A throwaway PostgreSQL server for the tests: initdb into a temporary folder, a free port on
127.0.0.1, removed afterwards. PostgreSQL refuses to run as root, so when the tests run as root the
server runs as the unprivileged `postgres` system user (its files are handed to that user first).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_USER = "postgres"


class PostgresMissing(RuntimeError):
    """The PostgreSQL server binaries are not on this machine."""


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    raise PostgresMissing(f"{name} not found: install PostgreSQL (the server package) to run these tests")


PORT_TRIES = 3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    folder: Path
    port: int
    user: str

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def inbox_url(self, schema: str | None = None) -> str:
        """A URL naming a fresh, unused inbox schema in this server's database."""
        name = schema or f"inbox_{uuid.uuid4().hex[:12]}"
        return f"{self.url}?schema={name}"

    def stop(self) -> None:
        _as_server_user([_binary("pg_ctl"), "stop", "-D", str(self.folder / "data"), "-m", "immediate", "-w"],
                        check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


def _as_server_user(command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0:
        command = ["runuser", "-u", SERVER_USER, "--", *command]
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)


def start_server(*, durable: bool = False) -> PostgresServer:
    """A fresh server. The tests' server skips fsync (nothing in a test outlives the machine); durable=True
    keeps PostgreSQL's own defaults (fsync, full_page_writes, synchronous_commit on), as benchmarks need."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    # A durable server is for benchmarks that measure the disk: never on the tests' tmpfs (tests/conftest.py).
    on_tmpfs = tempfile.gettempdir() == "/dev/shm"  # tests.support.RAM_DISK (bench/ imports this file alone)
    folder = Path(tempfile.mkdtemp(prefix="agent-console-pg-", dir="/var/tmp" if durable and on_tmpfs else None))
    data = folder / "data"
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER)
        os.chown(folder, account.pw_uid, account.pw_gid)
        user = SERVER_USER
    else:
        user = pwd.getpwuid(os.geteuid()).pw_name
    os.chmod(folder, 0o700)
    log = folder / "server.log"
    try:
        _as_server_user([initdb, "-D", str(data), "-U", user, "--auth=trust", "--encoding=UTF8",
                         "--no-sync", "--locale=C"])
        # The free port is only free when probed: a test worker running beside this one may take it first
        # (each xdist worker starts its own server), so a port found taken is tried again with another.
        for tries_left in reversed(range(PORT_TRIES)):
            port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={folder} "
                       "-c max_connections=200 -c shared_buffers=64MB")
            if not durable:
                options += " -c fsync=off -c full_page_writes=off"
            try:
                _as_server_user([pg_ctl, "start", "-D", str(data), "-w", "-t", "60", "-o", options,
                                 "-l", str(log)])
                return PostgresServer(folder, port, user)
            except subprocess.CalledProcessError:
                taken = log.exists() and "could not bind" in log.read_text(errors="replace")
                if not taken or not tries_left:
                    raise
                log.unlink()
    except subprocess.CalledProcessError as exc:
        detail = log.read_text(errors="replace") if log.exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr}\n{detail}") from exc
    raise AssertionError("unreachable: the last try returns or raises")


def drop_schema(server: PostgresServer, url: str) -> None:
    import psycopg

    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- Migrated inboxes, recycled: a schema migrated once serves test after test, emptied back to what a fresh
# migration holds. Migrating a schema costs the server 0.15-0.4 s of CPU (28 migrations of tables, indexes and
# functions); emptying one costs a few milliseconds. A schema is only recycled when nothing is connected to it any
# more and its definitions are still those of a fresh migration; otherwise it is dropped, as before.

SCHEMA_SHAPE = """
SELECT 'relation ' || c.relname || ' ' || c.relkind::text FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' notnull='
       || a.attnotnull || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text || ' default='
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relnamespace = %(ns)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relnamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
 WHERE connamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'function ' || pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.pronamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = %(ns)s::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid) FROM pg_class c
 WHERE c.relnamespace = %(ns)s::regnamespace AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'sequence ' || c.relname || ' ' || s.seqtypid::regtype || ' ' || s.seqstart || ' ' || s.seqincrement || ' '
       || s.seqmax || ' ' || s.seqmin || ' ' || s.seqcache || ' ' || s.seqcycle
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = %(ns)s::regnamespace
"""


# Rows a migration writes with a value of its own for each inbox (console/core/pg_schema/0001_inbox.sql): a
# recycled inbox gets a new one the same way, never the pristine schema's.
NEW_PER_INBOX = ("UPDATE inbox_identity SET tag = substr(md5(random()::text || clock_timestamp()::text), 1, 16)",)


def schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


def schema_shape(conn: Any, schema: str) -> list[str]:
    """Every definition in the schema (relations, columns, indexes, constraints, functions, triggers, views,
    sequences), its own name written as <schema>, sorted: two schemas of the same shape give the same list."""
    rows = conn.execute(SCHEMA_SHAPE, {"ns": f'"{schema}"'}).fetchall()
    return sorted(str(row[0]).replace(schema, "<schema>") for row in rows)  # names are inbox_ + 12 hex digits


def tables_of(conn: Any, schema: str) -> list[str]:
    return [row[0] for row in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind IN ('r', 'p') ORDER BY 1",
        (f'"{schema}"',)).fetchall()]


def sequences_of(conn: Any, schema: str) -> dict[str, tuple[int, bool]]:
    """Each sequence's state: (last_value, is_called), as nextval() will continue it."""
    names = [row[0] for row in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind = 'S' ORDER BY 1",
        (f'"{schema}"',)).fetchall()]
    return {name: tuple(conn.execute(f'SELECT last_value, is_called FROM "{schema}"."{name}"').fetchone())
            for name in names}


class InboxPool:
    """Migrated, empty inbox schemas for one test process's server. take() hands out one (a fresh schema the
    first times); give_back() empties it back to a pristine migration's rows and sequences and keeps it, or drops
    it when something is still connected or its shape is no longer a fresh migration's."""

    def __init__(self, server: PostgresServer) -> None:
        import psycopg

        from console.core import Store

        self.server = server
        # Its own, migrated now: the figures kept below are a fresh migration's (an older pristine schema may
        # have met a test's ANALYZE of the whole database).
        self.pristine = f"pristine_{uuid.uuid4().hex[:12]}"
        Store.open(f"{server.url}?schema={self.pristine}").close()
        self.conn = psycopg.connect(server.url, autocommit=True)
        self.conn.execute("SET lock_timeout = '5s'")
        self.shape = schema_shape(self.conn, self.pristine)
        self.tables = tables_of(self.conn, self.pristine)
        self.seeded = [table for table in self.tables
                       if self.conn.execute(f'SELECT EXISTS (SELECT FROM "{self.pristine}"."{table}")').fetchone()[0]]
        self.sequences = sequences_of(self.conn, self.pristine)
        self.sizes = self._sizes(self.pristine)
        self.planner = {name: (pages, tuples, visible) for name, pages, tuples, visible in self.conn.execute(
            "SELECT relname, relpages, reltuples, relallvisible FROM pg_class WHERE relnamespace = %s::regnamespace",
            (f'"{self.pristine}"',)).fetchall()}
        self.spare: list[str] = []
        self.recycled = 0
        self.taken_at: Any = None

    def take(self) -> str:
        self.taken_at = self.conn.execute("SELECT clock_timestamp()").fetchone()[0]
        if self.spare:
            url = self.spare.pop()
            self._planner_as_fresh(schema_of(url))
            return url
        from console.core import Store

        url = self.server.inbox_url()
        Store.open(url).close()
        return url

    def _planner_as_fresh(self, schema: str) -> None:
        """What ANALYZE learnt of an earlier test's rows would steer this one's plans, and TRUNCATE leaves an index
        marked as never counted where a fresh one was counted empty at its build. Set as the pristine migration
        had them when it was made (done as a spare is handed out: a test's ANALYZE of the whole database reaches
        the spares and the pristine schema too)."""
        names, pages, tuples, visible = zip(*((name, *figures) for name, figures in self.planner.items()), strict=True)
        with self.conn.transaction():
            self.conn.execute("DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class "
                              "WHERE relnamespace = %s::regnamespace)", (f'"{schema}"',))
            self.conn.execute(
                "UPDATE pg_class c SET relpages = f.pages, reltuples = f.tuples, relallvisible = f.visible "
                "FROM unnest(%s::text[], %s::int[], %s::real[], %s::int[]) AS f(name, pages, tuples, visible) "
                "WHERE c.relnamespace = %s::regnamespace AND c.relname = f.name AND (c.relpages, c.reltuples, "
                "c.relallvisible) IS DISTINCT FROM (f.pages, f.tuples, f.visible)",
                (list(names), list(pages), list(tuples), list(visible), f'"{schema}"'))

    def give_back(self, url: str) -> None:
        schema = schema_of(url)
        if self._alone(since=self.taken_at) and self._empty_again(schema):
            self.spare.append(url)
            self.recycled += 1
        else:
            drop_schema(self.server, url)

    def _alone(self, since: Any) -> bool:
        """No session that connected since the inbox was taken is still connected (a test's process may need a
        moment to be gone from the server). Sessions older than the test (a module's own) never saw it."""
        deadline = time.monotonic() + 2.0
        while True:
            others = self.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                       "AND pid <> pg_backend_pid() AND backend_start >= %s", (since,)).fetchone()[0]
            if not others:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def _sizes(self, schema: str) -> dict[str, tuple[str, int]]:
        """Each relation's table and size on disk (its TOAST table's counted with it): a table a test wrote to,
        even one it emptied again, is bigger than a fresh migration's."""
        return {name: (table, size) for name, table, size in self.conn.execute(
            "SELECT c.relname, coalesce(t.relname, c.relname), pg_relation_size(c.oid) + "
            "coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0) FROM pg_class c "
            "LEFT JOIN pg_index i ON i.indexrelid = c.oid LEFT JOIN pg_class t ON t.oid = i.indrelid "
            "WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p', 'i')",
            (f'"{schema}"',)).fetchall()}

    def _empty_again(self, schema: str) -> bool:
        import psycopg

        try:
            if schema_shape(self.conn, schema) != self.shape:
                return False
            sizes = self._sizes(schema)
            written = sorted({table for name, (table, size) in sizes.items() if size != self.sizes[name][1]}
                             | set(self.seeded))
            with self.conn.transaction():
                self.conn.execute(f'SET LOCAL search_path = "{schema}"')
                self.conn.execute("TRUNCATE " + ", ".join(f'"{table}"' for table in written) + " CASCADE")
                for table in self.seeded:
                    self.conn.execute(f'INSERT INTO "{table}" OVERRIDING SYSTEM VALUE '
                                      f'SELECT * FROM "{self.pristine}"."{table}"')
                for statement in NEW_PER_INBOX:
                    self.conn.execute(statement)
                if sequences_of(self.conn, schema) != self.sequences:  # ON CONFLICT and rollbacks spend ids too
                    for name, (last_value, is_called) in self.sequences.items():
                        self.conn.execute("SELECT setval(%s::regclass, %s, %s)", (f'"{name}"', last_value, is_called))
            return True
        except psycopg.Error:
            return False

    def close(self) -> None:
        self.conn.execute(f'DROP SCHEMA IF EXISTS "{self.pristine}" CASCADE')
        self.conn.close()
