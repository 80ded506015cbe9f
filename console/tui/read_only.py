"""The console's --read-only (a second screen, a shared terminal): which of its actions would change the inbox.

Its engine is watch-only (it never takes the lease, and opens the inbox read-only); the app, its panes and its
screens do not offer these actions at all, so a key pressed there does nothing, and the footer, the palette and
the keys screen do not list it."""

from __future__ import annotations

from textual.dom import DOMNode

READ_ONLY_WORDS = "This console is read-only (--read-only): it watches and changes nothing"
READ_ONLY_FLASH = "read-only: this console changes nothing"  # the short answer to a writing key

# The main screen's actions that write: answers, retries, discards, the inject form, the stall, the budgets.
MAIN_SCREEN_WRITES = frozenset({"inject", "answer", "retry", "retry_all", "discard", "undo", "stall", "budget",
                                "quick_chat", "quick_poison", "quick_redeliver", "quick_approval"})


def read_only(node: DOMNode) -> bool:
    """Whether the console node belongs to runs --read-only."""
    return bool(getattr(node.app, "read_only", False))
