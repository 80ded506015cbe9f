"""Two consoles on one inbox file: the first stalls, the second takes over, the first's late finish is refused."""

from __future__ import annotations

import threading
from pathlib import Path

from console.agents.base import RunContext
from console.assembly import assemble, build_engine
from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import settings_for

SIZE = (80, 24)
TTL = 30


class GatedAgent:
    """Holds its run open until the test lets go, so the worker can be stalled mid-run."""

    name = "gated"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def run(self, ctx: RunContext) -> None:
        self.entered.set()
        if not self.release.wait(30):
            raise TimeoutError("the test never released the run")


def console(db: Path, clock: ManualClock, holder: str, agent: GatedAgent | None = None) -> ConsoleApp:
    settings = settings_for(db, lease_ttl=TTL)
    # idle_cap: the engines re-check within 50 ms of real time, so advancing the shared clock is noticed
    engine = build_engine(settings, clock=clock, holder=holder, agent=agent, install_defaults=False, idle_cap=0.05)
    return ConsoleApp(settings, system=assemble(settings, engine=engine), deterministic=True, inbox_label="inbox.db")


def lease_text(app: ConsoleApp) -> str:
    return f"{app.query_one('#lease-who').render()}\n{app.query_one('#lease-fencing').render()}"


def first_status(app: ConsoleApp) -> str | None:
    page = app.query_one(EventsPane).page
    return page.events[0].status if page is not None and page.events else None


async def test_second_console_takes_over_a_stalled_one_and_its_late_finish_is_refused(
    db_path: Path, clock: ManualClock
) -> None:
    with Store.open(db_path) as store:
        store.ingest("chat", "c-1", {"text": "hello"}, now=clock.now())
    gate = GatedAgent()
    first = console(db_path, clock, "console-a", gate)
    second = console(db_path, clock, "console-b")
    async with first.run_test(size=SIZE) as pilot_a:
        await pilot_until(pilot_a, gate.entered.is_set, what="the first console's run to start")
        await pilot_until(pilot_a, lambda: first_status(first) == "running", what="the event shown running")
        await pilot_a.press("x")
        await pilot_until(pilot_a, lambda: "stalled" in lease_text(first), what="the first console stalled")
        stalled = next(n for n in first._notifications if n.title == "Worker stalled")
        assert stalled.message.startswith("This console stops renewing its lease; another console or")
        assert stalled.message.endswith("(x resumes it)")

        async with second.run_test(size=SIZE) as pilot_b:
            await pilot_until(pilot_b, lambda: second.engine.mode == "standby", what="the second console on standby")
            await pilot_until(pilot_b, lambda: "console-a" in lease_text(second) and "(other)" in lease_text(second),
                             what="the second console's lease pane naming the first as holder")
            await pilot_until(pilot_b, lambda: first_status(second) == "running", what="the event shown running")

            clock.advance(TTL + 1)  # the stalled console renewed nothing: its lease lapses
            await pilot_until(pilot_b, lambda: second.engine.mode == "active", what="the takeover")
            await pilot_until(pilot_b, lambda: any(n.title == "Now active" for n in second._notifications),
                              what="the second console told it is active")
            active = next(n for n in second._notifications if n.title == "Now active")
            assert active.message == "This console holds the lease (generation 2): it runs the inbox's events now"
            # the stranded row's backoff counted from its lost claim, so the new holder runs it at once
            await pilot_until(pilot_b, lambda: first_status(second) == "done", what="the second console's run")
            with reopen(db_path) as store:
                stranded = store.find_event("chat", "c-1")
                assert stranded is not None and stranded.attempts == 2
                assert [a.kind for a in store.history(stranded.id)] == ["claim", "lost", "claim", "finish"]
            await pilot_until(pilot_b,
                              lambda: "console-b" in lease_text(second) and "takeovers 1" in lease_text(second),
                              what="the lease pane showing the takeover")
            assert "refused finishes 0" in lease_text(second)
            # the stalled console stays stalled (no change of role), and still says who took its lease (issue 36)
            await pilot_until(pilot_a, lambda: any(
                n.title == "Taken over" and n.message == "console-b holds the lease now (generation 2); this console "
                "is stalled" for n in first._notifications), what="the stalled console told it was taken over")

            gate.release.set()  # the first run ends, but a stalled worker holds its finish...
            await pilot_a.press("x")  # ...until it resumes, and then the finish is fenced off
            await pilot_until(pilot_a, lambda: "refused finishes 1" in lease_text(first),
                             what="the refused finish in the first console's lease pane")
            assert "console-a gen 1" in lease_text(first)
            await pilot_until(pilot_a, lambda: first.engine.mode == "standby", what="the first console on standby")
            await pilot_until(pilot_a, lambda: any("Another worker holds the lease (generation 2)" in n.message
                                                   for n in first._notifications), what="the first told so")
            await pilot_until(pilot_a, lambda: any("finish refused" in n.message for n in first._notifications),
                             what="the refusal notified")
            await pilot_until(pilot_b, lambda: "refused finishes 1" in lease_text(second),
                             what="the refusal seen by the second console too")
            with reopen(db_path) as store:  # checked while both run: on exit the standby one may take over again
                event = store.find_event("chat", "c-1")
                assert event is not None and event.status == "done" and event.claim_gen == 2
                assert store.refused_finish_count() == 1 and store.takeover_count() == 1
                assert store.refused_finishes(1)[0].holder == "console-a"
