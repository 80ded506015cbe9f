"""Trust assigned right (issue 31, items 3 and 4), against the stand-in Bot API with a real engine on a real inbox
file: a resumed run continues with exactly the provenance it had when it asked (never rebuilt from source names),
and a batch never mixes chats, so a reply goes only where every message of its run came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.agents.offline import OfflineAgent
from console.agents.policy import DEFAULT_ALLOW, Policy
from console.agents.tools import PythonTool, ToolGateway
from console.clock import ManualClock
from console.core import Store
from console.core.audit import audit_record
from tests.edges.phone_harness import START, phone_settings, running, stored, until
from tests.edges.phone_standins import StandInBotApi
from tests.edges.telegram_harness import ENV, OWNER


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def table(bot: StandInBotApi, **extra: Any) -> dict[str, Any]:
    return {"type": "telegram", "token_env": "TG_TEST_TOKEN", "api_base": bot.url, "batch_window": 0, **extra}


def refunding(refunded: list[str]) -> OfflineAgent:
    """The offline agent with an in-process refund tool that asks (no MCP server to start)."""
    def refund(order: str) -> str:
        """Refund an order."""
        refunded.append(order)
        return f"refunded {order}"

    return OfflineAgent(ToolGateway(Policy(allow=DEFAULT_ALLOW, ask=("refund",)),
                                    python_tools={"refund": PythonTool("refund", refund)}))


def trail(store: Store) -> list[dict[str, Any]]:
    return [audit_record(row) for row in store.audit_rows()]


async def test_the_owners_own_requests_stay_trusted_after_the_yes(tmp_path: Path, clock: ManualClock,
                                                                  bot: StandInBotApi) -> None:
    """The owner asks for a refund in their own chat, and again by an e-mail their own server authenticated
    (dmarc=pass); each card says where it came from, and after the yes (a tap, then the console) the resumed run
    that makes the call is the same trusted run, in the audit trail too (it said "telegram delivery" before)."""
    from console.core.mail import MailCursor
    from console.edges.mailmsg import read_message

    raw = (b"Authentication-Results: mx.example.org; dmarc=pass header.from=example.org\r\n"
           b"From: Me <me@example.org>\r\nTo: agent@example.org\r\nSubject: refund\r\n\r\nrefund order 882\r\n")
    mail = read_message(raw, trusted_senders=["me@example.org"], authserv_id="mx.example.org")
    assert mail["trusted"] is True
    refunded: list[str] = []
    async with running(phone_settings(tmp_path, table(bot, chat_id=OWNER)), clock, ENV,
                       agent=refunding(refunded)) as engine:
        await bot.write(OWNER, "refund order 881")
        [asked] = await stored(engine, lambda s: s.pending_approvals(), "the approval")
        assert asked.origin["trusted"] is True
        assert asked.origin["summary"] == f"asked by a run from your telegram #{asked.event_id}"
        [card] = await until(lambda: bot.cards(OWNER), "the card")
        await bot.tap(OWNER, card, "Yes")
        await stored(engine, lambda s: s.counts()["done"] == 2, "the answer's run")

        await engine.write(lambda s: s.take_mail("email", MailCursor(1700000000, 42, START), now=START,
                                                 events=[("1700000000:42", mail)]))
        [mailed] = await stored(engine, lambda s: s.pending_approvals(), "the mail's approval")
        assert mailed.origin["summary"] == f"asked by a run from your email #{mailed.event_id}"
        assert await engine.answer(mailed.request_id, "yes") == "yes"
        await stored(engine, lambda s: s.counts()["done"] == 4, "the second answer's run")

        calls = [r for r in await engine.read(trail) if r["kind"] == "call" and r["decision"] == "approved"]
        assert [(c["arguments"], c["outcome"], c["trusted"], c["provenance"], c["tainted_by"]) for c in calls] == [
            ({"order": "881"}, "done", True, f"a run from your telegram #{asked.event_id}", []),
            ({"order": "882"}, "done", True, f"a run from your email #{mailed.event_id}", [])]
        assert refunded == ["881", "882"]
