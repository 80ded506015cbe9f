"""The PostgreSQL benchmark still runs end to end (tiny sizes, its own throwaway server), so it cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg_server import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "postgres_bench.py"
LINES = ("ingest", "duplicates", "drain", "cycle_empty", "cycle_full", "cycle_flat", "producers", "group", "pair")
PG, SQLITE, PGQ = "ours on PostgreSQL", "ours on SQLite", "pgqueuer"


def run_bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(tmp_path), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )


def test_quick_run_measures_every_line_on_both_backends_and_the_peer(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    done = run_bench(tmp_path, "--quick", "--json", str(result_file), "--markdown")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(result_file.read_text(encoding="utf-8"))
    lines = {line["key"]: line for line in result["lines"]}
    assert tuple(lines) == LINES
    for key, line in lines.items():
        for system in (PG, SQLITE):
            assert line["figures"][system] > 0, (key, system)
        if key == "pair":
            assert line["figures"][PGQ] is None  # the peer has no lease: reported as unable, not as zero
        else:
            assert line["figures"][PGQ] > 0, key
    # The two engines shared each inbox without a takeover: the first engine kept generation 1 throughout,
    # and the one standing by read status while it waited.
    assert {pair["system"] for pair in result["pair"]} == {PG, SQLITE}
    for pair in result["pair"]:
        assert pair["lease_gen"] == 1
        assert pair["status_reads"] >= 1
    # Durability is what an acknowledged commit needs, read back from the server, for ours and the peer.
    pg, peer = result["durability"][PG], result["durability"][PGQ]
    assert (pg["fsync"], pg["synchronous_commit"], pg["full_page_writes"]) == ("on", "on", "on")
    assert (peer["synchronous_commit"], peer["tables"]) == ("on", "logged")
    sqlite = result["durability"][SQLITE]
    assert (sqlite["journal_mode"], sqlite["synchronous"]) == ("wal", "FULL")
    # Claiming on PostgreSQL reads indexes only.
    assert all("Seq Scan" not in " ".join(plan) for plan in result["claim_plans"].values())
    assert "| durable ingest" in done.stdout  # the Markdown table docs/performance.md records
    assert list(tmp_path.iterdir()) == [result_file]  # the SQLite files were cleaned up


def test_an_existing_server_is_used_through_url(tmp_path: Path, postgres_server: PostgresServer) -> None:
    done = run_bench(tmp_path, "--quick", "--only", "ingest", "--url", postgres_server.url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the server at --url" in done.stdout
    assert "durable ingest" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--url", "postgresql://nobody@127.0.0.1:1/none"), "cannot reach --url"),
    (("--dir", "/nonexistent/folder"), "is not a folder"),
])
def test_bad_arguments_are_one_clear_error(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = run_bench(tmp_path, "--quick", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
