"""The panes and the app's loop (issue 13): approvals you cannot miss, lease problems visible, test keys only in
the demo, the inject form, q, [keys] checks, screenshots, and an idle console that reads nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Input

from console.clock import ManualClock
from console.core import Store
from console.notices import NoticeKind
from console.timefmt import coarse_span
from console.tui import app as app_module
from console.tui.app import ConsoleApp, screenshot_folder
from console.tui.commands import ConsoleCommands
from console.tui.reads import PENDING_WINDOW
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.inject import InjectScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.countdown_bar import Countdown, CountdownBar
from console.tui.widgets.events_pane import EventsPane, table_age
from console.tui.widgets.lease_pane import LeasePane
from tests.tui.conftest import reopen, wait_until
from tests.tui.scenes import make_app
from tests.tui.test_takeover import GatedAgent, console

SIZE = (100, 30)


async def started(app: ConsoleApp, pilot: Any) -> None:
    await wait_until(pilot, lambda: app.started and app.query_one(EventsPane).page is not None, what="first page")
    await app.settle()


def text(app: ConsoleApp, selector: str) -> str:
    return str(app.query_one(selector).render())


def toasts(app: ConsoleApp) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


def footer_label(app: ConsoleApp, binding_id: str) -> str | None:
    return next((b.binding.description for b in app.active_bindings.values() if b.binding.id == binding_id), None)


async def test_a_flood_of_waiting_approvals_is_read_as_a_window_with_the_whole_count(filled: Path,
                                                                                  clock: ManualClock) -> None:
    """The pane reads the soonest PENDING_WINDOW approvals and the header and the pane say how many wait in all:
    a flood of asked calls (the tool-call cap asks each call past it) costs the console what it shows."""
    with reopen(filled) as store:
        for n in range(PENDING_WINDOW + 20):
            store.request_approval(f"apr-flood-{n}", f"act {n}", now=clock.now(), expires_in=3600 + n)
    total = PENDING_WINDOW + 22  # and the filled scene's two
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(ApprovalsPane)
        await wait_until(pilot, lambda: pane.table.row_count == PENDING_WINDOW, what="a window of approvals")
        assert f"{total} approvals waiting" in text(app, "#header-title")
        assert pane.border_subtitle == f"{total} waiting, the {PENDING_WINDOW} soonest shown"
        assert "apr-8-1" in str(pane.table.get_row_at(0)[0])  # the scene's soonest deadline first


@pytest.mark.parametrize("bell", [True, False], ids=["bell", "quiet"])
async def test_an_arriving_approval_toasts_rings_when_asked_and_shows_a_header_badge(
    filled: Path, clock: ManualClock, bell: bool
) -> None:
    app = make_app(filled, clock, settings={"approval_bell": bell})
    rings: list[int] = []
    app.bell = lambda: rings.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert "2 approvals waiting" in text(app, "#header-title")
        assert not any("apr-9-1" in t for t in toasts(app))  # waiting at start: not an arrival
        with reopen(filled) as store:  # another process asks: the engine's watcher sees the commit
            store.request_approval("apr-42-1", "pay invoice 42", now=clock.now(), expires_in=900)
        await wait_until(pilot, lambda: any("apr-42-1" in t for t in toasts(app)), what="the approval toast")
        toast = next(t for t in toasts(app) if "apr-42-1" in t)
        # A request with no tool behind it is a question, and reads as one.
        assert toast == "Question for you: “pay invoice 42”\napr-42-1 · y / n answer it, enter opens it"
        await wait_until(pilot, lambda: "3 approvals waiting" in text(app, "#header-title"), what="the badge")
        rows = [str(app.query_one(ApprovalsPane).table.get_row_at(i)[0]) for i in range(3)]
        assert any("pay invoice 42" in r and "apr-42-1" in r for r in rows), rows
    assert rings == ([1] if bell else [])


async def test_nobody_working_banner_and_the_stall_key_reads_resume_while_stalled(
    filled: Path, clock: ManualClock
) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        banner = app.query_one("#header-banner")
        assert not banner.display  # worker-b holds a live lease
        assert footer_label(app, "console.stall") == "Stall"
        await pilot.press("x")
        await wait_until(pilot, lambda: app.engine.mode == "stalled", what="stalled")
        assert footer_label(app, "console.stall") == "Resume"
        clock.advance(200)  # worker-b's lease lapses; a stalled worker takes nothing
        await app.settle()
        assert banner.display
        said = text(app, "#header-banner")
        assert "Nobody is working this inbox" in said and "worker-b:4242 (gen 2) lapsed" in said
        assert "press x to resume" in said
        await pilot.press("x")
        await wait_until(pilot, lambda: app.engine.mode == "active", what="resumed and took the lease over")
        assert footer_label(app, "console.stall") == "Stall"
        await wait_until(pilot, lambda: not banner.display, what="the banner gone with a live lease")


async def test_the_banner_follows_a_remapped_stall_key(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock, settings={"keys": {"console.stall": "S"}})
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("S")
        await wait_until(pilot, lambda: app.engine.mode == "stalled", what="stalled")
        clock.advance(200)
        await app.settle()
        assert "press S to resume" in text(app, "#header-banner")


async def test_test_keys_write_nothing_outside_the_demo(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        before = store.max_event_id()
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("c", "p", "d", "a")
        await app.settle()
        titles = [title for title, _, _, _ in ConsoleCommands(app.screen)._commands()]
        assert "Inject a poison event" not in titles and "Inject an event" in titles
        assert not {"quick_chat", "quick_poison", "quick_redeliver", "quick_approval"} & {
            b.binding.action for b in app.active_bindings.values()}
    with reopen(filled) as store:
        assert store.max_event_id() == before


async def test_the_inject_form_takes_any_source_refuses_reserved_ones_and_clears_its_error(
    filled: Path, clock: ManualClock
) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InjectScreen), what="the form")
        source = app.screen.query_one("#inject-source", Input)
        source.value = "timer"
        await pilot.press("ctrl+s")
        error = app.screen.query_one("#inject-error")
        await wait_until(pilot, lambda: "reserved" in str(error.render()), what="the reserved source refused")
        assert "timer is reserved for the engine's own events" in str(error.render())
        source.focus()
        await pilot.press("s")  # "timers": an edit
        await wait_until(pilot, lambda: str(error.render()) == "", what="the old error cleared by an edit")
        source.value = "home-bot"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: not isinstance(app.screen, InjectScreen), what="stored, form closed")
    with reopen(filled) as store:
        assert store.events(source="home-bot", limit=1)[0].payload == {"text": "hello"}


async def test_q_quits_at_once_when_no_run_is_in_progress(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)  # standby: worker-b holds the lease
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, what="quit")


async def test_q_asks_first_while_a_run_is_in_progress(db_path: Path, clock: ManualClock) -> None:
    with Store.open(db_path) as store:
        store.ingest("chat", "c-1", {"text": "hi"}, now=clock.now())
    agent = GatedAgent()
    app = console(db_path, clock, "console-q", agent)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.started and agent.entered.is_set(), what="a run in progress")
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        assert "A run is in progress (1 event)" in str(app.screen.query_one("#confirm-question").render())
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="no: stays")
        assert app.is_running
        agent.release.set()
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) or not app.is_running,
                         what="the question or the quit")
        if app.is_running and isinstance(app.screen, ConfirmScreen):
            await pilot.press("y")
        await wait_until(pilot, lambda: not app.is_running, what="quit")


async def test_unknown_key_ids_warn_and_the_empty_hint_follows_remapped_keys(
    db_path: Path, clock: ManualClock
) -> None:
    with Store.open(db_path) as store:
        store.acquire("elsewhere", now=clock.now() + 10_000)  # standby: nothing runs
    app = make_app(db_path, clock, settings={"keys": {"quit": "ctrl+x", "console.injct": "k",
                                                        "console.inject": "j"}})
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        warning = next(t for t in toasts(app) if t.startswith("Config: [keys] entries ignored"))
        assert "[keys] quit: no such binding id (did you mean console.quit?)" in warning
        assert "[keys] console.injct: no such binding id (did you mean console.inject?)" in warning
        assert "console.inject:" not in warning  # a known id is not named
        hint = text(app, "#events-empty")
        assert hint.startswith("No events yet. Press j to inject one;"), hint


def test_the_screenshot_goes_to_a_folder_that_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platformdirs

    monkeypatch.setattr(platformdirs, "user_downloads_dir", lambda: str(tmp_path / "no-downloads-here"))
    monkeypatch.setattr(platformdirs, "user_state_dir", lambda name: str(tmp_path / "state" / name))
    folder = screenshot_folder()
    assert folder == tmp_path / "state" / "agent-console" / "screenshots" and folder.is_dir()
    (tmp_path / "downloads").mkdir()
    monkeypatch.setattr(platformdirs, "user_downloads_dir", lambda: str(tmp_path / "downloads"))
    assert screenshot_folder() == tmp_path / "downloads"


async def test_the_palettes_screenshot_is_saved(filled: Path, clock: ManualClock, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    shots = tmp_path / "shots"
    shots.mkdir()
    monkeypatch.setattr(app_module, "screenshot_folder", lambda: shots)
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        app.deliver_screenshot()
        await wait_until(pilot, lambda: any(shots.glob("*.svg")), what="the screenshot file")


async def test_an_idle_console_reads_nothing_and_still_counts_down(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await wait_until(pilot, lambda: not app._dirty and not app._busy, what="every pane read")
        reads: list[str] = []
        reload_pane = app._reload_pane

        async def counted(pane: str) -> None:
            reads.append(pane)
            await reload_pane(pane)

        app._reload_pane = counted  # type: ignore[method-assign]
        lease_before = str(app.query_one("#lease-left").render())
        for _ in range(5):
            clock.advance(1)
            app._tick()
            await pilot.pause()
        assert reads == []  # no pane read again (the sparkline's rolling minute is, every 5 s: events just came)
        assert str(app.query_one("#lease-left").render()) != lease_before  # the countdown moved: 1m30s → 1m25s
        assert "1m25s" in str(app.query_one("#lease-left").render())
        assert app.query_one(LeasePane).view.now == clock.now()  # type: ignore[union-attr]


async def test_a_commit_by_another_process_rereads_every_pane(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        with reopen(filled) as store:
            store.queue_message("from another process", now=clock.now())  # outbox only: no notice of its own
        outbox = app.query_one("#outbox-lines")
        await wait_until(pilot, lambda: "from another process" in str(outbox.render()), what="the outbox re-read")


class OneBar(App[None]):
    def compose(self) -> ComposeResult:
        yield CountdownBar()


async def test_countdown_bar_fills_its_width_and_says_the_time_left() -> None:
    app = OneBar()
    async with app.run_test(size=(30, 3)) as pilot:
        bar = app.query_one(CountdownBar)
        bar.countdown = Countdown(30, 120, label="left ")
        await pilot.pause()
        shown = str(bar.render())
        assert shown == "left " + "▰" * 5 + "▱" * 16 + " 30s"  # a quarter of the 21 cells left by the texts
        bar.countdown = Countdown(0, 120, label="left ", done="lapsed")
        await pilot.pause()
        assert str(bar.render()) == "left " + "▱" * 18 + " lapsed"
        bar.countdown = Countdown(None, idle="nothing held")
        await pilot.pause()
        assert str(bar.render()) == "nothing held"


def test_every_notice_the_engine_publishes_names_the_panes_it_changes() -> None:
    assert set(app_module.NOTICE_PANES) == set(get_args(NoticeKind))
    assert all(set(panes) <= set(app_module.PANES) for panes in app_module.NOTICE_PANES.values())


def test_long_countdowns_show_whole_minutes() -> None:
    assert [coarse_span(s) for s in (42, 599, 600, 3599, 3600)] == ["42s", "9m59s", "10m", "59m", "1h00m"]
    # an event's age in the table: whole minutes from its first minute on
    assert [table_age(s) for s in (59, 60, 3599, 3600)] == ["59s", "1m", "59m", "1h00m"]


async def test_header_badge_names_one_approval_in_the_singular(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        app.query_one(ApprovalsPane).table.focus()
        await pilot.press("n")
        await wait_until(pilot, lambda: "1 approval waiting" in text(app, "#header-title"), what="one left")
        assert app.query_one(ConsoleHeader).view.facts.waiting == 1  # type: ignore[union-attr]


async def test_the_demos_empty_hint_names_its_test_keys(db_path: Path, clock: ManualClock) -> None:
    with Store.open(db_path) as store:
        store.acquire("elsewhere", now=clock.now() + 10_000)  # standby: nothing runs
    app = make_app(db_path, clock, demo=True, settings={"keys": {"console.quick_chat": "C"}})
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert text(app, "#events-empty").startswith(
            "No events yet. Press i to inject one (C: a quick chat message, a: one that needs approval);")


async def test_below_100_columns_the_sparkline_gives_the_inbox_path_room(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        sparkline = app.query_one("#header-sparkline")
        await wait_until(pilot, lambda: sparkline.size.width > 0, what="the sparkline laid out")
        assert sparkline.size.width == 10
        await pilot.resize_terminal(120, 40)
        await wait_until(pilot, lambda: sparkline.size.width == 20, what="the whole sparkline at 120 columns")


async def test_the_outbox_pane_shows_the_telegram_channel_once_it_is_used(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert "telegram" not in text(app, "#outbox-lines")  # never used: no line
        with reopen(filled) as store:
            store.take_chat_updates("telegram", "telegram", now=clock.now(), strangers=["777", "777"])
            store.set_chat_health("telegram", "conflict", "another program is reading this bot's updates",
                                  now=clock.now())
        await wait_until(pilot, lambda: "telegram conflict" in text(app, "#outbox-lines"), what="the channel's line")
        line = text(app, "#outbox-lines")
        assert "another program" in line and "paired\u00a00" in line and "refused\u00a02" in line


async def test_the_outbox_pane_shows_the_email_source_once_it_is_used(filled: Path, clock: ManualClock) -> None:
    from console.core.mail import MailCursor

    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert "email" not in text(app, "#outbox-lines")  # no [email]: no line
        with reopen(filled) as store:
            store.take_mail("email", MailCursor(7, 41, 0), now=clock.now())
            store.set_chat_health("email", "paused", "the server refused the login of me@example.org",
                                  now=clock.now())
        await wait_until(pilot, lambda: "email paused" in text(app, "#outbox-lines"), what="the source's line")
        line = text(app, "#outbox-lines")
        assert "refused the login" in line and "last UID\u00a041" in line


async def test_a_tool_server_down_shows_in_the_lease_pane_and_toasts_once(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert not app.query_one("#lease-tools").has_class("-down")
        with reopen(filled) as store:  # as the engine holding the lease records it (console/runtime/worker.py)
            lease = store.lease()
            assert lease is not None
            assert store.set_tool_health(lease.holder, lease.gen, "shop", "down", "SHOP_TOKEN not set",
                                         now=clock.now())
        await wait_until(pilot, lambda: app.query_one("#lease-tools").has_class("-down"), what="the tools line")
        assert text(app, "#lease-tools") == "tools: shop down — SHOP_TOKEN not set — retrying"
        await wait_until(pilot, lambda: any(t.startswith("Tool server down") for t in toasts(app)), what="a toast")
        app.mark("lease")  # read again while it stays down: no second toast
        await app.settle()
        assert sum(t.startswith("Tool server down") for t in toasts(app)) == 1
        with reopen(filled) as store:
            assert store.set_tool_health(lease.holder, lease.gen, "shop", "up", None, now=clock.now())
        await wait_until(pilot, lambda: not app.query_one("#lease-tools").has_class("-down"), what="back up")
