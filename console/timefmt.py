"""Durations for people (45s, 3m 05s, 4h 00m, 2d 03h), shared by the command line and the console."""

from __future__ import annotations


def span(seconds: int, *, sep: str = " ") -> str:
    """The size of a duration; the console passes sep="" to save columns."""
    seconds = abs(int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{sep}{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{sep}{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{sep}{seconds % 86400 // 3600:02d}h"


def relative(when: int, now: int, *, sep: str = " ") -> str:
    """'in 3m 05s' or '3m 05s ago'."""
    return f"in {span(when - now, sep=sep)}" if when >= now else f"{span(now - when, sep=sep)} ago"
