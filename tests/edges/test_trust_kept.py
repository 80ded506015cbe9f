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

GROUP = -100123
MEMBER = 777


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def table(bot: StandInBotApi, **extra: Any) -> dict[str, Any]:
    return {"type": "telegram", "token_env": "TG_TEST_TOKEN", "api_base": bot.url, "batch_window": 0, **extra}


def noted(bot: StandInBotApi, chat: int) -> list[str]:
    return [m["text"] for m in bot.sent_to(chat) if m["text"].startswith("Noted")]


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


async def test_a_private_question_and_a_group_message_are_separate_runs_each_answered_where_it_came_from(
        tmp_path: Path, clock: ManualClock, bot: StandInBotApi) -> None:
    """The owner writes to the bot directly and, in the same moment, a member writes in a paired group: one burst,
    stored in one transaction. They are two runs: the owner's question is answered in the owner's chat only, the
    group's message in the group only (before, one run answered both in the group)."""
    from console.edges.chatsource import code_hash

    async with running(phone_settings(tmp_path, table(bot, chat_id=OWNER, batch_window=0.4)), clock, ENV) as engine:
        await engine.write(lambda s: s.new_pair_code("telegram", code_hash("GRP23456"), expires_at=START + 600))
        await bot.write(GROUP, "/pair GRP23456", from_id=OWNER, chat_type="supergroup")
        await until(lambda: any(m["text"].startswith("Paired") for m in bot.sent_to(GROUP)), "the group paired")
        _, private = await bot.write(OWNER, "what is my bank PIN?")
        _, public = await bot.write(GROUP, "hello group", from_id=MEMBER, chat_type="supergroup")
        await stored(engine, lambda s: s.counts()["done"] == 2, "both messages done")
        await until(lambda: noted(bot, OWNER) and noted(bot, GROUP), "a reply in each chat")
        assert noted(bot, OWNER) == ["Noted: what is my bank PIN?"]
        assert noted(bot, GROUP) == ["Noted: hello group"]
        assert [m.get("reply_to_message_id") for m in bot.sent_to(OWNER) if m["text"].startswith("Noted")] == [private]
        assert [m.get("reply_to_message_id") for m in bot.sent_to(GROUP) if m["text"].startswith("Noted")] == [public]
        assert engine.worker.runs == 2
        history = await engine.read(lambda s: s.history(s.find_event("telegram", f"{GROUP}:{public}").id))
        assert [a.kind for a in history][:2] == ["claim", "deferred"], history  # claimed with the other, handed back
