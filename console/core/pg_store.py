"""The Store on PostgreSQL: the same mixins and SQL as on SQLite, over a PgConnection.

Only what is about the storage itself differs here (the schema's version, the size on disk, the
integrity check, change notification); every behaviour (lease, fencing, claims, timers, approvals,
outbox, journal) is the shared code, run by the same conformance tests on both backends.
"""

from __future__ import annotations

from typing import Any

from console.core import pg
from console.core.db import StoreError
from console.core.options import StoreOptions
from console.core.store import Store


class PgStore(Store):
    _conn: pg.PgConnection

    def __init__(self, conn: pg.PgConnection, path: str, options: StoreOptions, seed: int | None = None) -> None:
        super().__init__(conn, path, options, seed)
        self.target = conn.target
        self._read_only = conn.read_only

    @classmethod
    def open_url(
        cls, url: str, options: StoreOptions, seed: int | None = None, *, read_only: bool = False,
        schema: str | None = None, password_env: str | None = None,
    ) -> PgStore:
        target = pg.parse_target(url, schema=schema, password_env=password_env)
        return cls(pg.connect(target, read_only=read_only), target.display, options, seed)

    def reopen(self) -> PgStore:
        return type(self)(pg.PgConnection(self.target, read_only=self._read_only), self.path, self.options,
                          self._seed)

    @property
    def backend(self) -> str:
        return "postgresql"

    def change_feed(self) -> pg.ChangeFeed:
        """A LISTEN on this inbox's channel: every write transaction that wrote NOTIFYs it as it commits."""
        return pg.ChangeFeed(self.target)

    DURABILITY_SETTINGS = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")

    def durability_settings(self) -> dict[str, str]:
        """The server's settings that decide what an acknowledged commit survives, as this connection sees
        them (benchmarks print them; `relaxed` commits still turn synchronous_commit off for themselves)."""
        rows = self._conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(?)", (list(self.DURABILITY_SETTINGS),)
        ).fetchall()
        found = {str(name): str(value) for name, value in rows}
        return {name: found.get(name, "?") for name in self.DURABILITY_SETTINGS}

    def data_version(self) -> int:
        """Changes when a transaction that writes starts or ends anywhere on the server (it may be another
        inbox's: a spare change, never a missed one). The snapshot's text (xmin:xmax:in-progress ids)
        changes when any writing transaction commits, which its xmax alone does not (a transaction holds
        its id from its first write). Waiters use change_feed(), which hears this inbox only."""
        return int(self._scalar("SELECT hashtext(pg_current_snapshot()::text)"))

    def query_plan(self, sql: str, params: Any = ()) -> list[str]:
        """PostgreSQL's plan for a statement (EXPLAIN without running it), one line per node."""
        return [str(row[0]).strip() for row in self._conn.execute(f"EXPLAIN (COSTS OFF) {sql}", params)]

    def limit_pages(self, pages: int) -> int:
        raise StoreError("a page cap is a SQLite file's setting: a PostgreSQL inbox has none")

    def schema(self) -> list[tuple[str, str, str]]:
        rows = self._conn.execute(
            """SELECT 'table', table_name, string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position)
                 FROM information_schema.columns WHERE table_schema = current_schema() GROUP BY table_name
               UNION ALL
               SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()
               ORDER BY 1, 2"""
        ).fetchall()
        return [(str(kind), str(name), " ".join(str(sql).split())) for kind, name, sql in rows]

    def schema_version(self) -> int:
        return pg.schema_version(self._conn)

    def integrity_problems(self) -> list[str]:
        """PostgreSQL checks its own pages (checksums, WAL); what is checked here is the inbox's own
        bookkeeping: the kept counts agree with the rows they count."""
        problems = []
        for table, counts in (("inbox", "inbox_counts"), ("outbox", "outbox_counts")):
            rows = self._conn.execute(
                f"""SELECT c.status, c.n, (SELECT COUNT(*) FROM {table} t WHERE t.status = c.status)
                      FROM {counts} c ORDER BY c.status"""
            ).fetchall()
            problems += [f"{counts}: {status} says {kept}, {table} holds {real}"
                         for status, kept, real in rows if kept != real]
        return problems

    def integrity_check(self) -> str:
        return "; ".join(self.integrity_problems()) or "ok"

    def wal_bytes(self) -> int:
        return 0  # the server keeps and recycles its own WAL

    def shrink_wal(self) -> bool:
        return True

    def page_count(self) -> int:
        """Pages (8 KiB) the inbox's tables and indexes take on the server."""
        size = self._scalar(
            """SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relkind = 'r'"""
        )
        return int(size) // 8192
