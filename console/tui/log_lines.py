"""The engine's log lines for the console's log pane (L): a logging handler on the `agent_console` loggers that
keeps the newest lines and tells the screen, on its own event loop, that there are new ones.

The console has no terminal for stderr (the screen is on it), so without this its engine's lines (a run, a lease
change, a channel's trouble) went nowhere but the few that became toasts. A record may come from any of the
engine's threads: the line is kept under a lock and the screen is woken with call_soon_threadsafe, once for a
burst. The time shown is the console's clock (tests and snapshots run on a manual one).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from console.redact import install_log_redaction
from console.textsafe import TerminalSafeFormatter

KEPT_LINES = 500  # what the pane shows when opened: the newest lines since the console started
ENGINE_LOGGER = "agent_console"


class LogLines(logging.Handler):
    def __init__(self, now: Callable[[], int], zone: ZoneInfo) -> None:
        super().__init__(level=logging.INFO)
        self.now, self.zone = now, zone
        self.setFormatter(TerminalSafeFormatter("%(levelname)s %(name)s %(message)s"))
        self.lines: deque[str] = deque(maxlen=KEPT_LINES)
        self._guard = threading.Lock()
        self._unread: list[str] = []
        self._told = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_lines: Callable[[list[str]], None] | None = None
        self._level_before = logging.NOTSET

    def attach(self, on_lines: Callable[[list[str]], None]) -> None:
        """Start keeping the engine's INFO lines and above; on_lines gets each burst, on this event loop."""
        self._loop, self._on_lines = asyncio.get_running_loop(), on_lines
        engine = logging.getLogger(ENGINE_LOGGER)
        self._level_before = engine.level
        if engine.getEffectiveLevel() > logging.INFO:
            engine.setLevel(logging.INFO)
        install_log_redaction(self)
        engine.addHandler(self)

    def detach(self) -> None:
        engine = logging.getLogger(ENGINE_LOGGER)
        engine.removeHandler(self)
        engine.setLevel(self._level_before)
        self._on_lines = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            at = datetime.fromtimestamp(self.now(), self.zone).strftime("%H:%M:%S")
            line = f"{at} {self.format(record).splitlines()[0]}"
        except Exception:  # logging's own rule: a handler never raises
            self.handleError(record)
            return
        with self._guard:
            self.lines.append(line)
            self._unread.append(line)
            tell, self._told = not self._told, True
        if tell and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._guard:
            unread, self._unread, self._told = self._unread, [], False
        if self._on_lines is not None and unread:
            self._on_lines(unread)
