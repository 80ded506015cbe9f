"""Textual's Linux driver, made safe for a terminal that closes under it.

A closed terminal window is a hangup: the kernel sends SIGHUP and SIGCONT, and every later write to
the terminal fails with EIO. Textual's driver has two habits that turn that into a process that never
ends (seen 5 times in ~37 closes of a standby console, and one close in two while it was drawing):

- its writer thread dies at the first failed write, and every later write waits on that thread's
  bounded queue: after 30 of them the event loop blocks for ever, so no signal handler (SIGHUP,
  SIGTERM) can run and the shutdown, which writes too, never finishes;
- its SIGCONT handler restarts application mode even when nothing was suspended, starting a second
  writer thread on the dead terminal (which dies at once) and a second input thread.

Here a write to a terminal that has gone is dropped, so the writer thread lives and the queue drains,
and SIGCONT resumes only what a suspend stopped.
"""

from __future__ import annotations

import io
from typing import IO, Any, cast

from textual.drivers.linux_driver import LinuxDriver


class HangupSafeOutput:
    """The terminal as the driver's writer thread sees it: once a write fails, the terminal has gone
    (EIO after a hangup, EPIPE), and later writes are dropped instead of raising."""

    def __init__(self, terminal: IO[str]) -> None:
        self._terminal = terminal
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._terminal.write(text)
            except OSError:
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._terminal.flush()
            except OSError:
                self.gone = True

    def fileno(self) -> int:
        return self._terminal.fileno()

    def isatty(self) -> bool:
        return self._terminal.isatty()


class HangupSafeDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert self._file is not None
        # Typed as the text file it wraps: the driver and its writer thread use write, flush and fileno.
        self._file = cast(io.TextIOWrapper, HangupSafeOutput(self._file))
        self._suspended = False

    def suspend_application_mode(self) -> None:
        self._suspended = True
        super().suspend_application_mode()

    def resume_application_mode(self) -> None:
        self._suspended = False
        super().resume_application_mode()

    def _sigcont_application(self, *args: Any) -> None:
        # The kernel sends SIGCONT along with a hangup's SIGHUP; only a suspended console resumes.
        if self._suspended:
            super()._sigcont_application(*args)
