"""A filled inbox on a fixed clock, the same every run, for pilot and snapshot tests."""

from __future__ import annotations

from pathlib import Path

from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.screens.search import SearchScreen
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until

START = 1_700_000_000
HOLDER = "console-test"
OTHER = "worker-b:4242"


def settings_for(db: Path, **overrides: object) -> Settings:
    options: dict[str, object] = {"db": db, "theme": "agent-dark", "outbox_gap": 600, "backoff_base": 10}
    options.update(overrides)
    return Settings(**options)  # type: ignore[arg-type]


def fill(db: Path, clock: ManualClock, *, other_holds_lease: bool = True) -> None:
    """Every state a pane shows: pending, running, done, dead, a refused finish, approvals, outbox."""
    now = clock.now()
    with Store.open(db, seed=7, backoff_base=10, outbox_gap=600) as store:
        store.ingest("github", "delivery-1001", {"action": "push", "repository": {"full_name": "me/app"}},
                     now=now - 300)
        store.ingest("github", "delivery-1001", {"action": "push"}, now=now - 290)  # refused duplicate
        store.ingest("chat", "c-1", {"text": "are you there?"}, now=now - 240)
        store.ingest("manual", "poison-1", {"poison": True}, now=now - 200)
        gen = store.acquire("worker-a:1", now=now - 180)
        assert gen == 1
        claimed = store.claim_batch("worker-a:1", gen, now=now - 180)
        store.finish("worker-a:1", gen, [e.id for e in claimed if e.source != "manual"], now=now - 179,
                     messages=["Noted: are you there?"])
        store.finish("worker-a:1", gen, [e.id for e in claimed if e.source == "manual"], now=now - 179,
                     error="PoisonEventError: event is marked as poison")
        store.queue_message("Digest: 3 done", now=now - 170)
        store.dispatch(lambda batch: None, now=now - 170, channel="console")
        store.request_approval("apr-9-1", "refund order 881", now=now - 60, expires_in=240, details={"event": 9})
        store.request_approval("apr-8-1", "deploy web to prod", now=now - 200, expires_in=230)
        store.request_approval("apr-7-1", "drop the staging table", now=now - 400, expires_in=60)
        store.run_scheduler(now=now - 300)
        store.answer_approval("apr-7-1", "no", now=now - 390)
        store.queue_message("Approval needed [apr-9-1]: refund order 881", now=now - 60)
        store.queue_message("Noted: water the plants", now=now - 30)
        store.ingest("chat", "c-2", {"text": "water the plants"}, now=now - 30)
        store.ingest("webhook", "stripe-evt-1", {"type": "charge.succeeded", "amount": 4200}, now=now - 10)
        if other_holds_lease:
            # worker-a lapses; worker-b takes over; a late finish by worker-a is refused (fencing).
            gen_b = store.acquire(OTHER, now=now - 20 + store.options.lease_ttl + 200)
            store.connection.execute("UPDATE lease SET until = ?, renewed_at = ?, acquired_at = ? WHERE one = 1",
                                     (now + 90, now - 30, now - 30))
            assert gen_b == 2
            store.finish("worker-a:1", gen, [1], now=now - 5)  # refused: a late finish by the old generation
            claimed_b = store.claim_batch(OTHER, 2, now=now - 5)
            assert [e.source_id for e in claimed_b] == ["poison-1"]  # a retry is claimed alone
            with Store.open(db, max_attempts=2) as strict:
                strict.finish(OTHER, 2, [claimed_b[0].id], now=now - 4, error="PoisonEventError: marked as poison")
            store.claim_batch(OTHER, 2, now=now - 3)
        store.ingest("chat", "c-3", {"text": "what's on today?"}, now=now - 2)


def make_app(db: Path, clock: ManualClock, *, settings: dict[str, object] | None = None,
             **options: object) -> ConsoleApp:
    return ConsoleApp(settings_for(db, **(settings or {})), clock=clock, holder=HOLDER, deterministic=True,
                      install_defaults=False, inbox_label="inbox.db", **options)  # type: ignore[arg-type]


def shown_ids(app: ConsoleApp) -> list[int]:
    """The ids the events pane shows, top to bottom."""
    page = app.query_one(EventsPane).page
    return [] if page is None else [e.id for e in page.events]


def text_of(app: ConsoleApp, selector: str) -> str:
    return str(app.screen.query_one(selector).render()).replace("\u00a0", " ")  # panes keep "label n" together


async def open_search(app: ConsoleApp, pilot: object) -> SearchScreen:
    """Press / and wait for the search screen."""
    await pilot.press("slash")  # type: ignore[attr-defined]
    await pilot_until(pilot, lambda: isinstance(app.screen, SearchScreen), what="the search screen")  # type: ignore[arg-type]
    screen = app.screen
    assert isinstance(screen, SearchScreen)
    return screen


async def started(app: ConsoleApp, pilot: object) -> None:
    """The engine started, the first page shown, every pane read."""
    await pilot_until(pilot, lambda: app.started and bool(shown_ids(app)), what="first page")  # type: ignore[arg-type]
    await app.settle()
