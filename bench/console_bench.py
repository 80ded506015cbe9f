"""The console on a 1,000,000-event inbox: first frame, memory, page-down and keystroke latency; and the
CPU an idle console uses on a small inbox.

    python bench/console_bench.py [--events 1000000] [--drain-rate 1000] [--peer-rows 100000]
    python bench/console_bench.py --idle-only [--idle-seconds 30] [--before FOLDER]
    python bench/console_bench.py --start-only [--rounds 7] [--before FOLDER]

The inbox is built once with Store.ingest_many in large batches and cached in /tmp; each run works
on a copy. Every measurement runs in a fresh child process, so its peak RSS is the console's own.
- first frame: from creating the app to the events pane showing its first page (headless, 120x40);
- page-down: from the key press to the pane showing the next window of rows (30 presses);
- keystroke-to-frame while draining: another thread ingests `--drain-rate` events/s and the console's
  own engine drains them with the offline agent; a filter key press is timed until the pane redraws.
The peer is a plain Textual DataTable given `--peer-rows` rows up front (time to its first frame).

Start: from the moment a fresh interpreter is launched to the first frame with all four panes drawn (header,
events, lease, approvals, outbox; headless, 120x40) on an empty inbox, against a plain Textual app with four
panes (a header, a 40-row DataTable, three Statics side by side and a Footer), each a fresh process, taking turns
for `--rounds` rounds (medians). The launch is stamped by the parent just before it starts the child; the child
stamps the frame with the same wall clock, and the CPU time its threads have used since the process started (on a
loaded machine the wall time waits for a core; the CPU time is the work itself).

Idle cost: the real `agent-console` in a pseudo-terminal (120x40) on an inbox of `--idle-events` done events, a
pending approval counting down an hour, a message sent an hour ago (`--idle-scenario fresh-send`: one sent as it
starts; `mixed-ages`: the newest 60 events came one a minute over the last hour; `fresh-event`: those, and the
newest stored as the console starts, so its age counts seconds through the window) and its own engine holding the
lease, left alone: the time on a CPU of every thread of its process tree
(schedstat, in nanoseconds) over `--idle-seconds` of wall time, as a share of one core, from the moment it has
settled after `--idle-warmup` seconds (under 2% of a core for two seconds: its start is over; at most
`--idle-settle-limit` seconds more, 0 for none). The peers, in the same
terminal for the same time: a plain Textual app (a DataTable of 40 rows and a Footer) that draws nothing, and the
same app with one line counting seconds down (what drawing a countdown each second costs Textual). Systems take
turns for `--idle-rounds` rounds. `--before FOLDER` measures another checkout's console (e.g. `git archive main |
tar -x -C /tmp/before`) in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# A child measuring another checkout (--before) imports that checkout's console, not this one's.
sys.path.insert(0, os.environ.get("CONSOLE_BENCH_ROOT", str(ROOT)))

from console.clock import WallClock  # noqa: E402
from console.config import Settings  # noqa: E402
from console.core import Store  # noqa: E402

CACHE = Path("/tmp/agent-console-bench")
SIZE = (120, 40)
BATCH = 50_000


def build_inbox(events: int) -> Path:
    """The cached inbox: `events` done events (a drained history) plus nothing pending."""
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"inbox-{events}.db"
    if path.exists():
        return path
    partial = path.with_suffix(".building")
    for leftover in CACHE.glob(partial.name + "*"):
        leftover.unlink()
    started = time.perf_counter()
    now = WallClock().now() - 3600
    with Store.open(partial, check=False) as store:
        for first in range(0, events, BATCH):
            count = min(BATCH, events - first)
            store.ingest_many(
                [("webhook" if i % 3 else "chat", f"bench-{i}", {"n": i, "text": "history"})
                 for i in range(first, first + count)], now=now + first // 1000)
        # A drained history: everything done, as after a long uptime.
        store.connection.execute("UPDATE inbox SET status = 'done', attempts = 1, claim_gen = 1")
    partial.rename(path)
    print(f"built {events:,} events in {time.perf_counter() - started:.1f} s -> {path}", file=sys.stderr)
    return path


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def wait_for(pilot: Any, condition: Any, timeout: float = 30.0) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("condition not met")
        await pilot.pause(0)


def settings_for(db: Path, telemetry: bool = True) -> Settings:
    return Settings(db=db, theme="agent-dark", lease_ttl=30, batch_cap=100, telemetry=telemetry)


def feed_events(db: Path, drain_rate: int, stop: threading.Event, first: Any = None) -> int:
    """Ingest drain_rate events a second (20 commits a second) until stop is set; how many were committed."""
    serial = 0
    with Store.open(db, check=False) as store:
        step = max(1, drain_rate // 20)
        next_at = time.perf_counter()
        while not stop.is_set():
            store.ingest_many([("chat", f"live-{serial + i}", {"text": "hi"}) for i in range(step)],
                              now=WallClock().now())
            serial += step
            if first is not None and serial == step:
                first()
            next_at += 0.05
            time.sleep(max(0.0, next_at - time.perf_counter()))  # pacing the feeder, not waiting on a result
    return serial


def child_feed(db: Path, drain_rate: int) -> int:
    """The feeder process: feeds until a line (or the end) arrives on stdin."""
    stop = threading.Event()
    waiter = threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True)
    waiter.start()
    return feed_events(db, drain_rate, stop, first=lambda: print("fed", flush=True))


async def child_console(db: Path, drain_rate: int, feeder: str = "process", telemetry: str = "on") -> dict[str, Any]:
    from console.tui.app import ConsoleApp
    from console.tui.widgets.approvals_pane import ApprovalsPane
    from console.tui.widgets.console_header import ConsoleHeader
    from console.tui.widgets.events_pane import EventsPane
    from console.tui.widgets.lease_pane import LeasePane
    from console.tui.widgets.outbox_pane import OutboxPane

    started = time.perf_counter()
    # telemetry "off": the same console with `telemetry = false`, to read what telemetry costs its peak RSS.
    app = ConsoleApp(settings_for(db, telemetry=telemetry != "off"), install_defaults=False)
    result: dict[str, Any] = {"telemetry": telemetry}
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(EventsPane)
        # Stamps inside the app: when the key's action starts, and when the pane has drawn the rows
        # it read for it (the pilot's own settling time is not the console's latency).
        key_at: list[float] = []
        shown_at: list[tuple[float, int]] = []
        show = pane.show

        def stamped_show(page: Any) -> None:
            show(page)
            shown_at.append((time.perf_counter(), page.events[0].id if page.events else 0))

        pane.show = stamped_show  # type: ignore[method-assign]
        table = pane.table
        page_down, cycle = table.action_page_down, app.main.action_cycle_status

        def stamped_page_down() -> None:
            key_at.append(time.perf_counter())
            page_down()

        async def stamped_cycle() -> None:
            started = time.perf_counter()
            await cycle()  # sets the filter, reads the page and draws it
            filter_latency.append((time.perf_counter() - started) * 1000)

        table.action_page_down = stamped_page_down  # type: ignore[method-assign]
        app.main.action_cycle_status = stamped_cycle  # type: ignore[method-assign]

        filter_latency: list[float] = []

        def page_latency(before: int) -> float:
            after = [t for t, first in shown_at if t >= key_at[-1] and first != before]
            return (after[0] - key_at[-1]) * 1000
        await wait_for(pilot, lambda: pane.page is not None and len(pane.page.events) > 0)
        result["first_frame_ms"] = (time.perf_counter() - started) * 1000
        others = [app.query_one(kind) for kind in (LeasePane, ApprovalsPane, OutboxPane, ConsoleHeader)]
        await wait_for(pilot, lambda: all(other.view is not None for other in others))
        result["all_panes_ms"] = (time.perf_counter() - started) * 1000
        result["peak_rss_at_first_frame_mb"] = peak_rss_mb()
        pages = []
        for _ in range(30):
            before = pane.page.events[0].id  # type: ignore[union-attr]
            await pilot.press("pagedown")
            await wait_for(pilot, lambda before=before: pane.page.events[0].id != before)  # type: ignore[union-attr]
            pages.append(page_latency(before))
        result["page_down_ms"] = summary(pages)
        await pilot.press("home")
        await wait_for(pilot, lambda: pane.top is None)
        result["peak_rss_before_drain_mb"] = peak_rss_mb()

        # The events come from another process, as a real console's do (the webhook receiver, `ingest`), so the
        # peak RSS is the console's own; feeder="thread" feeds from a thread of this process (its connection and
        # its batches counted in the console's peak), as this bench did before 2026-12-01.
        stop = threading.Event()
        fed = [0]
        feeder_process: subprocess.Popen[str] | None = None

        def feed() -> None:
            fed[0] = feed_events(db, drain_rate, stop)

        if feeder == "thread":
            feeder_thread = threading.Thread(target=feed, daemon=True)
            feeder_thread.start()
        else:
            feeder_process = subprocess.Popen([sys.executable, __file__, "--child", "feed", str(db), str(drain_rate)],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
            assert feeder_process.stdout is not None
            await asyncio.to_thread(feeder_process.stdout.readline)  # its first batch is in: it is feeding
        await wait_for(pilot, lambda: app.engine.mode == "active")
        keystrokes = []
        for _ in range(20):
            title = pane.border_title
            await pilot.press("f")
            await wait_for(pilot, lambda title=title: pane.border_title != title)
            keystrokes.append(filter_latency[-1])
            await pilot.pause(0.1)
        if feeder_process is not None:
            fed[0] = int(feeder_process.communicate("stop\n", timeout=60)[0].strip())
        else:
            stop.set()
            feeder_thread.join()
        done = await app.read(lambda store: store.counts())
        result["keystroke_while_draining_ms"] = summary(keystrokes)
        result["fed_events"] = fed[0]
        result["feeder"] = feeder
        result["drained_done_total"] = done["done"]
        await app.shutdown_engine()
    result["peak_rss_mb"] = peak_rss_mb()
    return result


async def child_peer(rows: int) -> dict[str, Any]:
    from textual.app import App, ComposeResult
    from textual.widgets import DataTable

    class PlainTable(App[None]):
        def compose(self) -> ComposeResult:
            table: DataTable[str] = DataTable()
            table.add_columns("id", "source", "source id", "status", "att", "gen", "age", "last error")
            table.add_rows([(str(i), "webhook", f"bench-{i}", "done", "1", "1", "1h", "") for i in range(rows)])
            yield table

    started = time.perf_counter()
    app = PlainTable()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == rows and table.virtual_size.height >= rows, 300)
        await pilot.pause()
        first = (time.perf_counter() - started) * 1000
    return {"first_frame_ms": first, "rows": rows, "peak_rss_mb": peak_rss_mb()}


async def child_start_console(db: Path) -> dict[str, Any]:
    """The console on db until its four panes and header have drawn their first views; the wall-clock time then."""
    from console.tui.app import ConsoleApp
    from console.tui.widgets.approvals_pane import ApprovalsPane
    from console.tui.widgets.console_header import ConsoleHeader
    from console.tui.widgets.events_pane import EventsPane
    from console.tui.widgets.lease_pane import LeasePane
    from console.tui.widgets.outbox_pane import OutboxPane

    app = ConsoleApp(settings_for(db), install_defaults=False, state_path=db.with_suffix(".state.json"))
    async with app.run_test(size=SIZE) as pilot:
        panes = [app.query_one(kind) for kind in (EventsPane, LeasePane, ApprovalsPane, OutboxPane, ConsoleHeader)]
        await wait_for(pilot, lambda: all(pane.view is not None for pane in panes))
        drawn = asyncio.Event()
        app.call_after_refresh(drawn.set)
        await drawn.wait()
        at, cpu = time.time(), time.process_time()
        modules = len(sys.modules)
    return {"first_frame_at": at, "cpu_s": cpu, "modules": modules}


async def child_start_peer() -> dict[str, Any]:
    """A plain Textual app with four panes, until its first frame is drawn."""
    from four_panes import FourPanes  # bench/four_panes.py: this script's folder is first on sys.path
    from textual.widgets import DataTable

    app = FourPanes()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 40)
        drawn = asyncio.Event()
        app.call_after_refresh(drawn.set)
        await drawn.wait()
        at, cpu = time.time(), time.process_time()
        modules = len(sys.modules)
    return {"first_frame_at": at, "cpu_s": cpu, "modules": modules}


def start_seconds(kind: str, root: Path, *args: str) -> tuple[float, float, int]:
    """Launch to first frame of one fresh child process (its interpreter's start and imports included): the wall
    time, and the CPU time its threads used by then (time.process_time: from the process's start, every thread)."""
    env = dict(os.environ, PYTHONPATH=str(root), CONSOLE_BENCH_ROOT=str(root))
    # Bytecode is cached as an installed package's is (pip compiles it); a PYTHONDONTWRITEBYTECODE=1 in the
    # environment would make every start compile the console's sources again (about 0.4 s here).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    launched = time.time()
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", kind, *args], capture_output=True,
                         text=True, check=True, cwd=root, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["first_frame_at"] - launched, float(result["cpu_s"]), int(result["modules"])


def start_report(rounds: int, before: Path | None) -> dict[str, Any]:
    """Console (and another checkout's, with before) against the plain four-pane app, taking turns."""
    subjects: list[tuple[str, Path]] = [("console", ROOT), *((("console_before", before),) if before else ())]
    samples: dict[str, list[float]] = {name: [] for name, _ in subjects}
    samples["peer_four_panes"] = []
    cpu: dict[str, list[float]] = {name: [] for name in samples}
    modules: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="agent-console-start-") as folder:
        for name, root in subjects:  # untimed: writes each checkout's bytecode cache
            start_seconds("start-console", root, str(Path(folder) / f"{name}-warm.db"))
        for round_ in range(rounds):
            order: list[tuple[str, Path | None]] = [*subjects, ("peer_four_panes", None)]
            shift = round_ % len(order)
            for name, root in order[shift:] + order[:shift]:
                if root is None:
                    seconds, cpu_seconds, loaded = start_seconds("start-peer", ROOT)
                else:
                    db = Path(folder) / f"{name}-{round_}.db"  # an empty inbox each time (the console creates it)
                    seconds, cpu_seconds, loaded = start_seconds("start-console", root, str(db))
                samples[name].append(seconds)
                cpu[name].append(cpu_seconds)
                modules[name] = loaded
    report: dict[str, Any] = {"rounds": rounds, "load_average": os.getloadavg()}
    for name, values in samples.items():
        report[name] = {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values),
                        "cpu_median_s": statistics.median(cpu[name]), "cpu_min_s": min(cpu[name]),
                        "cpu_max_s": max(cpu[name]), "modules": modules[name]}
    peer, peer_cpu = report["peer_four_panes"]["median_s"], report["peer_four_panes"]["cpu_median_s"]
    for name, _ in subjects:
        report[f"{name}_over_peer"] = report[name]["median_s"] / peer
        report[f"{name}_cpu_over_peer"] = report[name]["cpu_median_s"] / peer_cpu
    return report


IDLE_SIZE = (40, 120)  # rows, columns
IDLE_PEER = """
from textual.app import App
from textual.widgets import DataTable, Footer

class Plain(App):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self):
        table = DataTable()
        table.add_columns("id", "source", "source id", "status", "age")
        table.add_rows([(str(i), "chat", f"c-{i}", "done", f"{i}s") for i in range(40)])
        yield table
        yield Footer()

Plain().run()
"""
# The same app with one line that counts seconds down, redrawn each second without a layout: what any Textual
# app that shows a countdown in seconds pays, the floor under a console whose lease counts down.
IDLE_PEER_COUNTDOWN = """
import time
from textual.app import App
from textual.widgets import DataTable, Footer, Static

class Countdown(App):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self):
        table = DataTable()
        table.add_columns("id", "source", "source id", "status", "age")
        table.add_rows([(str(i), "chat", f"c-{i}", "done", f"{i}s") for i in range(40)])
        yield table
        yield Static(id="left")
        yield Footer()

    def on_mount(self):
        self.set_interval(1, self.tick)

    def tick(self):
        self.query_one("#left", Static).update(f"left {120 - int(time.time()) % 120}s", layout=False)

Countdown().run()
"""
SCENARIOS = ("quiet", "fresh-send", "mixed-ages", "fresh-event")
SPREAD = 60  # mixed-ages: the newest this many events arrived one a minute over the last hour


def small_inbox(path: Path, events: int = 40, scenario: str = "quiet") -> None:
    """`events` done events a couple of minutes old, one approval counting down an hour, and a message: sent an
    hour ago (quiet: the console after an hour in which nothing happened but its lease counting down), or queued
    now (fresh-send: the console's channel sends it as it starts, and its age counts seconds for ten minutes)."""
    now = WallClock().now()
    with Store.open(path, check=False) as store:
        for first in range(0, events, BATCH):
            store.ingest_many([("chat", f"c-{i}", {"text": f"message {i}"})
                               for i in range(first, min(events, first + BATCH))], now=now - 120)
        store.connection.execute("UPDATE inbox SET status = 'done', attempts = 1, claim_gen = 1")
        store.request_approval("apr-idle", "refund order 881", now=now, expires_in=3600)
        if scenario == "quiet":
            store.queue_message("sent an hour ago", now=now - 3600)
            store.dispatch(lambda batch: None, now=now - 3600, channel="console")
        else:
            store.queue_message("held for the next send", now=now)


def small_inbox_for(root: Path, path: Path, events: int, scenario: str) -> None:
    """small_inbox made by the checkout at root (its own schema: --before's console may refuse a newer one). The
    ages of mixed-ages and fresh-event are set here, on the quiet inbox, with plain SQL on columns every version
    has (an older checkout's bench does not know these scenarios): the newest SPREAD events one a minute over the
    last hour, so that some row's minute turns every minute; fresh-event also makes the newest event a second
    old as the console starts (issue 38: in the minute after an event arrives its age moves every second)."""
    env = dict(os.environ, PYTHONPATH=str(root), CONSOLE_BENCH_ROOT=str(root))
    made = scenario if scenario in ("quiet", "fresh-send") else "quiet"
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "small-inbox", str(path), str(events),
                    made], check=True, cwd=root, env=env)
    if made != scenario:
        import sqlite3

        now = WallClock().now()
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            newest = [row[0] for row in db.execute("SELECT id FROM inbox ORDER BY id DESC LIMIT ?", (SPREAD,))]
            for minutes, event_id in enumerate(newest, start=1):
                db.execute("UPDATE inbox SET created_at = ? WHERE id = ?", (now - 60 * minutes - 7, event_id))
            if scenario == "fresh-event" and newest:
                db.execute("UPDATE inbox SET created_at = ? WHERE id = ?", (now, newest[0]))


def process_tree(pid: int) -> set[int]:
    """pid and every live descendant (the MCP servers the engine starts)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    tree, grew = {pid}, True
    while grew:
        found = {child for child, parent in parents.items() if parent in tree} - tree
        grew = bool(found)
        tree |= found
    return tree


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of pid and every live descendant, in clock ticks (10 ms here): every thread, the ended
    ones too."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def tree_run_nanoseconds(pid: int) -> dict[tuple[int, int], int]:
    """Time on a CPU of every live thread of pid and its descendants, in nanoseconds (schedstat): an idle
    console uses a few clock ticks in 30 s, too few to compare by ticks alone."""
    times: dict[tuple[int, int], int] = {}
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{member}/task").iterdir():
                times[(member, int(task.name))] = int((task / "schedstat").read_text().split()[0])
    return times


SETTLED_SHARE = 0.02  # of a core, over two seconds: the program's start is over
SETTLE_LIMIT = 60.0  # seconds after the warm-up the window opens anyway


def idle_cpu(argv: list[str], cwd: Path, seconds: float, warmup: float = 8.0,
             settle_limit: float = SETTLE_LIMIT) -> dict[str, float]:
    """Share of one core the program uses while nobody touches it, after at least `warmup` seconds of start-up
    and once it has settled (under SETTLED_SHARE of a core for two seconds)."""
    import pexpect

    with tempfile.TemporaryDirectory(prefix="agent-console-idle-") as home:
        env = dict(os.environ, PYTHONPATH=str(cwd), TERM="xterm-256color", XDG_CONFIG_HOME=f"{home}/config",
                   XDG_DATA_HOME=f"{home}/data", XDG_STATE_HOME=f"{home}/state")
        env.pop("TEXTUAL", None)
        child = pexpect.spawn(argv[0], argv[1:], cwd=str(cwd), env=env, dimensions=IDLE_SIZE)
        written = [0]

        def drain(until: float) -> None:
            while time.monotonic() < until:
                try:
                    written[0] += len(child.read_nonblocking(65536, timeout=0.2))
                except pexpect.TIMEOUT:
                    continue
                except pexpect.EOF as exc:
                    raise RuntimeError(f"{argv} ended early") from exc

        try:
            started = time.monotonic()
            drain(started + warmup)  # start-up is not idle: the first frames, the engine's check
            # On a loaded machine the console's start (the engine's check of the inbox, the agent built) outlasts a
            # fixed warm-up: the measured window then held some of it (2% of a core "idle" on 2026-12-01 20:35).
            # The window opens once the program used under SETTLED_SHARE of a core for two seconds running.
            while time.monotonic() - started < warmup + settle_limit:
                ran = sum(tree_run_nanoseconds(child.pid).values())
                drain(time.monotonic() + 2)
                if (sum(tree_run_nanoseconds(child.pid).values()) - ran) / 2e9 < SETTLED_SHARE:
                    break
            settled_after = time.monotonic() - started
            cpu_before, run_before = tree_cpu_seconds(child.pid), tree_run_nanoseconds(child.pid)
            wall_before, written[0] = time.monotonic(), 0
            drain(wall_before + seconds)
            cpu = tree_cpu_seconds(child.pid) - cpu_before
            run_after = tree_run_nanoseconds(child.pid)
            wall = time.monotonic() - wall_before
        finally:
            child.terminate(force=True)
    # Threads that ended within the window are missing from schedstat (the ticks count them): none do here.
    ran = sum(after - run_before.get(task, 0) for task, after in run_after.items()) / 1e9
    return {"core_percent": 100 * ran / wall, "cpu_seconds": ran, "core_percent_by_ticks": 100 * cpu / wall,
            "wall_seconds": wall, "bytes_written_per_s": written[0] / wall, "settled_after_s": settled_after}


def idle_report(seconds: float, before: Path | None, events: int = 40, scenario: str = "quiet",
                rounds: int = 1, warmup: float = 8.0, settle_limit: float = SETTLE_LIMIT) -> dict[str, Any]:
    """The console (and another checkout's), the do-nothing peer and the countdown peer, taking turns for
    `rounds` rounds; each figure is the median of its rounds."""
    report: dict[str, Any] = {"idle_seconds": seconds, "events": events, "scenario": scenario, "rounds": rounds,
                              "load_average": os.getloadavg()}
    samples: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="agent-console-idle-db-") as folder:
        systems: list[tuple[str, list[str], Path]] = []
        for name, root in (("console", ROOT), *((("console_before", before),) if before else ())):
            db = Path(folder) / f"{name}.db"
            small_inbox_for(root, db, events, scenario)
            systems.append((name, [sys.executable, "-m", "console", "--db", str(db)], root))
        for name, source in (("peer_plain_textual", IDLE_PEER), ("peer_textual_countdown", IDLE_PEER_COUNTDOWN)):
            script = Path(folder) / f"{name}.py"
            script.write_text(source)
            systems.append((name, [sys.executable, str(script)], ROOT))
        for round_ in range(rounds):
            shift = round_ % len(systems)
            for name, argv, root in systems[shift:] + systems[:shift]:
                if name.startswith("console") and round_:
                    db = Path(argv[-1])  # a fresh copy of the same inbox each round: the last round's lease is held
                    for leftover in Path(folder).glob(db.name + "*"):
                        leftover.unlink()
                    small_inbox_for(root, db, events, scenario)
                samples.setdefault(name, []).append(idle_cpu(argv, root, seconds, warmup, settle_limit))
    for name, runs in samples.items():
        report[name] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    peer = max(report["peer_plain_textual"]["core_percent"], 0.001)
    for name in ("console", "console_before", "peer_textual_countdown"):
        if name in report:
            report[f"{name}_over_peer"] = report[name]["core_percent"] / peer
    if before:
        report["before_over_after"] = report["console_before"]["core_percent"] / max(
            report["console"]["core_percent"], 0.001)
    return report


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median": statistics.median(ordered), "p95": ordered[int(len(ordered) * 0.95) - 1], "max": ordered[-1]}


def run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--drain-rate", type=int, default=1000)
    parser.add_argument("--peer-rows", type=int, default=100_000)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--idle-only", action="store_true", help="only the idle-cost measurement")
    parser.add_argument("--idle-events", type=int, default=40, help="events in the idle console's inbox")
    parser.add_argument("--idle-scenario", choices=SCENARIOS, default="quiet",
                        help="quiet: the last message went an hour ago; fresh-send: one is sent as the console starts")
    parser.add_argument("--idle-rounds", type=int, default=1, help="rounds of the idle line (each system once a round)")
    parser.add_argument("--idle-warmup", type=float, default=8.0, help="seconds of start-up before each is measured")
    parser.add_argument("--idle-settle-limit", type=float, default=SETTLE_LIMIT,
                        help="seconds after the warm-up to wait for each to settle (0: measure right after it)")
    parser.add_argument("--before", type=Path, help="another checkout whose idle console (or start) is measured too")
    parser.add_argument("--start-only", action="store_true", help="only launch to first frame, against the peer")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of --start-only (each system once a round)")
    parser.add_argument("--child", nargs="+")
    options = parser.parse_args()
    if options.start_only:
        print(json.dumps(start_report(options.rounds, options.before), indent=2))
        return
    if options.idle_only:
        print(json.dumps(idle_report(options.idle_seconds, options.before, options.idle_events, options.idle_scenario,
                                     options.idle_rounds, options.idle_warmup, options.idle_settle_limit), indent=2))
        return
    if options.child:
        kind, *rest = options.child
        if kind == "start-console":
            result = asyncio.run(child_start_console(Path(rest[0])))
        elif kind == "start-peer":
            result = asyncio.run(child_start_peer())
        elif kind == "console":
            result = asyncio.run(child_console(Path(rest[0]), int(rest[1]), *rest[2:4]))
        elif kind == "small-inbox":
            small_inbox(Path(rest[0]), int(rest[1]), rest[2])
            return
        elif kind == "feed":
            print(child_feed(Path(rest[0]), int(rest[1])))
            return
        else:
            result = asyncio.run(child_peer(int(rest[0])))
        print(json.dumps(result))
        return
    cached = build_inbox(options.events)
    work = CACHE / "run.db"
    for leftover in CACHE.glob("run.db*"):
        leftover.unlink()
    shutil.copyfile(cached, work)
    console = run_child("console", str(work), str(options.drain_rate))
    peer = run_child("peer", str(options.peer_rows))
    report = {
        "events": options.events, "console": console, "peer_datatable": peer,
        "first_frame_ratio_peer_over_console": peer["first_frame_ms"] / console["first_frame_ms"],
        "idle": idle_report(options.idle_seconds, options.before),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
