"""Pilot tests: every binding and modal, checking both the screen and the database."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

from textual.widgets import Input, Label, TextArea
from textual.worker import WorkerCancelled, WorkerState

from console.clock import ManualClock
from console.core import MAX_PAYLOAD_DEPTH, Store
from console.runtime.why import why_not_run
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.detail import DetailScreen
from console.tui.screens.inject import InjectScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.events_pane import EventsPane
from console.tui.widgets.lease_pane import LeasePane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import HOLDER, make_app, shown_ids, started, text_of

SIZE = (80, 24)


async def test_main_screen_shows_every_pane(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert shown_ids(app) == [7, 6, 5, 4, 3, 2, 1]
        assert "worker-b:4242" in text_of(app, "#lease-who")
        assert "refused finishes 1" in text_of(app, "#lease-fencing")
        assert app.query_one(ApprovalsPane).table.row_count == 2
        assert "queued 2" in text_of(app, "#outbox-counts")
        assert app.engine.mode == "standby"


async def test_inject_stores_the_event(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("i")
        await pilot_until(pilot, lambda: isinstance(app.screen, InjectScreen), what="inject modal")
        source_id = app.screen.query_one("#inject-source-id", Input).value
        assert source_id.startswith("kb-")
        app.screen.query_one("#inject-payload", TextArea).text = '{"text": "typed by hand"}'
        await pilot.press("ctrl+s")
        await pilot_until(pilot, lambda: not isinstance(app.screen, InjectScreen), what="modal closed")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 8, what="new row")
    with reopen(filled) as store:
        event = store.find_event("chat", source_id)
        assert event is not None and event.payload == {"text": "typed by hand"}


async def test_inject_bad_json_shows_the_error_and_stores_nothing(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("i")
        await pilot_until(pilot, lambda: isinstance(app.screen, InjectScreen))
        app.screen.query_one("#inject-payload", TextArea).text = '{"text": '
        await pilot.press("ctrl+s")
        await pilot_until(pilot, lambda: "not valid JSON" in text_of(app, "#inject-error"), what="inline error")
        assert isinstance(app.screen, InjectScreen)
    with reopen(filled) as store:
        assert store.max_event_id() == 7


async def test_inject_reused_source_id_is_refused_as_duplicate(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("i")
        await pilot_until(pilot, lambda: isinstance(app.screen, InjectScreen))
        app.screen.query_one("#inject-source-id", Input).value = "c-1"
        await pilot.press("ctrl+s")
        await pilot_until(pilot, lambda: "duplicate refused" in text_of(app, "#inject-error"), what="refusal")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, InjectScreen))
    with reopen(filled) as store:
        event = store.find_event("chat", "c-1")
        assert event is not None and event.duplicates == 1 and event.payload == {"text": "are you there?"}
        assert store.max_event_id() == 7


async def test_y_and_n_answer_the_selected_approval(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(ApprovalsPane)
        selected = pane.selected()
        assert selected is not None and selected.request_id == "apr-8-1"  # the soonest deadline first
        await pilot.press("y")
        await pilot_until(pilot, lambda: pane.table.row_count == 1, what="one approval left")
        await pilot.press("n")
        await pilot_until(pilot, lambda: pane.table.row_count == 0, what="no approval left")
        assert "declined" not in text_of(app, "#approvals-resolved")
        assert "no" in text_of(app, "#approvals-resolved")
    with reopen(filled) as store:
        assert store.approval("apr-8-1").outcome == "yes"  # type: ignore[union-attr]
        assert store.approval("apr-9-1").outcome == "no"  # type: ignore[union-attr]
        assert json.loads(json.dumps(store.find_event("approval", "apr-9-1").payload))["answer"] == "no"  # type: ignore[union-attr]


async def test_a_late_answer_gets_expired(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        clock.advance(31)  # apr-8-1 had 30 s left; nobody has swept its expiry timer yet
        await pilot.press("y")
        await pilot_until(pilot, lambda: any("outcome that stands is expired" in n.message
                                            for n in app._notifications), what="too-late notice")
    with reopen(filled) as store:
        assert store.approval("apr-8-1").outcome == "expired"  # type: ignore[union-attr]


async def test_an_expiry_swept_by_the_other_worker_is_notified(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        clock.advance(31)
        with reopen(filled) as other:  # worker-b holds the lease, so its scheduler writes the expiry
            assert other.run_scheduler(now=clock.now()) == 1
        await pilot_until(pilot, lambda: any("expired unanswered" in n.message for n in app._notifications),
                         what="expiry notification")
        await pilot_until(pilot, lambda: app.query_one(ApprovalsPane).table.row_count == 1, what="one left")


async def test_r_retries_the_selected_dead_event(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("r")  # row 0 is pending: refused with a message, nothing changes
        await pilot_until(pilot, lambda: any("only dead events" in n.message for n in app._notifications))
        for _ in range(4):
            await pilot.press("f")
        await pilot_until(pilot, lambda: shown_ids(app) == [3], what="dead filter")
        assert "dead" in str(app.query_one(EventsPane).border_title)
        await pilot.press("r")
        await pilot_until(pilot, lambda: shown_ids(app) == [], what="no dead event left")
    with reopen(filled) as store:
        event = store.event(3)
        assert event is not None and event.status == "pending" and event.attempts == 0


async def test_retry_all_asks_with_the_exact_count(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        store.ingest("manual", "poison-2", {"poison": True}, now=clock.now())
        store.connection.execute("UPDATE inbox SET status = 'dead', error = 'test' WHERE source_id = 'poison-2'")
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("R")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
        assert "Retry 2 dead events?" in text_of(app, "#confirm-question")
        await pilot.press("n")
        await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        with reopen(filled) as store:
            assert store.count_dead() == 2
        await pilot.press("R")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await pilot_until(pilot, lambda: any("2 dead events back" in n.message for n in app._notifications))
    with reopen(filled) as store:
        assert store.count_dead() == 0


async def test_enter_opens_the_detail_with_why_it_has_not_run(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("enter")  # row 0: event 7, pending behind another worker's lease
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail")
        why = text_of(app, "#detail-why")
        assert "Why hasn't this run?" in why
        assert "held by another worker, worker-b:4242" in why
        assert '"text"' in text_of(app, "#detail-payload")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, DetailScreen))
        for _ in range(4):
            await pilot.press("down")
        await pilot.press("enter")  # event 3: dead, with its history of claims, errors and the refusal
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen))
        history = text_of(app, "#detail-history")
        assert "claim" in history and "error" in history and "worker-b:4242 gen 2" in history
        assert "dead: failed 2 attempts; last error: PoisonEventError" in text_of(app, "#detail-why")


async def test_status_and_source_filters(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("f")
        await pilot_until(pilot, lambda: shown_ids(app) == [7], what="pending only")
        await pilot.press("f")
        await pilot_until(pilot, lambda: shown_ids(app) == [6, 5, 4], what="running only")
        await pilot.press("f", "f", "f", "f")  # done, dead, discarded, all
        await pilot_until(pilot, lambda: len(shown_ids(app)) == 7, what="all again")
        await pilot.press("s")  # sources in order: approval, chat, github, manual, webhook
        await pilot.press("s")
        await pilot_until(pilot, lambda: shown_ids(app) == [7, 5, 2], what="chat only")
        assert "chat" in str(app.query_one(EventsPane).border_title)


async def test_x_stalls_the_worker(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("x")
        await pilot_until(pilot, lambda: "stalled" in text_of(app, "#lease-who"), what="stalled mode")
        assert app.engine.mode == "stalled"
        await pilot.press("x")
        await pilot_until(pilot, lambda: app.engine.mode != "stalled", what="resumed")


async def test_quick_keys_inject_chat_poison_redelivery_and_approval_in_the_demo(
    filled: Path, clock: ManualClock
) -> None:
    app = make_app(filled, clock, demo=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("c")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 8)
        await pilot.press("p")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 9)
        await pilot.press("d")  # the poison event again: refused
        await pilot_until(pilot, lambda: any("duplicate refused" in n.message for n in app._notifications))
        await pilot.press("a")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 10)
    with reopen(filled) as store:
        chat, poison, approval = store.event(8), store.event(9), store.event(10)
        assert chat is not None and chat.source == "chat"
        assert poison is not None and poison.payload == {"poison": True} and poison.duplicates == 1
        assert approval is not None and approval.payload == {"text": "refund order 881"}
        assert store.max_event_id() == 10


async def test_keys_are_remapped_from_the_config(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock, settings={"keys": {"console.inject": "j"}})
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("i")
        await pilot.pause()
        assert not isinstance(app.screen, InjectScreen)
        await pilot.press("j")
        await pilot_until(pilot, lambda: isinstance(app.screen, InjectScreen), what="inject on j")


async def test_palette_runs_an_action(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock, demo=True)  # the poison event is a test key's: the demo's
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"poison event")
        await pilot.pause(0.3)  # the palette searches in a worker; pressing enter picks the top hit
        await pilot.press("enter")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 8, what="poison injected from the palette")
    with reopen(filled) as store:
        assert store.event(8).payload == {"poison": True}  # type: ignore[union-attr]


async def test_a_second_process_ingest_shows_up_live(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        with reopen(filled) as other:
            other.ingest("webhook", "from-elsewhere", {"n": 1}, now=clock.now())
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 8, what="row from another connection")


async def test_ctrl_q_quits_and_releases_the_lease(db_path: Path, clock: ManualClock) -> None:
    with Store.open(db_path) as store:
        store.ingest("chat", "hello", {"text": "hi"}, now=clock.now())
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: app.engine.mode == "active", what="active")
        await pilot_until(pilot, lambda: HOLDER in text_of(app, "#lease-who"), what="holder shown")
        await pilot_until(pilot, lambda: app.query_one(EventsPane).page is not None
                         and app.query_one(EventsPane).page.events[0].status == "done",  # type: ignore[union-attr]
                         what="the worker ran the chat event")
        await pilot.press("ctrl+q")
        await pilot_until(pilot, lambda: not app.is_running, what="exit")
    with reopen(db_path) as store:
        lease = store.lease()
        assert lease is not None and lease.holder == HOLDER and not lease.is_live(clock.now())
        assert store.lease_log(1)[0][1] == "release"


async def test_an_activity_read_finishing_after_the_header_went_is_not_a_crash(
    filled: Path, clock: ManualClock
) -> None:
    """Closing removes the panes while a sparkline read may still be in its thread (CI saw this crash)."""
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        header = app.query_one(ConsoleHeader)
        gate = threading.Event()
        real_read = header.read_activity

        async def held_read() -> None:
            await app.read(lambda store: gate.wait(5))  # the reader thread is busy until the header has gone
            await real_read()

        header.read_activity = held_read  # type: ignore[method-assign]
        worker = header.refresh_activity()
        await header.remove()
        gate.set()
        with contextlib.suppress(WorkerCancelled):  # the header's own read goes with it
            await worker.wait()
        assert worker.state in (WorkerState.SUCCESS, WorkerState.CANCELLED) and app.is_running


async def test_paging_reads_one_window_at_a_time(db_path: Path, clock: ManualClock) -> None:
    with Store.open(db_path) as store:
        store.ingest_many([("bulk", f"b-{i}", {"i": i}) for i in range(500)], now=clock.now())
        store.acquire("elsewhere", now=clock.now() + 10_000)  # keep this console on standby
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        table = app.query_one(EventsPane).table
        rows = table.visible_rows()
        assert shown_ids(app) == list(range(500, 500 - rows, -1))
        assert table.row_count == rows  # only the visible window is loaded
        await pilot.press("pagedown")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 500 - rows, what="next page")
        pane = app.query_one(EventsPane)
        await pilot.press("end")  # the oldest event itself, not the top row of the oldest page
        await pilot_until(pilot, lambda: shown_ids(app)[-1] == 1 and pane.selected_event().id == 1,  # type: ignore[union-attr]
                          what="the oldest event selected")
        assert table.cursor_row == rows - 1
        await pilot.press("up")
        await pilot_until(pilot, lambda: pane.selected_event().id == 2, what="the cursor up one")  # type: ignore[union-attr]
        await pilot.press("pageup")  # paging follows from there
        await pilot_until(pilot, lambda: shown_ids(app) == list(range(2 * rows, rows, -1)), what="the page above")
        await pilot.press("end", "down")  # at the oldest event, down goes nowhere
        await pilot_until(pilot, lambda: pane.selected_event().id == 1, what="the oldest again")  # type: ignore[union-attr]
        await pilot.press("home")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 500, what="newest again")
        assert "live" in str(app.query_one(EventsPane).border_subtitle)


async def test_lease_pane_shows_this_console_when_active(db_path: Path, clock: ManualClock) -> None:
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: app.engine.mode == "active", what="active")
        await pilot_until(pilot, lambda: "(you)" in text_of(app, "#lease-who"), what="own lease shown")
        assert app.query_one(LeasePane).view is not None
        assert Label  # the pane composes labels for the countdowns


async def test_lease_pane_says_when_the_agent_waits(db_path: Path, clock: ManualClock) -> None:
    with Store.open(db_path) as store:
        gen = store.acquire("worker-b:4242", now=clock.now())
        assert gen is not None
        store.set_agent_state("worker-b:4242", gen, "waiting", now=clock.now(), until=clock.now() + 45,
                              reason="the Claude API is overloaded (529: Overloaded)")
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: "waiting" in text_of(app, "#lease-agent"), what="agent waiting shown")
        shown = text_of(app, "#lease-agent")
        assert shown == "agent waiting (45s left): the Claude API is overloaded (529: Overloaded)"
        clock.advance(45)
        await pilot_until(pilot, lambda: text_of(app, "#lease-agent") == "agent ready", what="agent ready again")


def test_why_a_pending_event_has_not_run_names_the_agents_wait(db_path: Path, clock: ManualClock) -> None:
    now = clock.now()
    with Store.open(db_path) as store:
        store.ingest("chat", "m1", {}, now=now)
        gen = store.acquire(HOLDER, now=now)
        assert gen is not None
        reason = "the Claude API is rate limiting (429: slow down)"
        store.set_agent_state(HOLDER, gen, "waiting", now=now, reason=reason, until=now + 90)
        event = store.find_event("chat", "m1")
        assert event is not None
        why = why_not_run(store, event, now=now, holder=HOLDER, mode="active")
        assert why.kinds()[0] == "agent_not_ready" and why.reasons[0].facts["until"] == now + 90
        assert why.sentences[0] == f"the agent is waiting (1m30s left): {reason}; nothing is claimed meanwhile, " \
                                   "and the wait costs no event an attempt"
        store.set_agent_state(HOLDER, gen, "paused", now=now, reason="the key was refused")
        why = why_not_run(store, event, now=now, holder=HOLDER, mode="active")
        assert why.sentences[0].startswith("the agent is paused until the engine restarts: the key was refused;")


async def test_the_detail_of_a_pruned_event_says_so(db_path: Path, clock: ManualClock) -> None:
    long_ago = clock.now() - 40 * 86_400
    with Store.open(db_path) as store:
        gen = store.acquire("old-worker", now=long_ago)
        assert gen is not None and store.ingest("chat", "old", {"text": "a secret from long ago"}, now=long_ago)
        claimed = store.claim_batch("old-worker", gen, now=long_ago)
        assert store.finish("old-worker", gen, [e.id for e in claimed], now=long_ago)
        assert store.release("old-worker", gen, now=long_ago)
        assert store.prune(older_than=30 * 86_400, now=clock.now() - 60).payloads_cleared == 1
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail")
        payload = text_of(app, "#detail-payload")
        assert payload.startswith("pruned ") and "(1m00s ago)" in payload
        assert "secret" not in payload


def nested_text(depth: int) -> str:
    return '{"k": ' * depth + '"leaf"' + "}" * depth


async def test_nesting_past_the_limit_is_refused_by_inject_and_the_deepest_payload_shows(
    filled: Path, clock: ManualClock
) -> None:
    with reopen(filled) as store:
        assert store.ingest("hook", "deepest", json.loads(nested_text(MAX_PAYLOAD_DEPTH)), now=clock.now())
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        for depth in (5000, MAX_PAYLOAD_DEPTH + 1):  # past json's own recursion, and just past the limit
            await pilot.press("i")
            await pilot_until(pilot, lambda: isinstance(app.screen, InjectScreen), what="inject modal")
            app.screen.query_one("#inject-payload", TextArea).text = nested_text(depth)
            await pilot.press("ctrl+s")
            await pilot_until(pilot, lambda: f"nested deeper than {MAX_PAYLOAD_DEPTH} levels" in text_of(
                app, "#inject-error"), what="inline error")
            await pilot.press("escape")
            await pilot_until(pilot, lambda: not isinstance(app.screen, InjectScreen), what="modal closed")
        await pilot_until(pilot, lambda: shown_ids(app)[0] == 8, what="the deepest event on top")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail")
        assert text_of(app, "#detail-payload").count('"k": {') == MAX_PAYLOAD_DEPTH - 1
    with reopen(filled) as store:
        assert store.max_event_id() == 8


async def test_the_console_says_where_each_answer_came_from(db_path: Path, clock: ManualClock) -> None:
    now = clock.now()
    with Store.open(db_path) as store:
        store.ingest("chat", "c1", {"text": "refund order 881"}, now=now - 120)
        asker = store.find_event("chat", "c1")
        assert asker is not None
        store.request_approval("apr-1-aa", "refund order 881", now=now - 100, expires_in=3600, event_id=asker.id)
        store.take_phone_answer("telegram", "u7", via="telegram", now=now - 60, request_id="apr-1-aa", answer="no",
                                refused="wrong_chat")
        store.take_phone_answer("telegram", "u8", via="telegram", now=now - 50, request_id="apr-1-aa", answer="yes")
        store.request_approval("apr-9-bb", "deploy web", now=now - 40, expires_in=3600)
    app = make_app(db_path, clock)
    async with app.run_test(size=(120, 30)) as pilot:
        await started(app, pilot)
        await pilot_until(pilot, lambda: "· Telegram" in text_of(app, "#approvals-resolved"), what="Telegram")
        await pilot.press("y")  # the other approval, answered here
        await pilot_until(pilot, lambda: "deploy web · console" in text_of(app, "#approvals-resolved"), what="console")
        await pilot.press("enter")  # the newest event: the answer just given
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail")
        # A request with no tool behind it is a question, and says so.
        assert "apr-9-bb  question: “deploy web”\n  yes in the console" in text_of(app, "#detail-approvals")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, DetailScreen), what="back")
        await pilot.press("down")  # the answer from the phone
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail")
        trail = text_of(app, "#detail-approvals")
        assert "apr-1-aa  question: “refund order 881”\n  yes from Telegram" in trail
        assert "telegram: yes → settled" in trail and "telegram: no → wrong chat" in trail


def test_an_events_detail_lists_the_approvals_it_asked_for(db_path: Path, clock: ManualClock) -> None:
    from console.tui.detail import read_detail

    now = clock.now()
    with Store.open(db_path) as store:
        store.ingest("chat", "c1", {"text": "refund 1 and deploy"}, now=now)
        store.ingest("chat", "c2", {"text": "unrelated"}, now=now)
        for request_id, action in (("apr-1-aa", "refund 1"), ("apr-1-bb", "deploy")):
            store.request_approval(request_id, action, now=now, expires_in=600, event_id=1)
        store.answer_approval("apr-1-bb", "no", now=now + 5, via="cli")
        view = read_detail(1, now=now + 10, holder=HOLDER, mode="active")(store)
        other = read_detail(2, now=now + 10, holder=HOLDER, mode="active")(store)
    assert [(t.approval.request_id, t.approval.outcome, t.approval.answered_via) for t in view.approvals] == [
        ("apr-1-aa", None, None), ("apr-1-bb", "no", "cli")]
    assert other.approvals == []
