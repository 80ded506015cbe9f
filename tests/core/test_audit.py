"""The audit trail (issue 18 item 10): every recorded tool call and every approval's answer is a row chained by
hash, written in the transaction that writes what it records; verification names the first row edited, inserted,
swapped or deleted; pruning the oldest rows leaves the rest verifiable. Runs on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from console.core import ApprovalDraft, Store, ToolCallRecord, approved_step_key
from console.core.audit import row_hash
from console.core.copy import move_inbox
from console.trust.audit import audit_record
from tests.core.test_stranded_answers import TTL, ask, lose_every_attempt
from tests.core.test_stranded_answers import T as T_STRANDED

T = 1_800_000_000
DAY = 86_400
TRUSTED = {"trusted": True, "summary": "started by chat m1"}
UNTRUSTED = {"trusted": False, "summary": "read untrusted content: github d-1"}


def finish_run(store: Store, source_id: str | None, calls: Sequence[tuple[str, str, str, str | None]], *,
               now: int, provenance: dict[str, object] = TRUSTED, ask: str | None = None, holder: str = "w") -> int:
    """A run of one event (a new chat message, or with source_id None the answer waiting in the inbox) that
    recorded `calls` (tool, decision, outcome, rule) and, with `ask`, asked for that approval; returns the
    event's id."""
    if source_id is not None:
        store.ingest("chat", source_id, {"text": "hi"}, now=now)
    gen = store.acquire(holder, now=now)
    assert gen is not None
    [event] = store.claim_batch(holder, gen, now=now)
    run = {"holder": holder, "gen": gen, "events": [event.id]}
    records = [ToolCallRecord(event.id, f"t{n}", tool, {"order": "881"}, decision, outcome,
                              "order 881 is already refunded" if outcome == "error" else "ok",
                              ask if decision in ("asked", "approved") else None, rule=rule, provenance=provenance,
                              run=run)
               for n, (tool, decision, outcome, rule) in enumerate(calls)]
    approvals = [] if ask is None or source_id is None else [ApprovalDraft(
        ask, 'refund(order="881")', 600, {"rule": "ask: refund"}, {"state": 1}, event.id, "refund", {"order": "881"},
        [{"event_id": event.id, "source": "chat", "source_id": source_id}], origin=provenance)]
    assert store.finish(holder, gen, [event.id], now=now, tool_calls=records, approvals=approvals)
    store.release(holder, gen, now=now)
    return event.id


def seeded(store: Store) -> list[int]:
    """Four rows: an allowed lookup, an asked refund, its yes from Telegram, the approved refund's run."""
    first = finish_run(store, "m1", [("lookup", "allowed", "done", "allow: lookup*"),
                                     ("refund", "asked", "deferred", "ask: refund")], now=T, ask="apr-1")
    assert store.answer_approval("apr-1", "yes", now=T + 5, via="telegram") == "yes"
    finish_run(store, None, [("refund", "approved", "done", "ask: refund")], now=T + 6, ask="apr-1")
    return [first]


def test_calls_and_answers_are_rows_in_the_order_they_were_written(store: Store) -> None:
    [event_id] = seeded(store)

    rows = list(store.audit_rows())

    assert [(r.seq, r.kind) for r in rows] == [(1, "call"), (2, "call"), (3, "answer"), (4, "call")]
    lookup, asked, answer, approved = (audit_record(r) for r in rows)
    assert lookup["event_id"] == event_id and lookup["run"]["events"] == [event_id]
    assert (lookup["tool"], lookup["rule"], lookup["decision"], lookup["outcome"], lookup["trusted"]) == (
        "lookup", "allow: lookup*", "allowed", "done", True)
    assert (asked["decision"], asked["outcome"], asked["request_id"]) == ("asked", "deferred", "apr-1")
    assert (answer["decision"], answer["answered_via"], answer["rule"], answer["provenance"], answer["run"]) == (
        "approved", "telegram", "ask: refund", "started by chat m1", None)
    assert (approved["decision"], approved["answered_via"], approved["outcome"]) == ("approved", "telegram", "done")
    assert [r.prev_hash for r in rows] == ["", *(r.hash for r in rows[:-1])]
    check = store.verify_audit()
    assert (check.intact, check.rows, check.head) == (True, 4, rows[-1].hash)
    assert store.audit_head() == (4, rows[-1].hash)


def test_outcomes_are_said_in_the_trails_words(store: Store) -> None:
    finish_run(store, "m1", [("delete_order", "denied", "error", "deny: delete_*"),
                             ("nope", "unknown", "error", "no such tool"),
                             ("refund", "allowed", "error", "allow: refund")], now=T, provenance=UNTRUSTED)

    denied, missing, failed = (audit_record(r) for r in store.audit_rows())

    assert (denied["outcome"], missing["outcome"], failed["outcome"]) == ("refused", "refused", "failed")
    assert failed["detail"] == "order 881 is already refunded" and denied["trusted"] is False
    assert denied["provenance"] == "read untrusted content: github d-1"


def test_a_refused_finish_writes_no_row(store: Store) -> None:
    store.ingest("chat", "m1", {"text": "hi"}, now=T)
    gen = store.acquire("w", now=T)
    assert gen is not None
    [event] = store.claim_batch("w", gen, now=T)
    record = ToolCallRecord(event.id, "t1", "lookup", {}, "allowed", "done", "ok", rule="allow: lookup")
    assert not store.finish("w", gen + 1, [event.id], now=T, tool_calls=[record])  # a stale generation

    assert list(store.audit_rows()) == []
    assert store.verify_audit().rows == 0


def test_expiry_and_a_late_answer_are_the_clocks(store: Store) -> None:
    for rid, n in (("apr-a", 1), ("apr-b", 2)):
        finish_run(store, f"m{n}", [("refund", "asked", "deferred", "ask: refund")], now=T, ask=rid)
    assert store.run_scheduler(now=T + 600) >= 1  # apr-a's expiry fires ... (both are due: both expire)
    store.answer_approval("apr-b", "yes", now=T + 601, via="cli")  # ... and a late yes changes nothing

    answers = [audit_record(r) for r in store.audit_rows() if r.kind == "answer"]

    assert [(a["request_id"], a["decision"], a["answered_via"]) for a in answers] == [
        ("apr-a", "expired", "clock"), ("apr-b", "expired", "clock")]
    assert store.verify_audit().intact


def test_since_lists_the_rows_written_from_then_on(store: Store) -> None:
    seeded(store)

    assert [r.seq for r in store.audit_rows(since=T + 5)] == [3, 4]
    assert [r.seq for r in store.audit_rows(since=T + 7)] == []


# --- tampering ------------------------------------------------------------------------------------------------

def sql(store: Store, statement: str, params: Sequence[object] = ()) -> None:
    store.connection.execute(statement, params)


def body_of(store: Store, seq: int) -> str:
    return str(store.connection.execute("SELECT body FROM audit WHERE seq = ?", (seq,)).fetchall()[0][0])


def rehash(store: Store, seq: int) -> None:
    """Recompute a row's own hash after an edit, as someone covering their tracks would."""
    at, kind, event_id, body, prev = store.connection.execute(
        "SELECT at, kind, event_id, body, prev_hash FROM audit WHERE seq = ?", (seq,)).fetchall()[0]
    sql(store, "UPDATE audit SET hash = ? WHERE seq = ?", (row_hash(seq, at, kind, event_id, body, prev), seq))


def edit_outcome(store: Store) -> None:
    sql(store, "UPDATE audit SET body = ? WHERE seq = 2",
        (body_of(store, 2).replace('"decision":"asked"', '"decision":"allowed"'),))


def edit_and_rehash(store: Store) -> None:
    edit_outcome(store)
    rehash(store, 2)


def swap(store: Store) -> None:
    first, second = body_of(store, 2), body_of(store, 3)
    sql(store, "UPDATE audit SET body = ? WHERE seq = 2", (second,))
    sql(store, "UPDATE audit SET body = ? WHERE seq = 3", (first,))


def insert_past_the_head(store: Store) -> None:
    last = store.audit_head()[1]
    body = json.dumps({"tool": "refund", "decision": "approved"})
    sql(store, "INSERT INTO audit (seq, at, kind, event_id, body, prev_hash, hash) VALUES (5, ?, 'call', 1, ?, ?, ?)",
        (T + 7, body, last, row_hash(5, T + 7, "call", 1, body, last)))


@pytest.mark.parametrize(("tamper", "bad", "words"), [
    (edit_outcome, 2, "row 2 (event 1, refund) does not match its hash: it was changed after it was written"),
    (edit_and_rehash, 2, "row 2 is not the row that row 3 was chained to: it was changed or replaced"),
    (swap, 2, "row 2 (event 1, refund) does not match its hash"),
    (lambda store: sql(store, "DELETE FROM audit WHERE seq = 2"), 2, "row 2 is missing before row 3: deleted"),
    (lambda store: sql(store, "DELETE FROM audit WHERE seq IN (2, 3)"), 2, "rows 2 to 3 are missing before row 4"),
    (lambda store: sql(store, "DELETE FROM audit WHERE seq = 4"), 4, "row 4 is missing from the end of the trail"),
    (insert_past_the_head, 5, "row 5 is past the trail's last row (4): it was inserted"),
    (lambda store: (sql(store, "UPDATE audit SET body = '{}' WHERE seq = 4"), rehash(store, 4)), 4,
     "row 4, the last, is not the row the trail's head recorded"),
])
def test_verification_names_the_first_row_tampered_with(store: Store, tamper: object, bad: int, words: str) -> None:
    seeded(store)
    assert store.verify_audit().intact

    tamper(store)  # type: ignore[operator]

    check = store.verify_audit()
    assert not check.intact and check.bad_seq == bad
    assert check.problem is not None and words in check.problem


def test_the_chain_goes_on_after_a_row_is_deleted_and_still_says_where(store: Store) -> None:
    seeded(store)
    sql(store, "DELETE FROM audit WHERE seq = 4")
    finish_run(store, "m3", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 9)

    check = store.verify_audit()

    assert check.bad_seq == 4 and "row 4 is missing before row 5" in str(check.problem)


# --- pruning --------------------------------------------------------------------------------------------------

def test_pruning_the_oldest_rows_leaves_the_rest_verifiable_and_records_itself(store: Store) -> None:
    seeded(store)  # rows 1-4 at T .. T+6
    finish_run(store, "m3", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 3 * DAY)  # row 5

    dry = store.prune(older_than=2 * DAY, now=T + 2 * DAY + 10, dry_run=True)
    report = store.prune(older_than=2 * DAY, now=T + 2 * DAY + 10, chunk=3)

    assert dry.audit_rows_deleted == report.audit_rows_deleted == 4
    rows = list(store.audit_rows())
    assert [(r.seq, r.kind) for r in rows] == [(5, "call"), (6, "pruned")]
    assert rows[1].body == {"rows": 4, "through": 4, "hash": rows[0].prev_hash, "before": T + 10}
    check = store.verify_audit()
    assert (check.intact, check.rows) == (True, 2)
    assert store.prune(older_than=2 * DAY, now=T + 2 * DAY + 10).audit_rows_deleted == 0  # nothing more: no row


def test_after_a_prune_a_deleted_or_reinserted_row_is_still_found(store: Store) -> None:
    seeded(store)
    finish_run(store, "m3", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 3 * DAY)
    store.prune(older_than=2 * DAY, now=T + 2 * DAY + 10)

    sql(store, "INSERT INTO audit (seq, at, kind, event_id, body, prev_hash, hash) VALUES (3, ?, 'call', 1, '{}', "
               "'', '')", (T,))
    assert "row 3 is older than the trail's start (rows up to 4 were pruned): it was inserted" in str(
        store.verify_audit().problem)
    sql(store, "DELETE FROM audit WHERE seq <= 5")
    assert "row 5 is missing before row 6: deleted" in str(store.verify_audit().problem)


def test_a_prune_with_nothing_old_in_the_trail_keeps_it_whole(store: Store) -> None:
    seeded(store)

    report = store.prune(older_than=DAY, now=T + DAY)

    assert report.audit_rows_deleted == 0
    assert [r.seq for r in store.audit_rows()] == [1, 2, 3, 4] and store.verify_audit().intact


def move_anchor(store: Store, through: int) -> None:
    """What someone deleting the oldest rows does to make the rest check: the anchor moved to the last one."""
    last = store.connection.execute("SELECT hash FROM audit WHERE seq = ?", (through,)).fetchall()[0][0]
    sql(store, "DELETE FROM audit WHERE seq <= ?", (through,))
    sql(store, "UPDATE audit_head SET base_seq = ?, base_hash = ? WHERE one = 1", (through, last))


def test_deleting_the_oldest_rows_and_moving_the_anchor_is_found(store: Store) -> None:
    seeded(store)
    head = store.audit_head()
    move_anchor(store, 2)  # passed before issue 31: the same last hash, the rows left checking from the anchor

    check = store.verify_audit()

    assert store.audit_head() == head and not check.intact and check.bad_seq == 1
    assert "rows 1 to 2 are gone and no `pruned` row records a prune: they were deleted" in str(check.problem)


def test_deleting_every_row_is_never_an_intact_empty_trail(store: Store) -> None:
    seeded(store)
    move_anchor(store, 4)  # every row gone, the anchor at the head: "0 rows, chain intact" before issue 31

    check = store.verify_audit()

    assert not check.intact and "rows 1 to 4 are gone" in str(check.problem)


def test_a_prune_is_a_row_first_and_rows_deleted_past_it_are_found(store: Store) -> None:
    seeded(store)
    finish_run(store, "m3", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 3 * DAY)  # row 5
    store.prune(older_than=2 * DAY, now=T + 2 * DAY + 10, chunk=3)  # row 6 says: through row 4
    finish_run(store, "m4", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 3 * DAY + 5)  # row 7
    assert store.verify_audit().intact

    move_anchor(store, 5)  # one row more than the prune recorded

    check = store.verify_audit()
    assert not check.intact and check.bad_seq == 5
    assert "rows 5 to 5 are gone, past what the last prune recorded (through row 4)" in str(check.problem)


def test_a_prune_cut_short_leaves_a_verifiable_trail_that_the_next_prune_finishes(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    seeded(store)
    finish_run(store, "m3", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 3 * DAY)  # row 5
    # The prune's row is written and its first chunk deleted (rows 1-2), then the process dies.
    real_prune, real_transaction = Store._prune_audit, Store.write_transaction
    transactions: list[int] = []

    def counted(self: Store) -> object:
        if transactions:
            transactions.append(1)
            if len(transactions) == 4:  # the start, the prune's row, the first chunk, then the second chunk
                raise OSError("killed")
        return real_transaction(self)

    def pruning(self: Store, cutoff: int, now: int, chunk: int) -> int:
        transactions.append(1)
        return real_prune(self, cutoff, now, chunk)

    monkeypatch.setattr(Store, "write_transaction", counted)
    monkeypatch.setattr(Store, "_prune_audit", pruning)
    with pytest.raises(OSError):
        store.prune(older_than=2 * DAY, now=T + 2 * DAY + 10, chunk=2)
    monkeypatch.undo()
    assert [r.seq for r in store.audit_rows()] == [3, 4, 5, 6] and store.verify_audit().intact
    store.prune(older_than=2 * DAY, now=T + 2 * DAY + 20, chunk=2)
    assert [r.kind for r in store.audit_rows()] == ["call", "pruned", "pruned"] and store.verify_audit().intact


def test_a_pinned_head_is_proved_held_and_a_rewritten_trail_is_not(store: Store) -> None:
    seeded(store)
    _, pinned = store.audit_head()
    finish_run(store, "m3", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 3 * DAY)
    assert store.audit_pin(pinned) is None and store.audit_pin(pinned.upper()) is None
    # The whole trail rewritten from row 1 with every hash recomputed: intact by itself, but not the pinned one.
    sql(store, "UPDATE audit SET body = ? WHERE seq = 2", (body_of(store, 2).replace("asked", "allowed"),))
    prev = ""
    for seq in range(1, 6):
        sql(store, "UPDATE audit SET prev_hash = ? WHERE seq = ?", (prev, seq))
        rehash(store, seq)
        prev = str(store.connection.execute("SELECT hash FROM audit WHERE seq = ?", (seq,)).fetchall()[0][0])
    sql(store, "UPDATE audit_head SET hash = ? WHERE one = 1", (prev,))
    assert store.verify_audit().intact
    assert "no row of the trail has the hash" in str(store.audit_pin(pinned))


def test_a_pinned_row_pruned_since_is_said_so(store: Store) -> None:
    seeded(store)
    _, pinned = store.audit_head()  # row 4
    finish_run(store, "m3", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 3 * DAY)  # row 5
    store.prune(older_than=2 * DAY, now=T + 2 * DAY + 10)
    assert store.audit_pin(pinned) is None  # the last row pruned: the anchor, recorded by the prune's row
    store.prune(older_than=DAY, now=T + 4 * DAY + 10)  # rows 5 and 6 go too
    assert "it was never a row of it, or it was among the rows pruned (rows up to 6 were pruned" in str(
        store.audit_pin(pinned))


def test_an_answer_row_records_the_scrubbed_arguments_the_gateway_kept(store: Store) -> None:
    store.ingest("chat", "m9", {"text": "hi"}, now=T)
    gen = store.acquire("w", now=T)
    assert gen is not None
    [event] = store.claim_batch("w", gen, now=T)
    secret = {"order": "881", "token": "tok-very-secret"}
    draft = ApprovalDraft("apr-9", "refund", 600, {"rule": "ask: refund", "recorded_arguments": {
        "order": "881", "token": "***"}}, {"state": 1}, event.id, "refund", secret,
        [{"event_id": event.id, "source": "chat", "source_id": "m9"}], origin=TRUSTED)
    assert store.finish("w", gen, [event.id], now=T, approvals=[draft])
    assert store.answer_approval("apr-9", "no", now=T + 1, via="cli") == "no"
    [answer] = [r for r in store.audit_rows() if r.kind == "answer"]
    assert answer.body["arguments"] == {"order": "881", "token": "***"}
    assert "tok-very-secret" not in json.dumps([r.body for r in store.audit_rows()])
    assert store.approval("apr-9").arguments == secret  # what runs on yes stays exact


# --- an approved call whose answer's event died -----------------------------------------------------------------

@pytest.fixture
def crashing(inbox_target: str) -> Iterator[Store]:
    with Store.open(inbox_target, lease_ttl=TTL, max_attempts=3, backoff_base=0, seed=7) as store:
        yield store


def test_a_yes_whose_event_died_before_its_call_ran_is_a_failed_row(crashing: Store) -> None:
    request_id, _ = ask(crashing)
    crashing.answer_approval(request_id, "yes", now=T_STRANDED + 1, via="telegram")
    answer = crashing.find_event("approval", request_id)
    assert answer is not None

    died_at = lose_every_attempt(crashing, answer.id, T_STRANDED + 1)

    last = audit_record(list(crashing.audit_rows())[-1])
    assert (last["kind"], last["event_id"], last["tool"], last["decision"], last["answered_via"], last["outcome"],
            last["at"]) == ("call", answer.id, "mcp__shop__refund", "approved", "telegram", "failed", died_at)
    assert last["detail"].startswith(f"approved, but not run: its event #{answer.id} is dead")
    assert crashing.verify_audit().intact


def test_a_yes_whose_worker_died_during_the_call_is_an_unknown_row(crashing: Store) -> None:
    request_id, _ = ask(crashing)
    crashing.answer_approval(request_id, "yes", now=T_STRANDED + 1, via="cli")
    answer = crashing.find_event("approval", request_id)
    assert answer is not None
    # The call's step was claimed (the call went out) and never committed: the worker died during it.
    crashing.connection.execute("INSERT INTO journal (idem_key, state, gen, event_id, claimed_at) "
                                "VALUES (?, 'claimed', 1, ?, ?)", (approved_step_key(request_id), answer.id,
                                                                   T_STRANDED + 2))

    lose_every_attempt(crashing, answer.id, T_STRANDED + 2)

    last = audit_record(list(crashing.audit_rows())[-1])
    assert (last["decision"], last["outcome"]) == ("approved", "unknown")
    assert "whether it ran is unknown" in last["detail"]


def test_a_migrated_inbox_keeps_its_trail_verifiable(db_path: Path, postgres_url: str) -> None:
    with Store.open(db_path) as source:
        seeded(source)
        before = [(r.seq, r.hash) for r in source.audit_rows()]
        with Store.open(postgres_url) as target:
            move_inbox(source, target, now=T + 10)
            assert [(r.seq, r.hash) for r in target.audit_rows()] == before
            check = target.verify_audit()
            assert (check.intact, check.rows, check.head) == (True, 4, before[-1][1])
            target.answer_approval("apr-none", "yes", now=T + 11)  # an unknown request: no row, nothing breaks
            finish_run(target, "m9", [("lookup", "allowed", "done", "allow: lookup*")], now=T + 12)
            assert [r.seq for r in target.audit_rows()][-1] == 5 and target.verify_audit().intact
