"""Benchmark what a CLI command costs against the inbox's size, and the WAL's size after a long reader.

1. `agent-console ingest` and `agent-console status`, each a real process, on a large inbox (100 MB by
   default) and on a fresh one, with a cold and with a warm cache. The goal is flat: a command must not
   cost more because the inbox is large. For context it also times what every command used to pay at
   open, `PRAGMA quick_check` (now only the engine runs it at start, and `agent-console check`).
2. The WAL after a long reader: a reader process holds one snapshot while a writer commits, then lets
   go. Printed: the WAL's size at its peak, after the first commit once the reader let go (its
   autocheckpoint), after the second, and after the engine maintenance's truncating checkpoint; with
   this project's journal_size_limit and, for comparison, with none (what versions before it did).

Cold cache: `echo 1 > /proc/sys/vm/drop_caches` when the process may write it (it drops every cached
file on the machine), else posix_fadvise(DONTNEED) on the inbox and its WAL; the report says which.
After a drop the program itself is warmed again (`agent-console --version`), so the cold figure is the
inbox's, not Python's imports. --quick never drops the machine's caches.

    python bench/cli_bench.py            # about 1-2 minutes
    python bench/cli_bench.py --quick    # a few seconds: the smoke test's size
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the script runs as `python bench/cli_bench.py`

from console.core import Store  # noqa: E402
from console.core.backend import WAL_SIZE_LIMIT  # noqa: E402
from console.core.gate import CHECKED_SUFFIX, check_before_ingest, remember_checked  # noqa: E402

MB = 1024 * 1024
NOW = 1_700_000_000
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
READER = """
import sys, apsw
conn = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
conn.execute("BEGIN")
conn.execute("SELECT COUNT(*) FROM inbox").fetchall()
print("reading", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
conn.close()
"""


def build_inbox(path: Path, target_bytes: int) -> int:
    """An inbox of about target_bytes: events with a payload of a webhook's ordinary size."""
    body = {"action": "opened", "text": "x" * 900}
    count = 0
    with Store.open(path) as store:
        while path.stat().st_size < target_bytes:
            store.ingest_many([("github", f"d-{count + n}", body) for n in range(2_000)], now=NOW)
            count += 2_000
            store.shrink_wal()  # the events into the file itself, so its size says how far it is
    return count


def wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def agent_console(db: Path, *args: str) -> float:
    """Seconds one `agent-console` process takes, start to exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env["PYTHONPATH"] = str(ROOT)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "console", "--db", str(db), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"agent-console {' '.join(args)} failed: {done.stderr.strip()}")
    return elapsed


def python_seconds(code: str, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   check=True, timeout=300)
    return time.perf_counter() - started


class Cache:
    """Makes the inbox's pages cold before a timed command."""

    def __init__(self, allow_drop: bool) -> None:
        self.method = "drop_caches" if allow_drop and self._may_drop() else "fadvise"

    @staticmethod
    def _may_drop() -> bool:
        try:
            with DROP_CACHES.open("w") as control:
                os.sync()
                control.write("1\n")
            return True
        except OSError:
            return False

    def make_cold(self, db: Path) -> None:
        if self.method == "drop_caches":
            os.sync()
            DROP_CACHES.write_text("1\n")
            agent_console(db, "--version")  # the program warm again: what is cold is the inbox
            return
        for part in (db, Path(f"{db}-wal")):
            if part.exists():
                descriptor = os.open(part, os.O_RDONLY)
                try:
                    os.fsync(descriptor)  # dirty pages cannot be dropped
                    os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(descriptor)


def cli_cost(folder: Path, size_mb: int, runs: int, cache: Cache) -> dict[str, Any]:
    large, fresh = folder / "large.db", folder / "fresh.db"
    events = build_inbox(large, size_mb * MB)
    Store.open(fresh).close()
    sizes = {"large": large.stat().st_size, "fresh": fresh.stat().st_size}
    rows: list[dict[str, Any]] = []
    inboxes = (("large", large), ("fresh", fresh))
    # `ingest` as it runs one call after another (its gate remembers the state it verified and left), and `ingest`
    # on a file another writer changed since (the remembered state removed first: the gate's bounded check runs, what
    # every ingest paid before the gate remembered).
    for command in ("ingest", "ingest, changed since", "status"):
        for temperature in ("cold", "warm"):
            times: dict[str, list[float]] = {"large": [], "fresh": []}
            for _name, db in inboxes:
                agent_console(db, "status")  # the program and, for the warm runs, the inbox in the cache
                if command == "ingest":
                    agent_console(db, "ingest", "bench", f"settle-{temperature}", "{}")  # the state remembered
            for run in range(runs):
                # Taken in turns, the large inbox first every other run, so neither gains from going second.
                for name, db in inboxes if run % 2 == 0 else inboxes[::-1]:
                    if command == "ingest, changed since":
                        Path(f"{db}{CHECKED_SUFFIX}").unlink(missing_ok=True)
                    if temperature == "cold":
                        cache.make_cold(db)
                    args = ["ingest", "bench", f"{name}-{command}-{temperature}-{run}", '{"n": 1}'] \
                        if command.startswith("ingest") else ["status"]
                    times[name].append(agent_console(db, *args))
            figures = {name: statistics.median(values) for name, values in times.items()}
            rows.append({"command": command, "cache": temperature, "large_s": figures["large"],
                         "fresh_s": figures["fresh"], "ratio": figures["large"] / figures["fresh"]})
    rows += in_process_ingest(inboxes, runs)
    check_code = "import sys; from console.core import Store; Store.open(sys.argv[1], check=True).close()"
    cache.make_cold(large)
    quick_check_cold = python_seconds(check_code, str(large))
    quick_check_warm = python_seconds(check_code, str(large))
    return {"events": events, "bytes": sizes, "rows": rows,
            "quick_check_open_s": {"cold": quick_check_cold, "warm": quick_check_warm}}


def in_process_ingest(inboxes: tuple[tuple[str, Path], ...], runs: int) -> list[dict[str, Any]]:
    """What `ingest` does after Python has started (open, the gate, the insert and its fsync, close, the state
    remembered), timed in this process: a process's start-up is most of a CLI call and, on a loaded machine, most of
    its noise. Warm cache; the same two states as the process rows."""
    rows = []
    for label, changed in (("ingest, in-process", False), ("ingest, changed since, in-process", True)):
        times: dict[str, list[float]] = {"large": [], "fresh": []}
        for run in range(max(runs, 15)):
            for name, db in inboxes if run % 2 == 0 else inboxes[::-1]:
                if changed:
                    Path(f"{db}{CHECKED_SUFFIX}").unlink(missing_ok=True)
                started = time.perf_counter()
                with Store.open(db) as store:
                    remember = check_before_ingest(store, now=NOW)
                    store.ingest("bench", f"{label}-{run}", {"n": 1}, now=NOW)
                if remember:
                    remember_checked(str(db))
                times[name].append(time.perf_counter() - started)
        figures = {name: statistics.median(values) for name, values in times.items()}
        rows.append({"command": label, "cache": "warm", "large_s": figures["large"], "fresh_s": figures["fresh"],
                     "ratio": figures["large"] / figures["fresh"]})
    return rows


@contextmanager
def long_reader(db: Path) -> Iterator[subprocess.Popen[str]]:
    reader = subprocess.Popen([sys.executable, "-c", READER, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "reading":
            raise RuntimeError("the reader did not start")
        yield reader
    finally:
        if reader.poll() is None:
            reader.kill()
        reader.wait(timeout=30)


def wal_after_long_reader(folder: Path, grow_mb: int, limited: bool) -> dict[str, Any]:
    db = folder / ("wal-limited.db" if limited else "wal-unlimited.db")
    build_inbox(db, 2 * MB)
    sizes: dict[str, int] = {}
    with Store.open(db) as store:
        if not limited:
            store.connection.execute("PRAGMA journal_size_limit=-1")  # SQLite's default, as before
        with long_reader(db) as reader:
            batch = 0
            while wal_bytes(db) < grow_mb * MB:
                store.ingest_many([("bulk", f"{batch}-{n}", {"text": "y" * 900}) for n in range(2_000)], now=NOW)
                batch += 1
            sizes["peak"] = wal_bytes(db)
            assert reader.stdin is not None
            reader.stdin.write("let go\n")
            reader.stdin.flush()
        for label in ("after 1st commit", "after 2nd commit"):
            store.ingest("chat", label, {}, now=NOW)
            sizes[label] = wal_bytes(db)
        truncated = store.shrink_wal()
        sizes["after maintenance checkpoint"] = wal_bytes(db)
    return {"journal_size_limit": WAL_SIZE_LIMIT if limited else -1, "sizes": sizes, "truncated": truncated}


def markdown(result: dict[str, Any]) -> str:
    cli = result["cli"]
    lines = [
        f"CLI cost against the inbox's size: a {cli['bytes']['large'] / MB:.0f} MB inbox ({cli['events']:,} events) "
        f"against a fresh one ({cli['bytes']['fresh'] / 1024:.0f} KB); median of {result['runs']} runs of each "
        f"process; cold cache by {result['cold_method']}.",
        "",
        "| command | cache | large inbox | fresh inbox | large / fresh |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in cli["rows"]:
        lines.append(f"| `{row['command']}` | {row['cache']} | {row['large_s'] * 1000:.0f} ms | "
                     f"{row['fresh_s'] * 1000:.0f} ms | {row['ratio']:.2f} |")
    check = cli["quick_check_open_s"]
    lines += ["", f"What every command paid at open before (`quick_check`, now only at engine start): "
              f"{check['cold']:.2f} s cold, {check['warm']:.2f} s warm on the large inbox.", "",
              "WAL after a long reader (bytes; the limit is "
              f"{WAL_SIZE_LIMIT / MB:.0f} MiB):", "",
              "| journal_size_limit | peak | after 1st commit | after 2nd commit | after maintenance checkpoint |",
              "| --- | --- | --- | --- | --- |"]
    for run in result["wal"]:
        s = run["sizes"]
        limit = "none (before)" if run["journal_size_limit"] < 0 else f"{run['journal_size_limit'] / MB:.0f} MiB"
        lines.append(f"| {limit} | {s['peak'] / MB:.1f} MB | {s['after 1st commit'] / MB:.1f} MB | "
                     f"{s['after 2nd commit'] / MB:.1f} MB | {s['after maintenance checkpoint'] / MB:.1f} MB |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--dir", type=Path, help="where the inbox files go (default: a temp dir under /tmp)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--markdown", action="store_true", help="print the tables for docs/performance.md")
    parser.add_argument("--size-mb", type=int, help="the large inbox's size (default 100; the review's was 85)")
    parser.add_argument("--runs", type=int, help="runs of each process (default 9)")
    parser.add_argument("--fadvise", action="store_true",
                        help="make the inbox cold with posix_fadvise only, never dropping the machine's whole cache")
    options = parser.parse_args()
    size_mb, grow_mb, runs = (2, 6, 1) if options.quick else (100, 130, 9)
    size_mb, runs = options.size_mb or size_mb, options.runs or runs
    cache = Cache(allow_drop=not options.quick and not options.fadvise)
    with tempfile.TemporaryDirectory(dir=options.dir, prefix="cli-bench-") as scratch:
        folder = Path(scratch)
        result: dict[str, Any] = {
            "machine": f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "runs": runs, "cold_method": cache.method,
            "cli": cli_cost(folder, size_mb, runs, cache),
            "wal": [wal_after_long_reader(folder, grow_mb, limited) for limited in (True, False)],
        }
    for row in result["cli"]["rows"]:
        print(f"{row['command']:<22} {row['cache']:<5} large {row['large_s'] * 1000:7.0f} ms   "
              f"fresh {row['fresh_s'] * 1000:7.0f} ms   large/fresh {row['ratio']:.2f}")
    for run in result["wal"]:
        print(f"journal_size_limit {run['journal_size_limit']}: " +
              ", ".join(f"{label} {size / MB:.1f} MB" for label, size in run["sizes"].items()))
    if options.json:
        options.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if options.markdown:
        print(markdown(result))


if __name__ == "__main__":
    main()
