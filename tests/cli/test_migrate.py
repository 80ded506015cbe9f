"""`agent-console migrate`: a SQLite inbox copied into a new PostgreSQL inbox, row for row, and refused
where it would lose or mix anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from console.core import InboxMoved, Store
from console.core.copy import NOT_COPIED, TABLES, _columns, _set_mark
from console.core.models import BudgetDefaults
from tests.cli.helpers import invoke

T = 1_700_000_000
HOUR = 3_600


def fill(store: Store) -> None:
    """An inbox that has lived a little: every table the product writes holds something."""
    store.ingest_many([("chat", f"m-{n}", {"text": f"message {n}"}) for n in range(5)], now=T)
    store.ingest("github", "delivery-1", {"pr": 1}, now=T)
    store.ingest("github", "delivery-1", {"pr": 1}, now=T + 1)  # a refused copy, counted
    gen = store.acquire("engine-A", now=T)
    assert gen is not None
    batch = store.claim_batch("engine-A", gen, now=T)
    assert store.run_once("step:1", lambda: "sent the report", gen=gen, now=T, holder="engine-A",
                          event_id=batch[0].id) == ("sent the report", "executed")
    assert store.finish("engine-A", gen, [e.id for e in batch[:3]], now=T + 1, messages=["done with three"])
    assert store.finish("engine-A", gen, [e.id for e in batch[3:]], now=T + 1, error="model unavailable")
    store.release("engine-A", gen, now=T + 2)
    store.request_approval("apr-9-aa", "refund order 881", now=T, expires_in=HOUR)
    store.save_session("apr-9-aa", {"turns": ["refund please"]}, now=T)
    message = store.queue_message("Approval needed [apr-9-aa]: refund", now=T, approval_id="apr-9-aa", urgent=True)
    store.record_phone_message("tg", message, "42:7", now=T, request_id="apr-9-aa", shown="ask")
    store.add_timer("hourly", T + HOUR, {"tick": True}, every=HOUR, now=T)
    assert store.dispatch(lambda batch: None, now=T + 3) >= 1
    store.queue_message("held for the gap", now=T + 4)
    store.set_memory("owner.name", "Ada", now=T)
    store.set_budget("daily", 2.5, now=T)
    decision = store.reserve_spend(model="claude-x", worst_nanos=5_000, defaults=BudgetDefaults(), now=T)
    assert decision.reservation_id is not None
    store.settle_spend(decision.reservation_id, model="claude-x", cost_nanos=1_234, input_tokens=10,
                       output_tokens=5, cache_write_tokens=0, cache_read_tokens=0, now=T)


def rows(store: Store, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    names = ", ".join(columns)
    return sorted((tuple(r) for r in store.connection.execute(f"SELECT {names} FROM {table}")), key=repr)


def test_a_sqlite_inbox_is_copied_into_postgresql_row_for_row(tmp_path: Path, postgres_url: str) -> None:
    source = tmp_path / "inbox.db"
    with Store.open(source) as store:
        fill(store)
        before = store.status(now=T + 10)

    result = invoke(["migrate", "--from", str(source), "--to", postgres_url])
    assert result.exit_code == 0, result.output
    assert "every table's count and all 6 event keys verified" in result.output
    assert f"{source} is marked moved and takes no new work: use --db {postgres_url}" in result.output

    with Store.open(source, read_only=True) as old, Store.open(postgres_url) as new:
        for table in TABLES:
            columns = _columns(old, table)
            assert rows(old, table, columns) == rows(new, table, columns), table
        after = new.status(now=T + 10)
        assert {**after, "path": None} == {**before, "path": None}
        # The copy is a working inbox: its counters continue after the copied ids, its lease's generation
        # after the source's, and the approval carried over can be answered there.
        assert new.ingest("chat", "after-the-move", {}, now=T + 20)
        newest = new.find_event("chat", "after-the-move")
        assert newest is not None and newest.id == max(e.id for e in old.events(limit=100)) + 1
        assert new.acquire("engine-B", now=T + 30) == 2
        assert new.answer_approval("apr-9-aa", "yes", now=T + 31, via="cli") == "yes"
        assert new.inbox_tag() == old.inbox_tag()  # the phone answer keys are derived from it
        assert new.move_mark() is None and old.move_mark() == ("moved", postgres_url, old.move_mark()[2])


def test_a_target_that_already_holds_an_inbox_is_refused_and_left_alone(tmp_path: Path, postgres_url: str) -> None:
    source = tmp_path / "inbox.db"
    with Store.open(source) as store:
        fill(store)
    with Store.open(postgres_url) as target:
        target.ingest("chat", "mine", {}, now=T)
    result = invoke(["migrate", "--from", str(source), "--to", postgres_url])
    assert result.exit_code == 2 and "is not empty (1 inbox)" in result.output and "Traceback" not in result.output
    with Store.open(postgres_url) as target:
        assert [e.source_id for e in target.events()] == ["mine"]


def test_a_source_an_engine_still_holds_is_refused(tmp_path: Path, postgres_url: str) -> None:
    source = tmp_path / "inbox.db"
    with Store.open(source) as store:
        store.ingest("chat", "m-1", {}, now=T)
        assert store.acquire("engine-A", now=2**40) == 1  # held far into the future
    result = invoke(["migrate", "--from", str(source), "--to", postgres_url])
    assert result.exit_code == 2 and "an engine holds the source inbox's lease (engine-A" in result.output
    with Store.open(postgres_url) as target:
        assert target.events() == []


def test_bad_targets_are_one_line_errors(tmp_path: Path) -> None:
    source = tmp_path / "inbox.db"
    Store.open(source).close()
    for target, said in [
        ("postgresql://me:secret@127.0.0.1:1/db", "must not carry the password"),
        ("postgresql://127.0.0.1:1/db?schema=Bad-Name", "is not a plain name"),
        ("postgresql://127.0.0.1:1/db", "cannot reach the inbox database postgresql://127.0.0.1:1/db"),
        (str(source), "name the same inbox"),
    ]:
        result = invoke(["migrate", "--from", str(source), "--to", target])
        assert result.exit_code == 2, (target, result.output)
        assert said in result.output and "Traceback" not in result.output and "secret" not in result.output


def _mark(where: str | Path, state: str, other: str) -> None:
    with Store.open(where) as store:
        _set_mark(store, state, other, T)


def _one_line(result: Any, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.splitlines()) == 1, result.output
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


def test_a_move_stopped_before_its_last_step_is_finished_by_running_it_again(tmp_path: Path,
                                                                            postgres_url: str) -> None:
    source = tmp_path / "inbox.db"
    with Store.open(source) as store:
        fill(store)
    assert invoke(["migrate", "--from", str(source), "--to", postgres_url]).exit_code == 0
    _mark(postgres_url, "incomplete", str(source))  # what a migrate stopped between its last two steps leaves
    _one_line(invoke(["--db", postgres_url, "ingest", "chat", "x"]),
              f"this inbox is an unfinished copy from {source}", "run migrate again or delete it")
    _one_line(invoke(["--db", str(source), "ingest", "chat", "x"]), f"this inbox was moved to {postgres_url}")

    shown = invoke(["--db", str(source), "status"]).output.splitlines()
    assert shown[1].startswith(f"move       this inbox was moved to {postgres_url} (")
    marked = json.loads(invoke(["--db", postgres_url, "status", "--json"]).output)["move"]
    assert marked["state"] == "incomplete" and marked["other"] == str(source) and marked["since"] == T

    again = invoke(["migrate", "--from", str(source), "--to", postgres_url])
    assert again.exit_code == 0 and "finished the move" in again.output and "all 6 event keys verified" in again.output
    assert json.loads(invoke(["--db", postgres_url, "status", "--json"]).output)["move"] is None
    assert invoke(["--db", postgres_url, "ingest", "chat", "x"]).output == "stored\n"
    done = invoke(["migrate", "--from", str(source), "--to", postgres_url])
    assert done.exit_code == 0 and "the move was already done" in done.output


def test_a_copy_stopped_part_way_is_done_again(tmp_path: Path, postgres_url: str) -> None:
    """Stopped after the copy committed but before the source was marked moved: the target holds a whole
    copy, still marked incomplete; running migrate again copies it afresh (the old rows go first)."""
    source = tmp_path / "inbox.db"
    with Store.open(source) as store:
        fill(store)
    assert invoke(["migrate", "--from", str(source), "--to", postgres_url]).exit_code == 0
    assert invoke(["migrate", "--abandon", "--from", str(source)]).exit_code == 0
    with Store.open(source) as store:
        store.ingest("chat", "after-the-first-copy", {}, now=T + 50)
    _mark(source, "moving", postgres_url)
    _mark(postgres_url, "incomplete", str(source))
    _one_line(invoke(["--db", str(source), "ingest", "chat", "y"]), f"this inbox is being moved to {postgres_url}")

    again = invoke(["migrate", "--from", str(source), "--to", postgres_url])
    assert again.exit_code == 0, again.output
    assert "(an unfinished copy was done again)" in again.output and "all 7 event keys verified" in again.output
    with Store.open(source, read_only=True) as old, Store.open(postgres_url) as new:
        for table in TABLES:
            columns = _columns(old, table)
            assert rows(old, table, columns) == rows(new, table, columns), table
        assert new.counts() == old.counts() and new.outbox_counts() == old.outbox_counts()


def test_abandoning_a_move_gives_the_source_its_work_back(tmp_path: Path, postgres_url: str) -> None:
    source = tmp_path / "inbox.db"
    with Store.open(source) as store:
        store.ingest("chat", "m-1", {}, now=T)
    _mark(source, "moving", postgres_url)  # a migrate killed mid-copy
    _one_line(invoke(["--db", str(source), "ingest", "chat", "m-2"]), "is being moved")
    _one_line(invoke(["migrate", "--abandon", "--from", str(source), "--to", postgres_url]),
              "--abandon takes only --from")
    result = invoke(["migrate", "--abandon", "--from", str(source)])
    assert result.exit_code == 0 and f"it was being moved to {postgres_url}" in result.output
    assert invoke(["--db", str(source), "ingest", "chat", "m-2"]).output == "stored\n"
    _one_line(invoke(["migrate", "--abandon", "--from", str(source)]), "is not being moved, nor was it moved")
    _one_line(invoke(["migrate", "--from", str(source)]), "--to is missing")


def test_moves_that_would_mix_two_inboxes_are_refused(tmp_path: Path, postgres_url: str) -> None:
    source, other = tmp_path / "inbox.db", tmp_path / "other.db"
    for path in (source, other):
        with Store.open(path) as store:
            store.ingest("chat", "m-1", {}, now=T)
    _mark(postgres_url, "incomplete", str(other))
    _one_line(invoke(["migrate", "--from", str(source), "--to", postgres_url]),
              f"is an unfinished copy from {other}, not from {source}")
    _mark(source, "moved", str(other))
    _one_line(invoke(["migrate", "--from", str(source), "--to", postgres_url]), f"was already moved to {other}")
    _mark(source, "moving", str(other))
    _one_line(invoke(["migrate", "--from", str(source), "--to", postgres_url]),
              f"is being moved to {other} by another migrate", "--abandon")
    with Store.open(source, read_only=True) as old:
        assert [e.source_id for e in old.events()] == ["m-1"]


def test_every_table_of_an_inbox_is_moved_or_known_not_to_need_it(inbox_target: str) -> None:
    with Store.open(inbox_target) as store:
        if store.backend == "postgresql":
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        else:
            sql = "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
        tables = {str(row[0]) for row in store.connection.execute(sql)}
    assert tables - set(NOT_COPIED) == set(TABLES)


def test_a_postgresql_inbox_moves_into_a_sqlite_file(tmp_path: Path, postgres_url: str) -> None:
    with Store.open(postgres_url) as store:
        fill(store)
    target = tmp_path / "back-home.db"
    result = invoke(["migrate", "--from", postgres_url, "--to", str(target)])
    assert result.exit_code == 0 and "all 6 event keys verified" in result.output, result.output
    with Store.open(postgres_url) as old, Store.open(target) as new:
        for table in TABLES:
            columns = _columns(old, table)
            assert rows(old, table, columns) == rows(new, table, columns), table
        assert new.counts() == old.counts() and new.move_mark() is None
        assert new.ingest("chat", "after-the-move", {}, now=T + 20)
        with pytest.raises(InboxMoved, match=f"this inbox was moved to {target}"):
            old.ingest("chat", "after-the-move", {}, now=T + 20)
