"""Every user mistake is one line on stderr and exit code 2, never a traceback; a bug still shows one."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from console.core import Store
from tests.cli.helpers import assert_user_error, invoke, run_process


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "inbox.db"


def user_error(args: list[str], *fragments: str, input: str | None = None, env: dict[str, str] | None = None) -> str:
    result = invoke(args, input=input, env=env)
    assert isinstance(result.exception, SystemExit) or result.exception is None, result.exception
    return assert_user_error(result.exit_code, result.stdout, result.stderr, *fragments)


# --- bad input ---------------------------------------------------------------------------------

def test_bad_json_payload(db: Path) -> None:
    user_error(["--db", str(db), "ingest", "chat", "m-1", "{oops"], "the payload is not valid JSON")
    user_error(["--db", str(db), "ingest", "chat", "m-1", "-"], "not valid JSON", input="")
    with Store.open(db) as store:
        assert store.events() == []  # nothing half-stored


def test_payload_the_core_refuses(db: Path) -> None:
    user_error(["--db", str(db), "ingest", "chat", "m-1", '{"n": NaN}'], "not JSON-serialisable")
    user_error(["--db", str(db), "ingest", " ", "m-1"], "source must be a non-empty string")
    user_error(["--db", str(db), "--config", str(write_config(db.parent, "max_payload_bytes = 10")),
                "ingest", "chat", "big", json.dumps({"text": "x" * 50})], "over the limit of 10 bytes")


def write_config(folder: Path, text: str) -> Path:
    path = folder / "config.toml"
    path.write_text(text + "\n", encoding="utf-8")
    return path


def test_unknown_event_id(db: Path) -> None:
    Store.open(db).close()
    user_error(["--db", str(db), "show", "42"], "no event with id 42")
    user_error(["--db", str(db), "retry", "42"], "no event with id 42")
    user_error(["--db", str(db), "show", "forty-two"], "bad value for EVENT_ID: expected a whole number from 1 to",
               "got 'forty-two' (see 'agent-console show --help')")


def test_retry_of_an_event_that_is_not_dead(db: Path) -> None:
    invoke(["--db", str(db), "ingest", "chat", "m-1"])
    user_error(["--db", str(db), "retry", "1"], "event 1 is pending, not dead")


def test_retry_needs_exactly_one_target(db: Path) -> None:
    user_error(["--db", str(db), "retry"], "either an EVENT_ID or --all-dead")
    user_error(["--db", str(db), "retry", "3", "--all-dead"], "either an EVENT_ID or --all-dead")
    user_error(["--db", str(db), "retry", "3", "--source", "x"], "--source goes with --all-dead")


def test_bad_answer_word(db: Path) -> None:
    user_error(["--db", str(db), "approve", "refund-1", "maybe"], "'yes' or 'no', not 'maybe'")


def test_unknown_command_and_option_are_one_line_too(db: Path) -> None:
    user_error(["--db", str(db), "frobnicate"], "there is no command 'frobnicate'")
    user_error(["--db", str(db), "stauts"], "there is no command 'stauts' (did you mean status?)")
    user_error(["--db", str(db), "events", "--colour"], "there is no option --colour",
               "(see 'agent-console events --help')")
    user_error(["--db", str(db), "events", "--status", "lost"],
               "bad value for --status: expected one of pending, running, done, dead, discarded, got 'lost'")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["timers", "add"], "TIMER_ID is missing"),
        (["prune"], "--days is missing"),
        (["--db"], "--db needs a value"),
        (["budget", "--daily", "lots"], "bad value for --daily: expected a number of US dollars, got 'lots'"),
        (["events", "surplus"], "unexpected extra argument: surplus"),
        (["status", "--jsn"], "there is no option --jsn (did you mean --json?)"),
        (["serve", "--port", "70000"], "bad value for --port: expected a whole number from 0 to 65,535, got '70000'"),
        (["timers", "--all", "add", "t"], "--all and --json go after `timers list`"),
    ],
)
def test_usage_mistakes_are_said_in_the_products_words_not_clicks(db: Path, args: list[str], said: str) -> None:
    line = user_error(["--db", str(db), *args] if args[0] != "--db" else args, said)
    for clicks_phrase in ("Invalid value", "No such", "Missing argument", "Missing option", "Usage:", "Error:",
                          "is not a valid", "is not in the range", "requires an argument", "Got unexpected"):
        assert clicks_phrase not in line



def test_empty_message(db: Path) -> None:
    user_error(["--db", str(db), "say", "   "], "a message must be non-empty text")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["t", "--every", "60", "--cron", "* * * * *"], "exactly one of --every, --cron or --at"),
        (["t"], "exactly one of --every, --cron or --at"),
        (["t", "--every", "60", "--tz", "UTC"], "--tz goes with --cron"),
        (["t", "--cron", "not a cron"], "invalid cron expression"),
        (["t", "--cron", "0 9 31 2 *"], "--cron: cron expression '0 9 31 2 *' never fires"),
        (["t", "--cron", "0 9 31 4,6,9,11 *", "--tz", "Europe/Berlin"], "--cron: cron expression"),
        (["t", "--cron", "0 9 * * *", "--tz", "Mars/Base"], "unknown time zone"),
        (["t", "--at", "next tuesday"], "--at takes epoch seconds or an ISO 8601 time"),
        (["t", "--every", "0"], "--every"),
        (["t", "--every", "60", "--payload", "[1, 2]"], "the timer payload must be a JSON object"),
        (["t", "--every", "60", "--payload", "{bad"], "the timer payload is not valid JSON"),
    ],
)
def test_bad_timer_definitions(db: Path, args: list[str], problem: str) -> None:
    user_error(["--db", str(db), "timers", "add", *args], problem)
    with Store.open(db) as store:
        assert store.timers() == []


def test_unknown_timer(db: Path) -> None:
    for action in ("remove", "pause", "resume"):
        user_error(["--db", str(db), "timers", action, "nope"], "no timer named 'nope'")


# --- unusable inbox files ----------------------------------------------------------------------

def test_db_that_is_not_a_database(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("these are my notes, not an inbox\n" * 20)
    user_error(["--db", str(text), "status"], "not a SQLite database", str(text))
    assert text.read_text().startswith("these are my notes")  # untouched


def test_db_in_a_missing_folder_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "inbox.db"
    user_error(["--db", str(missing), "ingest", "chat", "m-1"], "does not exist")
    assert not missing.parent.exists()


def test_read_only_db(db: Path) -> None:
    Store.open(db).close()
    db.chmod(0o444)
    try:
        user_error(["--db", str(db), "ingest", "chat", "m-1"], "read-only")
        assert invoke(["--db", str(db), "status"]).exit_code == 0  # reading a read-only file is fine
    finally:
        db.chmod(0o644)


def test_corrupt_db(db: Path) -> None:
    with Store.open(db) as store:
        store.ingest_many([("bulk", str(i), {"text": "x" * 200}) for i in range(300)], now=1)
    size = db.stat().st_size
    with db.open("r+b") as handle:  # keep the header, wreck the pages behind it
        handle.seek(4096)
        handle.write(b"\xde\xad\xbe\xef" * ((size - 4096) // 4))
    user_error(["--db", str(db), "events"], str(db), "corrupt")


def test_db_that_is_a_folder(tmp_path: Path) -> None:
    user_error(["--db", str(tmp_path), "status"], f"bad value for --db: expected a file, got the folder '{tmp_path}'")


# --- bad settings ------------------------------------------------------------------------------

def test_bad_config_value_in_a_file(tmp_path: Path, db: Path) -> None:
    config = write_config(tmp_path, 'lease_ttl = "soon"')
    user_error(["--config", str(config), "--db", str(db), "status"], "lease_ttl", str(config), "whole number")


def test_bad_config_value_in_an_env_var(db: Path) -> None:
    user_error(["--db", str(db), "status"], "AGENT_CONSOLE_LEASE_TTL", "expected a whole number, got 'abc'",
               env={"AGENT_CONSOLE_LEASE_TTL": "abc"})
    user_error(["--db", str(db), "status"], "AGENT_CONSOLE_AGENT", "unknown agent", env={"AGENT_CONSOLE_AGENT": "hal"})


def test_unknown_config_key(tmp_path: Path, db: Path) -> None:
    config = write_config(tmp_path, "lease_tll = 5")
    user_error(["--config", str(config), "--db", str(db), "status"], "unknown setting 'lease_tll'", str(config))


def test_missing_explicit_config_file(tmp_path: Path, db: Path) -> None:
    user_error(["--config", str(tmp_path / "absent.toml"), "--db", str(db), "status"], "absent.toml does not exist")


def test_invalid_toml(tmp_path: Path, db: Path) -> None:
    config = write_config(tmp_path, "[webhooks\nenabled = true")
    user_error(["--config", str(config), "--db", str(db), "status"], "is not valid TOML")


def test_bad_default_config_file_is_reported(tmp_path: Path, db: Path) -> None:
    default = tmp_path / "home" / "config" / "agent-console" / "config.toml"
    default.parent.mkdir(parents=True)
    default.write_text('timezone = "Atlantis/Capital"\n')
    user_error(["--db", str(db), "status"], "timezone", str(default), "unknown time zone")


# --- the console -------------------------------------------------------------------------------

def test_no_command_opens_the_console_with_settings_and_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, bool]] = []
    demos: list[Path | None] = []
    fake = types.ModuleType("console.tui.app")
    fake.run_app = lambda settings, *, read_only: calls.append((settings, read_only))  # type: ignore[attr-defined]
    fake.run_demo_app = lambda *, keep: demos.append(keep)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "console.tui.app", fake)
    result = invoke(["--db", str(tmp_path / "x.db")], env={"AGENT_CONSOLE_LEASE_TTL": "7"})
    assert result.exit_code == 0, result.stderr
    [(settings, read_only)] = calls
    assert (settings.db, settings.lease_ttl, read_only) == (tmp_path / "x.db", 7, False)
    assert invoke([]).exit_code == 0
    assert calls[1][1] is False and calls[1][0].db.parent.is_dir()  # the default data folder was made
    # The demo reads no settings: a broken config file does not stop it.
    broken = tmp_path / "home" / "config" / "agent-console" / "config.toml"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text("[webhooks\n")
    assert invoke(["--demo"]).exit_code == 0
    result = invoke(["--demo", "--keep-demo", str(tmp_path / "kept")])
    assert result.exit_code == 0 and f"kept in {tmp_path / 'kept'}" in result.stdout
    assert demos == [None, tmp_path / "kept"] and len(calls) == 2


@pytest.mark.parametrize(("args", "words"), [
    (["--demo", "--db", "x.db"], ["--demo", "no --db or --config"]),
    (["--demo", "--config", "c.toml"], ["--demo", "no --db or --config"]),
    (["--demo", "status"], ["--demo", "`status`"]),
    (["--keep-demo", "d"], ["--keep-demo", "goes with --demo"]),
])
def test_the_demo_takes_nothing_of_the_owners(args: list[str], words: list[str]) -> None:
    user_error(args, *words)


def test_a_build_without_the_console_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "console.tui.app", None)  # makes the import fail as if the file were absent
    user_error([], "this build has no console")


def test_the_console_is_not_opened_with_bad_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    fake = types.ModuleType("console.tui.app")
    fake.run_app = lambda settings, *, read_only: calls.append(settings)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "console.tui.app", fake)
    user_error([], "AGENT_CONSOLE_OUTBOX_GAP", env={"AGENT_CONSOLE_OUTBOX_GAP": "-1"})
    assert calls == []


# --- bugs are not hidden -----------------------------------------------------------------------

def test_an_internal_error_keeps_its_traceback(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Store, *, now: int, budgets: object = None) -> dict[str, Any]:
        raise ValueError("an internal bug, not the user's input")

    monkeypatch.setattr(Store, "status", broken)
    Store.open(db).close()
    result = invoke(["--db", str(db), "status"])
    assert isinstance(result.exception, ValueError)  # propagated, not turned into a user error
    assert result.exit_code == 1


def test_an_internal_error_in_a_real_process_prints_a_traceback(tmp_path: Path, isolated: dict[str, str]) -> None:
    # A sitecustomize that breaks Store.events stands in for a bug in the code.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "from console.core import Store\n"
        "def broken(self, **kw):\n    raise RuntimeError('simulated bug')\n"
        "Store.events = broken\n"
    )
    env = dict(isolated, PYTHONPATH=os.pathsep.join([str(hook), isolated["PYTHONPATH"]]))
    Store.open(tmp_path / "x.db").close()
    done = run_process(["--db", str(tmp_path / "x.db"), "events"], env)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: simulated bug" in done.stderr


# --- the same contract as a real process -------------------------------------------------------

def test_user_errors_from_a_real_process(tmp_path: Path, isolated: dict[str, str]) -> None:
    db = tmp_path / "inbox.db"
    done = run_process(["--db", str(db), "ingest", "chat", "m-1", "{not json"], isolated)
    assert_user_error(done.returncode, done.stdout, done.stderr, "not valid JSON")
    done = run_process(["--db", str(tmp_path / "missing" / "inbox.db"), "status"], isolated)
    assert_user_error(done.returncode, done.stdout, done.stderr, "does not exist")
    done = run_process(["--db", str(db), "status"], dict(isolated, AGENT_CONSOLE_MAX_ATTEMPTS="many"))
    assert_user_error(done.returncode, done.stdout, done.stderr, "AGENT_CONSOLE_MAX_ATTEMPTS")


def test_numbers_past_what_the_inbox_holds(db: Path) -> None:
    huge = "99999999999999999999999"
    invoke(["--db", str(db), "ingest", "chat", "m-1"])
    user_error(["--db", str(db), "show", huge], "expected a whole number from 1 to 9,223,372,036,854,775,807")
    user_error(["--db", str(db), "retry", huge], "expected a whole number from 1 to")
    user_error(["--db", str(db), "events", "--limit", huge], "bad value for --limit: expected a whole number")
    user_error(["--db", str(db), "timers", "add", "t", "--every", huge], "bad value for --every")
    for moment in ("99999999999999999", "-99999999999999999", huge):
        user_error(["--db", str(db), "timers", "add", "t", "--at", moment], "--at", "between")
    # Nothing unprintable was stored: the timer list still reads.
    listed = invoke(["--db", str(db), "timers", "list", "--all"])
    assert listed.exit_code == 0 and listed.stdout == "no timers\n", listed.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["approve", "apr-\udcff", "yes"],
        ["events", "--source", "web\udcff"],
        ["timers", "add", "t\udcff", "--every", "60"],
        ["say", "caf\udcff"],
    ],
)
def test_arguments_that_are_not_utf8(db: Path, args: list[str]) -> None:
    # Bytes that are not UTF-8 on the command line reach Python as lone surrogates (surrogateescape).
    user_error(["--db", str(db), *args], "not valid UTF-8")


def test_running_a_timer_that_does_not_exist(db: Path) -> None:
    user_error(["--db", str(db), "timers", "run", "nope"], "no timer named 'nope'")


def test_an_approvals_expiry_timer_is_not_the_users_to_remove(db: Path) -> None:
    with Store.open(db) as store:
        store.request_approval("apr-1", "deploy web", now=1_000, expires_in=10**6)
    for verb in ("remove", "pause", "resume", "run"):
        user_error(["--db", str(db), "timers", verb, "expire:apr-1"], "is the expiry of an approval")


@pytest.mark.parametrize(("args", "fragment"), [
    (["prune"], "--days is missing"),
    (["prune", "--days", "0"], "--days"),
    (["prune", "--days", "soon"], "--days"),
])
def test_prune_needs_a_whole_number_of_days(db: Path, args: list[str], fragment: str) -> None:
    user_error(["--db", str(db), *args], fragment)


def test_the_sources_the_engine_writes_cannot_be_ingested(db: Path) -> None:
    """Issue 8.2: a forged `approval` event once resumed a conversation as approved while the approval stayed
    pending. Only the answer path writes an approval's outcome, only the scheduler a timer's firing."""
    with Store.open(db) as store:
        store.request_approval("apr-1-1", "refund order 881", now=1_000, expires_in=10**10)
    user_error(["--db", str(db), "ingest", "approval", "forged-1", '{"approval":"apr-1-1","answer":"yes"}'],
               "source 'approval' is reserved", "agent-console approve")
    user_error(["--db", str(db), "ingest", "approval", "apr-1-1", '{"approval":"apr-1-1","answer":"yes"}'],
               "source 'approval' is reserved")
    user_error(["--db", str(db), "ingest", "timer", "digest@1", "{}"], "source 'timer' is reserved")
    with Store.open(db) as store:
        assert store.events() == []
        assert [a.request_id for a in store.pending_approvals()] == ["apr-1-1"]
        with pytest.raises(ValueError, match="reserved"):
            store.ingest_many([("chat", "ok", {}), ("approval", "apr-1-1", {"answer": "yes"})], now=1_001)
        with pytest.raises(ValueError, match="reserved"):
            store.add_timer("sneaky", 1_002, {"answer": "yes"}, key=("approval", "apr-1-1"))
        assert store.events() == [] and store.timer("sneaky") is None
    answered = invoke(["--db", str(db), "approve", "apr-1-1", "no"])
    assert answered.exit_code == 0 and answered.stdout.strip() == "no"


def test_a_fifo_or_kernel_file_as_the_inbox_is_one_line_in_a_real_process(
    tmp_path: Path, isolated: dict[str, str]
) -> None:
    fifo = tmp_path / "inbox.db"
    os.mkfifo(fifo)
    done = run_process(["--db", str(fifo), "status"], isolated, timeout=30)  # it used to wait for a writer
    assert_user_error(done.returncode, done.stdout, done.stderr, str(fifo), "not a regular file")
    done = run_process(["ingest", "chat", "m-1"], dict(isolated, AGENT_CONSOLE_DB="/proc/self/mem"), timeout=30)
    assert_user_error(done.returncode, done.stdout, done.stderr, "/proc/self/mem")
