"""The command line. With no subcommand it opens the console; `run` is the headless engine; the other
subcommands read and write the inbox file directly through the Store, so they work whether or not an
engine is running (the engine notices another process's commit within 100 ms)."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import importlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import click

from console import __version__
from console.cli_common import (
    PROG,
    SQLITE_COUNT,
    USER_ERROR,
    CliState,
    ConsoleGroup,
    Dollars,
    FilePath,
    InboxTarget,
    OneOf,
    UserError,
    WholeNumber,
    _clock_time,
    _now,
    _parse_json,
    _print_json,
    _say,
    _short_time,
    rejecting_bad_input,
)
from console.cli_render import budget_source_words, call_record, event_record, status_lines
from console.cli_schedules import schedules
from console.cli_telegram import telegram
from console.config import ConfigError, Settings, ensure_default_db_folder, load_settings, open_inbox
from console.core import STATUSES, Event, Store, Timer
from console.core.approvals import ANSWERS
from console.core.copy import abandon_move, inbox_name, move_inbox
from console.core.errors import damage_line
from console.core.gate import check_before_ingest, remember_checked
from console.core.inbox import DISCARDABLE, REVIVABLE
from console.core.models import PAYLOAD_DAMAGED, origin_in_words
from console.core.timers import CATCH_UP_POLICIES, MAX_DUE, check_due, validate_cron, validate_zone
from console.modelspec import model_rows
from console.redact import install_log_redaction
from console.runtime.why import why_not_run
from console.spendfmt import dollars, runs_of
from console.textsafe import TerminalSafeFormatter, json_terminal_safe, terminal_safe
from console.timefmt import (
    answered_in_words,
    count,
    plural,
    relative,
    schedule_in_words,
    span,
    via_in_words,
)
from console.trust.audit import AUDIT_FIELDS, audit_record
from console.trust.callview import origin_line, request_view

if TYPE_CHECKING:
    from console.assembly import System

UNKNOWN_REQUEST = 1
DAMAGED = 1
SHOW_WIDTH = 100  # columns `show` wraps an approval's call to


# --- the group ---------------------------------------------------------------------------------

@click.group(
    cls=ConsoleGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit codes: 0 done; 1 `approve` of a request that was never made (prints `unknown`), or `check` "
    "found damage; "
    "2 a user error (one line on stderr: bad input, unknown id, bad setting, unusable inbox file).",
)
@click.option("--db", type=InboxTarget(), metavar="FILE|URL",
              help="The inbox: a file (default: inbox.db in your user data folder), or a postgresql:// URL "
                   "(env AGENT_CONSOLE_DB).")
@click.option("--config", "config_path", type=FilePath(),
              help="A TOML config file (default: config.toml in your user config folder, if it exists).")
@click.option("--demo", is_flag=True,
              help="Open the console on a demo in a world of its own: built-in settings (none of your config, "
                   "channels, servers or keys), a temporary inbox with scripted traffic, removed on quit.")
@click.option("--keep-demo", "keep_demo", type=click.Path(path_type=Path), metavar="DIR",
              help="With --demo: run it in DIR (made owner-only; it must not exist or be empty) and keep it after "
                   "quitting, to look at its inbox and telemetry.")
@click.option("--read-only", "read_only", is_flag=True,
              help="Open the console read-only: it watches the inbox and cannot answer, retry, discard, inject or "
                   "stall (its engine never takes the lease). For a second screen or a shared terminal.")
@click.version_option(__version__, prog_name=PROG)
@click.pass_context
def main(ctx: click.Context, db: Path | str | None, config_path: Path | None, demo: bool, keep_demo: Path | None,
         read_only: bool) -> None:
    """A terminal console for one person's always-on agent. With no command, opens the console.

    Settings come from defaults, then the config file, then AGENT_CONSOLE_<SETTING> environment
    variables (e.g. AGENT_CONSOLE_LEASE_TTL=30), then --db.
    """
    state = CliState(config_path, db)
    ctx.obj = state
    if read_only and ctx.invoked_subcommand is not None:
        raise UserError(f"--read-only opens the console read-only; it goes without a command, not before "
                        f"`{ctx.invoked_subcommand}`")
    if read_only and demo:
        raise UserError("--read-only and --demo do not go together: the demo's inbox is a throwaway to play with")
    if keep_demo is not None and not demo:
        raise UserError("--keep-demo keeps the demo's folder; it goes with --demo")
    if demo and ctx.invoked_subcommand is not None:
        raise UserError(f"--demo opens the console on a demo; it goes without a command, not before "
                        f"`{ctx.invoked_subcommand}`")
    if demo and (db is not None or config_path is not None):
        raise UserError("--demo runs in a world of its own (built-in settings, a temporary inbox): it takes no "
                        "--db or --config")
    if demo:
        _open_demo(keep_demo)
    elif ctx.invoked_subcommand is None:
        _open_console(state, read_only=read_only)


def _import_part(module: str, missing: str) -> Any:
    """Import an optional part of the program late; its absence is a one-line error, while a broken
    import inside it (some other module missing) keeps its traceback."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise UserError(missing) from None


def _open_console(state: CliState, *, read_only: bool = False) -> None:
    settings = state.settings()
    if not read_only:  # a read-only console creates nothing: no folder, no inbox
        ensure_default_db_folder(settings)
    _console_part("run_app")(settings, read_only=read_only)


def _open_demo(keep: Path | None) -> None:
    """The demo reads no settings at all: a broken or full config of the owner's neither stops nor feeds it."""
    _console_part("run_demo_app")(keep=keep)
    if keep is not None:
        _say(f"the demo's inbox, shop and telemetry are kept in {keep.expanduser().absolute()}")


def _console_part(name: str) -> Any:
    app = _import_part("console.tui.app", "this build has no console (console.tui.app is missing); "
                       "see --help for the commands")
    part = getattr(app, name, None)
    if part is None:
        raise UserError(f"this build's console has no {name}; see --help for the commands")
    return part


# --- run: the headless engine ------------------------------------------------------------------

log = logging.getLogger("agent_console.cli")


def _log_to_stderr() -> None:
    """One line per record on stderr; what a record quotes from outside is escaped for the terminal, and
    any URL's credentials (a proxy's user:pass@) are redacted."""
    handler = logging.StreamHandler()
    handler.setFormatter(TerminalSafeFormatter("%(asctime)s %(name)s %(levelname)s %(message)s",
                                               datefmt="%Y-%m-%dT%H:%M:%S"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    install_log_redaction(*logging.getLogger().handlers)


@main.command()
@click.pass_obj
def run(state: CliState) -> None:
    """Run the engine headless until SIGTERM, SIGHUP or Ctrl-C.

    The worker, the scheduler and the outbox dispatcher, without the console (plus the webhook receiver
    when the config enables it). Logs to stderr, one line per run and lease change. SIGTERM or Ctrl-C
    stops it cleanly: the current run ends, the lease is released at once (a replacement need not wait
    out the TTL), exit code 0. A closed terminal (SIGHUP) does the same.
    """
    settings = state.settings()
    ensure_default_db_folder(settings)
    _log_to_stderr()
    asyncio.run(_run_headless(settings))


async def _run_headless(settings: Settings) -> None:
    from console.assembly import assemble

    await assemble(settings).run_until_signalled()


@main.command()
@click.option("--host", help="Address to bind (default from [webhooks] host, else 127.0.0.1).")
@click.option("--port", type=WholeNumber(0, 65535), help="Port to bind (default from [webhooks] port, else 8765).")
@click.pass_obj
def serve(state: CliState, host: str | None, port: int | None) -> None:
    """Run the signed webhook receiver alone, until SIGTERM, SIGHUP or Ctrl-C.

    POST /hooks/SOURCE for each source under [webhooks.sources]; GET /healthz. Each delivery's signature
    is checked on the raw body before anything is stored, and a 200 is sent only once the event is
    durable in the inbox. Another process (`agent-console run` or the console) runs the events.
    """
    from console.assembly import assemble_serve

    settings = state.settings()
    ensure_default_db_folder(settings)
    _log_to_stderr()
    asyncio.run(assemble_serve(settings, host=host, port=port).run_until_signalled(on_ready=_say_listening))


def _say_listening(system: System) -> None:
    if system.receiver is not None:
        click.echo(f"listening on {system.receiver.url}", err=True)


@main.command()
@click.pass_obj
def doctor(state: CliState) -> None:
    """Check that the MCP servers can run in their sandboxes.

    One line each: bubblewrap, user namespaces, the egress proxy, and each stdio server in [mcp_servers],
    started in its sandbox with a probe in its place that lists what it can see, write and reach, then
    started for real. Exit 2 when a check fails; a server with sandbox = false is a warning."""
    from console.assembly import doctor_checks

    try:
        checks = doctor_checks(state.settings())
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    width = max(len(check.what) for check in checks)
    for check in checks:
        _say(f"{check.verdict:<4}  {check.what:<{width}}  {check.said}")
    if any(check.verdict == "FAIL" for check in checks):
        raise click.exceptions.Exit(USER_ERROR)


# --- the inbox ---------------------------------------------------------------------------------

@main.command()
@click.argument("source")
@click.argument("source_id")
@click.argument("payload", required=False, metavar="[PAYLOAD|-]")
@click.pass_obj
def ingest(state: CliState, source: str, source_id: str, payload: str | None) -> None:
    """Put an event in the inbox. PAYLOAD is JSON text, `-` reads it from stdin, none means {}.

    Prints `stored`, or `duplicate` when (SOURCE, SOURCE_ID) was already stored (nothing changes).
    """
    if payload == "-":
        payload = sys.stdin.read()
    data = {} if payload is None else _parse_json(payload, "the payload")
    now = _now()
    with state.store() as store, rejecting_bad_input():
        # The one command that acknowledges outside input checks first, within a bound that keeps its cost
        # flat in the file's size: "stored" must never go into an inbox that will not be read again. What was
        # checked is remembered: a file nobody else wrote since is not checked again (gate.check_before_ingest).
        remember = check_before_ingest(store, now=now)
        stored = store.ingest(source, source_id, data, now=now)
    if remember:
        remember_checked(store.path)
    click.echo("stored" if stored else "duplicate")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as a JSON object.")
@click.pass_obj
def status(state: CliState, as_json: bool) -> None:
    """Show the inbox at a glance.

    Counts by state, the lease, pending approvals, the outbox, the next timer, fencing counts, the agent's
    state, and today's and this month's spend on model calls against the budgets (and where each budget
    came from)."""
    now = _now()
    with state.reader() as store:
        info = store.status(now=now, budgets=state.settings().budget_defaults())
        rows = model_rows(state.settings().model_chain(), store.model_health(), now=now)
    if as_json:
        _print_json(dict(info, now=now, models=[{name: row[name] for name in ("name", "state", "until", "reason")}
                                                for row in rows]))
        return
    for line in status_lines(info, now):
        _say(line)
    if any(row["state"] != "ready" for row in rows):
        _say("models     " + " · ".join(_model_words(row, now) for row in rows))


def _model_words(row: dict[str, Any], now: int) -> str:
    """'local in use' · 'claude cooling (25s left): rate limited' · 'claude paused: refused the key'."""
    if row["state"] == "ready":
        return f"{row['name']} {'in use' if row['in_use'] else 'ready'}"
    left = f" (until {relative(int(row['until']), now)})" if row["until"] is not None else ""
    return f"{row['name']} {row['state']}{left}: {row['reason']}"


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the chain as a JSON list.")
@click.pass_obj
def models(state: CliState, as_json: bool) -> None:
    """List the chain of models in order ([[models]], or the claude_* settings as a chain of one): each one's
    protocol, model id and state (ready, cooling until when, paused) and why, and the one in use (the first
    that is ready: the next turn asks it)."""
    now = _now()
    settings = state.settings()
    with state.reader() as store:
        rows = model_rows(settings.model_chain(), store.model_health(), now=now)
    if as_json:
        _print_json(rows)
        return
    if not rows:
        _say(f"no models: the {settings.agent} agent asks none (agent = \"claude\" uses the chain)")
        return
    for row in rows:
        mark = "*" if row["in_use"] else " "
        _say(f"{mark} {row['name']:<12} {row['protocol']:<9} {row['model']:<24} {_model_words(row, now)}")
    if not any(row["in_use"] for row in rows):
        _say("no model can answer now: the events wait, no attempt spent")


@main.command()
@click.pass_context
def check(ctx: click.Context) -> None:
    """Check the whole inbox file for damage, and say what is damaged.

    Runs SQLite's full integrity check, which reads every page (seconds on a large inbox), and compares
    every payload with the checksum written when it was stored; it only reads, so it can run beside a
    running engine. Prints `ok`, or the problems found and exits with
    code 1. `run`, `serve`, the console and `ingest` run a quicker check, bounded in time, before they
    take any work (a damaged inbox: the first line printed here, exit 2); commands that only read check
    nothing."""
    state: CliState = ctx.obj
    with state.reader() as store:
        problems = store.integrity_problems()
        pages = store.page_count()
        payloads = store.verify_payloads()
    problems += payloads.problems()
    if not problems:
        click.echo(f"ok: {store.path} passed its integrity check ({plural(pages, 'page')}; "
                   f"{plural(payloads.checked, 'payload')} match their checksums)")
        return
    click.echo(damage_line(store.path, problems))  # the line every refusal to take new work gives
    for problem in problems:
        click.echo(f"  {problem}")
    ctx.exit(DAMAGED)


@main.command()
@click.option("--from", "source", required=True, metavar="FILE|URL", help="The inbox to move.")
@click.option("--to", "target", metavar="URL|FILE",
              help="A new, empty inbox to copy it into, e.g. postgresql://me@db.example:5432/agent?schema=me "
                   "(or the unfinished copy a stopped migrate left there).")
@click.option("--abandon", is_flag=True,
              help="Take a move back: clear the --from inbox's being-moved or moved mark, so it takes work again.")
@click.pass_obj
def migrate(state: CliState, source: str, target: str | None, abandon: bool) -> None:
    """Move a whole inbox into a new one: a SQLite file into PostgreSQL, typically.

    Events and their history, timers, approvals and their sessions, the journal, the outbox, memory, the
    lease's generation, spend and the phone records move with their ids, in one transaction; every table's
    rows are counted on both sides, and every event key of the source is found in the target. While it
    copies, the source takes no new work (writers are told it is being moved; webhooks get 503 with
    Retry-After, so senders deliver again); afterwards it is marked moved and refuses new work, naming the
    target. The target refuses work until the move's last step. Stopped part-way, run it again: it restarts
    the copy or finishes the move. Refuses a target that already holds anything, and a source whose lease
    an engine still holds (stop it first)."""
    now = _now()
    with rejecting_bad_input():
        source_settings = load_settings(state.config_path, overrides={"db": source})
        target_settings = None if target is None else load_settings(state.config_path, overrides={"db": target})
    if abandon:
        if target is not None:
            raise UserError("--abandon takes only --from (the inbox whose move is taken back)")
        with _writable_existing(state, source_settings) as old:
            was, other = abandon_move(old)
        _say(f"abandoned the move: {inbox_name(old)} takes work again (it was "
             f"{'being moved' if was == 'moving' else 'moved'} to {other}; that copy is not changed)")
        return
    if target_settings is None:
        raise UserError("--to is missing: the inbox to move it into (or --abandon, to take a move back)")
    if source_settings.db == target_settings.db:
        raise UserError("--from and --to name the same inbox")
    with _writable_existing(state, source_settings) as old, \
            state._opened(open_inbox(target_settings)) as new:
        report = move_inbox(old, new, now=now)
    for table, rows in report.rows.items():
        if rows:
            _say(f"{table:<18} {rows:>9,}")
    keys = "its one event key" if report.keys == 1 else f"all {report.keys:,} event keys"
    verified = f"every table's count and {keys} verified"
    if report.how in ("copied", "restarted"):
        again = " (an unfinished copy was done again)" if report.how == "restarted" else ""
        _say(f"copied {report.total:,} rows from {report.source} to {report.target}{again}; {verified}")
    else:
        _say(f"{'the move was already done' if report.how == 'already moved' else 'finished the move'}: "
             f"{report.source} to {report.target}; {keys} verified")
    _say(f"{report.source} is marked moved and takes no new work: use --db {report.target}")


@contextmanager
def _writable_existing(state: CliState, settings: Settings) -> Iterator[Store]:
    """An inbox that must exist already (a move's source), opened for writing: it is looked at read-only
    first, so that a typo names no inbox instead of creating one."""
    with state._opened(open_inbox(settings, read_only=True)):
        pass
    with state._opened(open_inbox(settings)) as store:
        yield store


@main.command()
@click.option("--status", "status_filter", type=OneOf(STATUSES), help="Only events in this state.")
@click.option("--source", help="Only events from this source.")
@click.option("--limit", type=SQLITE_COUNT, default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of event objects.")
@click.pass_obj
def events(state: CliState, status_filter: str | None, source: str | None, limit: int, as_json: bool) -> None:
    """List events, newest first."""
    with state.reader() as store:
        found = store.events(status=status_filter, source=source, limit=limit)
    if as_json:
        _print_json([event_record(e) for e in found])
        return
    if not found:
        click.echo("no events")
        return
    for event in found:
        said = event.death_in_words() or event.batch_failure_in_words() or event.error
        error = f"  {said}" if said else ""
        _say(f"{event.id:>6}  {event.status:<7}  {event.attempts} att  {event.source}/{event.source_id}{error}")


@main.command()
@click.argument("event_id", type=SQLITE_COUNT)
@click.pass_obj
def trace(state: CliState, event_id: int) -> None:
    """Print the runs of one event as trace trees with timings (from the inbox's telemetry file beside it)."""
    from console import telemetry  # reads the file as JSON: the OpenTelemetry SDK is not loaded

    settings = state.settings()
    own = settings.telemetry_file
    # The inbox's own file, and the one every inbox in the folder shared before: a run there is this inbox's only
    # when this inbox's history has its holder claiming its event under its generation.
    spans = telemetry.read_spans(settings.inbox_folder) + telemetry.read_spans(own.parent, own.name)
    with state.reader() as store:
        claims: dict[int, set[tuple[str | None, int | None]]] = {}

        def claimed(event: int, holder: str, generation: int) -> bool:
            if event not in claims:
                claims[event] = {(a.holder, a.gen) for a in store.history(event) if a.kind == "claim"}
            return (holder, generation) in claims[event]

        runs = telemetry.runs_of_event(spans, event_id, claimed=claimed)
    if not runs:
        raise UserError(f"no run of event {event_id} in {own} (not run yet, telemetry off, or rotated away)")
    zone = state.zone()
    for number, tree in enumerate(runs, 1):
        root = tree[0][1]
        began = int(root.get("startTimeUnixNano", 0))
        when = _clock_time(began // 1_000_000_000, zone)
        _say(f"run {number}  {when}  trace {root.get('traceId')}")
        for above in telemetry.ancestors(spans, root):  # a delivery's ingest span, when the run is traced under it
            what = telemetry.describe(above)
            _say(f"  under {above.get('name')}" + (f"  {what}" if what else ""))
        for depth, node in tree:
            offset = (int(node.get("startTimeUnixNano", 0)) - began) / 1e9
            what = telemetry.describe(node)
            _say(f"{'  ' * (depth + 1)}{node.get('name')}  +{offset:.3f} s  {telemetry.seconds(node):.3f} s"
                 + (f"  {what}" if what else ""))
            for event in node.get("events", []):
                at = (int(event.get("timeUnixNano", 0)) - began) / 1e9
                details = ", ".join(f"{key.rsplit('.', 1)[-1]} {value}"
                                    for key, value in telemetry.attributes_of(event).items())
                _say(f"{'  ' * (depth + 2)}· {event.get('name')}  +{at:.3f} s  {details}")


@main.command()
@click.argument("event_id", type=SQLITE_COUNT)
@click.option("--json", "as_json", is_flag=True, help="Print the event, its history and journal steps as JSON.")
@click.pass_obj
def show(state: CliState, event_id: int, as_json: bool) -> None:
    """Show one event: payload, attempt history, journal steps."""
    with state.reader() as store:
        event = store.event(event_id)
        if event is None:
            raise UserError(f"no event with id {event_id}")
        history = store.history(event_id)
        steps = store.journal_steps(event_id)
        calls = store.tool_calls(event_id)
        approvals = store.approvals_of_event(event_id)
        model_calls = store.event_spend(event_id)
        why = why_not_run(store, event, now=_now(), zone=state.zone())
    if as_json:
        _print_json({"event": event_record(event), "why": why.as_json(),
                     "history": [dataclasses.asdict(a) for a in history],
                     "journal": [dataclasses.asdict(s) for s in steps],
                     "tool_calls": [dataclasses.asdict(c) for c in calls],
                     "approvals": [dataclasses.asdict(a) for a in approvals],
                     "model_calls": [call_record(call) for call in model_calls]})
        return
    zone = state.zone()
    generation = "" if event.claim_gen is None else f", generation {event.claim_gen}"
    _say(f"event {event.id}  {event.source}/{event.source_id}  {event.status}  "
               f"({plural(event.attempts, 'attempt')}{generation}, {plural(event.duplicates, 'duplicate')} refused)")
    click.echo(f"created {_clock_time(event.created_at, zone)} · updated {_clock_time(event.updated_at, zone)}")
    if event.error and event.status != "dead":  # a dead event's last error is in its state, below
        _say(f"error: {event.error}")
    click.echo("why it has not run:" if event.status == "pending" else "state:")
    for sentence in why.sentences:
        _say(f"  - {sentence}")
    if event.damaged:
        _say(f"payload: damaged: {PAYLOAD_DAMAGED}; not shown")
    elif event.pruned_at is not None:
        click.echo(f"payload: pruned {_clock_time(event.pruned_at, zone)}")
    else:
        click.echo("payload:")
        click.echo(json_terminal_safe(json.dumps(event.payload, indent=2, ensure_ascii=False)))
    click.echo("history:" if history else "history: none")
    for attempt in history:
        who = "" if attempt.holder is None else f"  {attempt.holder} gen {attempt.gen}"
        detail = f"  {attempt.detail}" if attempt.detail else ""
        _say(f"  {_clock_time(attempt.at, zone)}  {attempt.kind:<8}{who}{detail}")
    if calls:
        click.echo("tool calls:")
    for call in calls:
        under = f"  (request {call.request_id})" if call.request_id else ""
        result = (call.result or "").splitlines() or [""]
        _say(f"  {call.tool} {json.dumps(call.arguments, ensure_ascii=False)}  {call.decision}, {call.outcome}"
             f"{under}: {result[0]}")
        for line in result[1:]:  # a result's own lines, each on one (not one line with \n in it)
            _say(f"      {line}")
    if approvals:
        click.echo("approvals:")
    for approval in approvals:
        # Each argument on its own line, the whole value: what a yes runs (or ran), and where it came from.
        what = request_view(approval)
        settled = "waiting" if approval.outcome is None else answered_in_words(
            approval.outcome, approval.answered_via, approval.resolved_at, _now())
        _say(f"  {approval.request_id}  {'question' if what.is_question else 'call'}, {settled}")
        for line in what.lines(SHOW_WIDTH, value_limit=None):
            _say(f"    {line}")
        if what.origin is not None:
            _say(f"    {origin_line(what.origin)}")
    click.echo("journal:" if steps else "journal: no steps")
    for step in steps:
        _say(f"  {step.idem_key}  {step.state}  gen {step.gen}  executed {step.executions}x  "
                   f"result {json.dumps(step.result, ensure_ascii=False)}")
    click.echo("model calls:" if model_calls else "model calls: none filed under this event")
    for run in runs_of(model_calls):
        who = "" if run.holder is None else f"  {run.holder} gen {run.gen}"
        _say(f"  run {_clock_time(run.started, zone)}{who}  {run.describe()}")


@main.command()
@click.argument("request_id")
@click.argument("answer", metavar="yes|no")
@click.pass_context
def approve(ctx: click.Context, request_id: str, answer: str) -> None:
    """Answer a pending approval and print the outcome that stands.

    The first stored outcome stands: `yes` or `no` (possibly an earlier answer), `expired` if the
    deadline passed first, or `unknown` for a request that was never made (then the exit code is 1).
    """
    word = answer.strip().lower()
    if word not in ANSWERS:
        raise UserError(f"an approval answer is 'yes' or 'no', not {answer!r}")
    state: CliState = ctx.obj
    with state.store() as store:
        now = _now()
        outcome = store.answer_approval(request_id, word, now=now, via="cli")
        settled = store.approval(request_id) if outcome not in (word, "unknown") else None
    click.echo(outcome)  # the outcome that stands, alone on stdout (DESIGN §7): scripts read it
    if settled is not None:
        at = "" if settled.resolved_at is None else f" at {_short_time(settled.resolved_at, now, state.zone())}"
        before = (f"expired{at} before your answer" if outcome == "expired"
                  else f"already answered {outcome} {via_in_words(settled.answered_via)}{at}".replace("  ", " "))
        click.echo(f"{before}; your {word} was not applied", err=True)
    if outcome == "unknown":
        ctx.exit(UNKNOWN_REQUEST)


@main.command()
@click.argument("event_ids", metavar="[EVENT_ID]...", type=SQLITE_COUNT, nargs=-1)
@click.option("--all-dead", is_flag=True, help="Retry every dead event (of --source, if given).")
@click.option("--source", help="With --all-dead: only dead events from this source.")
@click.pass_obj
def retry(state: CliState, event_ids: tuple[int, ...], all_dead: bool, source: str | None) -> None:
    """Retry dead (or discarded) events with a fresh attempt budget.

    `retry EVENT_ID...` retries those events, all or none; `retry --all-dead [--source S]` retries every
    dead event (of one source) and prints how many."""
    if bool(event_ids) == all_dead:
        raise UserError("give either an EVENT_ID or --all-dead")
    if source is not None and not all_dead:
        raise UserError("--source goes with --all-dead")
    with state.store() as store:
        if not event_ids:
            click.echo(f"retried {count(store.retry_dead_matching(source=source, now=_now()))}")
            return
        for event in _check_states(store, event_ids, REVIVABLE, "retried", "not dead"):
            if event.pruned_at is not None:
                raise UserError(f"event {event.id} was discarded and retention cleared it on "
                                f"{_clock_time(event.pruned_at, state.zone())}: it cannot be retried")
        retried = store.retry_events(event_ids, now=_now())
    click.echo("retried" if len(event_ids) == 1 else f"retried {count(len(retried))}")


@main.command()
@click.argument("event_ids", metavar="EVENT_ID...", type=SQLITE_COUNT, nargs=-1, required=True)
@click.option("--reason", help="Why, kept in each event's history.")
@click.pass_obj
def discard(state: CliState, event_ids: tuple[int, ...], reason: str | None) -> None:
    """Give up on dead (or pending) events: they become `discarded`.

    A discarded event is never run again and stays for the record: its payload, error and history are
    kept, its key still refuses a redelivery, and `retry` brings it back, until retention (`prune`,
    `retain_days`) clears it like a done event. All or none: an id that is running, done or unknown
    changes nothing."""
    with state.store() as store:
        _check_states(store, event_ids, DISCARDABLE, "discarded", "not dead or pending")
        discarded = store.discard(event_ids, now=_now(), reason=reason)
    click.echo(f"discarded {count(len(discarded))}")


@main.command()
@click.argument("event_ids", metavar="EVENT_ID...", type=SQLITE_COUNT, nargs=-1, required=True)
@click.pass_obj
def restore(state: CliState, event_ids: tuple[int, ...]) -> None:
    """Undo a discard: discarded events become `dead` again, as they died, and do not run.

    `retry` is what runs an event again; `restore` only puts it back among the dead (no fresh attempts). All
    or none: an id that is not discarded changes nothing."""
    with state.store() as store:
        for event in _check_states(store, event_ids, ("discarded",), "restored", "not discarded"):
            if event.pruned_at is not None:
                raise UserError(f"event {event.id} was discarded and retention cleared it on "
                                f"{_clock_time(event.pruned_at, state.zone())}: it cannot be restored")
        restored = store.restore_to_dead(event_ids, now=_now())
    them = "it" if len(restored) == 1 else "them"
    click.echo(f"restored {count(len(restored))} to dead (not run; `retry` runs {them})")


def _check_states(
    store: Store, event_ids: tuple[int, ...], allowed: tuple[str, ...], verb: str, what: str
) -> list[Event]:
    """One line naming the first event that cannot be {verb}, before anything changes; else the events."""
    events = []
    for event_id in event_ids:
        event = store.event(event_id)
        if event is None:
            raise UserError(f"no event with id {event_id}")
        if event.status not in allowed:
            raise UserError(f"event {event_id} is {event.status}, {what}: only {' or '.join(allowed)} events "
                            f"can be {verb}")
        events.append(event)
    return events


@main.command()
@click.option("--source", help="Only dead events from this source.")
@click.option("--limit", type=SQLITE_COUNT, default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list: id, source, source_id, attempts, died_at, "
              "dead_reason (failed, lost, out_of_attempts; null if it died before the field), error (its last).")
@click.pass_obj
def dead(state: CliState, source: str | None, limit: int, as_json: bool) -> None:
    """List dead events, newest first: when each died and why.

    Then `retry ID...` runs them again with a fresh attempt budget, `discard ID...` gives up on them."""
    now = _now()
    with state.reader() as store:
        found = store.events(status="dead", source=source, limit=limit)
        answers = {e.id: answer for e in found if e.source == "approval"
                   and (answer := store.stranded_answer(e.id)) is not None}
    # A dead event's updated_at is the moment it died: nothing else writes a dead row but retry and discard,
    # which move it out of this state.
    if as_json:
        _print_json([{"id": e.id, "source": e.source, "source_id": e.source_id, "attempts": e.attempts,
                      "died_at": e.updated_at, "dead_reason": e.dead_reason, "error": e.error} for e in found])
        return
    if not found:
        click.echo("no dead events")
        return
    zone = state.zone()
    for event in found:
        _say(f"{event.id:>6}  died {_clock_time(event.updated_at, zone)} ({span(max(0, now - event.updated_at))} ago)  "
             f"{event.source}/{event.source_id}  {event.death_in_words()}")
        if event.id in answers:  # the owner's answer it carries: on a yes, a call that may not have happened
            _say(f"        {answers[event.id].outcome} to {answers[event.id].action}: {answers[event.id].in_words()}")


@main.command()
@click.argument("text")
@click.option("--urgent", is_flag=True, help="Send without waiting for the outbox gap.")
@click.pass_obj
def say(state: CliState, text: str, urgent: bool) -> None:
    """Queue a message in the outbox.

    Held messages go out together, at most once per gap; --urgent skips the gap."""
    with state.store() as store, rejecting_bad_input():
        message_id = store.queue_message(text, now=_now(), urgent=urgent)
    click.echo(f"queued message {message_id}{' (urgent)' if urgent else ''}")


@main.command("send-now")
@click.argument("message_id", type=SQLITE_COUNT)
@click.pass_obj
def send_now(state: CliState, message_id: int) -> None:
    """Send an outbox message the send gap holds at once, on the urgent lane (the gap is not restarted)."""
    with state.store() as store:
        message = store.outbox_message(message_id)
        if message is None:
            raise UserError(f"no outbox message with id {message_id}")
        if not store.send_now(message_id, now=_now()):
            now_is = "urgent" if message.status == "queued" else message.status
            raise UserError(f"message {message_id} is not held by the send gap (it is {now_is})")
    click.echo(f"message {message_id} goes out at once (the urgent lane)")


@main.command()
@click.option("--daily", type=Dollars(), metavar="USD", help="Store a daily budget (0 = no daily limit).")
@click.option("--monthly", type=Dollars(), metavar="USD", help="Store a monthly budget (0 = no monthly limit).")
@click.option("--clear", is_flag=True, help="Forget the stored budgets: the config file's and environment's apply.")
@click.option("--json", "as_json", is_flag=True, help="Print the budgets in force and the spend as JSON.")
@click.pass_obj
def budget(state: CliState, daily: float | None, monthly: float | None, clear: bool, as_json: bool) -> None:
    """Show or set the budgets for model calls, in US dollars per day and per month (the `timezone`
    setting's days and months).

    A budget set here is stored in the inbox: it wins over daily_budget_usd / monthly_budget_usd in the
    config file and the environment until `--clear`, and a running engine obeys it at its next model call
    (a pause for a budget reached lifts at once when that budget is raised). With no option, shows the
    budgets in force, where each came from, and what was spent."""
    if clear and (daily is not None or monthly is not None):
        raise UserError("give --clear alone, or --daily and/or --monthly")
    settings = state.settings()
    now = _now()
    if clear or daily is not None or monthly is not None:
        with state.store() as store, rejecting_bad_input():
            if clear:
                cleared = store.clear_budgets()
            for kind, usd in (("daily", daily), ("monthly", monthly)):
                if usd is not None:
                    store.set_budget(kind, usd, now=now)
            spend = store.spend_summary(settings.budget_defaults(), now=now)
        if not as_json:
            if clear:
                click.echo(f"cleared {cleared} stored budget{'s' if cleared != 1 else ''}: the settings' apply again")
            else:
                click.echo("stored in the inbox; a running engine obeys it at its next model call")
    else:
        with state.reader() as store:
            spend = store.spend_summary(settings.budget_defaults(), now=now)
    if as_json:
        _print_json(dict(spend, now=now))
        return
    for kind, spent, period in (("daily", "today_usd", "today"), ("monthly", "month_usd", "this month")):
        limit = spend[f"{kind}_budget_usd"]
        shown = "no limit" if limit is None else dollars(limit)
        _say(f"{kind:<8} {shown:<10} from {budget_source_words(spend[f'{kind}_budget_from'])}; spent {period} "
             f"{dollars(spend[spent], unknown='unknown (a model without a price was used)')}")


@main.command()
@click.option("--days", type=WholeNumber(1, 3660), default=7, show_default=True,
              help="The last N days of the `timezone` setting, today included.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as a JSON object.")
@click.pass_obj
def usage(state: CliState, days: int, as_json: bool) -> None:
    """Tokens and cost of model calls per day, per source, and the most expensive events.

    A cost is `unknown` (null in JSON) where a call's model has no price: set one under [prices."MODEL"]
    in the config. A call never settled (its worker died mid-call) counts at its worst case."""
    settings = state.settings()
    with state.reader() as store:
        report = store.usage_report(days=days, zone=settings.timezone, now=_now())
    if as_json:
        _print_json(report)
        return
    header = f"{'':<12}{'calls':>7}{'input':>11}{'cache write':>13}{'cache read':>12}{'output':>10}  cost"
    click.echo(f"model calls over the last {days} day{'s' if days != 1 else ''} ({settings.timezone})")
    click.echo(header)
    for row in [*report["days"], dict(report["total"], date="total")]:
        _say(_usage_line(str(row["date"]), row))
    if report["sources"]:
        click.echo("by source")
        for row in report["sources"]:
            _say(_usage_line(str(row["source"]), row))
    if report["top_events"]:
        click.echo("most expensive events")
        for row in report["top_events"]:
            _say(_usage_line(f"#{row['event_id']}", row) + f"  {row['source']}/{row['source_id']}")


def _usage_line(label: str, row: dict[str, Any]) -> str:
    cost = dollars(row["cost_usd"])
    if row["unpriced_calls"]:
        cost += f" ({row['unpriced_calls']} without a price)"
    return (f"{label:<12}{row['calls']:>7,}{row['input_tokens']:>11,}{row['cache_write_tokens']:>13,}"
            f"{row['cache_read_tokens']:>12,}{row['output_tokens']:>10,}  {cost}")


@main.command()
@click.option("--days", type=WholeNumber(1, 100_000), required=True,
              help="Prune what finished or was sent more than this many days ago.")
@click.option("--dry-run", is_flag=True, help="Only say what would be pruned.")
@click.pass_obj
def prune(state: CliState, days: int, dry_run: bool) -> None:
    """Forget old finished work: payloads of done (and discarded) events, sent messages, journal steps
    and saved sessions older than --days.

    Every event keeps its row, so a redelivery of a pruned event is still refused; a discarded event
    once cleared can no longer be retried. Pending, running and dead events are never touched, nor any
    step or session while an approval is unsettled. Freed space is reused by new events (the file does
    not shrink)."""
    with (state.reader() if dry_run else state.store()) as store:
        report = store.prune(older_than=days * 86_400, now=_now(), dry_run=dry_run)
    clear, delete = ("would clear", "would delete") if dry_run else ("cleared", "deleted")
    click.echo(f"{clear} the payloads of {plural(report.payloads_cleared, 'finished event')} and {delete} "
               f"{plural(report.messages_deleted, 'sent message')}, {plural(report.steps_deleted, 'journal step')} and "
               f"{plural(report.sessions_deleted, 'saved session')} older than "
               f"{_clock_time(report.cutoff, state.zone())}")
    if report.audit_rows_deleted:
        rows = plural(report.audit_rows_deleted, "oldest audit row")
        click.echo(f"{delete} the {rows}" + ("" if dry_run else " (a `pruned` row and the anchor keep the rest "
                                                                 "verifiable)"))
    if report.open_conversations:
        unsettled = report.open_conversations
        click.echo(f"kept every journal step and saved session: {plural(unsettled, 'approval')} "
                   f"{'is' if unsettled == 1 else 'are'} not settled yet (a conversation resumes from them)")


# --- audit -------------------------------------------------------------------------------------

@main.command()
@click.option("--since", "since_text", metavar="WHEN",
              help="Only rows written at or after WHEN: epoch seconds, an ISO 8601 time, or an age (12h, 7d).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of rows.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV, with a header line.")
@click.option("--verify", is_flag=True,
              help="Check the hash chain: 'N rows, chain intact' (exit 0), or the first bad row (exit 2).")
@click.option("--against", metavar="HASH",
              help="With --verify: also prove the trail still holds the row whose hash you pinned (--pin).")
@click.option("--pin", is_flag=True,
              help="Check the chain and print its head: the last row's number and hash, to keep somewhere else.")
@click.pass_obj
def audit(state: CliState, since_text: str | None, as_json: bool, as_csv: bool, verify: bool, against: str | None,
          pin: bool) -> None:
    """The audit trail: every tool call and every approval's answer, oldest first.

    Each row says the run and event, whether the run was trusted and what it had read, the policy rule that
    decided (`allow: mcp__shop__lookup_*`, `default`), the decision (allowed, asked, denied, approved,
    declined, expired), who answered and how (console, cli, ntfy, telegram, clock), and the outcome (done,
    refused, failed, unknown; deferred while it waits on an answer). Secrets are never stored in it. Rows are
    chained by hash: --verify finds a row edited, inserted or deleted since it was written. A prune is a row of
    the chain too. --pin prints the head's hash (the daily digest sends it as well): kept somewhere else, `audit
    --verify --against HASH` proves later that the trail still holds that row, so a trail rewritten whole, or
    emptied, is found too."""
    if as_json and as_csv:
        raise UserError("give one of --json or --csv")
    if (verify or pin) and (as_json or as_csv or since_text is not None):
        raise UserError(f"--{'verify' if verify else 'pin'} checks the whole trail: give it alone")
    if against is not None and not verify:
        raise UserError("--against goes with --verify: agent-console audit --verify --against HASH")
    if verify and pin:
        raise UserError("give one of --verify or --pin")
    if against is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", against.strip()):
        raise UserError("--against takes a row's hash: 64 hex digits, as `audit --pin` prints it")
    now = _now()
    since = None if since_text is None else _parse_since(since_text, state.zone(), now)
    zone = state.zone()
    with state.reader() as store:
        if verify or pin:
            check = store.verify_audit()
            if not check.intact:
                raise UserError(f"the audit trail is broken: {check.problem}")
            missing = store.audit_pin(against) if against is not None else None
            if missing is not None:
                raise UserError(f"the audit trail does not hold the pinned row: {missing}")
            seq, head = store.audit_head()
            if pin:
                if not seq:
                    raise UserError("the audit trail is empty: nothing to pin yet")
                click.echo(f"row {seq}, hash {head}")
                click.echo(f"keep it somewhere else; later `agent-console audit --verify --against {head}` proves "
                           "the trail still holds it")
                return
            if not check.rows:
                click.echo("0 rows: the trail is empty, nothing was recorded yet (a trail emptied with its head "
                           "is told only by --against a pinned hash)")
                return
            held = f"; it holds the pinned row {against.strip().lower()}" if against is not None else ""
            click.echo(f"{plural(check.rows, 'row')}, chain intact; last hash {check.head}{held}")
            return
        records = []
        for row in store.audit_rows(since=since):
            record = audit_record(row)
            records.append({"seq": record.pop("seq"), "at": record.pop("at"),
                            "time": _clock_time(row.at, zone), **record})
    if as_json:
        _print_json(records)
    elif as_csv:
        _print_csv(records)
    elif not records:
        click.echo("no audit rows" + ("" if since is None else f" since {_clock_time(since, zone)}"))
    else:
        for record in records:
            _say(_audit_line(record))


def _print_csv(records: list[dict[str, Any]]) -> None:
    """Every column of the export; a value that is not text as JSON; control characters shown as escapes."""
    fields = ["seq", "at", "time", *(name for name in AUDIT_FIELDS if name not in ("seq", "at"))]
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(fields)
    for record in records:
        writer.writerow([_csv_cell(record[name]) for name in fields])


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return terminal_safe(str(value))
    return terminal_safe(json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")))


def _audit_line(record: dict[str, Any]) -> str:
    """One row for a person: when, which event, the call, the decision and its rule, the outcome."""
    head = f"{record['seq']:>6}  {record['time']}"
    if record["kind"] == "pruned":
        return f"{head}  {record['detail']}"
    arguments = json.dumps(record["arguments"], ensure_ascii=False, sort_keys=True)
    if len(arguments) > 80:
        arguments = arguments[:39] + "…" + arguments[-40:]
    event = f"event {record['event_id']}" if record["event_id"] is not None else "no event"
    decided = f"{record['decision']} ({record['rule'] or 'no rule recorded'})"
    via = f" via {record['answered_via']}" if record["answered_via"] else ""
    outcome = f" -> {record['outcome']}" if record["outcome"] else ""
    trust = "trusted" if record["trusted"] else ("untrusted" if record["trusted"] is False else "trust unknown")
    detail = f": {record['detail']}" if record["detail"] else ""
    return f"{head}  {event}  {record['tool']} {arguments}  {decided}{via}{outcome}  [{trust}]{detail}"


# --- memory ------------------------------------------------------------------------------------

@main.group(cls=ConsoleGroup, invoke_without_command=True)
@click.pass_context
def memory(ctx: click.Context) -> None:
    """List and edit the agent's memory: the short notes it keeps across runs (remember / forget).

    The agent sees them at the start of every run. Each note says where it came from: yours, a trusted run's,
    or a run's that had read untrusted content (those are shown to the agent only as quoted data, and reading
    them makes its run untrusted; docs/security.md). With no command, lists them."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(memory_list)


@memory.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of {key, value, updated_at, event_id, origin, trusted}.")
@click.pass_obj
def memory_list(state: CliState, as_json: bool) -> None:
    """The notes, most recently written first, each with its origin."""
    with state.reader() as store:
        notes = store.memory()
    if as_json:
        _print_json([{**dataclasses.asdict(note), "trusted": note.trusted} for note in notes])
        return
    if not notes:
        click.echo("no notes")
        return
    zone = state.zone()
    for note in notes:
        mark = "" if note.trusted else "[untrusted] "
        _say(f"{mark}{note.key}: {note.value}  ({note.origin_in_words()}, {_clock_time(note.updated_at, zone)})")


@memory.command("set")
@click.argument("key")
@click.argument("value")
@click.pass_obj
def memory_set(state: CliState, key: str, value: str) -> None:
    """Write a note (replacing one with the same key)."""
    with state.store() as store, rejecting_bad_input():
        store.set_memory(key, value, now=_now())
    _say(f"remembered {key}")


@memory.command("delete")
@click.argument("key")
@click.pass_obj
def memory_delete(state: CliState, key: str) -> None:
    """Drop a note."""
    with state.store() as store:
        if not store.delete_memory(key):
            raise UserError(f"there is no note {key!r}")
    _say(f"forgot {key}")


# --- held messages -----------------------------------------------------------------------------

@main.group(cls=ConsoleGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="With no command: print a JSON list of held messages.")
@click.pass_context
def held(ctx: click.Context, as_json: bool) -> None:
    """Messages from the agent held over the hourly cap (max_messages_per_hour): kept, not sent, until
    you release them. With no command, lists them."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(held_list, as_json=as_json)
    elif as_json:
        raise UserError(f"--json goes after `held list`, not before `held {ctx.invoked_subcommand}`")


@held.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {id, body, urgent, created_at, event_id}.")
@click.pass_obj
def held_list(state: CliState, as_json: bool) -> None:
    """The held messages, oldest first."""
    with state.reader() as store:
        found = store.held_messages(limit=10_000)
    if as_json:
        _print_json([dataclasses.asdict(message) for message in found])
        return
    if not found:
        click.echo("no held messages")
        return
    zone = state.zone()
    for message in found:
        by = "" if message.event_id is None else f"event {message.event_id}, "
        _say(f"{message.id:>6}  ({by}{_clock_time(message.created_at, zone)}){' urgent' if message.urgent else ''}  "
             f"{message.body}")


@held.command("release")
@click.argument("ids", nargs=-1, type=WholeNumber(1, 2**62))
@click.option("--all", "release_all", is_flag=True, help="Release every held message.")
@click.pass_obj
def held_release(state: CliState, ids: tuple[int, ...], release_all: bool) -> None:
    """Send held messages (those named, or --all) through the outbox, in the order they were held. No cap
    applies to what you release."""
    if release_all == bool(ids):
        raise UserError("name the held messages to release, or give --all")
    with state.store() as store:
        released = store.release_held(None if release_all else list(ids), now=_now())
    missing = sorted(set(ids) - set(released))
    click.echo(f"released {plural(len(released), 'message')} into the outbox")
    if missing:
        raise UserError(f"not held (unknown or already released): {', '.join(map(str, missing))}")


# --- timers ------------------------------------------------------------------------------------

@main.group(cls=ConsoleGroup, invoke_without_command=True)
@click.option("--all", "include_done", is_flag=True, help="With no command: include one-off timers that already fired.")
@click.option("--json", "as_json", is_flag=True, help="With no command: print a JSON list of timer objects.")
@click.pass_context
def timers(ctx: click.Context, include_done: bool, as_json: bool) -> None:
    """List, add, pause, resume and remove timers.

    Timers feed the inbox with events keyed TIMER_ID@SCHEDULED_TIME; they never start runs themselves.
    With no command, lists them (`timers --all` is `timers list --all`)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(timers_list, include_done=include_done, as_json=as_json)
    elif include_done or as_json:
        raise UserError(f"--all and --json go after `timers list`, not before `timers {ctx.invoked_subcommand}`")


def _schedule(timer: Timer) -> str:
    return schedule_in_words(timer.every, timer.cron, timer.tz)


@timers.command("list")
@click.option("--all", "include_done", is_flag=True, help="Include one-off timers that already fired.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of timer objects.")
@click.pass_obj
def timers_list(state: CliState, include_done: bool, as_json: bool) -> None:
    """The timers, soonest first."""
    now = _now()
    with state.reader() as store:
        found = store.timers(include_done=include_done)
    if as_json:
        _print_json([dataclasses.asdict(t) for t in found])
        return
    if not found:
        click.echo("no timers")
        return
    zone = state.zone()
    for timer in found:
        # a paused timer does not fire: its old due time, counting down, would read as a promise
        when = "fired" if timer.done else "paused, not counting down" if timer.paused else \
            f"next {_clock_time(timer.due, zone)} ({relative(timer.due, now)})"
        set_by = "" if timer.origin is None else f"  set {origin_in_words(timer.origin)}"
        _say(f"{timer.id}  {_schedule(timer)}  {when}  catch-up {timer.catch_up}{set_by}")


def _parse_moment(text: str, zone: ZoneInfo, option: str = "--at") -> int:
    """Epoch seconds, or an ISO 8601 time (a time without an offset is in the configured time zone)."""
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        value = int(stripped)
    else:
        try:
            moment = datetime.fromisoformat(stripped)
        except ValueError:
            raise UserError(f"{option} takes epoch seconds or an ISO 8601 time (2030-01-31T09:00), "
                            f"not {text!r}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=zone)
        value = int(moment.timestamp())
    try:
        check_due(value)
    except ValueError as exc:
        raise UserError(f"{option}: {exc}") from None
    return value


_AGE = re.compile(r"(\d{1,9})\s*([smhd])")
_AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def _parse_since(text: str, zone: ZoneInfo, now: int) -> int:
    """What --at takes (epoch seconds, an ISO 8601 time), or an age back from now: 90m, 12h, 7d."""
    age = _AGE.fullmatch(text.strip())
    if age:
        return max(0, now - int(age[1]) * _AGE_SECONDS[age[2]])
    try:
        return _parse_moment(text, zone, "--since")
    except UserError:
        raise UserError(f"--since takes epoch seconds, an ISO 8601 time (2030-01-31T09:00) or an age (12h, 7d), "
                        f"not {text!r}") from None


@timers.command("add")
@click.argument("timer_id")
@click.option("--every", type=WholeNumber(1, MAX_DUE), metavar="SECONDS", help="Fire every SECONDS.")
@click.option("--cron", metavar="EXPR", help="Fire on a cron schedule, e.g. '0 9 * * 1-5'.")
@click.option("--tz", metavar="ZONE", help="The cron schedule's time zone (default: the timezone setting).")
@click.option("--at", "at_text", metavar="EPOCH|ISO", help="Fire once at this time.")
@click.option("--payload", metavar="JSON", help="A JSON object the timer's events carry.")
@click.option("--catch-up", type=OneOf(CATCH_UP_POLICIES), default="coalesce", show_default=True,
              help="Missed occurrences: one event carrying `skipped` (coalesce), or one event each.")
@click.pass_obj
def timers_add(
    state: CliState, timer_id: str, every: int | None, cron: str | None, tz: str | None,
    at_text: str | None, payload: str | None, catch_up: str,
) -> None:
    """Add a timer, or replace the one with this TIMER_ID. Give exactly one of --every, --cron, --at."""
    if sum(option is not None for option in (every, cron, at_text)) != 1:
        raise UserError("give exactly one of --every, --cron or --at")
    if tz is not None and cron is None:
        raise UserError("--tz goes with --cron")
    body = {} if payload is None else _parse_json(payload, "the timer payload")
    if not isinstance(body, dict):
        raise UserError("the timer payload must be a JSON object")
    settings = state.settings()
    now = _now()
    if cron is not None:
        zone = tz or settings.timezone
        try:
            validate_zone(zone)
        except ValueError as exc:
            raise UserError(f"--tz: {exc}") from None
        try:
            validate_cron(cron, zone, now=now)
        except ValueError as exc:
            raise UserError(f"--cron: {exc}") from None
    if every is not None:
        due = now + every
    elif at_text is not None:
        due = _parse_moment(at_text, state.zone())
    else:
        due = now
    with state.store() as store:
        replacing = store.timer(timer_id) is not None
        with rejecting_bad_input():
            timer = store.add_timer(
                timer_id, due, body, every=every, cron=cron,
                tz=(tz or settings.timezone) if cron is not None else None, catch_up=catch_up, now=now,
            )
    verb = "replaced" if replacing else "added"
    _say(f"{verb} timer {timer.id}: {_schedule(timer)}, next {_clock_time(timer.due, state.zone())} "
               f"({relative(timer.due, now)})")


def _timer_change(name: str, verb: str, summary: str, change: Callable[[Store, str], bool]) -> Callable[..., None]:
    @click.pass_obj
    def command(state: CliState, timer_id: str) -> None:
        with state.store() as store, rejecting_bad_input():
            if not change(store, timer_id):
                raise UserError(f"no timer named {timer_id!r}")
        _say(f"{verb} timer {timer_id}")

    command.__doc__ = summary
    return timers.command(name)(click.argument("timer_id")(command))


_timer_change("remove", "removed", "Delete the timer TIMER_ID.",
              lambda store, timer_id: store.remove_timer(timer_id))
_timer_change("pause", "paused", "Stop the timer TIMER_ID firing until it is resumed.",
              lambda store, timer_id: store.pause_timer(timer_id, True))
_timer_change("resume", "resumed", "Let the paused timer TIMER_ID fire again; what it missed catches up.",
              lambda store, timer_id: store.pause_timer(timer_id, False))


@timers.command("run")
@click.argument("timer_id")
@click.pass_obj
def timers_run(state: CliState, timer_id: str) -> None:
    """Fire the timer TIMER_ID once now, as the console's run now does.

    Its event (source `timer`, id TIMER_ID@now) carries the timer's payload; the schedule stays as it is."""
    now = _now()
    with state.store() as store, rejecting_bad_input():
        outcome = store.fire_timer_now(timer_id, now=now)
    if outcome == "unknown":
        raise UserError(f"no timer named {timer_id!r}")
    if outcome == "duplicate":
        raise UserError(f"timer {timer_id} already fired at {now}: try again in a second")
    _say(f"fired timer {timer_id}: event timer/{timer_id}@{now}")


main.add_command(telegram)  # the chat source's commands, beside this module (console/cli_telegram.py)
main.add_command(schedules)  # the agent's schedules, seen and steered (console/cli_schedules.py)
