"""Numbers and durations for people (1,204 · 1 attempt, 2 attempts · 45s, 3m05s, 4h00m, 2d03h) and the agent's
state in words: the one formatter the command line (`status`, `show`, `timers`) and the console share, so both
say the same thing the same way. (Money is console/spendfmt.py.)"""

from __future__ import annotations

from datetime import datetime, tzinfo


def count(number: int) -> str:
    """A count as both the console and the command line print it: 1,204."""
    return f"{number:,}"


def plural(number: int, one: str, many: str | None = None) -> str:
    """'1 attempt', '2 attempts', '1,204 events'; `many` for a word that does not just take an s."""
    return f"{count(number)} {one if number == 1 else (many or one + 's')}"


def span(seconds: int, *, sep: str = "") -> str:
    """The size of a duration, compact (3m05s) as the console and the command line both print it."""
    seconds = abs(int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{sep}{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{sep}{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{sep}{seconds % 86400 // 3600:02d}h"


SECONDS_SHOWN_BELOW = 600  # under ten minutes a console countdown shows its seconds; above, whole minutes


def coarse_span(seconds: int, *, seconds_below: int = SECONDS_SHOWN_BELOW) -> str:
    """A countdown or an age the console redraws with the clock: as span prints it while its seconds matter
    (under `seconds_below`), then whole minutes up to the hour (10m), so it changes once a minute, not every
    second; hours and days as span prints them."""
    seconds = max(0, int(seconds))
    if seconds_below <= seconds < 3600:
        return f"{seconds // 60}m"
    return span(seconds)


def schedule_in_words(every: int | None, cron: str | None, tz: str | None, *, sep: str = "") -> str:
    """A timer's schedule: 'every 5m 00s', "cron '0 9 * * *' Europe/Berlin" or 'once'."""
    if every is not None:
        return f"every {span(every, sep=sep)}"
    if cron is not None:
        return f"cron '{cron}' {tz or 'UTC'}"
    return "once"


def relative(when: int, now: int, *, sep: str = "") -> str:
    """'in 3m 05s', 'now' or '3m 05s ago'."""
    if when == now:
        return "now"
    return f"in {span(when - now, sep=sep)}" if when > now else f"{span(now - when, sep=sep)} ago"


def clock_text(at: int | None, now: int, zone: tzinfo | None = None) -> str:
    """A moment as its user reads a clock, in their zone (the `timezone` setting; the machine's if None): the
    time of day, and the date only when it is not today, then how far off it is: '14:05:09 (in 16s)'."""
    if at is None:
        return "never"
    moment, today = datetime.fromtimestamp(at, zone), datetime.fromtimestamp(now, zone)
    shown = moment.strftime("%H:%M:%S" if moment.date() == today.date() else "%Y-%m-%d %H:%M")
    return f"{shown} ({relative(at, now, sep='')})"


def agent_in_words(state: str, reason: str | None, until: int | None, now: int, *, sep: str = "") -> str:
    """'ready', 'waiting (45s left): <reason>', 'paused until the engine restarts: <reason>', or for a pause that
    lifts on its own (a budget reached) 'paused (3h 05m left, or until the budget is raised): <reason>'."""
    why = f": {reason}" if reason else ""
    if state == "waiting" and until is not None:
        return f"waiting ({span(max(0, until - now), sep=sep)} left){why}"
    if state == "paused" and until is not None:
        return f"paused ({span(max(0, until - now), sep=sep)} left, or until the budget is raised){why}"
    if state == "paused":
        return f"paused until the engine restarts{why}"
    return state


# Where an approval's answer came from (answered_via), as the command line, the console and a phone's card say.
VIA_WORDS = {"console": "in the console", "cli": "from the command line", "ntfy": "from ntfy",
             "telegram": "from Telegram", "api": "by a program", "expiry": "at its deadline"}


# The same, in the few columns of the console's approvals pane.
VIA_SHORT = {"console": "console", "cli": "CLI", "ntfy": "ntfy", "telegram": "Telegram", "api": "api",
             "expiry": "deadline"}


def via_in_words(via: str | None) -> str:
    """'from Telegram', 'in the console'...; '' when it is not known (an approval settled by an older version)."""
    return VIA_WORDS.get(via or "", f"via {via}" if via else "")


def answered_in_words(outcome: str | None, via: str | None, at: int | None, now: int, *, sep: str = "") -> str:
    """'yes from Telegram, 2m 05s ago', 'expired at its deadline, 1h 00m ago'."""
    words = " ".join(part for part in (outcome or "unsettled", via_in_words(via)) if part)
    return words if at is None else f"{words}, {relative(at, now, sep=sep)}"
