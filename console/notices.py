"""Change notices the engine publishes; a UI subscribes and re-reads the Store. Coalescable by kind.

Neutral ground: the runtime publishes them, and the console and the phone channels (edges) name their kinds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NoticeKind = Literal["events", "lease", "approvals", "outbox", "timers", "run", "log"]


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    detail: str = ""
