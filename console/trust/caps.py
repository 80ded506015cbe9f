"""What the owner is told about the caps on what the agent does unasked (issue 32: the wording is trust's, the
counting is the core's ledger, core/caps.py). A call past a cap is not made unasked: the gateway turns it into an
approval whose rule says which cap it reached (cap_in_words), and the owner hears once per crossing why further
calls ask (cap_notice)."""

from __future__ import annotations

from console.core.caps import HOURLY_CALL_CAP, RUN_CAP, CapReached


def cap_in_words(reached: CapReached) -> str:
    """The cap a call reached, as its approval's rule and the model's error say it."""
    if reached.cap == RUN_CAP:
        return f"the cap of {reached.limit} world-changing tool calls per run ({RUN_CAP}) was reached"
    return f"the cap of {reached.limit} world-changing tool calls per hour ({HOURLY_CALL_CAP}) was reached"


def cap_notice(reached: CapReached) -> str:
    """The one message the owner gets when a call cap is crossed."""
    per = f"in the run for event {reached.event_id}" if reached.cap == RUN_CAP else "within the last hour"
    return (f"The agent reached its cap of {reached.limit} world-changing tool calls {per} ({reached.cap}). "
            f"Further calls are not made unasked: each asks for your approval. Raise {reached.cap} in the "
            f"config to change the cap.")
