"""Telemetry per inbox (issue 30): three inboxes in one folder each write a telemetry file of their own, every span
names its inbox, and `agent-console --db ch.db trace 1` prints ch.db's run alone, from its own file and from a file
the three shared before (as versions before this one wrote it)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from console import telemetry
from console.assembly import build_engine
from console.cli import main
from console.config import Settings
from tests.runtime.test_engine import make_settings
from tests.support import read_until

INBOXES = ("a.db", "b.db", "ch.db")


async def run_event_one(settings: Settings) -> None:
    """The inbox's event 1 (a chat), run once by the offline agent under an engine of its own."""
    engine = build_engine(settings, install_defaults=False, idle_cap=0.1)
    await engine.start()
    try:
        await engine.ingest("chat", "c-1", {"text": f"hello from {settings.db}"})
        await read_until(engine, lambda store: store.counts().get("done", 0) == 1, "event 1 done")
    finally:
        await engine.stop()  # flushes the spans to the file


def trace(db: Path, event_id: int = 1) -> list[str]:
    result = CliRunner().invoke(main, ["--db", str(db), "trace", str(event_id)])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def runs_shown(lines: list[str]) -> list[str]:
    """The holder of each run `trace` printed (its invoke_agent line names it)."""
    return [line.split("(")[-1].rstrip(")") for line in lines if line.lstrip().startswith("invoke_agent")]


async def test_each_inbox_traces_only_its_own_runs_from_its_own_file_and_from_the_shared_one(tmp_path: Path) -> None:
    holders = {}
    for name in INBOXES:
        settings = make_settings(tmp_path, db=tmp_path / name)
        await run_event_one(settings)
        holders[name] = runs_shown(trace(settings.db))
    try:
        # One file each, named by its inbox; every span in it names that inbox (its resource's agent_console.inbox).
        assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == [f"{name}.telemetry.jsonl" for name in INBOXES]
        for name in INBOXES:
            lines = (tmp_path / f"{name}.telemetry.jsonl").read_text().splitlines()
            named = {attribute["value"]["stringValue"] for line in lines
                     for resource in json.loads(line).get("resourceSpans", [])
                     for attribute in resource["resource"]["attributes"]
                     if attribute["key"] == telemetry.INBOX_ATTRIBUTE}
            assert named == {str(tmp_path / name)}
        assert all(len(shown) == 1 for shown in holders.values()), holders  # each its own run alone
        assert len({shown[0] for shown in holders.values()}) == 3  # three engines, three holders

        # The file all three shared before (event 1 of each, interleaved, no inbox named): each inbox still finds
        # its own run there, and only its own.
        shared = []
        for name in INBOXES:
            own = tmp_path / f"{name}.telemetry.jsonl"
            for line in own.read_text().splitlines():
                request = json.loads(line)
                for resource in request.get("resourceSpans", []):
                    resource["resource"]["attributes"] = [
                        a for a in resource["resource"]["attributes"] if a["key"] != telemetry.INBOX_ATTRIBUTE]
                shared.append(json.dumps(request))
            own.unlink()
        telemetry.file_path(tmp_path).write_text("\n".join(shared) + "\n")
        assert len(telemetry.runs_of_event(telemetry.read_spans(tmp_path), 1)) == 3  # what `trace` printed before
        for name in INBOXES:
            assert runs_shown(trace(tmp_path / name)) == holders[name]
    finally:
        telemetry.configure(None, enabled=False)


def test_a_postgresql_inbox_has_a_file_of_its_own_not_the_default_inboxs() -> None:
    default = Settings()
    first = Settings(db="postgresql://me@db.example:5433/agent?schema=home")
    second = Settings(db="postgresql://me@db.example:5433/agent?schema=work")
    files = {default.telemetry_file, first.telemetry_file, second.telemetry_file,
             default.inbox_folder / telemetry.FILE_NAME}
    assert len(files) == 4
    assert first.telemetry_file.parent == default.inbox_folder
    assert first.telemetry_file.name == "postgresql-me_db.example_5433_agent_schema_home.telemetry.jsonl"
    assert first.inbox_name == "postgresql://me@db.example:5433/agent?schema=home"
