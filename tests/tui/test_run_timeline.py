"""Issue 36, item 7: a run's timeline (t in an event's detail): its steps in time order with how long each took and
a bar across the run, from a real run of the Claude agent against the stand-in model with a real Python shop behind
the gateway (a lookup allowed, a delete refused, a refund asked); live: the approval's wait grows with the clock, and
the owner's yes and the resumed run's approved refund show as they commit; esc closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.core import Attempt, JournalStep
from console.tui.app import ConsoleApp
from console.tui.keys import key_rows
from console.tui.screens.detail import DetailScreen
from console.tui.screens.timeline import TimelineScreen, bar
from console.tui.timeline import Step, build_steps
from tests.agents.stand_in import FakeClaude, serve_stand_in
from tests.support import pilot_until
from tests.tui.scenes import START, make_app
from tests.tui.test_snapshots import ready
from tests.tui.timeline_run import Shop, refund_asked, refund_done

Compare = Callable[..., bool]
UTC = {"timezone": "UTC"}


@pytest.fixture
def claude() -> Iterator[FakeClaude]:
    """A stand-in of its own per test: its prompt cache prices the calls, so a shared one priced them by what
    earlier tests had sent."""
    with serve_stand_in() as fake:
        yield fake


def steps_text(app: ConsoleApp) -> str:
    """The steps one a line, each step's wrapped words joined again."""
    rows: list[str] = []
    for line in str(app.screen.query_one("#timeline-steps").render()).splitlines():
        if line.startswith(" ") and rows:
            rows[-1] = f"{rows[-1].rstrip()} {line.strip()}"
        else:
            rows.append(line)
    return "\n".join(rows)


def line_of(text: str, words: str) -> str:
    found = [line for line in text.splitlines() if words in line]
    assert found, f"no line with {words!r} in:\n{text}"
    return found[0]


async def open_timeline(app: ConsoleApp, pilot: Pilot[Any]) -> TimelineScreen:
    await pilot_until(pilot, lambda: app.started and app.query_one("#events").page is not None  # type: ignore[attr-defined]
                      and bool(app.query_one("#events").page.events), what="the events")  # type: ignore[attr-defined]
    await pilot.press("enter")
    await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the event's detail")
    assert "t timeline" in str(app.screen.query_one("#detail-dialog").border_subtitle)
    await pilot.press("t")
    await pilot_until(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.view is not None,
                      what="the timeline")
    screen = app.screen
    assert isinstance(screen, TimelineScreen)
    return screen


async def test_t_in_the_detail_shows_the_runs_steps_timed_and_follows_the_answer(db_path: Path,
                                                                                claude: FakeClaude) -> None:
    shop = Shop(START - 100)
    event_id, request_id = refund_asked(db_path, claude, shop)
    clock = ManualClock(START)
    app = make_app(db_path, clock, settings=UTC)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timeline(app, pilot)
        assert screen.event_id == event_id
        text = steps_text(app)
        turn = line_of(text, "model turn 1 · claude-sonnet-5-5")
        assert turn.split()[:3] == ["22:11:40", "3s", "model"] and "█" in turn  # START - 100, in UTC
        assert "allowed, done" in line_of(text, 'lookup_order(order="881")')
        assert line_of(text, 'lookup_order(order="881")').split()[1] == "2s"
        assert "refused, error" in line_of(text, 'delete_order(order="881")')
        refund = line_of(text, f'refund(order="881") · request {request_id}')  # the request id whole
        assert "asked, deferred" in refund
        wait = line_of(text, f"approval {request_id}")
        assert "waiting for your answer" in wait and "…1m32s" in wait  # asked at START - 92, still open
        assert "sent" in line_of(text, "urgent reply #1")
        summary = str(app.screen.query_one("#timeline-summary").render())
        assert "2 model turns 6s" in summary and "3 tool calls 2s" in summary and "(going on)" in summary

        clock.advance(10)  # the wait grows with the clock, nothing read
        await pilot_until(pilot, lambda: "…1m42s" in line_of(steps_text(app), f"approval {request_id}"),
                          what="the wait grown")

        await asyncio.to_thread(refund_done, db_path, claude, shop, request_id, answered_after=40)
        await pilot_until(pilot, lambda: "answered yes from Telegram" in steps_text(app)
                          and "approved, done" in steps_text(app), what="the answer and the resumed run")
        text = steps_text(app)
        approved = line_of(text, "approved, done")
        assert f'refund(order="881") · request {request_id} · resumed by #' in approved and " 4s " in approved
        assert line_of(text, f"approval {request_id}").split()[1] == "41s"  # asked, then answered 41 s later
        assert "(going on)" not in str(app.screen.query_one("#timeline-summary").render())
        assert shop.calls == [("lookup_order", "881"), ("refund", "881")]  # the delete never reached the shop

        await pilot.press("escape")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="back to the detail")


def test_a_bar_sits_where_its_step_ran_and_is_as_long_as_it_took() -> None:
    assert bar(Step("turn", 100, 110, "x"), 100, 140, 140, 20) == "█████" + " " * 15
    assert bar(Step("call", 120, 140, "x"), 100, 140, 140, 20) == " " * 10 + "█" * 10
    assert bar(Step("call", 130, 130, "x"), 100, 140, 140, 20) == " " * 15 + "▏" + " " * 4  # a moment
    assert bar(Step("approval", 120, None, "x"), 100, 130, 130, 10) == " " * 7 + "███"  # still going: to now


def test_the_key_is_in_the_help() -> None:
    rows = [row for row in key_rows({}) if row.binding_id == "detail.timeline"]
    assert [(row.place, row.keys, row.does) for row in rows] == [("An event's detail", "t", "Timeline")]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_run_timeline_snapshot(snap_compare: Compare, db_path: Path, claude: FakeClaude,
                               size: tuple[int, int]) -> None:
    shop = Shop(START - 100)
    _event_id, request_id = refund_asked(db_path, claude, shop)
    refund_done(db_path, claude, shop, request_id, answered_after=40)
    app = make_app(db_path, ManualClock(START), settings=UTC)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        events = app.query_one("#events")
        events.table.move_cursor(row=len(events.page.events) - 1)  # type: ignore[attr-defined]  # the chat event
        await open_timeline(app, pilot)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_a_failed_attempt_its_retry_wait_and_a_run_still_going() -> None:
    """From the attempt history alone: the first attempt failed after 5 s, the retry waited 30 s, the second
    attempt is still running (open: drawn to now), its model turn under way."""
    history = [Attempt(1, 100, "claim", "w", 1, None), Attempt(1, 105, "error", "w", 1, "RuntimeError: shop down"),
               Attempt(1, 135, "claim", "w", 2, None)]
    journal = [JournalStep("claude:1:turn:1", "claimed", 2, 1, 136, None, None, 1)]
    steps = build_steps(history, journal, (), (), (), ())
    assert [(s.kind, s.start, s.end, s.outcome) for s in steps] == [
        ("run", 100, 105, "error: RuntimeError: shop down"), ("retry", 105, 135, ""),
        ("run", 135, None, "running"), ("turn", 136, None, "under way")]
    assert steps[1].label == "waited before attempt 2" and steps[2].label == "attempt 2 · gen 2 · w"
    assert steps[2].took(150) == 15 and steps[0].style == "error"
