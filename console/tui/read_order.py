"""The order a view's reads began in, so that the newest facts read stay on the screen.

A pane's reads overlap: the console's flush reads it on a worker while a key, a tick or settle() reads it too, each
waiting its turn on the inbox's reader thread and then on the event loop. Their answers can come back in any order.
A read that began before another whose answer is already shown holds older facts: shown after it, the screen went
back in time until the next read (under load a settled approval showed as waiting again, the header's rate and its
"nobody is working" banner from before the answer). Its answer is dropped instead: the newer one stands."""

from __future__ import annotations


class ReadOrder:
    def __init__(self) -> None:
        self._begun = 0
        self._shown = 0

    def begin(self) -> int:
        """A read begins: its ticket."""
        self._begun += 1
        return self._begun

    def may_show(self, ticket: int) -> bool:
        """The read with this ticket has its answer: True when no read begun after it has shown one (the answer
        is then the newest shown), False when one has (drop it)."""
        if ticket < self._shown:
            return False
        self._shown = ticket
        return True
