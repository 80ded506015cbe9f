"""`status` and `show` show every argument of an approval and where it came from (issue 18 item 4)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from console.core import ApprovalDraft, Store
from tests.cli.helpers import invoke

MEMO = ("Invoice 2291 for the spring consulting work: see the attached statement for the hours, the rates and the "
        "expenses: pay within 14 days. Reference ACME-2291-SPRING; thanks!")
PAY = {"amount": 480, "memo": MEMO, "to_account": "DE89 3704 0044 0532 0130 00"}
ORIGIN = {"trusted": False, "summary": "asked by a run that read untrusted content: github delivery 9a1f (#1), "
                                       "tool mcp__shop__lookup_order"}


def asked_to_pay(db: Path) -> tuple[int, str]:
    now = int(time.time())
    with Store.open(db) as store:
        store.ingest("github", "9a1f", {"action": "opened"}, now=now)
        gen = store.acquire("w", now=now)
        assert gen is not None
        (event,) = store.claim_batch("w", gen, now=now)
        rid = "apr-1-0badcafe"
        draft = ApprovalDraft(rid, "mcp__x__pay(...)", 3600, {"tool": "mcp__x__pay", "arguments": PAY,
                                                               "untrusted": ["github"]}, {}, event.id, "mcp__x__pay",
                              PAY, [{"event_id": event.id, "source": "github", "source_id": "9a1f"}], origin=ORIGIN)
        assert store.finish("w", gen, [event.id], now=now, approvals=[draft])
        store.request_approval("apr-9-1", "Deploy web to prod now?", now=now, expires_in=3600)
    return event.id, rid


def ok(db: Path, *args: str) -> str:
    result = invoke(["--db", str(db), *args])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return str(result.stdout)


def test_status_names_every_argument_and_says_where_the_request_came_from(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    asked_to_pay(db)
    lines = ok(db, "status").splitlines()
    at = next(i for i, line in enumerate(lines) if "apr-1-0badcafe" in line)
    call = lines[at].strip()
    assert call.startswith('apr-1-0badcafe  mcp__x__pay(amount=480, to_account="DE89 3704 0044 0532 0130 00", '
                           'memo="Invoice 2291'), call
    assert "chars cut]" in call and call.endswith('thanks!")')  # the memo cut in its middle, both ends kept
    assert lines[at + 1].strip().startswith(f"⚠ {ORIGIN['summary']} · event 1 · ")
    question = next(line for line in lines if "apr-9-1" in line)
    assert question.strip() == "apr-9-1  question: “Deploy web to prod now?”"
    info = json.loads(ok(db, "status", "--json"))
    pending = {a["request_id"]: a for a in info["approvals_pending"]}
    assert pending["apr-1-0badcafe"]["arguments"] == PAY and pending["apr-1-0badcafe"]["origin"] == ORIGIN


def test_show_lists_the_events_approval_with_every_value_whole(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    event_id, rid = asked_to_pay(db)
    text = ok(db, "show", str(event_id))
    block = text[text.index("approvals:"):text.index("journal:")]
    lines = block.splitlines()
    assert lines[1].strip() == f"{rid}  call, waiting"
    joined = " ".join(line.strip() for line in lines[2:])
    assert joined.startswith('mcp__x__pay( amount=480, to_account="DE89 3704 0044 0532 0130 00", memo="Invoice')
    assert " ".join(MEMO.split()) in joined and "chars cut" not in joined  # every character of every value
    assert lines[-1].strip() == f"⚠ {ORIGIN['summary']}"
    shown = json.loads(ok(db, "show", str(event_id), "--json"))
    assert [(a["request_id"], a["arguments"], a["origin"]) for a in shown["approvals"]] == [(rid, PAY, ORIGIN)]
