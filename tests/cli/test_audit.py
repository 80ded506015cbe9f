"""`agent-console audit` in-process on both backends (the end-to-end test with real runs and real processes is
tests/runtime/test_audit_trail.py): the listing, an empty trail, bad combinations of options, --verify on an
intact and a tampered trail, prune's line; and the chain kept whole by writers racing on their own connections."""

from __future__ import annotations

import json
import threading
import time

import pytest

from console.core import Store
from tests.cli.helpers import assert_user_error, invoke

DAY = 86_400


def wall() -> int:
    return int(time.time())


def answered(target: str, count: int, *, at: int) -> None:
    """`count` approvals asked and answered: one `answer` row each."""
    with Store.open(target) as store:
        for n in range(count):
            store.request_approval(f"apr-{n}", f"deploy {n}", now=at, expires_in=3600)
            assert store.answer_approval(f"apr-{n}", "yes" if n % 2 else "no", now=at + n, via="cli") in ("yes", "no")


def test_the_listing_and_its_json_say_the_same_rows(inbox_target: str) -> None:
    answered(inbox_target, 3, at=wall() - 100)

    listed = invoke(["--db", inbox_target, "audit"])
    exported = invoke(["--db", inbox_target, "audit", "--json"])

    assert listed.exit_code == exported.exit_code == 0, listed.output + exported.output
    rows = json.loads(exported.output)
    assert [(r["seq"], r["kind"], r["decision"], r["answered_via"]) for r in rows] == [
        (1, "answer", "declined", "cli"), (2, "answer", "approved", "cli"), (3, "answer", "declined", "cli")]
    lines = listed.output.splitlines()
    assert len(lines) == 3 and "ask_owner" in lines[0] and "declined (no rule recorded) via cli" in lines[0]


def test_an_empty_trail_says_so_and_verifies(inbox_target: str) -> None:
    with Store.open(inbox_target):
        pass

    assert invoke(["--db", inbox_target, "audit"]).output == "no audit rows\n"
    assert invoke(["--db", inbox_target, "audit", "--since", "2h"]).output.startswith("no audit rows since ")
    assert invoke(["--db", inbox_target, "audit", "--json"]).output.strip() == "[]"
    # Never "0 rows, chain intact" (issue 31): an empty trail says it is empty, and that only a pin tells more.
    assert invoke(["--db", inbox_target, "audit", "--verify"]).output.startswith("0 rows: the trail is empty")
    result = invoke(["--db", inbox_target, "audit", "--pin"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "the audit trail is empty: nothing to pin yet")


@pytest.mark.parametrize(("args", "words"), [
    (["--json", "--csv"], "give one of --json or --csv"),
    (["--verify", "--since", "1d"], "--verify checks the whole trail: give it alone"),
    (["--pin", "--json"], "--pin checks the whole trail: give it alone"),
    (["--against", "ab" * 32], "--against goes with --verify"),
    (["--verify", "--against", "not-a-hash"], "--against takes a row's hash: 64 hex digits"),
    (["--verify", "--pin"], "give one of --verify or --pin"),
    (["--since", "yesterday"], "--since takes epoch seconds, an ISO 8601 time (2030-01-31T09:00) or an age"),
    (["--since", "99999999999999999999"], "--since takes epoch seconds"),
])
def test_bad_options_are_one_line(inbox_target: str, args: list[str], words: str) -> None:
    with Store.open(inbox_target):
        pass
    result = invoke(["--db", inbox_target, "audit", *args])
    assert_user_error(result.exit_code, result.stdout, result.stderr, words)


def test_verify_names_a_deleted_row_in_one_line(inbox_target: str) -> None:
    answered(inbox_target, 3, at=wall() - 100)
    assert invoke(["--db", inbox_target, "audit", "--verify"]).output.startswith("3 rows, chain intact; last hash ")
    with Store.open(inbox_target) as store:
        store.connection.execute("DELETE FROM audit WHERE seq = 2")

    result = invoke(["--db", inbox_target, "audit", "--verify"])

    assert_user_error(result.exit_code, result.stdout, result.stderr,
                      "the audit trail is broken: row 2 is missing before row 3: deleted")


def test_a_pinned_head_is_proved_held_until_the_trail_is_rewritten_or_emptied(inbox_target: str) -> None:
    answered(inbox_target, 3, at=wall() - 100)
    pinned = invoke(["--db", inbox_target, "audit", "--pin"])
    assert pinned.exit_code == 0, pinned.output
    seq, head = pinned.output.split("\n")[0].removeprefix("row ").split(", hash ")
    assert seq == "3" and len(head) == 64 and f"--verify --against {head}" in pinned.output
    held = invoke(["--db", inbox_target, "audit", "--verify", "--against", head.upper()])
    assert held.exit_code == 0 and held.output.startswith("3 rows, chain intact; last hash ")
    assert held.output.rstrip().endswith(f"it holds the pinned row {head}")
    # Every row deleted and the head set back to nothing: by itself an empty trail; against the pin, not.
    with Store.open(inbox_target) as store:
        store.connection.execute("DELETE FROM audit")
        store.connection.execute("UPDATE audit_head SET seq = 0, hash = '' WHERE one = 1")
    assert invoke(["--db", inbox_target, "audit", "--verify"]).output.startswith("0 rows: the trail is empty")
    result = invoke(["--db", inbox_target, "audit", "--verify", "--against", head])
    assert_user_error(result.exit_code, result.stdout, result.stderr,
                      f"the audit trail does not hold the pinned row: no row of the trail has the hash {head}")


def test_prune_says_it_deleted_the_oldest_rows(inbox_target: str) -> None:
    answered(inbox_target, 2, at=wall() - 40 * DAY)
    answered_later = wall() - 100
    with Store.open(inbox_target) as store:
        store.request_approval("apr-new", "deploy new", now=answered_later, expires_in=3600)
        store.answer_approval("apr-new", "yes", now=answered_later, via="console")

    preview = invoke(["--db", inbox_target, "prune", "--days", "30", "--dry-run"])
    pruned = invoke(["--db", inbox_target, "prune", "--days", "30"])

    assert "would delete the 2 oldest audit rows" in preview.output
    assert "deleted the 2 oldest audit rows (a `pruned` row and the anchor keep the rest verifiable)" in pruned.output
    rows = json.loads(invoke(["--db", inbox_target, "audit", "--json"]).output)
    assert [(r["seq"], r["kind"]) for r in rows] == [(3, "answer"), (4, "pruned")]
    assert rows[1]["detail"].startswith("pruned 2 rows written before ")
    assert invoke(["--db", inbox_target, "audit", "--verify"]).output.startswith("2 rows, chain intact")


def test_writers_racing_on_their_own_connections_keep_one_chain(inbox_target: str) -> None:
    """Four writers answer approvals at once, each on its own connection: every row is chained after the one
    committed before it (the head is read and extended inside each writer's own write transaction)."""
    now = wall()
    with Store.open(inbox_target) as store:
        for n in range(40):
            store.request_approval(f"apr-{n}", f"deploy {n}", now=now, expires_in=3600)
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def answer_every_fourth(offset: int) -> None:
        try:
            with Store.open(inbox_target) as mine:
                start.wait(timeout=30)
                for n in range(offset, 40, 4):
                    mine.answer_approval(f"apr-{n}", "yes", now=now, via="api")
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            failures.append(exc)

    threads = [threading.Thread(target=answer_every_fourth, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not failures and not any(thread.is_alive() for thread in threads)
    with Store.open(inbox_target) as store:
        rows = list(store.audit_rows())
        check = store.verify_audit()
    assert [r.seq for r in rows] == list(range(1, 41))
    assert sorted(r.body["request_id"] for r in rows) == sorted(f"apr-{n}" for n in range(40))
    assert check.intact and check.rows == 40
