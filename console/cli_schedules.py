"""`agent-console schedules [--json]`, `schedules renew|pause|resume|delete ID`: the agent's own schedules (issue 35),
seen and steered by the owner. Registered on the main group by console/cli.py; the agent creates schedules with
the `schedule` tool and the owner's yes, never here."""

from __future__ import annotations

import click

from console.cli_common import CliState, ConsoleGroup, UserError, _clock_time, _now, _print_json, _say
from console.core.schedules import RENEW_SECONDS
from console.timefmt import relative


@click.group(cls=ConsoleGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="With no command: print a JSON list of schedules.")
@click.pass_context
def schedules(ctx: click.Context, as_json: bool) -> None:
    """List the agent's schedules; renew, pause, resume or delete one.

    With no command, lists them: each one's state, next fire times, interval, expiry, spend this month, last
    outcome and who asked for it."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(schedules_list, as_json=as_json)
    elif as_json:
        raise UserError(f"--json goes after `schedules list`, not before `schedules {ctx.invoked_subcommand}`")


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of schedule objects.")
@click.pass_obj
def schedules_list(state: CliState, as_json: bool) -> None:
    """The schedules, the next to fire first."""
    now = _now()
    with state.reader() as store:
        rows = store.schedule_rows(now=now, zone=state.settings().timezone)
    if as_json:
        _print_json(rows)
        return
    if not rows:
        click.echo("no schedules")
        return
    zone = state.zone()
    for row in rows:
        nxt = f"next {_clock_time(row['next'], zone)} ({relative(row['next'], now)})" if row["next"] else "no next fire"
        expires = "never expires" if row["expires"] is None else (
            f"expires {_clock_time(row['expires'], zone)}" if row["state"] != "expired" else "renew to go on")
        why = f" ({row['paused_reason']})" if row["paused_reason"] else ""
        trust = "" if row["trusted"] else "  ⚠ runs untrusted"
        _say(f"{row['id']}  {row['state']}{why}  {row['title']!r}  {row['interval']}  {nxt}  {expires}")
        _say(f"    ${row['spend_month']:.2f} this month  last: {row['last_outcome'] or 'not yet'}  "
             f"asked by {row['origin']}{trust}")


def _steer(state: CliState, schedule_id: str, verb: str) -> bool:
    with state.store() as store:
        now = _now()
        if verb == "pause":
            return store.pause_schedule(schedule_id, now=now)
        if verb == "resume":
            return store.resume_schedule(schedule_id, now=now)
        return store.delete_schedule(schedule_id)


@schedules.command("renew")
@click.argument("schedule_id")
@click.pass_obj
def schedules_renew(state: CliState, schedule_id: str) -> None:
    """Run the schedule 30 more days from now (an expired one fires again from its next fire time)."""
    with state.store() as store:
        expires = store.renew_schedule(schedule_id, now=_now(), seconds=RENEW_SECONDS)
    if expires is None:
        raise UserError(f"no schedule {schedule_id!r} (see `agent-console schedules`)")
    _say(f"renewed {schedule_id}: expires {_clock_time(expires, state.zone())}")


@schedules.command("pause")
@click.argument("schedule_id")
@click.pass_obj
def schedules_pause(state: CliState, schedule_id: str) -> None:
    """Stop the schedule firing until resumed."""
    if not _steer(state, schedule_id, "pause"):
        raise UserError(f"no schedule {schedule_id!r} (see `agent-console schedules`)")
    _say(f"paused {schedule_id}")


@schedules.command("resume")
@click.argument("schedule_id")
@click.pass_obj
def schedules_resume(state: CliState, schedule_id: str) -> None:
    """Fire again from its next fire time (what it missed while paused does not fire)."""
    if not _steer(state, schedule_id, "resume"):
        raise UserError(f"no schedule {schedule_id!r} (see `agent-console schedules`)")
    _say(f"resumed {schedule_id}")


@schedules.command("delete")
@click.argument("schedule_id")
@click.pass_obj
def schedules_delete(state: CliState, schedule_id: str) -> None:
    """Delete the schedule: it fires no more (an occurrence already in the inbox is not run)."""
    if not _steer(state, schedule_id, "delete"):
        raise UserError(f"no schedule {schedule_id!r} (see `agent-console schedules`)")
    _say(f"deleted {schedule_id}")
