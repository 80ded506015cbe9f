"""Issue 36, item 6: search results are live. An event found dead and retried elsewhere while the results are open
reads pending (it read dead until searched again), and a message found queued and sent elsewhere reads sent; the
rows stay where they were (the search is not run again)."""

from __future__ import annotations

from pathlib import Path

from console.clock import ManualClock
from console.notices import Notice
from console.tui.app import EngineNotice
from console.tui.screens.search import SearchScreen
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, open_search, started

SIZE = (80, 24)


def cell(screen: SearchScreen, table: str, key: str, column: str) -> str:
    part = screen.events_table if table == "events" else screen.outbox_table
    return str(part.get_cell(key, column))


async def test_a_result_follows_its_event_and_message_changed_elsewhere(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        dead = store.find_event("manual", "poison-1")
        queued = next(m for m in store.outbox_messages() if m.body == "Noted: water the plants")
    assert dead is not None and dead.status == "dead" and queued.status == "queued"
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        await pilot.press(*"poison", "enter")
        await pilot_until(pilot, lambda: str(dead.id) in screen.events_table.rows, what="the dead event found")
        assert cell(screen, "events", str(dead.id), "status") == "dead"
        order = [key.value for key in screen.events_table.rows]
        with reopen(filled) as elsewhere:  # `agent-console retry` in a shell
            assert elsewhere.retry_dead(dead.id, now=clock.now())
        await pilot_until(pilot, lambda: cell(screen, "events", str(dead.id), "status") == "pending",
                          what="the result reading pending")
        assert [key.value for key in screen.events_table.rows] == order  # the same rows, where they were
        screen.query_one("#search-input").focus()
        await pilot.press(*(["backspace"] * len("poison")), *"plants", "enter")
        await pilot_until(pilot, lambda: str(queued.id) in screen.outbox_table.rows, what="the message found")
        assert cell(screen, "outbox", str(queued.id), "status") == "queued"
        with reopen(filled) as elsewhere:  # `agent-console send-now`, then another process's dispatcher
            assert elsewhere.send_now(queued.id, now=clock.now())
            assert elsewhere.dispatch(lambda batch: None, now=clock.now(), channel="console") == 1
        await pilot_until(pilot, lambda: cell(screen, "outbox", str(queued.id), "status") == "sent",
                          what="the message reading sent")


async def test_a_notice_while_the_search_screen_is_not_composed_yet_or_gone_is_no_crash(filled: Path,
                                                                                      clock: ManualClock) -> None:
    """The full run at stop 41 crashed the console: a change notice reached the search screen after its widgets had
    gone (NoMatches: '#search-events'). A screen on the stack without its widgets (opening or closing) reads when
    it is composed, or never."""
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        await screen.query_one("#search-events").remove()  # as when the screen is taken down
        app.post_message(EngineNotice(Notice("events", "the inbox changed")))
        await pilot.pause()
        assert app.is_running and app.screen is screen
