"""The two schemas agree: SQLite's migrations (console/core/schema) and PostgreSQL's (console/core/pg_schema) are
written by hand, twice, so this reads both inboxes as the engines left them (after every migration) and compares
what the core relies on: the tables, each column (name, kind of value, NOT NULL, default), the UNIQUE, PRIMARY KEY,
CHECK and foreign key constraints, the triggers (by name), the rows a fresh inbox starts with and the named indexes
(columns, uniqueness, partial WHERE clause). Each engine spells the same
thing its own way (PostgreSQL writes `status = ANY (ARRAY['a'::text, ...])` for `status IN ('a', ...)`): both
sides are brought to one spelling before they are compared."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import psycopg
import pytest

from console.core import Store
from tests.pg_server import PostgresServer


@dataclass(frozen=True)
class Column:
    kind: str  # INTEGER, TEXT, REAL or BLOB: the class of value it holds
    not_null: bool
    default: str | None


@dataclass
class Table:
    columns: dict[str, Column] = field(default_factory=dict)
    keys: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)  # ("primary"|"unique", columns)
    checks: set[str] = field(default_factory=set)
    references: set[tuple[tuple[str, ...], str, tuple[str, ...]]] = field(default_factory=set)
    triggers: set[str] = field(default_factory=set)
    rows: list[tuple[object, ...]] = field(default_factory=list)  # what a fresh inbox starts with


@dataclass(frozen=True)
class Index:
    table: str
    columns: tuple[str, ...]
    unique: bool
    where: str | None


@dataclass
class Schema:
    tables: dict[str, Table] = field(default_factory=dict)
    indexes: dict[str, Index] = field(default_factory=dict)


# -- one spelling for both engines -------------------------------------------------------------------------------

_CAST = re.compile(r"::[a-z]+(?: precision| varying)?(?:\[\])?", re.IGNORECASE)
_ANY_ARRAY = re.compile(r"=\s*ANY\s*\(\s*\(?\s*ARRAY\s*\[([^\]]*)\]\s*\)?\s*\)", re.IGNORECASE)
# SQLite's `a IS NOT b` between two values is PostgreSQL's IS DISTINCT FROM (as console/core/pg.py translates it).
_IS_NOT_VALUE = re.compile(r"\bIS\s+NOT\s+(?!NULL\b|DISTINCT\b|TRUE\b|FALSE\b)", re.IGNORECASE)
_NOT_ANY_ARRAY = re.compile(r"<>\s*ALL\s*\(\s*\(?\s*ARRAY\s*\[([^\]]*)\]\s*\)?\s*\)", re.IGNORECASE)


def normalised(expression: str) -> str:
    """An expression as neither engine's own spelling: casts, parentheses, spaces and case dropped, `= ANY (ARRAY[
    ...])` as IN (...), `!=` as `<>`. Loses nothing the comparison needs: both sides are the same small conditions
    (a column against constants), where parentheses change no meaning."""
    text = _CAST.sub("", expression)
    text = _ANY_ARRAY.sub(lambda found: f" IN ({found.group(1)})", text)
    text = _NOT_ANY_ARRAY.sub(lambda found: f" NOT IN ({found.group(1)})", text)
    text = _IS_NOT_VALUE.sub("IS DISTINCT FROM ", text.replace("!=", "<>"))
    return re.sub(r"[\s()]", "", text).lower()


def value_kind(declared: str) -> str:
    """SQLite's type affinity rules (https://sqlite.org/datatype3.html §3.1), applied to either engine's type."""
    name = declared.upper()
    if "INT" in name:
        return "INTEGER"
    if any(word in name for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not name or "BLOB" in name or "BYTEA" in name:
        return "BLOB"
    if any(word in name for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def default_of(text: str | None) -> str | None:
    return None if text is None else normalised(text)


def balanced(text: str, start: int) -> str:
    """The text inside the parentheses that open at text[start]."""
    depth = 0
    for at in range(start, len(text)):
        if text[at] == "(":
            depth += 1
        elif text[at] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1 : at]
    raise AssertionError(f"unbalanced parentheses in {text!r}")


def without_strings_and_comments(sql: str) -> str:
    """The statement with its comments gone and its string literals blanked (same length kept for offsets)."""
    sql = re.sub(r"--[^\n]*", lambda found: " " * len(found.group(0)), sql)
    return re.sub(r"'(?:[^']|'')*'", lambda found: "'" + "_" * (len(found.group(0)) - 2) + "'", sql)


# -- reading each engine's catalogue ------------------------------------------------------------------------------


def sqlite_schema(path: Path) -> Schema:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    schema = Schema()
    try:
        tables = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for name, sql in tables:
            table = schema.tables[name] = Table()
            keyed = []
            for _, column, declared, not_null, default, primary in conn.execute(f'PRAGMA table_info("{name}")'):
                table.columns[column] = Column(value_kind(declared), bool(not_null or primary), default_of(default))
                if primary:
                    keyed.append((primary, column))
            if keyed:
                table.keys.add(("primary", tuple(column for _, column in sorted(keyed))))
            for _, index, _unique, origin, _ in conn.execute(f'PRAGMA index_list("{name}")'):
                if origin == "u":
                    columns = tuple(row[2] for row in conn.execute(f'PRAGMA index_info("{index}")'))
                    table.keys.add(("unique", columns))
            references: dict[int, tuple[str, list[str], list[str]]] = {}
            for number, _, parent, column, parent_column, *_ in conn.execute(f'PRAGMA foreign_key_list("{name}")'):
                references.setdefault(number, (parent, [], []))[1].append(column)
                references[number][2].append(parent_column)
            table.references = {(tuple(own), parent, tuple(theirs)) for parent, own, theirs in references.values()}
            table.rows = sorted(conn.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr)
            blanked = without_strings_and_comments(sql)
            for found in re.finditer(r"\bCHECK\s*\(", blanked, re.IGNORECASE):
                table.checks.add(normalised(balanced(sql, found.end() - 1)))
        for name, table_name in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'"):
            schema.tables[table_name].triggers.add(name)
        indexes = conn.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
        for name, table_name, sql in indexes:
            columns = tuple(row[2] for row in conn.execute(f'PRAGMA index_info("{name}")'))
            unique = bool(re.match(r"\s*CREATE\s+UNIQUE", sql, re.IGNORECASE))
            where = re.search(r"\bWHERE\b", without_strings_and_comments(sql), re.IGNORECASE)
            predicate = normalised(sql[where.end() :]) if where else None
            schema.indexes[name] = Index(table_name, columns, unique, predicate)
    finally:
        conn.close()
    return schema


PG_KINDS = {"p": "primary", "u": "unique"}


def postgres_schema(server: PostgresServer, namespace: str) -> Schema:
    schema = Schema()
    with psycopg.connect(server.url) as conn:
        for name, in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE'",
            (namespace,),
        ):
            if name != "schema_version":  # PostgreSQL's own bookkeeping (SQLite keeps it in user_version)
                schema.tables[name] = Table()
        for table_name, column, declared, nullable, default in conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = %s",
            (namespace,),
        ):
            if table_name in schema.tables:
                schema.tables[table_name].columns[column] = Column(
                    value_kind(declared), nullable == "NO", default_of(default)
                )
        constraints = conn.execute(
            "SELECT t.relname, c.contype, pg_get_constraintdef(c.oid), c.confrelid::regclass::text, "
            "       ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY AS k(n, o) "
            "             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.o), "
            "       ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY AS k(n, o) "
            "             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.o) "
            "FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace s ON s.oid = t.relnamespace "
            "WHERE s.nspname = %s AND c.contype IN ('p', 'u', 'c', 'f')",
            (namespace,),
        ).fetchall()
        for table_name, kind, definition, parent, parent_columns, columns in constraints:
            if table_name not in schema.tables:
                continue
            table = schema.tables[table_name]
            if kind == "f":
                table.references.add((tuple(columns), parent.rpartition(".")[2], tuple(parent_columns)))
            elif kind == "c":
                table.checks.add(normalised(re.sub(r"^CHECK\s*", "", definition)))
            else:
                table.keys.add((PG_KINDS[kind], tuple(columns)))
        for name, table_name in conn.execute(
            "SELECT tgname, tgrelid::regclass::text FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid "
            "JOIN pg_namespace s ON s.oid = r.relnamespace WHERE s.nspname = %s AND NOT t.tgisinternal",
            (namespace,),
        ):
            schema.tables[table_name.rpartition(".")[2]].triggers.add(name)
        for name, table in schema.tables.items():
            table.rows = sorted(
                (tuple(row) for row in conn.execute(f'SELECT * FROM "{namespace}"."{name}"')), key=repr
            )
        backing = {
            name for name, in conn.execute(
                "SELECT i.relname FROM pg_constraint c JOIN pg_class i ON i.oid = c.conindid "
                "JOIN pg_namespace s ON s.oid = i.relnamespace WHERE s.nspname = %s AND c.contype IN ('p', 'u')",
                (namespace,),
            )
        }
        for name, table_name, unique, predicate, columns in conn.execute(
            "SELECT i.relname, t.relname, x.indisunique, pg_get_expr(x.indpred, x.indrelid), "
            "       ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY AS k(n, o) "
            "             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n ORDER BY k.o) "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace s ON s.oid = i.relnamespace WHERE s.nspname = %s",
            (namespace,),
        ):
            if name not in backing and table_name in schema.tables:
                schema.indexes[name] = Index(table_name, tuple(columns), unique, default_of(predicate))
    return schema


# -- the comparison ------------------------------------------------------------------------------------------------


def differences(sqlite: Schema, postgres: Schema) -> list[str]:
    found: list[str] = []
    for name in sorted(sqlite.tables.keys() ^ postgres.tables.keys()):
        found.append(f"table {name}: only in {'SQLite' if name in sqlite.tables else 'PostgreSQL'}")
    for name in sorted(sqlite.tables.keys() & postgres.tables.keys()):
        lite, pg = sqlite.tables[name], postgres.tables[name]
        for column in sorted(lite.columns.keys() ^ pg.columns.keys()):
            found.append(f"{name}.{column}: only in {'SQLite' if column in lite.columns else 'PostgreSQL'}")
        for column in sorted(lite.columns.keys() & pg.columns.keys()):
            if lite.columns[column] != pg.columns[column]:
                found.append(f"{name}.{column}: SQLite {lite.columns[column]}, PostgreSQL {pg.columns[column]}")
        for key in sorted(lite.keys ^ pg.keys):
            found.append(f"{name} {key[0]} key {key[1]}: only in {'SQLite' if key in lite.keys else 'PostgreSQL'}")
        for check in sorted(lite.checks ^ pg.checks):
            found.append(f"{name} CHECK {check}: only in {'SQLite' if check in lite.checks else 'PostgreSQL'}")
        for reference in sorted(lite.references ^ pg.references):
            where = "SQLite" if reference in lite.references else "PostgreSQL"
            found.append(f"{name} foreign key {reference}: only in {where}")
        for trigger in sorted(lite.triggers ^ pg.triggers):
            found.append(f"{name} trigger {trigger}: only in {'SQLite' if trigger in lite.triggers else 'PostgreSQL'}")
        if name != "inbox_identity" and lite.rows != pg.rows:  # its tag is random on each side, by design
            found.append(f"{name} starts with rows: SQLite {lite.rows}, PostgreSQL {pg.rows}")
    for name in sorted(sqlite.indexes.keys() ^ postgres.indexes.keys()):
        found.append(f"index {name}: only in {'SQLite' if name in sqlite.indexes else 'PostgreSQL'}")
    for name in sorted(sqlite.indexes.keys() & postgres.indexes.keys()):
        if sqlite.indexes[name] != postgres.indexes[name]:
            found.append(f"index {name}: SQLite {sqlite.indexes[name]}, PostgreSQL {postgres.indexes[name]}")
    return found


@pytest.fixture
def both(db_path: Path, postgres_server: PostgresServer, postgres_url: str) -> tuple[Schema, Schema]:
    Store.open(db_path).close()
    Store.open(postgres_url).close()
    return sqlite_schema(db_path), postgres_schema(postgres_server, postgres_url.rsplit("schema=", 1)[1])


def test_both_schemas_have_the_same_tables_columns_constraints_and_indexes(both: tuple[Schema, Schema]) -> None:
    sqlite, postgres = both
    assert len(sqlite.tables) > 20 and len(sqlite.indexes) > 20  # the catalogues were read
    assert differences(sqlite, postgres) == []


def test_the_comparison_sees_a_difference(both: tuple[Schema, Schema]) -> None:
    sqlite, postgres = both
    postgres.tables["inbox"].columns["status"] = Column("TEXT", False, None)
    postgres.tables["timers"].checks.clear()
    postgres.indexes["inbox_fresh"] = Index("inbox", ("id",), False, "status='pending'")
    del postgres.tables["lease"]
    assert differences(sqlite, postgres) == [
        "table lease: only in SQLite",
        "inbox.status: SQLite Column(kind='TEXT', not_null=True, default=\"'pending'\"), "
        "PostgreSQL Column(kind='TEXT', not_null=False, default=None)",
        *[f"timers CHECK {check}: only in SQLite" for check in sorted(sqlite.tables["timers"].checks)],
        "index inbox_fresh: SQLite Index(table='inbox', columns=('id',), unique=False, "
        "where=\"status='pending'andattempts=0andclaim_alone=0\"), "
        "PostgreSQL Index(table='inbox', columns=('id',), unique=False, where=\"status='pending'\")",
    ]


def test_the_spellings_agree() -> None:
    assert normalised("((status = ANY (ARRAY['pending'::text, 'running'::text])))") == normalised(
        "status IN ('pending', 'running')"
    )
    assert normalised("(wanted IS DISTINCT FROM shown)") == normalised("wanted IS DISTINCT FROM shown")
    assert normalised("every IS NULL OR every > 0") != normalised("every IS NULL OR every >= 0")
