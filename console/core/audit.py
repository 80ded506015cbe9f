"""The audit trail: every tool call a run recorded and every approval's answer, one row each, chained by hash.

Each row stores the SHA-256 of its own columns and of the previous row's hash, computed in the transaction that
writes the row (a run's fenced finish; an answer's own transaction), so a row edited, inserted, swapped or
deleted afterwards breaks the chain where it happened, and verify_audit() names the first row that does.
audit_head keeps the last row's number and hash (a row cut from the end is seen too) and the anchor a prune
leaves: rows go oldest first, and the anchor is the number and hash of the last one pruned, so the rows left
still check. A prune is itself a row in the chain, written before it deletes anything (`pruned`: how many
rows, through which row, that row's hash), and the anchor must be where the last one says: deleting the oldest
rows and moving the anchor, or deleting every row and moving it to the head, is found (issue 31).

A chain shows what was changed by anyone who did not recompute every later hash; someone who can write the file
and recomputes them all cannot be caught by the file alone. The head's hash (`audit --verify` prints it), kept
somewhere else, pins every row up to it: `audit --pin` prints it, the daily digest carries it, and
`audit --verify --against HASH` proves the trail still holds that row.

Secrets: the rows hold what the gateway recorded, which it scrubs of the values substituted from ${VAR} and of
URL credentials before a run's finish writes them (agents/gateway.py); a row about an approval (its answer, a
stranded yes) takes the scrubbed copy the gateway kept on it, never the exact arguments it runs with; a call's
result is not kept, only a short reason when it did not succeed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from console.core.base import StoreBase, loads
from console.core.models import AuditCheck, AuditRow, StrandedAnswer, ToolCallRecord

AUDIT_KINDS = ("call", "answer", "pruned", "egress")
# A call's outcome in the trail: done, refused (denied, no such tool, declined, expired), failed, unknown (it may
# or may not have happened), or deferred (it asked and waits on the owner; the answer and the run follow).
AUDIT_OUTCOMES = ("done", "refused", "failed", "unknown", "deferred")
DETAIL_CHARS = 300  # of what a call that did not succeed told the model
_PAGE = 2000
_INSERT_ROWS = 500  # rows one INSERT takes (7 parameters each: far below SQLite's 32,766)
_COLUMNS = "seq, at, kind, event_id, body, prev_hash, hash"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def row_hash(seq: int, at: int, kind: str, event_id: int | None, body: str, prev_hash: str) -> str:
    """The hash a row stores: over every column of it (the body as stored, byte for byte) and the hash before."""
    material = canonical_json([seq, at, kind, event_id, body, prev_hash])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def answered_via(via: str | None) -> str | None:
    """Where an answer came from as the trail says it: console, cli, ntfy, telegram, api, or clock (the
    approval's deadline decided it)."""
    return "clock" if via == "expiry" else via


def call_outcome(decision: str, outcome: str) -> str:
    """A recorded call's outcome in the trail's words (AUDIT_OUTCOMES)."""
    if decision in ("denied", "unknown"):  # nothing ran: the policy or a missing tool refused it
        return "refused"
    return "failed" if outcome == "error" else outcome


def recorded_arguments(details: Any, arguments: Any) -> Any:
    """The arguments a row about an approval records: the copy the gateway scrubbed of secrets when it asked
    (details["recorded_arguments"]: the values substituted from ${VAR}, URL credentials), never the row's own,
    which must stay exact to run on yes. A request asked without that copy recorded nothing to scrub."""
    if isinstance(details, dict) and "recorded_arguments" in details:
        return details["recorded_arguments"]
    return arguments


# What became of an approved call whose answer's event died (StrandedAnswer.call), as the trail says it.
_STRANDED_OUTCOMES = {"not_run": "failed", "unknown": "unknown", "done": "done"}


def _row(values: tuple[Any, ...]) -> AuditRow:
    seq, at, kind, event_id, body, prev_hash, digest = values
    return AuditRow(int(seq), int(at), str(kind), None if event_id is None else int(event_id), loads(body),
                    str(prev_hash), str(digest))


class AuditMixin(StoreBase):
    # --- writing (inside the caller's transaction) --------------------------------------------------------
    def _audit(self, kind: str, at: int, event_id: int | None, body: dict[str, Any]) -> None:
        """Append one row to the chain, inside the caller's write transaction."""
        self._audit_many([(kind, at, event_id, body)])

    def _audit_many(self, entries: Sequence[tuple[str, int, int | None, dict[str, Any]]]) -> None:
        """Append rows (kind, at, event, body) to the chain in order, inside the caller's write transaction, which
        serialises writers: the head read here is the last row, and nobody appends between this read and the
        commit. Three statements however many rows (a statement is a round trip on PostgreSQL)."""
        if not entries:
            return
        head = self._conn.execute("SELECT seq, hash FROM audit_head WHERE one = 1").fetchall()
        seq, prev_hash = (int(head[0][0]), str(head[0][1])) if head else (0, "")
        values: list[Any] = []
        for kind, at, event_id, body in entries:
            seq += 1
            text = canonical_json(body)
            digest = row_hash(seq, at, kind, event_id, text, prev_hash)
            values.append((seq, at, kind, event_id, text, prev_hash, digest))
            prev_hash = digest
        for start in range(0, len(values), _INSERT_ROWS):
            chunk = values[start:start + _INSERT_ROWS]
            self._conn.execute(
                "INSERT INTO audit (seq, at, kind, event_id, body, prev_hash, hash) VALUES "
                + ", ".join("(?, ?, ?, ?, ?, ?, ?)" for _ in chunk),
                [value for row in chunk for value in row],
            )
        self._conn.execute(
            """INSERT INTO audit_head (one, seq, hash, base_seq, base_hash) VALUES (1, ?, ?, 0, '')
               ON CONFLICT (one) DO UPDATE SET seq = excluded.seq, hash = excluded.hash""",
            (seq, prev_hash),
        )

    def _audit_failed_run(self, tool_calls: Sequence[ToolCallRecord], error: str, now: int) -> None:
        """The calls a run made in the world before it failed, written by its (fenced) failed finish: they stand
        in the journal whatever becomes of the run, and a retry replays them rather than make them again. Its
        other records (a built-in's staged effect, a call that asked) are dropped with the run."""
        self._audit_calls([call for call in tool_calls if call.made], now, failed=error)

    def _audit_calls(self, calls: Sequence[ToolCallRecord], now: int, *, failed: str | None = None) -> None:
        """The tool calls a run recorded, written by that run's finish (with `failed`, its failed finish)."""
        entries: list[tuple[str, int, int | None, dict[str, Any]]] = []
        for call in calls:
            via = None
            if call.request_id is not None and call.decision in ("approved", "declined", "expired"):
                via = answered_via(self._scalar("SELECT answered_via FROM approvals WHERE request_id = ?",
                                                (call.request_id,)))
            outcome = call_outcome(call.decision, call.outcome)
            said = None if outcome in ("done", "deferred") or not call.result else call.result
            if call.replayed:
                said = "; ".join(part for part in (
                    "replayed from the journal: an earlier attempt of this run made the call, it was not made again",
                    said) if part)
            if failed is not None:
                said = "; ".join(part for part in (
                    f"its run then failed ({_cut(failed, 120)}): the call stands, and a retry replays it from the "
                    "journal rather than make it again", said) if part)
            detail = None if said is None else _cut(said, DETAIL_CHARS)
            entries.append(("call", now, call.event_id, {
                "run": call.run, "tool": call.tool, "arguments": call.arguments, "request_id": call.request_id,
                "provenance": call.provenance, "rule": call.rule, "decision": call.decision, "answered_via": via,
                "outcome": outcome, "detail": detail,
            }))
        self._audit_many(entries)

    def _audit_egress(self, server: str, refused: dict[str, int], now: int) -> None:
        """Connections a sandboxed MCP server tried and its egress proxy refused (issue 33): one row per host, with
        how many more since the last row, written with the server's health that counts them."""
        self._audit_many([("egress", now, None, {
            "tool": f"mcp__{server}", "server": server, "host": host, "refused": more, "outcome": "refused",
            "detail": f"MCP server {server} tried to reach {host}, which its allow_hosts does not name: refused "
                      f"({more} more)"}) for host, more in sorted(refused.items())])

    def _audit_answer(self, request_id: str, answer: str, via: str, now: int) -> None:
        """An approval's answer (yes, no, or its expiry), written with the answer that settles it. Its provenance
        is the approval's origin (what the asking run had read); the rule is the one its asking call recorded on
        the approval's details (as is the provenance, for an approval asked without an origin)."""
        rows = self._conn.execute(
            "SELECT event_id, tool, arguments, action, details, origin FROM approvals WHERE request_id = ?",
            (request_id,),
        ).fetchall()
        if not rows:
            return
        event_id, tool, arguments, action, details_text, origin_text = rows[0]
        details = loads(details_text)
        details = details if isinstance(details, dict) else {}
        origin = loads(origin_text)
        decision = {"yes": "approved", "no": "declined"}.get(answer, "expired")
        self._audit("answer", now, event_id, {
            "run": None, "tool": tool or "ask_owner",
            "arguments": recorded_arguments(details, loads(arguments) if tool is not None else {"question": action}),
            "request_id": request_id, "rule": details.get("rule"),
            "provenance": origin if isinstance(origin, dict) else details.get("provenance"),
            "decision": decision, "answered_via": "clock" if decision == "expired" else answered_via(via),
            "outcome": None, "detail": None if decision != "expired" or via == "expiry" else
            f"answered from {via} after its deadline",
        })

    def _audit_stranded(self, stranded: StrandedAnswer, now: int) -> None:
        """An approved call whose answer's event died before its run finished (core/stranded.py), written in the
        transaction that parks the event dead: what became of the call (not run: failed; the worker died during
        it: unknown; run but not reported: done), since no run will record it unless the event is retried."""
        if stranded.outcome != "yes" or stranded.tool is None or stranded.call is None:
            return  # a no, an expiry or a question: the answer's own row says all there is
        rows = self._conn.execute(
            "SELECT arguments, details, origin, answered_via FROM approvals WHERE request_id = ?",
            (stranded.request_id,),
        ).fetchall()
        if not rows:
            return
        arguments, details_text, origin_text, via = rows[0]
        details = loads(details_text)
        origin = loads(origin_text)
        self._audit("call", now, stranded.event_id, {
            "run": None, "tool": stranded.tool, "arguments": recorded_arguments(details, loads(arguments)),
            "request_id": stranded.request_id,
            "provenance": origin if isinstance(origin, dict) else None,
            "rule": details.get("rule") if isinstance(details, dict) else None, "decision": "approved",
            "answered_via": answered_via(via), "outcome": _STRANDED_OUTCOMES.get(stranded.call, "unknown"),
            "detail": _cut(stranded.in_words(), DETAIL_CHARS),
        })

    # --- reading --------------------------------------------------------------------------------------
    def audit_rows(self, *, since: int | None = None) -> Iterator[AuditRow]:
        """The trail in order, oldest first; with since, the rows written at or after that time. Read a page
        at a time (by row number), so a long trail is never held whole."""
        after = 0
        if since is not None:
            first = self._scalar("SELECT MIN(seq) FROM audit INDEXED BY audit_at WHERE at >= ?", (since,))
            if first is None:
                return
            after = int(first) - 1
        while True:
            page = self._conn.execute(
                f"SELECT {_COLUMNS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?", (after, _PAGE)
            ).fetchall()
            for values in page:
                row = _row(values)
                if since is None or row.at >= since:
                    yield row
            if len(page) < _PAGE:
                return
            after = int(page[-1][0])

    def audit_head(self) -> tuple[int, str]:
        """The last row's number and hash ((0, '') for an empty trail)."""
        head = self._conn.execute("SELECT seq, hash FROM audit_head WHERE one = 1").fetchall()
        return (int(head[0][0]), str(head[0][1])) if head else (0, "")

    def verify_audit(self) -> AuditCheck:
        """Check every row's hash and its link to the row before, from the prune anchor to the head. Names the
        first row that breaks the chain: edited (its content no longer matches its hash), deleted (a number
        missing), inserted (a number before the start or past the head), or changed with its hash recomputed
        (the next row's link, or the head, no longer matches it)."""
        head = self._conn.execute("SELECT seq, hash, base_seq, base_hash FROM audit_head WHERE one = 1").fetchall()
        if not head:
            return AuditCheck(0, "", None, "the trail's head record is missing (audit_head was emptied)")
        head_seq, head_hash, base_seq, base_hash = int(head[0][0]), str(head[0][1]), int(head[0][2]), str(head[0][3])
        # Rows go only by a prune, and a prune is a row: the anchor must be where the last `pruned` row says. A row
        # the prune named as its last must still have the hash it recorded (checked in the walk below).
        prune = self._last_prune()
        named_through, named_hash = (prune[1], prune[2]) if prune is not None else (0, "")
        if base_seq > 0 and prune is None:
            return AuditCheck(0, "", 1, f"rows 1 to {base_seq} are gone and no `pruned` row records a prune: "
                                        "they were deleted (the anchor was moved)")
        if base_seq > named_through:
            return AuditCheck(0, "", named_through + 1, f"rows {named_through + 1} to {base_seq} are gone, past what "
                                                        f"the last prune recorded (through row {named_through}): "
                                                        "they were deleted (the anchor was moved)")
        if base_seq > 0 and base_seq == named_through and base_hash != named_hash:
            return AuditCheck(0, "", base_seq, f"the trail starts after row {base_seq}, which is not the row the last "
                                               "prune recorded: the anchor was changed")
        stray = self._scalar("SELECT MAX(seq) FROM audit WHERE seq <= ?", (base_seq,))
        if stray is not None:
            return AuditCheck(0, "", int(stray), f"row {stray} is older than the trail's start (rows up to "
                                                 f"{base_seq} were pruned): it was inserted")
        expected, prev_hash, checked = base_seq + 1, base_hash, 0
        for values in self._raw_audit_rows(base_seq):
            seq, at, kind, event_id, body, stored_prev, digest = values
            seq = int(seq)
            if seq > head_seq:
                return AuditCheck(checked, prev_hash, seq, f"row {seq} is past the trail's last row ({head_seq}): "
                                                           "it was inserted")
            if seq != expected:
                gone = f"row {expected} is" if seq == expected + 1 else f"rows {expected} to {seq - 1} are"
                return AuditCheck(checked, prev_hash, expected, f"{gone} missing before row {seq}: deleted")
            if row_hash(seq, int(at), str(kind), None if event_id is None else int(event_id), str(body),
                        str(stored_prev)) != digest:
                return AuditCheck(checked, prev_hash, seq, f"row {seq}{_about(body, event_id)} does not match its "
                                                           "hash: it was changed after it was written")
            if stored_prev != prev_hash:
                before = seq - 1
                return AuditCheck(checked, prev_hash, before, f"row {before} is not the row that row {seq} was "
                                                              "chained to: it was changed or replaced")
            if seq == named_through and digest != named_hash:
                return AuditCheck(checked, prev_hash, seq, f"row {seq} is not the row the last prune recorded as "
                                                           "its last: it was changed or replaced")
            prev_hash, expected, checked = str(digest), seq + 1, checked + 1
        if expected - 1 < head_seq:
            gone = f"row {head_seq} is" if expected == head_seq else f"rows {expected} to {head_seq} are"
            return AuditCheck(checked, prev_hash, expected, f"{gone} missing from the end of the trail: deleted")
        if prev_hash != head_hash:
            return AuditCheck(checked, prev_hash, head_seq, f"row {head_seq}, the last, is not the row the trail's "
                                                            "head recorded: it was changed or replaced")
        return AuditCheck(checked, prev_hash)

    def _raw_audit_rows(self, after: int) -> Iterator[tuple[Any, ...]]:
        while True:
            page = self._conn.execute(
                f"SELECT {_COLUMNS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?", (after, _PAGE)
            ).fetchall()
            yield from page
            if len(page) < _PAGE:
                return
            after = int(page[-1][0])

    # --- pruning --------------------------------------------------------------------------------------
    def _audit_prunable(self, cutoff: int) -> int:
        """The last row a prune at cutoff may delete: rows go as a run from the oldest, up to the first one
        written at or after the cutoff (0: none)."""
        base = int(self._scalar("SELECT base_seq FROM audit_head WHERE one = 1") or 0)
        first_kept = self._scalar("SELECT MIN(seq) FROM audit INDEXED BY audit_at WHERE at >= ?", (cutoff,))
        last = self._scalar("SELECT MAX(seq) FROM audit") if first_kept is None else int(first_kept) - 1
        return max(base, int(last or 0))

    def _count_audit_prunable(self, cutoff: int) -> int:
        base = int(self._scalar("SELECT base_seq FROM audit_head WHERE one = 1") or 0)
        return int(self._scalar("SELECT COUNT(*) FROM audit WHERE seq > ? AND seq <= ?",
                                (base, self._audit_prunable(cutoff))))

    def _prune_audit(self, cutoff: int, now: int, chunk: int) -> int:
        """Delete the rows written before cutoff, oldest first. A `pruned` row is appended first, in the chain,
        saying what goes: how many rows, through which row, and that row's hash. Then `chunk` rows go a
        transaction, each moving the anchor to the last row it deleted, so the chain left checks at every moment
        (verify_audit holds the anchor to the last `pruned` row: rows deleted without one, or past it, are
        found). Returns the rows deleted."""
        through = self._audit_prunable(cutoff)
        if through <= int(self._scalar("SELECT base_seq FROM audit_head WHERE one = 1") or 0):
            return 0  # nothing to prune: no write transaction taken
        with self.write_transaction():
            base = int(self._scalar("SELECT base_seq FROM audit_head WHERE one = 1") or 0)
            last_hash = self._scalar("SELECT hash FROM audit WHERE seq = ?", (through,)) if through > base else None
            if last_hash is None:  # nothing (more) to prune, or a row is missing: leave the chain as it is
                return 0
            count = int(self._scalar("SELECT COUNT(*) FROM audit WHERE seq > ? AND seq <= ?", (base, through)))
            self._audit("pruned", now, None, {"rows": count, "through": through, "hash": str(last_hash),
                                              "before": cutoff})
        deleted = 0
        while int(self._scalar("SELECT base_seq FROM audit_head WHERE one = 1") or 0) < through:
            with self.write_transaction():
                base = int(self._scalar("SELECT base_seq FROM audit_head WHERE one = 1") or 0)
                upto = min(base + chunk, through)
                anchor = self._scalar("SELECT hash FROM audit WHERE seq = ?", (upto,))
                if anchor is None:  # a row is missing: leave the chain as it is (verify names it)
                    break
                self._conn.execute("DELETE FROM audit WHERE seq > ? AND seq <= ?", (base, upto))
                deleted += self._conn.changes()
                self._conn.execute("UPDATE audit_head SET base_seq = ?, base_hash = ? WHERE one = 1",
                                   (upto, anchor))
        return deleted

    def _last_prune(self) -> tuple[int, int, str] | None:
        """The last `pruned` row in the trail: (its number, the row it pruned through, that row's hash)."""
        rows = self._conn.execute(
            "SELECT seq, body FROM audit WHERE kind = 'pruned' ORDER BY seq DESC LIMIT 1").fetchall()
        if not rows:
            return None
        body = loads(rows[0][1])
        body = body if isinstance(body, dict) else {}
        return int(rows[0][0]), int(body.get("through") or 0), str(body.get("hash") or "")

    def audit_digest_line(self, *, since: int) -> str | None:
        """The daily digest's line carrying the trail's head to the owner (None when no row was written since
        `since`: the head the owner was last sent still stands)."""
        if self._scalar("SELECT 1 FROM audit INDEXED BY audit_at WHERE at >= ? LIMIT 1", (since,)) is None:
            return None
        seq, head = self.audit_head()
        return (f"Audit trail: its head is row {seq}, hash {head}. Keep it somewhere else: `agent-console audit "
                f"--verify --against {head}` proves later that the trail still holds that row.")

    def audit_pin(self, pinned: str) -> str | None:
        """Whether the trail still holds the row whose hash the owner pinned (`audit --verify --against`): None
        when a row of the (verified) chain has that hash, else why not."""
        pinned = pinned.strip().lower()
        found = self._scalar("SELECT seq FROM audit WHERE hash = ?", (pinned,))
        if found is not None:
            return None
        base_seq, base_hash = self._conn.execute(
            "SELECT base_seq, base_hash FROM audit_head WHERE one = 1").fetchall()[0]
        if pinned == str(base_hash) and int(base_seq) > 0:
            return None  # the last row pruned: the chain left starts from it, and a `pruned` row records it
        if int(base_seq) > 0:
            return (f"no row of the trail has the hash {pinned}: it was never a row of it, or it was among the rows "
                    f"pruned (rows up to {base_seq} were pruned; the `pruned` rows say when): pin the current head")
        return f"no row of the trail has the hash {pinned}: the trail no longer holds the row you pinned"


def _about(body: Any, event_id: Any) -> str:
    """' (event 42, mcp__shop__refund)': which call a row is about, read from its stored content if it can be."""
    try:
        tool = json.loads(str(body)).get("tool")
    except (ValueError, AttributeError):
        tool = None
    parts = [f"event {event_id}" if event_id is not None else "", str(tool) if tool else ""]
    shown = ", ".join(part for part in parts if part)
    return f" ({shown})" if shown else ""


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
