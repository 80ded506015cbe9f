"""Benchmark the console's search (console/core/search.py) and the discarded-state migration on a large inbox.

There is no full-text index: a search reads rows, one bounded window of ids per query. This measures, in one
run and on one file, what that costs against its peers:

- a page read (`Store.events(limit=50)`, what the events pane reads each refresh): the floor;
- one unbounded query with the same predicate over the whole inbox (`search_events` with one window as large
  as the inbox): what the windows are split from.

It also times migration 0014 (the inbox rebuilt for the `discarded` state) on the same number of events.

    python bench/search_bench.py                 # 100,000 events: about half a minute
    python bench/search_bench.py --quick         # 2,000 events: the smoke test's size
    python bench/search_bench.py --json out.json --markdown
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The script runs as `python bench/search_bench.py`: make the checkout's console package importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from console.core import Store
from console.core.db import connect, migrations
from console.core.search import SEARCH_WINDOW

NOW = 1_700_000_000
BATCH = 5_000
RARE = "pelican"  # in one event, near the oldest end: a search must read (nearly) everything to find it
COMMON = "push"  # in every other event: the first page is found in the newest rows


def payload(n: int) -> dict[str, Any]:
    """A webhook-sized payload, about 300 bytes, like the ones the inbox holds."""
    return {"action": "push" if n % 2 else "opened", "repository": {"full_name": f"me/app-{n % 97}"},
            "sender": {"login": f"user{n % 1013}"}, "head_commit": {"message": f"change number {n} to the build",
                                                                    "id": f"{n:040x}"},
            "note": RARE if n == 7 else "routine"}


def fill(store: Store, events: int) -> None:
    for start in range(0, events, BATCH):
        store.ingest_many([("github", f"d-{n}", payload(n)) for n in range(start, min(events, start + BATCH))],
                          now=NOW)


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of `repeats` calls, and the last call's result."""
    times = []
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def search_all(store: Store, text: str, window: int) -> tuple[int, int]:
    """Every window until the oldest event: (matches, queries)."""
    before: int | None = None
    found = queries = 0
    while True:
        page = store.search_events(text, before_id=before, limit=50, window=window)
        found += len(page.events)
        queries += 1
        if page.next_before is None:
            return found, queries
        before = page.next_before


def migration_seconds(folder: Path, events: int) -> float:
    """Time migration 0014 on an inbox of `events` events built at the schema before it."""
    path = folder / "migrate.db"
    before = next(number for number, name, _ in migrations() if name.endswith("_discarded.sql")) - 1
    old = connect(path, schema_version=before)
    # Rows written as that schema's inbox took them: today's Store writes columns later migrations added (trace).
    with old:
        old.executemany("INSERT INTO inbox (source, source_id, payload, status, created_at, updated_at) "
                        "VALUES ('github', ?, ?, 'pending', ?, ?)",
                        ((f"d-{n}", json.dumps(payload(n)), NOW, NOW) for n in range(events)))
    old.close()
    start = time.perf_counter()
    Store.open(path).close()
    return time.perf_counter() - start


def run(events: int, repeats: int, folder: Path) -> dict[str, Any]:
    path = folder / "inbox.db"
    with Store.open(path) as store:
        built = time.perf_counter()
        fill(store, events)
        build_s = time.perf_counter() - built
        page_s, _ = timed(lambda: store.events(limit=50), repeats)
        window_s, window_page = timed(lambda: store.search_events(RARE, limit=50), repeats)
        rare_s, (rare_found, rare_queries) = timed(lambda: search_all(store, RARE, SEARCH_WINDOW), repeats)
        single_s, single = timed(lambda: store.search_events(RARE, limit=50, window=events + 1), repeats)
        common_s, common = timed(lambda: store.search_events(COMMON, limit=50), repeats)
    assert rare_found == 1 and len(single.events) == 1, "the rare word is in exactly one event"
    assert len(common.events) == 50
    rows = [
        {"measure": "page read (events pane, 50 rows)", "seconds": page_s, "queries": 1},
        {"measure": f"one search window ({min(events, SEARCH_WINDOW):,} ids, no match)", "seconds": window_s,
         "queries": 1},
        {"measure": "first page of a common word (50 matches)", "seconds": common_s, "queries": 1},
        {"measure": f"rare word, whole inbox in windows of {SEARCH_WINDOW:,}", "seconds": rare_s,
         "queries": rare_queries},
        {"measure": "rare word, whole inbox in one unbounded query (peer)", "seconds": single_s, "queries": 1},
    ]
    for row in rows:
        row["x_page_read"] = row["seconds"] / page_s
        row["x_unbounded"] = row["seconds"] / single_s
    return {"events": events, "repeats": repeats, "build_s": build_s, "window": SEARCH_WINDOW, "rows": rows,
            "window_found": len(window_page.events), "migration_0014_s": migration_seconds(folder, events)}


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Inbox of {result['events']:,} events; median of {result['repeats']} runs each.", "",
             "| measure | queries | time | × page read | × one unbounded query |", "|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['measure']} | {row['queries']} | {row['seconds'] * 1000:.1f} ms | "
                     f"{row['x_page_read']:.0f}× | {row['x_unbounded']:.2g}× |")
    lines += ["", f"Migration 0014 (inbox rebuilt for `discarded`) on {result['events']:,} events: "
              f"{result['migration_0014_s']:.2f} s."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2,000 events, 2 repeats")
    parser.add_argument("--dir", type=Path, help="where the inbox files go (a temporary folder by default)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--markdown", action="store_true", help="print the table recorded in docs/performance.md")
    args = parser.parse_args()
    events, repeats = (2_000, 2) if args.quick else (args.events, args.repeats)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="search-bench-") as folder:
        result = run(events, repeats, Path(folder))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(markdown(result) if args.markdown else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
