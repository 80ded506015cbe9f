"""Telegram's /schedules (issue 35) against the stand-in Bot API with a real engine on a real inbox file: the
schedules listed with Pause / Renew / Delete buttons, each tap steering the schedule once it is proved the owner's
and this inbox's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.clock import ManualClock
from console.core import ScheduleDraft, ScheduleSpec, Store
from tests.edges.phone_harness import START, phone_settings, running, until
from tests.edges.phone_standins import StandInBotApi
from tests.edges.telegram_harness import ENV, OWNER
from tests.edges.test_telegram_chat import quick, table

HOUR = 3600


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def schedule_it(store: Store) -> None:
    spec = ScheduleSpec("deploys", "check deploys", "look at the deploys", "every", at=START + HOUR, every=HOUR,
                        expires_at=START + 2 * 24 * HOUR)
    with store.write_transaction():  # as a run's fenced finish writes it
        store._write_schedule(ScheduleDraft(spec, None), START)


def card(bot: StandInBotApi) -> dict[str, Any] | None:
    return next((m for m in reversed(bot.sent_to(OWNER)) if m["text"].startswith("Schedule deploys")), None)


async def test_schedules_lists_them_with_buttons_that_pause_renew_and_delete(tmp_path: Path, clock: ManualClock,
                                                                           bot: StandInBotApi) -> None:
    async with running(phone_settings(tmp_path, table(bot, chat_id=OWNER)), clock, ENV, tune=quick) as engine:
        await bot.write(OWNER, "/schedules")
        await until(lambda: any("no schedules" in m["text"].lower() for m in bot.sent_to(OWNER)), "none yet")
        await engine.write(schedule_it)
        await bot.write(OWNER, "/schedules")
        shown = await until(lambda: card(bot), "the schedule's card")
        assert "active · every 1 hour · next in 1h" in shown["text"] and "look at the deploys" in shown["text"]
        keyboard = [[{"text": "Delete", "callback_data": "D|deploys|AAAA"}]]
        forged = dict(shown, reply_markup={"inline_keyboard": keyboard})
        tap = await bot.tap(OWNER, forged, "Delete")
        await until(lambda: bot.reply_to(tap), "the forged tap's answer")
        assert bot.reply_to(tap) == "Not done: this button is not one of this inbox's."
        tap = await bot.tap(OWNER, shown, "Pause")
        await until(lambda: bot.reply_to(tap), "the pause")
        assert bot.reply_to(tap) == "Schedule deploys: paused."
        paused = await engine.read(lambda s: s.schedule("deploys"))
        assert paused is not None and (paused.state, paused.paused_reason) == ("paused", "paused by you (Telegram)")
        tap = await bot.tap(OWNER, shown, "Renew")
        await until(lambda: bot.reply_to(tap), "the renewal")
        renewed = await engine.read(lambda s: s.schedule("deploys"))
        assert renewed is not None and renewed.spec.expires_at == START + 30 * 24 * HOUR
        tap = await bot.tap(OWNER, shown, "Delete")
        await until(lambda: bot.reply_to(tap), "the deletion")
        assert bot.reply_to(tap) == "Schedule deploys: deleted." and await engine.read(lambda s: s.schedules()) == []
