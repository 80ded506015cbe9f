"""What the commands print, apart from the commands: `status`'s lines, a budget in words, an approval on one line,
an event and a model call as JSON records. cli.py's commands read the inbox and hand what they read to these."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from console.cli_telegram import telegram_lines
from console.core import STATUSES, Event
from console.core.models import PHONE_IGNORED, SpendRow
from console.core.tool_health import sandbox_words
from console.spendfmt import NANOS_PER_USD, dollars
from console.timefmt import (
    agent_in_words,
    answered_in_words,
    count,
    plural,
    relative,
    span,
)
from console.trust.callview import RequestView, origin_line, request_view

if TYPE_CHECKING:
    pass

UNKNOWN_REQUEST = 1
DAMAGED = 1
SHOW_WIDTH = 100  # columns `show` wraps an approval's call to

RECENT_IN_STATUS = 3  # settled approvals `status` lists under the pending ones (--json has more)


def asks_line(what: RequestView) -> str:
    """One approval on one line: its id, then the call with every argument named, or the question."""
    asks = f"question: “{what.compact()}”" if what.is_question else what.compact()
    return f"{what.request_id}  {asks}"


def status_lines(info: dict[str, Any], now: int) -> list[str]:
    counts = info["events"]
    lines = [f"inbox      {info['path']}"]
    move = info.get("move")
    if move is not None:  # the first thing to know: this inbox takes no new work
        lines.append(f"move       {move['refusal']}")
    lines.append("events     " + " · ".join(f"{count(counts.get(s, 0))} {s}" for s in STATUSES))
    damaged = info.get("damaged") or []
    if damaged:  # their runs were refused: the file changed under them
        lines.append(f"damaged    {plural(len(damaged), 'event')} with a damaged payload, not run: "
                     + ", ".join(f"#{event_id}" for event_id in damaged) + " (agent-console check)")
    lease = info["lease"]
    if lease is None:
        lines.append("lease      nobody has held it yet")
    elif lease["live"]:
        lines.append(f"lease      held by {lease['holder']}, generation {lease['gen']}, "
                     f"{span(lease['expires_in'])} left")
    else:
        lines.append(f"lease      free (last holder {lease['holder']}, generation {lease['gen']}, "
                     f"ended {span(-lease['expires_in'])} ago)")
    pending = info["approvals_pending"]
    lines.append(f"approvals  {count(len(pending))} pending" if pending else "approvals  none pending")
    for approval in pending:
        # Every argument named (long values cut in the middle), then where the request came from.
        what = request_view(approval)
        left = f"{span(approval['expires_in'])} left" if approval["expires_in"] > 0 else "expired, not yet swept"
        asker = f"event {approval['event_id']} · " if approval.get("event_id") is not None else ""
        lines.append(f"           {asks_line(what)}")
        origin = f"{origin_line(what.origin)} · " if what.origin is not None else ""
        lines.append(f"             {origin}{asker}{left}")
    for answered in info.get("approvals_recent", [])[:RECENT_IN_STATUS]:
        said = answered_in_words(answered["outcome"], answered["answered_via"], answered["answered_at"], now)
        lines.append(f"           {asks_line(request_view(answered))}  ({said})")
    stranded = info.get("stranded_answers", [])
    if stranded:  # an answer that did not reach its conversation: on a yes, a call that may not have happened
        lines.append(f"answers    {plural(len(stranded), 'answer')} did not resume (dead events; retry runs them)")
    for answer in stranded:
        lines.append(f"           {answer['request_id']}  {answer['action']}  ({answer['in_words']})")
    phone = {verdict: n for verdict, n in info.get("phone_answers", {}).items() if n}
    if phone:
        taken = sum(phone.get(verdict, 0) for verdict in ("settled", "late", "already_answered"))
        ignored = {verdict: n for verdict, n in phone.items() if verdict in PHONE_IGNORED}
        detail = ", ".join(f"{count(n)} {verdict.replace('_', ' ')}" for verdict, n in ignored.items())
        lines.append(f"phone      {plural(taken, 'answer')} taken · {count(sum(ignored.values()))} ignored"
                     + (f" ({detail})" if detail else ""))
    lines += telegram_lines(info.get("telegram") or {})
    for tool in info.get("tools") or []:
        if tool["state"] == "down":
            lines.append(f"tools      {tool['server']} down — {tool['reason']} — retrying")
        elif tool["state"] == "starting":
            lines.append(f"tools      {tool['server']} starting")
        lines += [f"tools      {words}" for words in sandbox_words(tool)]
    mail = info.get("email") or {}
    if mail.get("state", "off") != "off" or mail.get("last_uid") is not None:
        reason = f" ({mail['reason']})" if mail.get("reason") else ""
        lines.append(f"email      {mail.get('state')}{reason} · last UID stored {mail.get('last_uid')}")
    outbox = info["outbox"]
    next_send = info["next_send_at"]
    send = "nothing to send" if next_send is None else f"next send {relative(next_send, now)}"
    retrying = f" · {plural(outbox['retrying'], 'batch', 'batches')} retrying" if outbox["retrying"] else ""
    held = (f" · {count(outbox['held'])} held over the hourly cap (agent-console held)"
            if outbox.get("held") else "")
    lines.append(f"outbox     {count(outbox['queued'])} queued · {count(outbox['sent'])} sent · "
                 f"{count(outbox['failed'])} failed{retrying}{held} · {send}")
    timer = info["next_timer"]
    upcoming = "none due" if timer is None else f"next: {timer['id']} {relative(timer['due'], now)}"
    lines.append(f"timers     {upcoming}")
    listed = info.get("schedules") or []
    if listed:
        states = [row["state"] for row in listed]
        tally = " · ".join(f"{states.count(word)} {word}" for word in ("active", "paused", "expired", "done")
                           if word in states)
        soonest = min((row for row in listed if row["next"] is not None), key=lambda row: row["next"], default=None)
        upcoming = "" if soonest is None else f" · next: {soonest['id']} {relative(soonest['next'], now)}"
        lines.append(f"schedules  {tally}{upcoming} (agent-console schedules)")
    lines.append(f"fencing    {plural(info['takeovers'], 'takeover')} · "
                 f"{plural(info['refused_finishes'], 'refused late finish', 'refused late finishes')}")
    agent = info["agent"]
    lines.append(f"agent      {agent_in_words(agent['state'], agent['reason'], agent['until'], now)}")
    spend = info["spend"]
    today = against_budget(spend["today_usd"], spend["daily_budget_usd"], spend["daily_budget_from"])
    month = against_budget(spend["month_usd"], spend["monthly_budget_usd"], spend["monthly_budget_from"])
    lines.append(f"spend      today {today} · this month {month}")
    return lines


def against_budget(spent: float | None, budget: float | None, source: str) -> str:
    """'$0.42 of $5.00 (budget from the inbox)' or '$0.42 (no budget)'; an unknown spend says so."""
    shown = dollars(spent) if spent is not None else "unknown (a model without a price was used)"
    if budget is None:
        return f"{shown} (no budget{'' if source == 'default' else ', set in ' + budget_source_words(source)})"
    return f"{shown} of {dollars(budget)} (budget from {budget_source_words(source)})"


def budget_source_words(source: str) -> str:
    return "the inbox: agent-console budget" if source == "inbox" else source


def event_record(event: Event) -> dict[str, Any]:
    return dataclasses.asdict(event)


def call_record(call: SpendRow) -> dict[str, Any]:
    record = dataclasses.asdict(call)
    cost = record.pop("cost_nanos")
    record["cost_usd"] = None if cost is None else cost / NANOS_PER_USD
    return record
