"""What a newcomer meets: the empty inbox, a narrow terminal, the help panel, the palette and the footer."""

from __future__ import annotations

from pathlib import Path

from textual.command import CommandPalette
from textual.widgets import OptionList

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.commands import ACTIONS
from console.tui.screens.inject import InjectScreen
from console.tui.screens.keys import KeysScreen
from console.tui.screens.main import MainScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.events_pane import EventsPane
from console.tui.widgets.events_table import EventsTable
from tests.support import pilot_until
from tests.tui.scenes import make_app


def hint(app: ConsoleApp) -> str | None:
    """The empty-table hint, or None while it is hidden."""
    widget = app.query_one("#events-empty")
    return str(widget.render()) if widget.display else None


def row_heights(app: ConsoleApp) -> list[int]:
    table = app.query_one(ApprovalsPane).table
    return [row.height for row in table.rows.values()]


async def test_an_empty_inbox_says_how_to_get_events_and_the_hint_goes_when_one_arrives(
    db_path: Path, clock: ManualClock
) -> None:
    with Store.open(db_path) as store:
        store.acquire("elsewhere", now=clock.now() + 10_000)  # this console stays on standby: events stay pending
    app = make_app(db_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started and app.query_one(EventsPane).page is not None, what="first page")
        await pilot_until(pilot, lambda: hint(app) == "No events yet. Press i to inject one; `agent-console --demo` "
                         "shows every pane moving.", what="empty hint, without the demo's test keys")
        await pilot.press("i")
        await pilot_until(pilot, lambda: isinstance(app.screen, InjectScreen), what="the inject form")
        await pilot.press("ctrl+s")
        await pilot_until(pilot, lambda: hint(app) is None, what="the hint hidden by the first event")
        await pilot.press("f", "f")  # running: none of the one pending event
        await pilot_until(pilot, lambda: hint(app) == "No running events (of 1). Press f to change the status "
                          "filter, s the source filter, F to pick either from a list.", what="the filter hint")
        await pilot.press("f", "f", "f", "f")
        await pilot_until(pilot, lambda: hint(app) is None, what="all statuses again")


async def test_approvals_keep_the_action_readable_at_80_columns(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started and len(row_heights(app)) == 2, what="two approvals")
        await app.settle()
        table = app.query_one(ApprovalsPane).table
        assert row_heights(app) == [2, 2]  # the action on a line of its own, its countdown below
        # the action on a line of its own; below it the countdown and the request id
        assert str(table.get_row_at(0)[0]).startswith("“deploy web to prod”\n▰")  # a question, in its words
        assert str(table.get_row_at(0)[0]).endswith(" apr-8-1")
        await pilot.resize_terminal(150, 36)  # a question's quotes take two columns more than its words
        await pilot_until(pilot, lambda: row_heights(app) == [1, 1], what="one line each when there is room")
        assert str(table.get_row_at(0)[0]).endswith("“deploy web to prod”  apr-8-1")
        assert app.query_one(ApprovalsPane).selected().request_id == "apr-8-1"  # type: ignore[union-attr]


async def test_f1_and_question_mark_open_the_keys_screen_filtered_as_you_type(filled: Path,
                                                                             clock: ManualClock) -> None:
    app = make_app(filled, clock, settings={"keys": {"console.stall": "X"}})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="start")
        await pilot.press("f1")
        await pilot_until(pilot, lambda: isinstance(app.screen, KeysScreen), what="the keys screen")
        screen = app.screen
        assert isinstance(screen, KeysScreen)
        await pilot_until(pilot, lambda: bool(screen.shown), what="the keys listed")
        assert screen.size == app.size  # the whole screen, not a side panel
        assert "The inbox, newest first" in str(screen.query_one("#keys-about").render())  # the focused pane's help
        everything = len(screen.shown)
        assert everything > 40
        await pilot.press("pagedown", "pagedown")
        assert (screen.keys_list.highlighted or 0) > 10  # ↑ ↓ pgup pgdn move the list while the box keeps the typing
        await pilot.press(*"stall")
        await pilot_until(pilot, lambda: [r.binding_id for r in screen.shown] == ["console.stall"], what="one row")
        assert screen.shown[0].keys == "X"  # after the remap
        assert "X: Stall, stop (or resume) renewing the lease" in str(screen.query_one("#keys-detail").render())
        await pilot.press("escape")  # clears the filter first
        await pilot_until(pilot, lambda: len(screen.shown) == everything, what="every key again")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, KeysScreen), what="closed")
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, KeysScreen), what="? opens it too")
        await pilot.press("f1")
        await pilot_until(pilot, lambda: not isinstance(app.screen, KeysScreen), what="f1 closes it")


def test_every_key_is_also_in_the_command_palette() -> None:
    in_palette = {action for _title, _help, action in ACTIONS}
    from_textual = {"toggle_help", "quit"}  # Textual's own palette commands "Keys" and "Quit"
    keys = {binding.action for binding in (*ConsoleApp.BINDINGS, *MainScreen.BINDINGS)}  # type: ignore[union-attr]
    moves = {"events.up", "events.down"}  # ids only so an owner's [keys] can take j/k back: cursor moves, no commands
    table_keys = {binding.action for binding in EventsTable.BINDINGS  # type: ignore[union-attr]
                  if binding.id and binding.id not in moves}  # type: ignore[union-attr]
    table_keys = {"detail" if action == "select_cursor" else action for action in table_keys}
    pane_keys = {binding.action for binding in EventsPane.BINDINGS if binding.id}  # type: ignore[union-attr]
    assert keys - from_textual <= in_palette
    assert table_keys <= in_palette
    assert pane_keys <= in_palette


async def test_the_palette_offers_keys_and_quit(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="start")
        titles = {command.title for command in app.get_system_commands(app.screen)}
        assert {"Keys", "Quit"} <= titles
        keys = next(c for c in app.get_system_commands(app.screen) if c.title == "Keys")
        keys.callback()  # type: ignore[call-arg]
        await pilot_until(pilot, lambda: isinstance(app.screen, KeysScreen) and bool(app.screen.shown),
                          what="the keys screen")


async def test_the_palette_shows_each_actions_key_after_remaps(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock, settings={"keys": {"console.inject": "ctrl+n"}})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="start")
        await pilot.press("ctrl+p")
        await pilot_until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press(*"inject an")
        options = app.screen.query_one(OptionList)
        await pilot_until(pilot, lambda: options.option_count > 0, what="hits")
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert any(p.startswith("Inject an event  ^n") for p in prompts), prompts
        await pilot.press("escape", "ctrl+p", *"sort the")
        await pilot_until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette again")
        options = app.screen.query_one(OptionList)
        await pilot_until(pilot, lambda: any("Sort the events  S" in str(options.get_option_at_index(i).prompt)
                                             for i in range(options.option_count)), what="Sort with its key S")


async def test_a_remap_onto_a_key_another_action_uses_warns_naming_both(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock, settings={"keys": {"console.stall": "S"}})  # the docs' old example
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="start")
        await pilot_until(pilot, lambda: any(n.title == "Config: [keys] clash" for n in app._notifications),
                          what="the warning")
        warning = next(n.message for n in app._notifications if n.title == "Config: [keys] clash")
        assert warning == ('[keys] console.stall = "S" takes S, which console.sort (Sort) uses too: one key runs '
                           "one of them; pick another key")


async def test_the_footer_shows_the_keys_a_newcomer_needs(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="start")
        shown = {binding.key for _node, binding, _enabled, _tip in app.screen.active_bindings.values() if binding.show}
        assert {"enter", "i", "y", "n", "r", "f", "x", "f1"} <= shown


async def test_live_cursor_on_the_newest_row_follows_new_events_and_elsewhere_stays_put(
    filled: Path, clock: ManualClock
) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started and app.query_one(EventsPane).page is not None, what="first page")
        pane = app.query_one(EventsPane)
        assert pane.selected_event().id == 7  # type: ignore[union-attr]
        with Store.open(filled, check=False) as other:
            other.ingest("webhook", "new-1", {}, now=clock.now())
        await pilot_until(pilot, lambda: pane.selected_event().id == 8, what="the cursor on the new event")  # type: ignore[union-attr]
        await pilot.press("down", "down")
        await pilot_until(pilot, lambda: pane.selected_event().id == 6, what="the cursor moved down")  # type: ignore[union-attr]
        with Store.open(filled, check=False) as other:
            other.ingest("webhook", "new-2", {}, now=clock.now())
        await pilot_until(pilot, lambda: pane.page.events[0].id == 9, what="the new row")  # type: ignore[union-attr]
        assert pane.selected_event().id == 6  # type: ignore[union-attr]
        assert pane.table.cursor_row == 3
