"""Pilot tests for the events pane's find, read and dead-event keys: /, o, F, space, D, r, the error under
the table, the retry-in column, and a redraw that keeps the sideways scroll."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input, OptionList

from console.clock import ManualClock
from console.tui.app import ConsoleApp
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.detail import DetailScreen
from console.tui.screens.filter_picker import FilterScreen
from console.tui.screens.message import MessageScreen
from console.tui.screens.search import SearchScreen
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, open_search, shown_ids, started, text_of

SIZE = (80, 24)
DEAD = 3  # manual/poison-1 in the filled scene: dead after two failed attempts
PENDING = 7


async def select(app: ConsoleApp, pilot: object, event_id: int) -> None:
    pane = app.query_one(EventsPane)
    while pane.selected_event().id != event_id:  # type: ignore[union-attr]
        await pilot.press("down")  # type: ignore[attr-defined]
        await pilot_until(pilot, lambda: pane.table.cursor_row >= 0, what="the cursor")  # type: ignore[arg-type]


async def test_slash_finds_events_and_messages_and_opens_each(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        await pilot.press(*"PLANTS", "enter")
        await pilot_until(pilot, lambda: list(screen.events_table.rows) == ["5"]  # chat c-2 "water the plants"
                         and screen.outbox_table.row_count == 1, what="one event and one message")
        assert "1 found (all searched)" in text_of(app, "#search-events-title")
        await pilot.press("enter")  # enter in the box moved to the events found: this opens #5
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the event's detail")
        assert "water the plants" in text_of(app, "#detail-payload")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: app.screen is screen, what="back to the results")
        await pilot.press("ctrl+o", "enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, MessageScreen), what="the message in full")
        assert text_of(app, "#message-text") == "Noted: water the plants"
        await pilot.press("escape", "escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, SearchScreen | MessageScreen), what="closed")


async def test_a_search_reads_on_past_a_page_and_keeps_to_the_filter(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        store.ingest_many([("bulk", f"b-{n}", {"note": "needle" if n % 2 else "hay"}) for n in range(130)],
                          now=clock.now())
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        screen.query_one(Input).value = "needle"
        await pilot.press("enter")
        await pilot_until(pilot, lambda: screen.events_table.row_count == 50, what="the first page of matches")
        assert screen.events_table.more
        await pilot.press(*["pagedown"] * 10)  # to the last row: the next page
        await pilot_until(pilot, lambda: screen.events_table.row_count == 65, what="every match")
        assert not screen.events_table.more
        await pilot.press("escape")
        await pilot.press("f")  # pending only: the filter applies to the search
        await pilot_until(pilot, lambda: app.query_one(EventsPane).filter.status == "pending", what="the filter")
        await pilot.press("slash")
        await pilot_until(pilot, lambda: isinstance(app.screen, SearchScreen) and app.screen is not screen)
        again = app.screen
        assert isinstance(again, SearchScreen)
        again.query_one(Input).value = "chat"
        await pilot.press("enter")
        await pilot_until(pilot, lambda: list(again.events_table.rows) == [str(PENDING)], what="pending chat only")


async def test_the_selected_events_error_is_under_the_table_with_when_it_died(filled: Path,
                                                                              clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert "#7 pending · no error" in text_of(app, "#events-error")
        await select(app, pilot, DEAD)
        await pilot_until(pilot, lambda: f"#{DEAD} died" in text_of(app, "#events-error"), what="the dead reason")
        shown = text_of(app, "#events-error")
        assert "(4s ago): failed 2 attempts; last error: PoisonEventError: marked as poison" in shown


async def test_a_batch_mate_says_it_failed_with_its_batch_not_the_poisons_error(filled: Path,
                                                                               clock: ManualClock) -> None:
    """Issue 21.6: the row, the line under the table and the detail say why it is pending again, and whose
    failure it was; the poison event's error is not shown as its own."""
    with reopen(filled) as store:
        store.ingest("chat", "mate-1", {"text": "hi"}, now=clock.now())
        store.connection.execute("UPDATE inbox SET failed_with = ?, claim_alone = 1 WHERE source_id = 'mate-1'",
                                 (DEAD,))
    said = f"failed with its batch (#{DEAD}, poison); runs alone next"
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        assert str(pane.table.get_cell("8", "last error")) == said
        assert str(pane.table.get_cell("8", "att")) == "0" and str(pane.table.get_cell("8", "retry")) == ""
        assert f"#8 pending · {said}" in text_of(app, "#events-error")
        assert "Poison" not in text_of(app, "#events-error")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the event's detail")
        assert said in text_of(app, "#detail-why")


async def test_a_failed_event_says_when_it_is_tried_again(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        store.ingest("chat", "slow-1", {"text": "hi"}, now=clock.now())
        store.connection.execute("UPDATE inbox SET attempts = 1, next_attempt_at = ?, error = 'TimeoutError: 30s' "
                                 "WHERE source_id = 'slow-1'", (clock.now() + 42,))
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        assert str(pane.table.get_cell("8", "retry")) == "in 42s"
        assert str(pane.table.get_cell(str(PENDING), "retry")) == ""  # never failed: nothing to wait for
        assert "#8 failed attempt 1, next try in 42s: TimeoutError: 30s" in text_of(app, "#events-error")
        clock.advance(50)
        await app.settle()
        await pilot_until(pilot, lambda: str(pane.table.get_cell("8", "retry")) == "due", what="due now")


async def test_a_redraw_keeps_the_sideways_scroll_and_the_cursor(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        await select(app, pilot, DEAD)
        row = pane.table.cursor_row
        await pilot.press("right", "right", "right", "right", "right")
        await pilot_until(pilot, lambda: pane.table.scroll_x >= 5, what="scrolled right")
        scrolled = pane.table.scroll_x
        for _ in range(3):  # three ticks of the clock, each redrawing every row
            clock.advance(1)
            await app.settle()
            await pilot_until(pilot, lambda: pane.view is not None and pane.view.now == clock.now(), what="redrawn")
            await pilot.pause()
            assert (pane.table.scroll_x, pane.table.cursor_row) == (scrolled, row)


async def test_space_marks_d_discards_the_marked_after_a_yes_and_r_brings_them_back(
    filled: Path, clock: ManualClock
) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        await pilot.press("space")  # marks #7 and moves down
        await select(app, pilot, DEAD)
        await pilot.press("space")
        await pilot_until(pilot, lambda: pane.marked_ids() == [PENDING, DEAD], what="two marked")
        assert "2 marked" in str(pane.border_title)
        await pilot.press("D")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        assert "Discard 2 marked events?" in text_of(app, "#confirm-question")
        await pilot.press("y")
        await pilot_until(pilot, lambda: any("2 events discarded" in n.message for n in app._notifications))
        await pilot_until(pilot, lambda: not pane.marked, what="the marks cleared")
        with reopen(filled) as store:
            assert [store.event(i).status for i in (PENDING, DEAD)] == ["discarded", "discarded"]  # type: ignore[union-attr]
            assert store.counts()["discarded"] == 2
        # F: the filter from a list; the discarded events are kept for the record
        await pilot.press("F")
        await pilot_until(pilot, lambda: isinstance(app.screen, FilterScreen), what="the filter list")
        options = app.screen.query_one(OptionList)
        options.highlighted = options.get_option_index("status:discarded")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: shown_ids(app) == [PENDING, DEAD], what="the discarded events")
        assert "#7 discarded" in text_of(app, "#events-error")
        await pilot.press("space", "space")
        await pilot_until(pilot, lambda: pane.marked_ids() == [PENDING, DEAD], what="both marked")
        await pilot.press("r")
        await pilot_until(pilot, lambda: shown_ids(app) == [], what="none discarded now")
    with reopen(filled) as store:
        revived = [store.event(i) for i in (PENDING, DEAD)]
        assert [(e.status, e.attempts) for e in revived] == [("pending", 0), ("pending", 0)]  # type: ignore[union-attr]


async def test_r_on_a_discarded_event_retention_cleared_says_why_and_changes_nothing(
    filled: Path, clock: ManualClock
) -> None:
    with reopen(filled) as store:
        assert store.discard([DEAD], now=clock.now()) == [DEAD]
        assert store.prune(older_than=86_400, now=clock.now() + 2 * 86_400).payloads_cleared >= 1
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await select(app, pilot, DEAD)
        await pilot.press("r")
        await pilot_until(pilot, lambda: any("retention has cleared it: it cannot be retried" in n.message
                                             for n in app._notifications), what="the reason")
    with reopen(filled) as store:
        kept = store.event(DEAD)
        assert kept is not None and kept.status == "discarded" and kept.pruned_at is not None


async def test_discard_refuses_a_done_event_and_escape_clears_marks(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        await select(app, pilot, 2)  # done
        await pilot.press("D")
        await pilot_until(pilot, lambda: any("only dead or pending events are discarded" in n.message
                                            for n in app._notifications), what="the refusal")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("space")
        await pilot_until(pilot, lambda: bool(pane.marked), what="marked")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not pane.marked, what="unmarked")
        await pilot.press("D", "n")  # a no changes nothing
    with reopen(filled) as store:
        assert store.counts()["discarded"] == 0


async def test_o_lists_the_outbox_and_opens_a_message_in_full(filled: Path, clock: ManualClock) -> None:
    long_body = "Digest of the day:\n" + "\n".join(f"- item {n}: something that happened" for n in range(40))
    with reopen(filled) as store:
        message_id = store.queue_message(long_body, now=clock.now())
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("o")
        await pilot_until(pilot, lambda: isinstance(app.screen, SearchScreen), what="the outbox list")
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await pilot_until(pilot, lambda: screen.outbox_table.row_count == 5, what="the newest messages")
        assert next(iter(screen.outbox_table.rows)) == str(message_id)
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, MessageScreen), what="the message")
        assert text_of(app, "#message-text") == long_body  # all of it, every line
        assert text_of(app, "#message-facts").startswith("queued  written")
        # held by the gap (600 s after the last send, 170 s ago): it says when it goes out
        assert "held by the send gap: goes out " in text_of(app, "#message-facts")
        assert text_of(app, "#message-facts").endswith("(in 7m10s)")


async def test_s_sorts_the_whole_inbox_and_paging_follows_the_order(db_path: Path, clock: ManualClock) -> None:
    with reopen(db_path) as store:
        store.ingest_many([(("chat", "github")[i % 2], f"b-{i}", {"i": i}) for i in range(300)], now=clock.now())
        store.connection.execute("UPDATE inbox SET status = 'dead', error = 'x' WHERE id % 10 = 0")
        store.acquire("elsewhere", now=clock.now() + 10_000)  # keep this console on standby
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        rows = pane.table.visible_rows()
        await pilot.press("S")  # oldest first
        await pilot_until(pilot, lambda: shown_ids(app) == list(range(1, rows + 1)), what="oldest first")
        assert "oldest first" in str(pane.border_title)
        await pilot.press("pagedown")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == rows + 1, what="the next page in that order")
        await pilot.press("end")
        await pilot_until(pilot, lambda: pane.selected_event().id == 300, what="the last row: the newest")  # type: ignore[union-attr]
        await pilot.press("S")  # by status, descending: pending before dead, newest first within each
        await pilot_until(pilot, lambda: shown_ids(app)[:2] == [299, 298], what="by status")
        await pilot.press("end")
        await pilot_until(pilot, lambda: pane.selected_event().id == 10, what="the oldest dead event last")  # type: ignore[union-attr]
        await pilot.press("home")
        await pilot.click("#events-table", offset=(14, 0))  # the source column's header
        await pilot_until(pilot, lambda: pane.filter.order == "source" and pane.filter.descending, what="by source")
        await pilot_until(pilot, lambda: [e.source for e in pane.page.events] == ["github"] * rows,  # type: ignore[union-attr]
                         what="github first")
        await pilot.click("#events-table", offset=(14, 0))  # again: turned round
        await pilot_until(pilot, lambda: pane.page is not None and pane.page.events[0].id == 1, what="chat, oldest")
        await pilot.press("f")  # a filter keeps the order
        await pilot_until(pilot, lambda: pane.filter.status == "pending" and pane.filter.order == "source")


async def test_a_discarded_events_detail_says_so_and_r_there_brings_it_back(filled: Path,
                                                                            clock: ManualClock) -> None:
    with reopen(filled) as store:
        assert store.discard([DEAD], now=clock.now() - 60) == [DEAD]
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await select(app, pilot, DEAD)
        assert "it had died: failed 2 attempts; last error: PoisonEventError: marked as poison" in \
            text_of(app, "#events-error")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail")
        why = text_of(app, "#detail-why")
        assert "discarded " in why and "(1m00s ago): it is never run again; a retry brings it back; it had died: " \
            "failed 2 attempts" in why
        await pilot.press("r")  # the detail's r goes through the console's retry, discarded events included
        await pilot_until(pilot, lambda: any(f"#{DEAD} is pending again" in n.message for n in app._notifications),
                          what="retried")
    with reopen(filled) as store:
        event = store.event(DEAD)
        assert event is not None and (event.status, event.attempts, event.dead_reason) == ("pending", 0, None)


async def test_the_details_next_and_previous_follow_the_tables_order(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("S", "S")  # by status, descending: running 6, 5, 4, then pending 7, then done 2, 1
        await pilot_until(pilot, lambda: shown_ids(app)[:5] == [6, 5, 4, PENDING, 2], what="by status")
        await select(app, pilot, 4)
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail of #4")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await pilot.press("right_square_bracket")
        await pilot_until(pilot, lambda: screen.view.event_id == PENDING, what="the row below, not the next older id")
        await pilot.press("left_square_bracket")
        await pilot_until(pilot, lambda: screen.view.event_id == 4, what="the row above again")
